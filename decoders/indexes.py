"""Offset index, time index and transaction index files (kafka-formats.md 9.1-9.3).

Index files are small (10 MiB at most when preallocated); they are still read in bounded
chunks and decoded with numpy. Entries stop at the first all-zero or non-increasing entry;
zeros after that are padding, anything else is reported as inconsistent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from decoders import fixed
from decoders.constants import (
    ABORTED_TXN_ENTRY_SIZE,
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_ENTRY_SIZE,
)
from decoders.errors import CORRUPT_BYTES, INDEX_INCONSISTENT, UNKNOWN_VERSION
from decoders.schemas import ABORTED_TXNS, INDEX_ENTRIES
from decoders.segment import Accounting, FileInfo, _const
from decoders.source import open_source

MAX_INDEX_BYTES = 1 << 30  # a larger "index" is not one; read no more than this


@dataclass(slots=True)
class IndexResult:
    table: pa.Table
    acct: Accounting


def _open(path_or_source, info: FileInfo | None, kind: str, entry_size: int):
    """(info, bytes, accounting, whole entries) of an index file, read once and bounded."""
    src = open_source(path_or_source)
    info = info or FileInfo(file=src.name, kind=kind)
    data = _read_all(src, MAX_INDEX_BYTES)
    return info, data, Accounting(size=src.size), len(data) // entry_size


def _read_all(src, limit: int) -> bytes:
    return src.read_at(0, min(src.size, limit))


def _tail(
    acct: Accounting, data: bytes, valid_end: int, info: FileInfo, entry_size: int, what: str
) -> None:
    """Account for the bytes after the last valid entry: zeros are padding, the rest inconsistent."""
    from decoders.errors import ErrorRow

    rest = np.frombuffer(data, np.uint8)[valid_end:]
    nz = np.flatnonzero(rest)
    if nz.size == 0:
        acct.padding += rest.size
        return
    bad_end = valid_end + int(nz[-1]) + 1
    bad_end = min(len(data), valid_end + -(-(bad_end - valid_end) // entry_size) * entry_size)
    acct.corrupt += bad_end - valid_end
    acct.padding += len(data) - bad_end
    acct.errors.append(
        ErrorRow(
            info.file,
            valid_end,
            bad_end - valid_end,
            INDEX_INCONSISTENT,
            f"{what} entries stop being increasing at byte {valid_end}; {bad_end - valid_end} bytes after that are not zero",
        )
    )


def _index_result(
    info, acct, data, kind, entry_size, count, rel, log_position=None, timestamp=None
) -> IndexResult:
    """The first `count` entries as index_entries rows; the bytes after them as padding or inconsistent."""
    acct.valid = count * entry_size
    acct.batches = count
    _tail(
        acct,
        data,
        acct.valid,
        info,
        entry_size,
        "offset index" if kind == "index" else "time index",
    )
    base = info.base_offset or 0
    ts_type = pa.timestamp("ms", tz="UTC")
    table = pa.table(
        {
            "broker": _const(info.broker, count, pa.string()),
            "topic": _const(info.topic, count, pa.string()),
            "partition": _const(info.partition, count, pa.int32()),
            "file": _const(info.file, count, pa.string()),
            "kind": _const(kind, count, pa.string()),
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
    if count:
        acct.see_offsets(int(rel[0] + base), int(rel[count - 1] + base))
    return IndexResult(table, acct)


def read_offset_index(path_or_source, info: FileInfo | None = None) -> IndexResult:
    info, data, acct, n = _open(path_or_source, info, "index", OFFSET_INDEX_ENTRY_SIZE)
    arr = np.frombuffer(data, ">i4", count=n * 2).reshape(n, 2).astype(np.int64)
    rel, pos = arr[:, 0], arr[:, 1]
    # Entries are strictly increasing in both fields and the first never points at position
    # 0, so the first all-zero or non-increasing entry ends the list (OffsetIndex.java).
    ok = ~((rel == 0) & (pos == 0)) & (rel >= 0) & (pos >= 0)
    if n > 1:
        ok[1:] &= (np.diff(rel) > 0) & (np.diff(pos) > 0)
    count = int(np.argmin(ok)) if not ok.all() else n
    return _index_result(
        info, acct, data, "index", OFFSET_INDEX_ENTRY_SIZE, count, rel, log_position=pos
    )


def read_time_index(path_or_source, info: FileInfo | None = None) -> IndexResult:
    info, data, acct, n = _open(path_or_source, info, "timeindex", TIME_INDEX_ENTRY_SIZE)
    raw = fixed.rows(data, TIME_INDEX_ENTRY_SIZE, n)
    ts = fixed.field(raw, 0, ">i8")
    rel = fixed.field(raw, 8, ">i4").astype(np.int64)
    ok = np.ones(n, bool)
    if n:
        ok[1:] = (np.diff(ts) > 0) & (np.diff(rel) >= 0)
        # An all-zero entry ends the list (only conceivable as a real first entry).
        zero = (ts == 0) & (rel == 0)
        ok[1:] &= ~zero[1:]
        ok[0] = rel[0] >= 0
    count = int(np.argmin(ok)) if not ok.all() else n
    if (
        count >= 1
        and ts[0] == 0
        and rel[0] == 0
        and not np.frombuffer(data, np.uint8)[TIME_INDEX_ENTRY_SIZE:].any()
    ):
        count = 0  # preallocated, never written
    return _index_result(
        info, acct, data, "timeindex", TIME_INDEX_ENTRY_SIZE, count, rel, timestamp=ts
    )


def read_txn_index(path_or_source, info: FileInfo | None = None) -> IndexResult:
    """AbortedTxn entries of 34 bytes; a trailing partial entry is ignored (as Kafka does) but counted."""
    from decoders.errors import ErrorRow

    info, data, acct, n = _open(path_or_source, info, "txnindex", ABORTED_TXN_ENTRY_SIZE)
    raw = fixed.rows(data, ABORTED_TXN_ENTRY_SIZE, n)
    version = fixed.field(raw, 0, ">i2")
    fields = [fixed.field(raw, a, ">i8") for a in (2, 10, 18, 26)]
    pid, first, last, lso = fields
    good = version == 0
    for i in np.flatnonzero(~good):
        acct.errors.append(
            ErrorRow(
                info.file,
                int(i) * ABORTED_TXN_ENTRY_SIZE,
                ABORTED_TXN_ENTRY_SIZE,
                UNKNOWN_VERSION,
                f"aborted-transaction entry {int(i)} has version {int(version[i])}",
            )
        )
    order = np.ones(n, bool)
    if n > 1:
        order[1:] = np.diff(last) > 0

    def inconsistent(i: int, why: str) -> None:
        at = int(i) * ABORTED_TXN_ENTRY_SIZE
        acct.errors.append(
            ErrorRow(
                info.file, at, ABORTED_TXN_ENTRY_SIZE, INDEX_INCONSISTENT, f"entry {int(i)}: {why}"
            )
        )

    for i in np.flatnonzero(good & ~order):
        inconsistent(i, f"lastOffset {int(last[i])} does not increase")
    for i in np.flatnonzero(good & (first > last)):
        inconsistent(i, f"firstOffset {int(first[i])} after lastOffset {int(last[i])}")
    acct.valid = int(good.sum()) * ABORTED_TXN_ENTRY_SIZE
    acct.corrupt = int((~good).sum()) * ABORTED_TXN_ENTRY_SIZE
    tail = len(data) - n * ABORTED_TXN_ENTRY_SIZE
    if tail:
        acct.corrupt += tail
        acct.errors.append(
            ErrorRow(
                info.file,
                n * ABORTED_TXN_ENTRY_SIZE,
                tail,
                CORRUPT_BYTES,
                f"{tail} trailing bytes do not make a whole entry",
            )
        )
    acct.batches = int(good.sum())
    idx = np.flatnonzero(good)
    k = idx.size
    table = pa.table(
        {
            "broker": _const(info.broker, k, pa.string()),
            "topic": _const(info.topic, k, pa.string()),
            "partition": _const(info.partition, k, pa.int32()),
            "file": _const(info.file, k, pa.string()),
            "entry": pa.array(idx.astype(np.int32)),
            "version": pa.array(version[idx]),
            "producer_id": pa.array(pid[idx]),
            "first_offset": pa.array(first[idx]),
            "last_offset": pa.array(last[idx]),
            "last_stable_offset": pa.array(lso[idx]),
        },
        schema=ABORTED_TXNS,
    )
    if k:
        acct.see_offsets(int(first[idx].min()), int(last[idx].max()))
    return IndexResult(table, acct)
