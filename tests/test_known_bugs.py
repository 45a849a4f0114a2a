"""Known Kafka bugs by their traces (replay.known_bugs, docs/known-bugs.md): each trace built
with the simulator's broker model, audited in one process, and reported by its finding with the
JIRA issue named in the evidence and the next step. No Spark."""

from __future__ import annotations

import json

import pytest

from decoders.constants import COMMIT
from replay.local import audit_local
from simulator.clients import TransactionalProducer, make_records
from simulator.cluster import Cluster, TopicConfig

TIMEOUT = 10_000


def _cluster(tmp_path, name: str) -> tuple[Cluster, TransactionalProducer]:
    """A cluster and another application's transactional producer writing the same topic."""
    c = Cluster(str(tmp_path / name), 3, offsets_partitions=2, txn_partitions=2)
    c.create_topic(TopicConfig("ledger", 2))
    return c, TransactionalProducer(c, "other", timeout_ms=TIMEOUT)


def _other(c: Cluster, other: TransactionalProducer) -> None:
    """The other application commits a transaction in both partitions: its markers, stamped by
    the partitions' leaders, bound when anything before them was appended."""
    for p in (0, 1):
        other.send("ledger", p, 2, tag="other")
    other.commit()


def _move_on(c: Cluster, other: TransactionalProducer, ms: int = 3 * TIMEOUT) -> None:
    """The other application writes on for longer than the transaction timeout: an open
    transaction pins its records behind the LSO."""
    for _ in range(6):
        _other(c, other)
        c.clock.tick(ms // 6)


def _bugs(root, kind: str) -> list[tuple[str, str]]:
    out = []
    for f in audit_local([str(root)])["findings"]:
        if f["kind"] == kind:
            bug = json.loads(f["evidence"]).get("known_bug") or ""
            out.append((bug.split(":")[0], f["remediation"]))
    return out


def _late(c: Cluster, tx: TransactionalProducer, partition: int, other) -> None:
    """A produce request of the producer's last transaction, with its epoch and the next
    sequence, reaching ``partition`` after the transaction ended. The clock moves on around
    it by more than the audit's clock tolerance: the coordinator's log provably holds the
    producer's transactions before and after it."""
    c.clock.tick(5_000)
    tp = ("ledger", partition)
    records = make_records(c, "ledger", partition, 2, "late", 40, tx.clock)
    c.log(*tp).produce(records, producer_id=tx.producer_id, producer_epoch=tx.epoch,
                       base_sequence=tx.next_sequence(tp, 2), transactional=True)  # fmt: skip
    _other(c, other)
    c.clock.tick(5_000)


def test_a_produce_after_its_transactions_marker_is_kafka_12671(tmp_path):
    c, other = _cluster(tmp_path, "d")
    tx = TransactionalProducer(c, "app", timeout_ms=TIMEOUT)
    for _ in range(3):
        tx.send("ledger", 0, 2)
        tx.commit()
    _late(c, tx, 0, other)  # after the COMMIT marker of the transaction it belonged to
    for _ in range(2):  # the producer goes on elsewhere: the coordinator's log runs past it
        tx.send("ledger", 1, 2)
        tx.commit()
    _move_on(c, other)
    c.close()
    ((bug, next_step),) = _bugs(c.root, "write_outside_transaction")
    assert bug == "KAFKA-12671" and "KAFKA-12671" in next_step
    assert "kafka-transactions.sh" in next_step


def test_data_in_a_partition_never_added_is_kafka_14402(tmp_path):
    c, other = _cluster(tmp_path, "d")
    tx = TransactionalProducer(c, "app", timeout_ms=TIMEOUT)
    tx.send("ledger", 0, 2)
    tx.commit()
    tx.send("ledger", 0, 2)
    _late(c, tx, 1, other)  # no AddPartitionsToTxn for ledger-1
    tx.commit()
    for _ in range(2):
        tx.send("ledger", 0, 2)
        tx.commit()
    _move_on(c, other)
    c.close()
    ((bug, _),) = _bugs(c.root, "write_outside_transaction")
    assert bug == "KAFKA-14402"


def test_a_coordinator_epoch_going_back_is_kafka_9144(tmp_path):
    """Markers of one producer from coordinator epoch 3, then one from epoch 1: before
    2.4.1, early producer expiry made brokers accept it."""
    c, other = _cluster(tmp_path, "d")
    tx = TransactionalProducer(c, "app", timeout_ms=TIMEOUT)
    tx.send("ledger", 0, 2)
    log = c.log("ledger", 0)
    log.write_marker(tx.producer_id, tx.epoch, COMMIT, 3, c.leader_now(log))
    tx.send("ledger", 0, 2)
    log.write_marker(tx.producer_id, tx.epoch, COMMIT, 1, c.leader_now(log))
    c.close()
    found = _bugs(c.root, "fenced_epoch_write")
    assert found and {bug for bug, _ in found} == {"KAFKA-9144"}


@pytest.mark.parametrize("version", [2])
def test_a_commit_left_in_prepare_is_a_stuck_tv2_transaction(tmp_path, version):
    """TV2: the coordinator writes PrepareCommit and the marker of one of the two partitions,
    then nothing more: the partition without its marker hangs, and the coordinator's
    transaction listing it is the missing marker's."""
    c, other = _cluster(tmp_path, "d")
    tx = TransactionalProducer(c, "app", version=version, timeout_ms=TIMEOUT)
    tx.send("ledger", 0, 2)
    tx.commit()
    tx.send("ledger", 0, 2)
    tx.send("ledger", 1, 2)
    c.txn_coordinator.end_txn(tx.md, True, stuck_after=1)
    _move_on(c, other)
    c.close()
    found = _bugs(c.root, "missing_marker")
    assert "KAFKA-18660" in {bug for bug, _ in found}, found


def test_offsets_reused_after_a_failed_index_append_are_kafka_7866(tmp_path):
    """An ABORT marker's append also appends to the segment's `.txnindex`; before 2.2.1 a
    failure there left the log end offset before the marker, and the next produce request
    reused the marker's offset. The batch holding it again is an offset_overlap."""
    c, other = _cluster(tmp_path, "d")
    tx = TransactionalProducer(c, "app", timeout_ms=TIMEOUT)
    tx.send("ledger", 0, 2)
    tx.abort()
    log = c.log("ledger", 0)
    log.writer.next_offset -= 1  # the failed .txnindex append: the marker's offset given again
    _other(c, other)
    c.close()
    found = _bugs(c.root, "offset_overlap")
    assert found and {bug for bug, _ in found} == {"KAFKA-7866"}
    assert "appended with a stale log end offset" in found[0][1]


def test_data_left_by_the_cleaner_without_its_marker_is_kafka_8351(tmp_path):
    """A compacted topic cleaned by the broker model, whose cleaner then loses a committed
    transaction's marker while keeping its data (before 2.2.2, a transaction spanning several
    segments): the data stays open where the cleaner has been and pins the partition's later
    records. A hanging_transaction, lowered to info (a copy torn across a cleaning pass
    leaves the same bytes), names KAFKA-8351."""
    from decoders.rewrite import entries
    from decoders.source import BytesSource

    c = Cluster(str(tmp_path / "d"), 1, offsets_partitions=2, txn_partitions=2)
    c.create_topic(TopicConfig("ledger", 1, compacted=True, clean=True, segment_bytes=600))
    other = TransactionalProducer(c, "other", timeout_ms=TIMEOUT)
    tx = TransactionalProducer(c, "app", timeout_ms=TIMEOUT)
    _other_one(other)
    tx.send("ledger", 0, 4)
    tx.commit()
    for _ in range(8):  # the other application writes on: the cleaner reaches past the commit
        _other_one(other)
        c.clock.tick(TIMEOUT // 2)
    c.close()
    pid = tx.producer_id
    part = tmp_path / "d" / "broker-1" / "ledger-0"
    dropped = 0
    for seg in sorted(part.glob("*.log")):  # the bug: the marker goes, the data stays
        data = seg.read_bytes()
        src = BytesSource(data)
        keep = [e for e in entries(src.read_at, len(data), lambda _: None)
                if not (e.is_control and e.producer_id == pid)]  # fmt: skip
        dropped += len(list(entries(src.read_at, len(data), lambda _: None))) - len(keep)
        seg.write_bytes(b"".join(data[e.position : e.end] for e in keep))
    assert dropped == 1
    found = [f for f in audit_local([str(tmp_path / "d")])["findings"]
             if f["kind"] == "hanging_transaction"]  # fmt: skip
    assert [f["producer_id"] for f in found] == [pid]
    ev = json.loads(found[0]["evidence"])
    assert found[0]["severity"] == "info" and ev["in_cleaned_range"] is True
    assert ev["known_bug"].startswith("KAFKA-8351")
    assert "copy ledger-0 again first" in found[0]["remediation"]


def _other_one(other: TransactionalProducer) -> None:
    other.send("ledger", 0, 2, tag="other")
    other.commit()
