"""Runs of plain batches applied at once (replay.partition._Runs, PartitionReplay._skip_ahead)
and a few batches replayed as rows (PartitionReplay._few) give exactly what the batch-by-batch
replay over columns gives: every output of a partition's replay
(findings, transactions, producer states, the snapshot comparison at every snapshot offset,
LSO changes, the partition's summary), over every simulated scenario, over production-shaped
traffic, and over the same batches damaged at random (sequence gaps and repeats, epoch bumps,
transactional and invalid batches, clock jumps past the producer-id expiration, holes). No
Spark."""

from __future__ import annotations

import os
import random
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import decoders
from replay import partition as partition_module
from replay.grouped import Facts, InOrder
from replay.partition import BATCH_COLUMNS, PartitionReplay, cleaner_leftovers_end
from replay.partition_runs import FIRST_WINDOW
from replay.replicas import SIDE_COLUMNS
from replay.settings import AuditConfig
from tests.whole_tables import partition_tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def production(tmp_path_factory):
    """A few MB of production-shaped traffic (benchmarks/prodshape.py): idempotent producers'
    small batches, an exactly-once app, busy `__consumer_offsets`."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import prodshape

    out = str(tmp_path_factory.mktemp("prod") / "dump")
    prodshape.generate(out, 0.004, seed=3)
    return out


def _millis(table: pa.Table) -> pa.Table:
    """Timestamps as epoch milliseconds (garbage ones included), as the replay reads them."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(pa.int64()))
    return table


def _partitions(root: str) -> dict[tuple, tuple[pa.Table, list[dict]]]:
    """(broker, topic, partition) -> (its batches, its snapshot side rows)."""
    t = decoders.read_dump([root], ["batches", "producer_snapshots"], deep=False)
    t = {name: _millis(table) for name, table in t.items()}
    batches = t["batches"].filter(pa.compute.is_valid(t["batches"].column("topic")))
    out: dict[tuple, list] = {}
    for row in batches.to_pylist():
        out.setdefault((row["broker"], row["topic"], row["partition"]), [[], []])[0].append(row)
    for s in t["producer_snapshots"].to_pylist():
        key = (s["broker"], s["topic"], s["partition"])
        if key in out:
            side = {c: s.get(c) for c in SIDE_COLUMNS}
            side["timestamp"] = None  # not compared
            out[key][1].append({"_row": "snapshot", **side})
    return {k: (_table(rows), side) for k, (rows, side) in out.items()}


def _table(rows: list[dict]) -> pa.Table:
    cols = [c for c in BATCH_COLUMNS if c != "file"] + ["broker"]
    return pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in rows])


def _both(key, bt: pa.Table, side: list[dict], facts: Facts, monkeypatch) -> int:
    """The replay of one partition with and without runs applied at once; equal. Returns the
    batches the fast replay applied at once."""
    _broker, topic, partition = key
    applied = []
    original = PartitionReplay._skip_ahead

    def counting(self, runs, a, b):
        done = original(self, runs, a, b)
        applied.append(b - a if done else 0)
        return done

    monkeypatch.setattr(PartitionReplay, "_skip_ahead", counting)
    monkeypatch.setattr(PartitionReplay, "small_piece", 0)  # every piece by runs
    fast = partition_tables(topic, partition, bt, side, facts)
    monkeypatch.setattr(PartitionReplay, "fast", False)
    slow = partition_tables(topic, partition, bt, side, facts)
    monkeypatch.setattr(PartitionReplay, "fast", True)
    assert by_table(fast) == by_table(slow), key
    # each producer stretch first tried at a large window (PartitionReplay.window): the same
    monkeypatch.setattr(partition_module, "FIRST_WINDOW", 4096)
    wide = partition_tables(topic, partition, bt, side, facts)
    monkeypatch.setattr(partition_module, "FIRST_WINDOW", FIRST_WINDOW)
    assert by_table(wide) == by_table(slow), key
    monkeypatch.setattr(PartitionReplay, "small_piece", 1 << 40)  # every piece as rows
    few = partition_tables(topic, partition, bt, side, facts)
    assert by_table(few) == by_table(slow), key
    return sum(applied)


