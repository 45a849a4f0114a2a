"""The replays hold a partition's state, never its history: the memory of replaying a
partition's batches, a `__transaction_state` partition and a `__consumer_offsets` partition
given a piece at a time in log order does not grow with the number of transactions or commits
(issue 14: every task within the memory budget whatever the dump size). Measured as the peak
of Python's allocations (tracemalloc, numpy included) plus Arrow's (a proxy pool of this
test), replaying N and then 4N transactions: what grows is bounded by a block of rows
(replay.tables.BLOCK_ROWS), not by 3N more. No Spark."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest

from replay import tables as T
from replay.crosslog import Bounds
from replay.grouped import (
    COORDINATOR_SCHEMA,
    GROUP_SCHEMA,
    PARTITION_SCHEMA,
    Facts,
    InOrder,
    commit_events,
    marker_events,
    merged_in_order,
    replay_coordinator,
    replay_groups,
    replay_partition,
)
from tests.whole_tables import collected, coordinator_tables, group_partition_tables

T0 = 1_700_000_000_000
PIECE = 4096  # rows of each piece a stream hands on (a spill file's or a decoded window's)
FACTS = Facts(86_400_000, 900_000, Bounds(2000, 600_000))
# the proxy pools of the measurements, alive as long as the process: a buffer allocated from
# one (kept by a cache, freed late) calls back into its pool when it is freed
_POOLS: list[pa.MemoryPool] = []


def _peak(run: Callable[[Callable[[pa.Table], None]], None]) -> tuple[int, int]:
    """(peak bytes of Python and Arrow allocations while ``run(flush)`` ran, rows flushed)."""
    previous = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(previous)
    _POOLS.append(pool)
    rows = [0]

    def flush(t: pa.Table) -> None:
        rows[0] += t.num_rows  # written and dropped, as the scan's task does

    pa.set_memory_pool(pool)
    tracemalloc.start()
    try:
        run(flush)
        python = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        pa.set_memory_pool(previous)
    return python + pool.max_memory(), rows[0]


def _pieces(make: Callable[[int, int], pa.Table], n: int) -> Callable[[], Iterator[pa.Table]]:
    """A stream of ``n`` rows made a piece at a time (nothing of it held beforehand)."""

    def pieces() -> Iterator[pa.Table]:
        for start in range(0, n, PIECE):
            yield make(start, min(n, start + PIECE))

    return pieces


def _growth(run_for: Callable[[int], Callable], n: int) -> tuple[int, int, int, int]:
    small, rows_small = _peak(run_for(n))
    large, rows_large = _peak(run_for(4 * n))
    return small, large, rows_small, rows_large


@pytest.fixture
def small_blocks(monkeypatch):
    """Replays over columns a BLOCK_ROWS block at a time: what they hold is bounded by a block
    (COLUMN_BLOCK_ROWS, ~65 k rows), so a history shows no growth once it is several blocks
    long; at the default that would take hundreds of thousands of Python-made rows here."""
    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", T.BLOCK_ROWS)


# -- a partition's batches: a transactional producer, a transaction every two batches ---------


def _batches(start: int, stop: int) -> pa.Table:
    """Batches ``start``..``stop`` of one partition: data of producer 7 (epoch 0) at even
    positions, its COMMIT marker at odd ones, one offset each."""
    rows = []
    for i in range(start, stop):
        marker = i % 2 == 1
        rows.append({
            "topic": "t", "partition": 0, "base_offset": i, "last_offset": i, "producer_id": 7,
            "producer_epoch": 0, "base_sequence": -1 if marker else i // 2,
            "last_sequence": -1 if marker else i // 2, "record_count": 1,
            "is_transactional": True, "is_control": marker,
            "control_type": "COMMIT" if marker else None, "coordinator_epoch": 0 if marker else None,
            "max_timestamp": T0 + i, "magic": 2, "crc_valid": True, "has_delete_horizon": False,
            "file": "b/t-0/00000000000000000000.log", "position": i * 80,
        })  # fmt: skip
    return pa.Table.from_pylist(rows)


def test_a_partition_replay_holds_its_producers_not_its_transactions():
    def run_for(n):
        source = InOrder(_pieces(_batches, 2 * n), "b", 0, 0)
        return lambda flush: replay_partition("t", 0, source, [], FACTS, 0, flush)

    small, large, rows_small, rows_large = _growth(run_for, 10_000)
    # a transaction row and two LSO changes per transaction, leaving as they happen
    assert rows_large >= 4 * 3 * 10_000 and rows_small >= 3 * 10_000
    assert large - small < 6 << 20, (small, large)
    # the same rows as replayed whole
    whole = _batches(0, 2 * 2000).append_column("broker", pa.array(["b"] * 4000))
    parts: list[pa.Table] = []
    replay_partition("t", 0, InOrder(_pieces(_batches, 4000), "b", 0, 0), [], FACTS, 0,
                     parts.append)  # fmt: skip
    streamed = pa.concat_tables(parts)
    at_once = collected(
        PARTITION_SCHEMA, lambda f: replay_partition("t", 0, whole, [], FACTS, 0, f)
    )
    assert _rows(streamed) == _rows(at_once)


# -- `__transaction_state`: a transactional id committing all the time -----------------------

STATES = ("Ongoing", "PrepareCommit", "CompleteCommit")


def _txn_log(start: int, stop: int) -> pa.Table:
    """Records ``start``..``stop`` of one `__transaction_state` partition: two transactional
    ids taking turns, each transaction an Ongoing, a PrepareCommit and a CompleteCommit."""
    rows = []
    for i in range(start, stop):
        txn, step = divmod(i, 3)
        tid = f"app-{txn % 2}"
        parts = [] if step == 2 else [{"topic": "out", "partitions": [txn % 4]}]
        rows.append({
            "transactional_id": tid, "producer_id": 100 + txn % 2, "producer_epoch": 0,
            "timeout_ms": 60_000, "state": STATES[step], "partitions": parts,
            "last_update_timestamp": T0 + i, "start_timestamp": T0 + 3 * txn,
            "client_transaction_version": 0, "is_tombstone": False, "log_partition": 3,
            "log_offset": i, "previous_producer_id": -1,
        })  # fmt: skip
    return pa.Table.from_pylist(rows)


def test_the_coordinator_replay_holds_its_ids_not_their_transactions(small_blocks):
    latest = {("app-0", 100): 0, ("app-1", 101): 0}

    def run_for(n):
        return lambda flush: replay_coordinator(_pieces(_txn_log, 3 * n)(), {3: 0}, latest, flush)

    small, large, rows_small, rows_large = _growth(run_for, 10_000)
    assert (rows_small, rows_large) == (10_000, 40_000)
    assert large - small < 6 << 20, (small, large)
    # in log order, ids interleaved, the rows each id's replay alone gives
    whole = _txn_log(0, 3 * 3000)
    together = coordinator_tables(whole, {3: 0})
    alone = pa.concat_tables(
        coordinator_tables(whole.filter(pa.compute.equal(whole.column("transactional_id"), t)),
                           {3: 0})
        for t in ("app-0", "app-1")
    )  # fmt: skip
    assert together.num_rows == 3000 and _rows(together) == _rows(alone)


# -- `__consumer_offsets`: an exactly-once app's group and a plain group ------------------------


def _commits(start: int, stop: int) -> pa.Table:
    """Commits at even offsets: the app's transactional ones (producer 9) and a plain group's,
    taking turns; the app's markers sit at the odd offsets between (:func:`_markers`)."""
    rows = []
    for i in range(start, stop):
        app = i % 2 == 0
        rows.append({
            "group_id": "app" if app else "plain", "log_partition": 5, "log_offset": 2 * i,
            "record_timestamp": T0 + 2 * i, "is_tombstone": False, "topic": "events",
            "partition": i % 8, "committed_offset": i, "commit_timestamp": T0 + 2 * i,
            "is_transactional": app, "producer_id": 9 if app else None,
        })  # fmt: skip
    return pa.Table.from_pylist(rows)


