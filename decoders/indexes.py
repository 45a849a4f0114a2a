"""Offset index, time index and transaction index files (docs/formats.md 9.1-9.3).

Index files are small (10 MiB at most when preallocated); they are still read in bounded
chunks and decoded with numpy. Entries stop at the first all-zero or non-increasing entry;
zeros after that are padding, anything else is reported as inconsistent.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from decoders import fixed
from decoders.accounting import Accounting, FileInfo
from decoders.columns import const
from decoders.constants import (
    ABORTED_TXN_CURRENT_VERSION,
    ABORTED_TXN_ENTRY_SIZE,
    ABORTED_TXN_FIRST_OFFSET_OFFSET,
    ABORTED_TXN_LAST_OFFSET_OFFSET,
    ABORTED_TXN_LAST_STABLE_OFFSET_OFFSET,
    ABORTED_TXN_PRODUCER_ID_OFFSET,
    ABORTED_TXN_VERSION_OFFSET,
    OFFSET_INDEX_ENTRY_SIZE,
    OFFSET_INDEX_POSITION_OFFSET,
    OFFSET_INDEX_RELATIVE_OFFSET_OFFSET,
    TIME_INDEX_ENTRY_SIZE,
    TIME_INDEX_RELATIVE_OFFSET_OFFSET,
    TIME_INDEX_TIMESTAMP_OFFSET,
)
from decoders.errors import CORRUPT_BYTES, INDEX_INCONSISTENT, UNKNOWN_VERSION
from decoders.schemas import ABORTED_TXNS, INDEX_ENTRIES
from decoders.source import ByteSource, reads_source

MAX_INDEX_BYTES = 1 << 30  # snapshots larger than this are not read (see snapshot.py)
DEFAULT_INDEX_BUDGET = 1 << 30
# The int64 fields of an AbortedTxn entry: producerId, firstOffset, lastOffset, lastStableOffset.
_ABORTED_TXN_LONGS = (
    ABORTED_TXN_PRODUCER_ID_OFFSET,
    ABORTED_TXN_FIRST_OFFSET_OFFSET,
    ABORTED_TXN_LAST_OFFSET_OFFSET,
    ABORTED_TXN_LAST_STABLE_OFFSET_OFFSET,
)
# Error rows one index file may produce; past it, one row sums up the rest.
MAX_ERROR_ROWS = 1000


@dataclass(slots=True)
class IndexResult:
    table: pa.Table
    acct: Accounting


def _chunk_bytes(memory_budget: int, entry_size: int) -> int:
    """Bytes of an index read at once: a 64th of the budget, whole entries."""
    n = max(1 << 16, min(64 << 20, memory_budget // 64))
    return n - n % entry_size


def _chunks(src, entry_size: int, memory_budget: int, start: int = 0):
    """(position, bytes) of the whole entries of a file, read chunk by chunk; holes of a sparse
    local file are yielded as empty chunks of their length, without reading them."""
    step = _chunk_bytes(memory_budget, entry_size)
    end = src.size - src.size % entry_size
    pos = start
    while pos < end:
        data_at = src.data_after(pos) if hasattr(src, "data_after") else pos
        data_at = min(end, data_at - (data_at - pos) % entry_size)
        if data_at > pos:  # a hole: zeros that cost nothing to read
            yield pos, data_at - pos
            pos = data_at
            continue
        n = min(step, end - pos)
        yield pos, src.read_at(pos, n)
        pos += n


def _tail(
    src, acct: Accounting, valid_end: int, info: FileInfo, entry_size: int, what: str, budget: int
) -> None:
    """Account for the bytes after the last valid entry: zeros are padding, the rest inconsistent."""
    from decoders.errors import ErrorRow

    last_nonzero = -1
    for pos, data in _chunks(src, 1, budget, valid_end):
        if isinstance(data, int):
            continue
        nz = np.flatnonzero(np.frombuffer(data, np.uint8))
        if nz.size:
            last_nonzero = pos + int(nz[-1])
    if last_nonzero < 0:
        acct.padding += src.size - valid_end
        return
    bad_end = valid_end + -(-(last_nonzero + 1 - valid_end) // entry_size) * entry_size
    bad_end = min(src.size, bad_end)
    acct.corrupt += bad_end - valid_end
    acct.padding += src.size - bad_end
    acct.errors.append(
        ErrorRow(
            info.file,
            valid_end,
            bad_end - valid_end,
            INDEX_INCONSISTENT,
            f"{what} entries stop being increasing at byte {valid_end}; {bad_end - valid_end} bytes after that are not zero",
        )
    )


def _entries(src, entry_size: int, budget: int, ok_fn):
    """Leading valid entries of an index, as a list of (count, entry_size) uint8 arrays.

    ``ok_fn(rows, previous_row)`` says which rows continue the list; the first that does not
    ends it (an all-zero entry does: preallocated space), and reading stops there.
    """
    kept: list[np.ndarray] = []
    prev = None
    for _, data in _chunks(src, entry_size, budget):
        if isinstance(data, int):  # a hole: an all-zero entry ends the list
            break
        raw = fixed.rows(data, entry_size, len(data) // entry_size)
        ok = ok_fn(raw, prev)
        if not ok.all():
            kept.append(raw[: int(np.argmin(ok))].copy())
            break
        kept.append(raw.copy())
        prev = raw[-1:]
    return np.concatenate(kept) if kept else np.zeros((0, entry_size), np.uint8)


@functools.cache
def _no_entries() -> pa.Table:
    """An empty index_entries table (tables are immutable: one serves every file)."""
    return INDEX_ENTRIES.empty_table()


def _index_result(
    src, info, kind, entry_size, count, rel, budget, log_position=None, timestamp=None,
    rows: bool = True,
) -> IndexResult:  # fmt: skip
    """The first `count` entries as index_entries rows (``rows`` False: none, the accounting
    only, for a caller that does not read them: an audit's quiet partition spent more
    building its two indexes' rows than reading them); the bytes after them as padding or
    inconsistent."""
    acct = Accounting(size=src.size)
    acct.valid = count * entry_size
    acct.batches = count
    _tail(
        src,
        acct,
        acct.valid,
        info,
        entry_size,
        "offset index" if kind == "index" else "time index",
        budget,
    )
    base = info.base_offset or 0
    if count:
        acct.see_offsets(int(rel[0] + base), int(rel[count - 1] + base))
    if not rows:
        return IndexResult(_no_entries(), acct)
    ts_type = pa.timestamp("ms", tz="UTC")
    table = pa.table(
        {
            "broker": const(info.broker, count, pa.string()),
            "topic": const(info.topic, count, pa.string()),
            "partition": const(info.partition, count, pa.int32()),
            "file": const(info.file, count, pa.string()),
            "kind": const(kind, count, pa.string()),
            "entry": pa.array(np.arange(count, dtype=np.int32)),
            "position": pa.array(np.arange(count, dtype=np.int64) * entry_size),
            "relative_offset": pa.array(rel[:count].astype(np.int32)),
            "offset": pa.array(rel[:count] + base),
            "log_position": pa.nulls(count, pa.int64())
            if log_position is None
            else pa.array(log_position[:count]),
            "timestamp": pa.nulls(count, ts_type)
            if timestamp is None
            else pa.array(timestamp[:count]).cast(ts_type),
        },
        schema=INDEX_ENTRIES,
    )
    return IndexResult(table, acct)


def _offset_ok(raw: np.ndarray, prev: np.ndarray | None) -> np.ndarray:
    # Entries are strictly increasing in both fields and the first never points at position
    # 0, so the first all-zero or non-increasing entry ends the list (OffsetIndex.java).
    both = raw if prev is None else np.concatenate([prev, raw])
    rel = fixed.field(both, OFFSET_INDEX_RELATIVE_OFFSET_OFFSET, ">i4").astype(np.int64)
    pos = fixed.field(both, OFFSET_INDEX_POSITION_OFFSET, ">i4").astype(np.int64)
    ok = ~((rel == 0) & (pos == 0)) & (rel >= 0) & (pos >= 0)
    if len(both) > 1:
        ok[1:] &= (np.diff(rel) > 0) & (np.diff(pos) > 0)
    return ok if prev is None else ok[1:]


def _time_ok(raw: np.ndarray, prev: np.ndarray | None) -> np.ndarray:
    both = raw if prev is None else np.concatenate([prev, raw])
    ts = fixed.field(both, TIME_INDEX_TIMESTAMP_OFFSET, ">i8")
    rel = fixed.field(both, TIME_INDEX_RELATIVE_OFFSET_OFFSET, ">i4").astype(np.int64)
    ok = np.ones(len(both), bool)
    if len(both):
        ok[1:] = (np.diff(ts) > 0) & (np.diff(rel) >= 0)
        # An all-zero entry ends the list (only conceivable as a real first entry).
        zero = (ts == 0) & (rel == 0)
        ok[1:] &= ~zero[1:]
        if prev is None:
            ok[0] = rel[0] >= 0
    return ok if prev is None else ok[1:]


@reads_source
def read_offset_index(
    src: ByteSource, info: FileInfo | None = None, memory_budget: int = DEFAULT_INDEX_BUDGET,
    rows: bool = True,
) -> IndexResult:  # fmt: skip
    info = info or FileInfo(file=src.name, kind="index")
    raw = _entries(src, OFFSET_INDEX_ENTRY_SIZE, memory_budget, _offset_ok)
    rel = fixed.field(raw, OFFSET_INDEX_RELATIVE_OFFSET_OFFSET, ">i4").astype(np.int64)
    pos = fixed.field(raw, OFFSET_INDEX_POSITION_OFFSET, ">i4").astype(np.int64)
    return _index_result(
        src,
        info,
        "index",
        OFFSET_INDEX_ENTRY_SIZE,
        len(raw),
        rel,
        memory_budget,
        log_position=pos,
        rows=rows,
    )


@reads_source
def read_time_index(
    src: ByteSource, info: FileInfo | None = None, memory_budget: int = DEFAULT_INDEX_BUDGET,
    rows: bool = True,
) -> IndexResult:  # fmt: skip
    info = info or FileInfo(file=src.name, kind="timeindex")
    raw = _entries(src, TIME_INDEX_ENTRY_SIZE, memory_budget, _time_ok)
    ts = fixed.field(raw, TIME_INDEX_TIMESTAMP_OFFSET, ">i8")
    rel = fixed.field(raw, TIME_INDEX_RELATIVE_OFFSET_OFFSET, ">i4").astype(np.int64)
    count = len(raw)
    if count == 1 and ts[0] == 0 and rel[0] == 0:
        count = 0  # an all-zero first entry followed by zeros: preallocated, never written
    return _index_result(
        src,
        info,
        "timeindex",
        TIME_INDEX_ENTRY_SIZE,
        count,
        rel,
        memory_budget,
        timestamp=ts,
        rows=rows,
    )


@reads_source
def read_txn_index(
    src: ByteSource, info: FileInfo | None = None, memory_budget: int = DEFAULT_INDEX_BUDGET
) -> IndexResult:
    """AbortedTxn entries (ABORTED_TXN_ENTRY_SIZE bytes each), read chunk by chunk.

    The file is appended, never preallocated, so zeros in it are not padding: a range of
    all-zero entries (what a crash leaves when the length reached the disk and the blocks did
    not) is corruption, reported as one error row for the whole range, never as aborted
    transactions. Runs of entries with the same problem are one error row each too.
    """
    info = info or FileInfo(file=src.name, kind="txnindex")
    acct = Accounting(size=src.size)
    size = ABORTED_TXN_ENTRY_SIZE
    runs = _Runs(info.file, acct)
    tables: list[pa.Table] = []
    prev_last = None
    first_min = last_max = None
    for pos, data in _chunks(src, size, memory_budget):
        entry0 = pos // size
        if isinstance(data, int):
            runs.add(CORRUPT_BYTES, entry0, data // size, _ZEROS)
            continue
        chunk = _TxnEntries.read(data, prev_last)
        chunk.report(runs, entry0)
        if chunk.good.any():
            idx = np.flatnonzero(chunk.good)
            prev_last = int(chunk.last[idx][-1])
            f_min, l_max = int(chunk.first[idx].min()), int(chunk.last[idx].max())
            first_min = f_min if first_min is None else min(first_min, f_min)
            last_max = l_max if last_max is None else max(last_max, l_max)
            acct.valid += idx.size * size
            acct.batches += idx.size
            tables.append(chunk.table(info, idx, entry0))
    _txn_index_tail(src, info, acct, runs)
    if first_min is not None:
        acct.see_offsets(first_min, last_max)
    table = pa.concat_tables(tables) if tables else ABORTED_TXNS.empty_table()
    return IndexResult(table, acct)


@dataclass(slots=True)
class _TxnEntries:
    """One chunk of AbortedTxn entries as columns, each entry with its problem: 0 fine, 1 all
    zeros, 2 unknown version, 3 lastOffset not increasing, 4 firstOffset after lastOffset.
    ``good`` entries (readable, current version) become rows even when inconsistent (3, 4)."""

    version: np.ndarray
    pid: np.ndarray
    first: np.ndarray
    last: np.ndarray
    lso: np.ndarray
    problem: np.ndarray
    good: np.ndarray

    @classmethod
    def read(cls, data, prev_last: int | None) -> _TxnEntries:
        """Decode and classify a chunk; ``prev_last``: the last good lastOffset of the chunks
        before, so the order check runs across chunk boundaries."""
        size = ABORTED_TXN_ENTRY_SIZE
        n = len(data) // size
        raw = fixed.rows(data, size, n)
        version = fixed.field(raw, ABORTED_TXN_VERSION_OFFSET, ">i2")
        pid, first, last, lso = (fixed.field(raw, a, ">i8") for a in _ABORTED_TXN_LONGS)
        zero = ~raw.any(axis=1)
        good = (version == ABORTED_TXN_CURRENT_VERSION) & ~zero
        problem = np.zeros(n, np.int8)
        problem[zero] = 1
        problem[~zero & (version != ABORTED_TXN_CURRENT_VERSION)] = 2
        lasts = last if prev_last is None else np.concatenate([[prev_last], last])
        order = np.ones(n, bool)
        if len(lasts) > 1:
            order[(0 if prev_last is not None else 1) :] = np.diff(lasts) > 0
        problem[good & ~order] = 3
        problem[good & order & (first > last)] = 4
        return cls(version, pid, first, last, lso, problem, good)

    def report(self, runs: _Runs, entry0: int) -> None:
        """An error row per run of entries with the same problem (``entry0``: the chunk's first
        entry); inconsistent entries are readable, so their bytes are not counted corrupt."""
        for kind, code in ((CORRUPT_BYTES, 1), (UNKNOWN_VERSION, 2)):
            for a, b in _true_runs(self.problem == code):
                why = _ZEROS if code == 1 else f"version {int(self.version[a])}"
                runs.add(kind, entry0 + a, b - a, why)
        for code in (3, 4):
            for a, b in _true_runs(self.problem == code):
                why = (
                    f"lastOffset {int(self.last[a])} does not increase"
                    if code == 3
                    else f"firstOffset {int(self.first[a])} after lastOffset {int(self.last[a])}"
                )
                runs.add(INDEX_INCONSISTENT, entry0 + a, b - a, why, counted=False)

    def table(self, info: FileInfo, idx: np.ndarray, entry0: int) -> pa.Table:
        """The aborted_txns rows of the entries at ``idx``."""
        k = idx.size
        return pa.table(
            {
                "broker": const(info.broker, k, pa.string()),
                "topic": const(info.topic, k, pa.string()),
                "partition": const(info.partition, k, pa.int32()),
                "file": const(info.file, k, pa.string()),
                "entry": pa.array((idx + entry0).astype(np.int32)),
                "version": pa.array(self.version[idx]),
                "producer_id": pa.array(self.pid[idx]),
                "first_offset": pa.array(self.first[idx]),
                "last_offset": pa.array(self.last[idx]),
                "last_stable_offset": pa.array(self.lso[idx]),
            },
            schema=ABORTED_TXNS,
        )


def _txn_index_tail(src: ByteSource, info: FileInfo, acct: Accounting, runs: _Runs) -> None:
    """Bytes after the last whole entry: zeros continuing a zero range join that range's row
    (one crash, one row); anything else is its own error row, after the runs' rows."""
    from decoders.errors import ErrorRow

    size = ABORTED_TXN_ENTRY_SIZE
    whole = src.size - src.size % size
    tail = src.size - whole
    if tail and not any(src.read_at(whole, tail)) and runs.ends_zeros_at(whole // size):
        runs.extra = tail  # a zero range running into the partial entry at the end
        acct.corrupt += tail
        tail = 0
    runs.close()
    if tail:
        acct.corrupt += tail
        acct.errors.append(
            ErrorRow(
                info.file,
                whole,
                tail,
                CORRUPT_BYTES,
                f"{tail} trailing bytes do not make a whole entry",
            )
        )


_ZEROS = "all-zero bytes where aborted-transaction entries belong (the file is never preallocated)"


def _true_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of True in mask."""
    if not mask.any():
        return []
    edges = np.diff(np.concatenate([[0], mask.view(np.int8), [0]]))
    return list(
        zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True)
    )


class _Runs:
    """Error rows for runs of txnindex entries, merged across chunks, at most MAX_ERROR_ROWS."""

    def __init__(self, file: str, acct: Accounting) -> None:
        self.file, self.acct = file, acct
        self.open: tuple[str, int, int, str] | None = None  # kind, first entry, entries, why
        self.rows = 0
        self.dropped = 0
        self.extra = 0  # bytes of a partial last entry added to the last range

    def ends_zeros_at(self, entry: int) -> bool:
        o = self.open
        return o is not None and o[3] == _ZEROS and o[1] + o[2] == entry

    def add(self, kind: str, entry: int, n: int, why: str, counted: bool = True) -> None:
        if counted:
            self.acct.corrupt += n * ABORTED_TXN_ENTRY_SIZE
        else:  # an inconsistent but readable entry is still a valid entry's bytes
            pass
        o = self.open
        if o and o[0] == kind and o[1] + o[2] == entry and o[3] == why:
            self.open = (kind, o[1], o[2] + n, why)
            return
        self.flush()
        self.open = (kind, entry, n, why)

    def flush(self) -> None:
        from decoders.errors import ErrorRow

        if self.open is None:
            return
        kind, entry, n, why = self.open
        self.open = None
        if self.rows >= MAX_ERROR_ROWS:
            self.dropped += 1
            return
        self.rows += 1
        what = f"entry {entry}" if n == 1 else f"entries {entry}..{entry + n - 1}"
        extra, self.extra = self.extra, 0
        self.acct.errors.append(
            ErrorRow(
                self.file,
                entry * ABORTED_TXN_ENTRY_SIZE,
                n * ABORTED_TXN_ENTRY_SIZE + extra,
                kind,
                f"aborted-transaction {what}: {why}",
            )
        )

    def close(self) -> None:
        from decoders.errors import ErrorRow

        self.flush()
        if self.dropped:
            self.acct.errors.append(
                ErrorRow(
                    self.file,
                    0,
                    0,
                    INDEX_INCONSISTENT,
                    f"{self.dropped} more problem ranges in this file are not listed",
                )
            )
