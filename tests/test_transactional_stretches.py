"""One transactional producer's stretches applied at once (replay.partition_runs.
apply_transactional) give exactly what the batch-by-batch replay gives: every output of a
partition's replay, over long histories of a Kafka Streams exactly-once thread (one producer
id and epoch for life, a transaction per commit interval), with the coordinators' own writes
between its batches, another producer now and then, a seeded start inside an open transaction,
snapshots, and random faults of the kinds a broker's log shows (sequence gaps and repeats, new
and older epochs, a marker of an older coordinator, a lost marker, an empty control batch, a
non-transactional write inside a transaction, clock jumps past the producer-id expiration,
holes, CRC-invalid batches, cleaned ranges). No Spark."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

import replay.partition as partition_module
from decoders.constants import CONSUMER_OFFSETS_TOPIC
from replay.partition import BATCH_COLUMNS, PartitionReplay
from replay.replicas import SIDE_COLUMNS
from replay.settings import AuditConfig
from tests.test_partition_runs import _damaged, _snapshots, by_table
from tests.whole_tables import partition_tables

START = 1_767_225_600_000


def history(rng: random.Random, transactions: int, topic: str = "out") -> list[dict]:
    """A partition a Streams thread writes: per transaction one to three transactional batches
    then its marker (an ABORT now and then), every 100 ms; between them, the coordinators' own
    writes (no producer state) and, rarely, another producer's transaction or idempotent
    write."""
    rows: list[dict] = []
    offset, seq, ts = 0, 0, START
    other_seq = 0

    def add(**kw) -> None:
        nonlocal offset
        count = kw.pop("records", 1)
        row = dict.fromkeys(BATCH_COLUMNS)
        row.update(
            topic=topic, partition=0, base_offset=offset, last_offset=offset + count - 1,
            record_count=count, is_transactional=False, is_control=False, magic=2,
            crc_valid=True, has_delete_horizon=False, producer_id=-1, producer_epoch=-1,
            base_sequence=-1, last_sequence=-1, max_timestamp=ts,
            file=f"{offset // 500:020d}.log", position=offset * 90,
        )  # fmt: skip
        row.update(kw)
        rows.append(row)
        offset += count

    for _ in range(transactions):
        ts += 100
        for _ in range(rng.randint(1, 3)):
            n = rng.randint(1, 5)
            add(producer_id=7, producer_epoch=3, base_sequence=seq, last_sequence=seq + n - 1,
                is_transactional=True, records=n)  # fmt: skip
            # the group coordinator writes a transactional offset commit with base sequence 0
            # (GroupMetadataManager.storeOffsets); the broker checks none in its own topics
            seq = 0 if topic == CONSUMER_OFFSETS_TOPIC else seq + n
            if rng.random() < 0.2:  # a group's commit, written by the coordinator
                add(records=1, max_timestamp=ts + rng.randint(-50, 50))
        if rng.random() < 0.02:  # another producer's whole transaction
            add(producer_id=9, producer_epoch=0, base_sequence=other_seq,
                last_sequence=other_seq, is_transactional=True)  # fmt: skip
            other_seq += 1
            add(producer_id=9, producer_epoch=0, is_control=True, control_type="COMMIT",
                coordinator_epoch=1, records=1)  # fmt: skip
        outcome = "ABORT" if rng.random() < 0.1 else "COMMIT"
        add(producer_id=7, producer_epoch=3, is_control=True, control_type=outcome,
            coordinator_epoch=1, records=1)  # fmt: skip
    return rows


def _faults(rows: list[dict], rng: random.Random) -> list[dict]:
    """A few faults of a transactional producer's log on top of the generic ones."""
    rows = _damaged(rows, rng)
    for _ in range(rng.randint(0, 4)):
        i = rng.randrange(len(rows))
        r = rows[i]
        fault = rng.choice(
            ["lost_marker", "old_coordinator", "empty", "plain", "expiry", "new_epoch"]
        )
        if fault == "lost_marker" and r["is_control"]:
            del rows[i]
        elif fault == "old_coordinator" and r["is_control"]:
            r["coordinator_epoch"] = 0
        elif fault == "empty" and r["is_control"]:
            r["record_count"] = 0
        elif fault == "plain" and r["is_transactional"]:
            r["is_transactional"] = False
        elif fault == "expiry":
            for later in rows[i:]:
                if later["max_timestamp"] is not None:
                    later["max_timestamp"] += 8 * 24 * 3600 * 1000
        elif fault == "new_epoch":  # fenced: from here on epoch 4, sequences from 0
            for later in rows[i:]:
                if later["producer_id"] == 7:
                    later["producer_epoch"] = 4
                    if later["base_sequence"] is not None and later["base_sequence"] >= 0:
                        later["base_sequence"] -= r["base_sequence"] or 0
                        later["last_sequence"] -= r["base_sequence"] or 0
    return rows


def _both(topic: str, rows: list[dict], side: list[dict], monkeypatch, cleaned_upto=0) -> int:
    """The replay with and without stretches applied at once: equal table by table. Returns
    the batches applied as transactional stretches."""
    facts = AuditConfig.from_conf(None).facts()
    bt = pa.Table.from_pylist(rows).append_column("broker", pa.array(["1"] * len(rows)))
    applied = []
    original = partition_module.apply_transactional

    def counting(r, runs, a, b):
        done = original(r, runs, a, b)
        applied.append(done)
        return done

    monkeypatch.setattr(partition_module, "apply_transactional", counting)
    monkeypatch.setattr(PartitionReplay, "small_piece", 0)  # every piece by runs
    fast = partition_tables(topic, 0, bt, side, facts, cleaned_upto)
    monkeypatch.setattr(PartitionReplay, "fast", False)
    slow = partition_tables(topic, 0, bt, side, facts, cleaned_upto)
    monkeypatch.setattr(PartitionReplay, "fast", True)
    assert by_table(fast) == by_table(slow)
    return sum(applied)