def _markers(start: int, stop: int) -> pa.Table:
    """The app's COMMIT marker after each of its commits: at 2i + 1 for every even i."""
    n = [i for i in range(start, stop) if i % 2 == 0]
    return pa.table({
        "base_offset": pa.array([2 * i + 1 for i in n], pa.int64()),
        "max_timestamp": pa.array([T0 + 2 * i + 1 for i in n], pa.int64()),
        "producer_id": pa.array([9] * len(n), pa.int64()),
        "control_type": pa.array(["COMMIT"] * len(n), pa.string()),
    })  # fmt: skip


def test_the_groups_replay_holds_its_groups_not_their_commits(small_blocks):
    def run_for(n):
        def run(flush):
            streams = [
                (commit_events(p) for p in _pieces(_commits, n)()),
                (marker_events(5, p) for p in _pieces(_markers, n)()),
            ]
            replay_groups(merged_in_order(streams), set(), flush)

        return run

    small, large, rows_small, rows_large = _growth(run_for, 20_000)
    assert (rows_small, rows_large) == (20_000, 80_000)  # every commit took effect
    assert large - small < 6 << 20, (small, large)
    # merged a piece at a time, the rows of the whole partition sorted and replayed at once
    parts: list[pa.Table] = []
    run_for(5000)(parts.append)
    streamed = pa.concat_tables(parts)
    empty_metadata = pa.table({c: pa.array([], pa.string()) for c in ("group_id",)})
    at_once = group_partition_tables(5, _commits(0, 5000), empty_metadata, _markers(0, 5000),
                                     set())  # fmt: skip
    assert streamed.num_rows == 5000 and _rows(streamed) == _rows(at_once)