def by_table(t: pa.Table) -> dict[str, list[dict]]:
    """A replay's rows by the table they go to, each table's in order (how the scan splits
    them: which table's rows come first is not an output)."""
    out: dict[str, list[dict]] = {}
    for row in t.to_pylist():
        out.setdefault(row["out"], []).append(row)
    return out


# byte for byte the partitions of another scenario here (production_day's logs, the healthy
# twin of the long-lived producer's faults): replaying them again proves nothing more
SAME_PARTITIONS = ("production_day_logs_only", "long_lived_producer")


@pytest.mark.sweep  # every scenario: in ./dev test, not the inner loop
def test_every_scenario_s_partitions_replay_the_same(sim_all, monkeypatch):
    facts = AuditConfig.from_conf(None).facts()
    applied = 0
    for scenario in sorted(d.name for d in sim_all.iterdir() if d.is_dir()):
        if scenario in SAME_PARTITIONS:
            continue
        for key, (bt, side) in sorted(_partitions(str(sim_all / scenario)).items()):
            applied += _both(key, bt, side, facts, monkeypatch)
    assert applied > 1000  # the scenarios' idempotent producers give runs


def test_production_shaped_partitions_replay_the_same(production, monkeypatch):
    facts = AuditConfig.from_conf(None).facts()
    parts = _partitions(production)
    total = sum(bt.num_rows for bt, _ in parts.values())
    applied = sum(_both(k, bt, s, facts, monkeypatch) for k, (bt, s) in sorted(parts.items()))
    assert applied > total // 2  # most batches of such traffic are plain continuations


def _damaged(rows: list[dict], rng: random.Random) -> list[dict]:
    """The batches with a few random faults a broker's log can show."""
    rows = [dict(r) for r in rows]
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(rows))
        r = rows[i]
        fault = rng.choice(
            [
                "gap",
                "repeat",
                "rewind",
                "zombie",
                "epoch",
                "txn",
                "crc",
                "clock",
                "no_ts",
                "hole",
                "back",
                "v1",
                "overlap",
                "crc_unknown",
            ]
        )
        if fault == "gap" and r["base_sequence"] is not None and r["base_sequence"] >= 0:
            r["base_sequence"] += 3
            r["last_sequence"] += 3
        elif fault == "repeat" and i > 0:
            prev = rows[i - 1]
            if prev["producer_id"] == r["producer_id"]:
                r["base_sequence"], r["last_sequence"] = (
                    prev["base_sequence"],
                    prev["last_sequence"],
                )
        elif fault == "rewind":  # the producer sends earlier sequences again from here on
            earlier = [j for j in range(i) if rows[j]["producer_id"] == r["producer_id"]
                       and (rows[j]["base_sequence"] or -1) >= 0]  # fmt: skip
            if earlier and r["base_sequence"] is not None and r["base_sequence"] >= 0:
                delta = r["base_sequence"] - rows[rng.choice(earlier)]["base_sequence"]
                for later in rows[i:]:
                    if later["producer_id"] == r["producer_id"] and later["base_sequence"] >= 0:
                        later["base_sequence"] -= delta
                        later["last_sequence"] -= delta
        elif fault == "zombie":  # from here on, writes of an epoch already fenced
            for earlier in rows[:i]:
                if earlier["producer_id"] == r["producer_id"]:
                    earlier["producer_epoch"] = (earlier["producer_epoch"] or 0) + 1
        elif fault == "epoch":
            for later in rows[i:]:
                if later["producer_id"] == r["producer_id"]:
                    later["producer_epoch"] = (later["producer_epoch"] or 0) + 1
        elif fault == "txn":
            r["is_transactional"] = True
        elif fault == "crc":
            r["crc_valid"] = False
        elif fault == "clock":
            for later in rows[i:]:
                if later["max_timestamp"] is not None:
                    later["max_timestamp"] += 10 * 24 * 3600 * 1000
        elif fault == "no_ts":
            r["max_timestamp"] = None
        elif fault == "hole":
            del rows[i]
        elif fault == "back":
            r["producer_epoch"] = max(0, (r["producer_epoch"] or 0) - 1)
        elif fault == "v1":
            r["magic"] = 1
        elif fault == "overlap" and i > 0:  # offsets a batch before it holds (KAFKA-7866)
            r["base_offset"] = rows[rng.randrange(i)]["base_offset"]
            r["last_offset"] = max(r["last_offset"], r["base_offset"])
        elif fault == "crc_unknown":  # not checked: counted valid
            r["crc_valid"] = None
    return rows


