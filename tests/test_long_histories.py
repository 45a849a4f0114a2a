"""The cross-log judgement streamed over long histories (replay.crosslog_stream): a producer's
sequences held in a bounded store and aligned a block of rows at a time give exactly what the
alignment of the whole history in memory gives, on random long histories with faults late in
them; and its memory does not grow with the history. Pure Python: no Spark."""

from __future__ import annotations

import numpy as np
import pytest

from replay import crosslog, spill
from replay.crosslog import Bounds, Coordinator, Side
from replay.crosslog_stream import judge_producer

PID, TID = 7000, "enrich-app-0_0"
T0 = 1_760_000_000_000  # epoch milliseconds, as a dump's timestamps are
BOUNDS = Bounds(2_000, 60_000)  # an order window of 600 transactions: a band that wide


def history(seed: int, n: int) -> tuple[list[dict], list[dict], dict, Coordinator]:
    """A TV1 producer's ``n`` transactions, 100 ms apart over 2 or 3 partitions, the
    partitions' clock up to 2 s off the coordinator's; late in it (and at random) split
    outcomes, missing markers, writes outside any transaction, retried markers and aborts;
    sometimes the coordinator's history starts late (compacted), a partition's copy ends
    early, or a partition starts late (retention)."""
    rng = np.random.default_rng(seed)
    parts = [("out", p) for p in range(int(rng.integers(2, 4)))]
    skew = int(rng.integers(-2_000, 2_000))
    faults = {int(k): str(rng.choice(["split", "missing", "outside", "retry", "abort"]))
              for k in rng.integers(int(n * 0.8), n, int(rng.integers(1, 6)))}  # fmt: skip
    compacted = int(rng.integers(0, n // 2)) if rng.random() < 0.3 else 0
    retention = {tp: int(rng.integers(0, n // 3)) for tp in parts if rng.random() < 0.3}
    offsets = dict.fromkeys(parts, 0)
    ctx, ptx = [], []
    for k in range(n):
        t0 = T0 + k * 100
        fault = faults.get(k)
        outcome = "ABORT" if fault == "abort" else "COMMIT"
        if k >= compacted:
            ctx.append({
                "transactional_id": TID, "data_epoch": 0, "marker_epoch": 0, "outcome": outcome,
                "partitions": [{"topic": t, "partition": p} for t, p in parts],
                "start_timestamp": t0, "prepare_timestamp": t0 + 60,
                "complete_timestamp": t0 + 80, "maybe": False,
            })  # fmt: skip
        for tp in parts:
            first = offsets[tp]
            marker = "ABORT" if fault == "split" and tp == parts[0] else outcome
            if fault == "missing" and tp == parts[-1]:
                marker = "OPEN"
            row = _entry(tp, first, 2, marker, t0 + skew)
            offsets[tp] += 3 if marker != "OPEN" else 2
            if k >= retention.get(tp, 0):
                ptx.append(row)
            if fault == "retry" and tp == parts[0]:
                ptx.append(_entry(tp, offsets[tp], 0, marker, t0 + skew + 5))
                offsets[tp] += 1
            if fault == "outside" and tp == parts[0]:
                ptx.append(_entry(tp, offsets[tp], 2, "COMMIT", t0 + skew + 90))
                offsets[tp] += 3
    end = T0 + n * 100
    copy_end = {tp: end + (0 if rng.random() < 0.7 else -int(rng.integers(0, 3_000)))
                for tp in parts}  # fmt: skip
    sides = {tp: Side(complete_from_start=tp not in retention, copy_end_ts=copy_end[tp])
             for tp in parts}  # fmt: skip
    coordinator = Coordinator(complete_from_start=not compacted, copy_end_ts=end + 100,
                              latest_epoch=0)  # fmt: skip
    return ptx, ctx, sides, coordinator


def _entry(tp, first: int, records: int, outcome: str, t0: int) -> dict:
    marker = None if outcome == "OPEN" else first + records
    return {
        "topic": tp[0], "partition": tp[1], "producer_id": PID, "producer_epoch": 0,
        "marker_epoch": None if marker is None else 0,
        "first_offset": first if records else None,
        "last_offset": first + records - 1 if records else None, "marker_offset": marker,
        "outcome": outcome, "record_count": records,
        "first_timestamp": t0 + 10 if records else None,
        "marker_timestamp": None if marker is None else t0 + 70, "coordinator_epoch": 0,
        "in_cleaned_range": False, "bound_timestamp": None,
    }  # fmt: skip


def _judged(ptx, ctx, sides, coordinator):
    findings, stats = judge_producer(PID, ptx, ctx, sides, coordinator, BOUNDS)
    return [(f["kind"], f["topic"], f["partition"], f["first_offset"], f["evidence"])
            for f in findings], stats  # fmt: skip


# the first seeds in the inner loop, every seed in ./dev test (the sweep tier)
SEEDS = [s if s < 4 else pytest.param(s, marks=pytest.mark.sweep) for s in range(12)]


@pytest.mark.parametrize("seed", SEEDS)
def test_streamed_alignment_equals_the_whole_history(seed, monkeypatch):
    """Each random history judged twice: its sequences whole in memory and aligned as one
    block (the whole-history alignment), then written to files past a few KB and aligned a
    few rows at a time (as a week of a Streams thread is). Identical findings and counts;
    and the faults injected late are found."""
    n = int(np.random.default_rng(seed).integers(1_500, 4_000))
    ptx, ctx, sides, coordinator = history(seed, n)
    whole = _judged(ptx, ctx, sides, coordinator)
    monkeypatch.setattr(spill, "HOLD_BYTES", 4_096)
    monkeypatch.setattr(crosslog, "BLOCK_BYTES", 8 * 17 * 37)  # 37 rows of the first band
    streamed = _judged(ptx, ctx, sides, coordinator)
    assert streamed == whole
    assert whole[1]["judged"] > 0


def test_faults_after_many_clean_transactions_are_found():
    """60,000 transactions of one producer, then a split outcome, a missing marker and a
    write outside any transaction (after its transaction's marker, in a partition the
    producer then leaves, as a Streams task moving to another thread), each in a partition
    of its own: each found where it is, nothing else."""
    n = 60_000
    parts = [("out", 0), ("out", 1), ("out", 2)]
    ctx, ptx = [], []
    for k in range(n):
        written = parts if k <= 56_000 else parts[:2]
        ctx.append({
            "transactional_id": TID, "data_epoch": 0, "marker_epoch": 0, "outcome": "COMMIT",
            "partitions": [{"topic": t, "partition": p} for t, p in written],
            "start_timestamp": k * 100, "prepare_timestamp": k * 100 + 60,
            "complete_timestamp": k * 100 + 80, "maybe": False,
        })  # fmt: skip
        for tp in written:
            marker = "COMMIT"
            if k == 54_000 and tp == parts[0]:
                marker = "ABORT"
            if k == 55_000 and tp == parts[1]:
                marker = "OPEN"
            ptx.append(_entry(tp, k * 10, 2, marker, k * 100 + 500))
    late = _entry(parts[2], 56_000 * 10 + 4, 2, "OPEN", 56_000 * 100 + 590)
    late["bound_timestamp"] = 56_001 * 100 + 570  # another producer's marker after it
    ptx.append(late)
    sides = {tp: Side(True, n * 100) for tp in parts}
    findings, stats = _judged(ptx, ctx, sides, Coordinator(True, n * 100 + 100, 0))
    assert [f[:4] for f in findings] == [
        ("split_outcome", "out", 0, 54_000 * 10),
        ("missing_marker", "out", 1, 55_000 * 10),
        ("write_outside_transaction", "out", 2, 56_000 * 10 + 4),
    ]
    assert stats == {"judged": 2 * n + 56_001 + 1, "undecidable": 0, "unjudged": 0}


@pytest.mark.slow
def test_the_judgements_memory_does_not_grow_with_the_history():
    """What the judgement allocates above its inputs (numpy and Python, traced) for 30,000
    and 120,000 transactions of one producer over 2 or 3 partitions: its sequences go to
    files past 1 MB and are read a block at a time, so four times the history costs about the
    same memory. Held whole (stores never spilled, one block of rows) the same judgement's
    arrays grow with the history, and this fails."""
    import tracemalloc

    from replay.crosslog_stream import COORDINATOR_TXNS, PARTITION_TXNS, columns_of

    grown = {}
    for n in (30_000, 120_000):
        ptx, ctx, sides, coordinator = history(5, n)
        ptx, ctx = columns_of(ptx, PARTITION_TXNS), columns_of(ctx, COORDINATOR_TXNS)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        judge_producer(PID, ptx, ctx, sides, coordinator, BOUNDS)
        grown[n] = tracemalloc.get_traced_memory()[1] - before
        tracemalloc.stop()
    # held whole: ~1 GB for 30,000 and ~4 GB for 120,000 (the stores and a block's costs)
    assert grown[120_000] < grown[30_000] + (16 << 20), grown
    assert grown[120_000] < 32 << 20, grown


def test_a_compacted_coordinator_log_copied_early_aligns_in_a_narrow_band(tmp_path):
    """The simulator's Streams thread (TV1, 2,000 transactions 100 ms apart over 4 partitions
    and its offsets) as a production dump holds it: its `__transaction_state` partition
    compacted and copied before the partitions (benchmarks/copies_apart.py: only the bytes
    from 30% to 70% of its log, the broker's cleaner-offset-checkpoint at the first offset
    kept), so the coordinator's history lies ~600 transactions inside the partitions' at
    each end (within the order window: aligned, not left out). Audited in one process
    (replay.local): no finding of warning or above, every partition transaction judged
    against the coordinator or counted as without its history, and no alignment's band wider
    than 100 cells (the band holding both ends spans ~1,200)."""
    import os
    import sys

    from replay.findings import at_least
    from replay.local import audit_local
    from simulator import synth

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
    import copies_apart

    whole, dump = str(tmp_path / "whole"), str(tmp_path / "dump")
    synth("long_lived_producer", whole, seed=1, scale=0.1)
    partition = copies_apart.largest_partition(whole, "__transaction_state")
    copies_apart.compacted_and_copied_early(whole, dump, partition, 0.3, 0.7)
    widths = []
    real = crosslog.Alignment.__init__

    def recorded(self, *a, **k):
        real(self, *a, **k)
        widths.append(self.dhi - self.dlo + 1)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(crosslog.Alignment, "__init__", recorded)
        result = audit_local([dump])
    assert [f for f in result["findings"] if at_least(f["severity"], "warning")] == []
    counts = {}
    for r in result["checks"]:
        counts[r["check"]] = counts.get(r["check"], 0) + r["count"]
    judged = counts.get("partition transactions judged against the coordinator", 0)
    unjudged = counts.get("partition transactions without coordinator history", 0)
    data = [x for x in result["transactions"] if x["topic"] == "enriched"]
    assert judged > 0 and judged + unjudged >= len(data)
    assert widths and max(widths) <= 100, widths