def _rows(t: pa.Table) -> list:
    return sorted(map(repr, t.to_pylist()))


@pytest.mark.parametrize("schema", [PARTITION_SCHEMA, COORDINATOR_SCHEMA, GROUP_SCHEMA])
def test_row_blocks_hand_on_at_most_a_block(schema):
    """What a replay holds of its output is one block of rows (replay.tables.RowBlocks)."""
    seen: list[int] = []
    blocks = T.RowBlocks(schema, lambda t: seen.append(t.num_rows), block=100)
    for i in range(1050):
        blocks.add("finding", {"kind": "x", "severity": "info", "message": str(i)})
    blocks.close()
    assert max(seen) <= 100 and sum(seen) == 1050


def test_column_blocks_are_whole_blocks_of_one_kind_of_piece(monkeypatch):
    """The pieces a replay takes, gathered into blocks of COLUMN_BLOCK_ROWS, one chunk each,
    in order, a block never across pieces of different columns (replay.tables.column_blocks)."""
    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 100)

    def piece(start: int, n: int, extra: bool = False) -> pa.Table:
        t = pa.table({"i": pa.array(range(start, start + n), pa.int64())})
        return t.append_column("x", pa.nulls(n, pa.string())) if extra else t

    pieces = [piece(0, 30), piece(30, 0), piece(30, 90), piece(120, 250), piece(370, 5, True),
              piece(375, 7, True), piece(382, 40)]  # fmt: skip
    blocks = list(T.column_blocks(pieces))
    assert [b.num_rows for b in blocks] == [100, 100, 100, 70, 12, 40]
    assert [b.num_columns for b in blocks] == [1, 1, 1, 1, 2, 1]
    assert pa.Table.from_batches(blocks[:4]).column("i").to_pylist() == list(range(370))
    assert [b.column(0)[0].as_py() for b in blocks[4:]] == [370, 382]
    assert list(T.column_blocks([])) == []