@pytest.mark.parametrize("topic", ["out", CONSUMER_OFFSETS_TOPIC])
def test_a_healthy_history_is_applied_in_stretches(topic, monkeypatch):
    rows = history(random.Random(1), 3000, topic)
    applied = _both(topic, rows, [], monkeypatch)
    assert applied > 0.95 * len(rows)


def _renumbered(rows: list[dict]) -> list[dict]:
    """The batches at consecutive offsets again (after some were removed or added)."""
    offset = rows[0]["base_offset"]
    for r in rows:
        span = r["last_offset"] - r["base_offset"]
        r["base_offset"], r["last_offset"] = offset, offset + span
        offset += span + 1
    return rows


def test_open_transactions_at_the_start_at_the_end_and_of_someone_else(monkeypatch):
    """The log starts inside a transaction a snapshot holds open; another producer leaves one
    open (hanging) that the thread's markers bound; the log ends inside a transaction, with
    the coordinators' writes after it pinned behind the LSO, their clock behind the leader's
    (the copy's end is its last marker)."""
    rows = [dict(r) for r in history(random.Random(2), 400)]
    first_marker = next(i for i, r in enumerate(rows) if r["is_control"] and r["producer_id"] == 7)
    rows = rows[first_marker - 1 :]
    # producer 9's last transaction without its marker: open from there on; its others gone
    last_of_9 = max(i for i, r in enumerate(rows) if r["producer_id"] == 9 and not r["is_control"])
    rows = [r for i, r in enumerate(rows) if r["producer_id"] != 9 or i == last_of_9]
    last_marker = max(i for i, r in enumerate(rows) if r["is_control"] and r["producer_id"] == 7)
    del rows[last_marker]
    rows += [{**rows[-1], "producer_id": -1, "producer_epoch": -1, "base_sequence": -1,
              "last_sequence": -1, "is_transactional": False,
              "max_timestamp": rows[-1]["max_timestamp"] - 1000} for _ in range(3)]  # fmt: skip
    rows = _renumbered(rows)
    start = rows[0]["base_offset"]
    seed = dict.fromkeys(SIDE_COLUMNS)
    seed.update(
        snapshot_offset=start, producer_id=7, producer_epoch=3,
        last_sequence=rows[0]["base_sequence"] - 1, last_offset=start - 1, offset_delta=0,
        coordinator_epoch=1, current_txn_first_offset=start - 3,
    )  # fmt: skip
    facts = AuditConfig.from_conf(None).facts()
    bt = pa.Table.from_pylist(rows).append_column("broker", pa.array(["1"] * len(rows)))
    opened = by_table(partition_tables("out", 0, bt, [{"_row": "snapshot", **seed}], facts))
    opened = [t for t in opened["transaction"] if t["outcome"] == "OPEN"]
    assert {t["producer_id"] for t in opened} == {7, 9}
    assert all(t["bound_timestamp"] for t in opened if t["producer_id"] == 9)
    pinned = [t["pinned_records"] for t in opened if t["producer_id"] == 7]
    assert len(pinned) == 1 and pinned[0] >= 3
    applied = _both("out", rows, [{"_row": "snapshot", **seed}], monkeypatch)
    assert applied > 0.9 * len(rows)


def test_an_expired_producer_is_forgotten_between_transactions(monkeypatch):
    """Idle past producer.id.expiration.ms between two transactions, the thread is a new
    producer to the broker: the coordinator epoch it had is forgotten, so an older one's
    marker after it is no zombie (10.3)."""
    rows = history(random.Random(4), 200)
    cut = next(
        i
        for i in range(100, len(rows))
        if rows[i - 1]["is_control"] and rows[i]["producer_id"] == 7
    )
    for later in rows[cut:]:
        later["max_timestamp"] += 2 * 24 * 3600 * 1000
        if later["is_control"]:
            later["coordinator_epoch"] = 0
    facts = AuditConfig.from_conf(None).facts()
    bt = pa.Table.from_pylist(rows).append_column("broker", pa.array(["1"] * len(rows)))
    found = by_table(partition_tables("out", 0, bt, [], facts)).get("finding", [])
    assert not [f for f in found if f["kind"] == "fenced_epoch_write"]
    assert _both("out", rows, [], monkeypatch) > 0.9 * len(rows)


@pytest.mark.sweep  # 60 random long histories: in ./dev test, not in the inner loop
def test_damaged_long_histories_replay_the_same(monkeypatch):
    rng = random.Random(17)
    applied = total = 0
    for n in range(60):
        topic = rng.choice(["out", CONSUMER_OFFSETS_TOPIC])
        rows = _faults(history(rng, rng.randint(50, 600), topic), rng)
        side = _snapshots(rows, rng) if n % 3 == 0 else []
        cleaned = rows[rng.randrange(len(rows))]["base_offset"] if n % 5 == 0 else 0
        applied += _both(topic, rows, side, monkeypatch, cleaned)
        total += len(rows)
    assert applied > total // 2  # most of a damaged history still goes in stretches