def _snapshots(rows: list[dict], rng: random.Random) -> list[dict]:
    """Snapshot entries at random offsets inside the log, so that the producer states there are
    compared (and their differences reported)."""
    out = []
    for _ in range(3):
        r = rows[rng.randrange(len(rows))]
        if r["producer_id"] is None or r["producer_id"] < 0:
            continue
        entry = dict.fromkeys(SIDE_COLUMNS)
        entry.update(
            snapshot_offset=r["base_offset"] + rng.choice([0, 1]), producer_id=r["producer_id"],
            producer_epoch=0, last_sequence=0, last_offset=0, offset_delta=0,
            coordinator_epoch=-1, current_txn_first_offset=-1,
        )  # fmt: skip
        out.append({"_row": "snapshot", **entry})
    return out


@pytest.mark.sweep  # 120 random damages: in ./dev test, not in the inner loop
def test_damaged_partitions_replay_the_same(production, sim_all, monkeypatch):
    facts = AuditConfig.from_conf(None).facts()
    rng = random.Random(11)
    parts = {**_partitions(production), **_partitions(str(sim_all))}
    keys = sorted(k for k, (bt, _) in parts.items() if bt.num_rows > 20)
    applied = 0
    for n in range(120):
        key = keys[n % len(keys)]
        rows = parts[key][0].to_pylist()
        damaged = _damaged(rows, rng)
        side = parts[key][1] + _snapshots(damaged, rng)
        applied += _both(key, _table(damaged), side, facts, monkeypatch)
    assert applied > 0


def _idempotent(n: int, producers: int) -> pa.Table:
    """``n`` batches of ``producers`` idempotent producers in turn, each continuing its last."""
    rows = []
    for i in range(n):
        seq = i // producers * 5
        rows.append({
            "topic": "t", "partition": 0, "base_offset": 5 * i, "last_offset": 5 * i + 4,
            "producer_id": 1000 + i % producers, "producer_epoch": 0, "base_sequence": seq,
            "last_sequence": seq + 4, "record_count": 5, "is_transactional": False,
            "is_control": False, "control_type": None, "coordinator_epoch": None,
            "max_timestamp": 1_700_000_000_000 + 10 * i, "magic": 2, "crc_valid": True,
            "has_delete_horizon": False, "position": 100 * i, "crc": 0,
        })  # fmt: skip
    return pa.Table.from_pylist(rows)


@pytest.mark.parametrize("n", [1, 8, 63, 64, 200])
def test_a_few_batches_go_one_by_one(n, monkeypatch):
    """A piece of fewer than ``small_piece`` batches is replayed batch by batch (setting up
    the runs costs more than a quiet partition's replay); the state is the runs' either way."""
    from replay import partition as partition_module
    from replay.carried import carry

    built = []

    class Counted(partition_module.Runs):
        def __init__(self, t, expiry_ms):
            built.append(t.num_rows)
            super().__init__(t, expiry_ms)

    monkeypatch.setattr(partition_module, "Runs", Counted)
    t = _idempotent(n, producers=3)
    as_set = carry(PartitionReplay("t", 0).run_in_order([t]))
    assert built == ([] if n < PartitionReplay.small_piece else [n])
    monkeypatch.setattr(PartitionReplay, "small_piece", 0)
    by_runs = carry(PartitionReplay("t", 0).run_in_order([t]))
    assert built[-1] == n
    assert as_set == by_runs
    assert as_set["log_end"] == 5 * n and len(as_set["producers"]) == min(n, 3)


