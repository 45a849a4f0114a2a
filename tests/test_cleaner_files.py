"""Files a crash leaves in a partition directory mid-cleaning or mid-deletion (`.deleted`,
`.cleaned`, `.swap`), resolved as the broker's log recovery would (replay.scan_task.Recovery,
LogLoader): decoded and accounted, never replayed twice (no Spark)."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from replay.local import audit_local
from replay.scan_task import Recovery


def _file(kind: str, base: int):
    return SimpleNamespace(kind=kind, info=SimpleNamespace(base_offset=base))


def _keys(result) -> list[tuple]:
    return sorted((f["kind"], f["severity"], f["topic"], f["first_offset"]) for f in result["findings"])  # fmt: skip


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """One broker, one partition an idempotent producer writes, a transactional one too."""
    from simulator.clients import Producer, TransactionalProducer
    from simulator.cluster import Cluster, TopicConfig

    root = tmp_path_factory.mktemp("crash") / "dump"
    c = Cluster(str(root), 1, offsets_partitions=1, txn_partitions=1)
    c.create_topic(TopicConfig("payments", 1))
    plain, tx = Producer(c), TransactionalProducer(c, "payments-tx")
    for r in range(20):
        plain.send("payments", 0, 3, tag=f"p{r}")
        tx.send("payments", 0, 2, tag=f"t{r}")
        tx.commit() if r % 4 else tx.abort()
    c.close()
    return root, _keys(audit_local([str(root)]))


@pytest.mark.parametrize("suffix", [".deleted", ".cleaned", ".swap"])
def test_a_segment_left_by_a_crash_is_not_replayed_twice(dump, suffix):
    """A copy of a live segment as a deletion's `.deleted`, an interrupted cleaning's
    `.cleaned`, or a completed cleaning's `.swap` (which replaces the segment it covers): the
    findings stay those of the clean dump (replaying both once gave a duplicate_sequence per
    batch), and the file's bytes are still accounted."""
    root, before = dump
    log = sorted((root / "broker-1" / "payments-0").glob("*.log"))[0]
    left = log.with_name(log.name + suffix)
    shutil.copy(log, left)
    try:
        result = audit_local([str(root)])
        assert _keys(result) == before
        assert any(c["check"].startswith("producer batches replayed") for c in result["checks"])
    finally:
        left.unlink()


def test_recovery_keeps_what_log_loader_keeps():
    files = [_file("log", 0), _file("log", 100), _file("log.swap", 0), _file("log.cleaned", 100),
             _file("log.swap", 150), _file("log.deleted", 0), _file("txnindex", 0)]  # fmt: skip
    r = Recovery(files)
    assert r.keeps(files[2]) and not r.keeps(files[4])  # a swap above the lowest .cleaned: dropped
    assert not r.keeps(files[3]) and not r.keeps(files[5])
    assert r.keeps(files[0])  # nothing known covered yet
    import pyarrow as pa

    r.saw(files[2], pa.record_batch({"base_offset": [0, 40], "last_offset": [39, 99]}))
    assert not r.keeps(files[0]) and not r.keeps(files[6])  # replaced by the swap
    assert r.keeps(files[1])


def test_replicas_cleaned_at_different_points_do_not_diverge(tmp_path):
    """Two replicas of a compacted topic, the follower's cleaner further on than the leader's
    (each broker cleans on its own): inside the cleaned range a kept batch has fewer records in
    one replica, so other bytes, and the same offsets, producer, epoch and base sequence, which
    is what is compared there (replay.rules.CLEANED_IDENTITY). A batch whose producer epoch
    differs there still diverges."""
    import os
    import pathlib

    from decoders.constants import PRODUCER_EPOCH_OFFSET
    from decoders.framing import iter_entries
    from simulator.cleaner import clean
    from simulator.clients import Producer
    from simulator.cluster import Cluster, TopicConfig
    from simulator.scenarios import _keyed
    from simulator.writer import restamp_crc

    root = tmp_path / "dump"
    c = Cluster(str(root), 1, brokers=2, offsets_partitions=1, txn_partitions=1)
    c.create_topic(TopicConfig("profiles", 1, replicas=2, compacted=True, segment_bytes=1 << 10))
    p = Producer(c)
    for r in range(60):
        p.send("profiles", 0, records=[_keyed(c, f"user-{r % 4}", f"v{r}") for _ in range(2)])
    c.close()
    log = c.log("profiles", 0)
    follower = os.path.join(log.log_dirs[1], "profiles-0")
    assert clean(log, c.clock.now, d=follower) > 0
    result = audit_local([str(root)])
    assert [f for f in result["findings"] if f["kind"] == "replica_divergence"] == []

    # the follower's first kept batch rewritten with another epoch: a real divergence
    path = sorted(pathlib.Path(follower).glob("*.log"))[0]
    data = bytearray(path.read_bytes())
    pos = next(iter_entries(bytes(data)))[0]
    data[pos + PRODUCER_EPOCH_OFFSET + 1] ^= 0x01  # its low byte; the CRC made valid again
    restamp_crc(data, pos)
    path.write_bytes(bytes(data))
    found = [f for f in audit_local([str(root)])["findings"] if f["kind"] == "replica_divergence"]
    assert len(found) == 1