@pytest.mark.parametrize("seed", range(24))
def test_pieces_of_a_few_batches_replay_as_rows_as_over_columns(seed, monkeypatch):
    """A log's pieces of a few batches replayed as rows (``_few``) leave what the replay over
    columns leaves, batch by batch or by runs: findings (offsets reused, CRC-invalid and
    unchecked batches, batches of a KRaft snapshot file that repeat the log's), transactions,
    LSO changes, the carried state and the producer states at snapshot offsets, the batches
    counted for the sequences, and the first segment's earliest timestamp over several pieces
    and segments."""
    from replay.carried import carry

    rng = random.Random(seed)
    rows = _damaged(_idempotent(48, producers=3).to_pylist(), rng)
    for i in rng.sample(range(len(rows)), 4):  # CRCs not checked, or not matching
        rows[i]["crc_valid"] = rng.choice([None, None, False])
    i = rng.randrange(1, len(rows) - 1)  # a batch starting at the offset the one before ends at
    rows.insert(i, {**rows[i], "base_offset": rows[i - 1]["last_offset"], "position": -1})
    rows.append({**rows[-1], "position": -2, "crc": 7})  # the highest offset reached twice
    rows[rng.randrange(3)]["max_timestamp"] = -1  # none (a negative one is none)
    for i, r in enumerate(rows):
        r["file"] = rng.choice([
            f"/d/t-0/{(i // 16) * 80:020d}.log",
            f"/d/t-0/{(i // 16) * 80:020d}.log",
            f"/d/t-0/{80:020d}-0000000001.checkpoint",  # a KRaft snapshot's
            None,
        ])  # fmt: skip
    cuts = sorted(rng.sample(range(1, len(rows)), 6))
    pieces = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]
    # a piece whose batches are all below what the pieces before reached (a segment written
    # again, KAFKA-7866)
    pieces.insert(-1, [{**r, "position": -3 - k} for k, r in enumerate(rows[2:5])])
    at = sorted(rng.sample([r["base_offset"] for r in rows], 3))
    schema = pa.Table.from_pylist(rows).schema  # (a piece's column of nulls keeps its type)

    def replayed(small_piece: int, fast: bool = True) -> tuple:
        monkeypatch.setattr(PartitionReplay, "small_piece", small_piece)
        monkeypatch.setattr(PartitionReplay, "fast", fast)
        r = PartitionReplay("t", 0, cleaned_upto=rows[5]["base_offset"])
        r.run_in_order([pa.Table.from_pylist(p, schema=schema) for p in pieces], at)
        return (r.findings, r.transactions, r.lso_changes, carry(r), r.snapshot_states,
                r.sequence_batches, r.overlaps, r.highest, r.first_timestamp, r.first_segment)  # fmt: skip

    as_rows = replayed(1 << 40)
    assert as_rows == replayed(0, fast=False)
    assert as_rows == replayed(0)


def test_a_long_lived_producer_s_pieces_are_tried_at_the_window_it_last_applied(
    sim_all, monkeypatch
):
    """A producer whose stretch applied whole windows has its next stretch (the next piece's,
    a long-lived producer's every piece) tried at once at the doubled window, not from 64
    rows up again: a try a piece, each handing its rows on as tables of their own. The rows
    are the batch-by-batch replay's."""
    facts = AuditConfig.from_conf(None).facts()
    parts = _partitions(str(sim_all / "long_lived_producer"))
    key = ("1", "enriched", 0)
    bt, side = parts[key]
    pieces = [bt.slice(i, 1000) for i in range(0, bt.num_rows, 1000)]
    first = pc.min(bt.column("base_offset")).as_py()
    in_order = InOrder(lambda: iter(pieces), "1", first, cleaner_leftovers_end(bt))
    tries, applied = [], []
    original = partition_module.apply_transactional

    def counting(r, runs, a, b):
        tries.append(b - a)
        applied.append(original(r, runs, a, b))
        return applied[-1]

    monkeypatch.setattr(partition_module, "apply_transactional", counting)
    fast = partition_tables("enriched", 0, in_order, side, facts)
    assert len(pieces) >= 10 and len(tries) <= len(pieces) + 6, tries
    assert sum(applied) > 0.99 * bt.num_rows  # all but the first few over columns
    monkeypatch.setattr(PartitionReplay, "fast", False)
    assert by_table(fast) == by_table(partition_tables("enriched", 0, in_order, side, facts))
