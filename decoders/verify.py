"""Check a partition's index, transaction index and snapshot files against its log.

Rules (docs/formats.md 9.1-9.4, LogSegment.append): an offset-index entry maps the last
offset of an append to the position where that append started, so a batch must start at the
entry's position and the entry's offset must be the last offset of a batch that begins before
the next entry's position. A time-index entry holds the maximum timestamp seen so far and an
offset at or after it. A `.txnindex` entry needs an ABORT marker of its producer at lastOffset.
A snapshot's state covers offsets below its name, so no entry may have lastOffset >= it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

import pyarrow as pa

from decoders import read_segment
from decoders.constants import (
    ABORTED_TXN_ENTRY_SIZE,
    OFFSET_INDEX_ENTRY_SIZE,
    PRODUCER_SNAPSHOT_ENTRY_SIZE,
    PRODUCER_SNAPSHOT_HEADER_SIZE,
    TIME_INDEX_ENTRY_SIZE,
)
from decoders.errors import INDEX_INCONSISTENT, ErrorRow
from decoders.layout import DumpFile, discover


def verify(paths) -> list[ErrorRow]:
    """Problems found across every partition of the dump(s)."""
    # by partition directory: a broker may hold two of one partition (a -future copy, a
    # -delete one), each with segments of the same names (decoders.brokers)
    by_dir: dict[str, list[DumpFile]] = defaultdict(list)
    for f in discover(paths):
        if f.info.topic is not None:
            by_dir[f.info.file.rsplit("/", 1)[0]].append(f)
    problems: list[ErrorRow] = []
    for files in by_dir.values():
        problems.extend(verify_partition(files))
    return problems


def verify_partition(files: list[DumpFile]) -> list[ErrorRow]:
    logs = {f.info.base_offset: f for f in files if f.kind == "log"}
    batches = {base: read_segment(f, "batches", deep=False) for base, f in logs.items()}
    out: list[ErrorRow] = []
    for f in files:
        if f.kind in ("index", "timeindex"):
            log = batches.get(f.info.base_offset)
            if log is None:
                out.append(
                    ErrorRow(
                        f.info.file, 0, f.size, INDEX_INCONSISTENT, "index without its .log segment"
                    )
                )
                continue
            entries = read_segment(f, "index_entries")
            check = _offset_index if f.kind == "index" else _time_index
            out.extend(check(f, entries, log))
        elif f.kind == "txnindex":
            out.extend(_txn_index(f, read_segment(f, "aborted_txns"), batches))
        elif f.kind == "snapshot":
            out.extend(_snapshot(f, read_segment(f, "producer_snapshots")))
    return out


def _offset_index(f: DumpFile, entries: pa.Table, log: pa.Table) -> list[ErrorRow]:
    pos = log["position"].to_pylist()
    last = log["last_offset"].to_pylist()
    starts = {p: i for i, p in enumerate(pos)}
    out = []
    ent_pos = entries["log_position"].to_pylist()
    for n, (off, p) in enumerate(zip(entries["offset"].to_pylist(), ent_pos, strict=True)):
        where = n * OFFSET_INDEX_ENTRY_SIZE
        i = starts.get(p)
        if i is None:
            out.append(
                ErrorRow(
                    f.info.file,
                    where,
                    OFFSET_INDEX_ENTRY_SIZE,
                    INDEX_INCONSISTENT,
                    f"entry {n}: no batch starts at log position {p}",
                    off,
                )
            )
            continue
        limit = ent_pos[n + 1] if n + 1 < len(ent_pos) else float("inf")
        j = i
        ok = False
        while j < len(pos) and pos[j] < limit:
            if last[j] == off:
                ok = True
                break
            j += 1
        if not ok:
            out.append(
                ErrorRow(
                    f.info.file,
                    where,
                    OFFSET_INDEX_ENTRY_SIZE,
                    INDEX_INCONSISTENT,
                    f"entry {n}: offset {off} is not the last offset of a batch appended at position {p}",
                    off,
                )
            )
    return out


def _time_index(f: DumpFile, entries: pa.Table, log: pa.Table) -> list[ErrorRow]:
    last = log["last_offset"].to_pylist()
    max_ts = log["max_timestamp"].cast(pa.int64()).to_pylist()
    running, best = [], None
    for t in max_ts:
        if t is not None and (best is None or t > best):
            best = t
        running.append(best)
    out = []
    stamps = entries["timestamp"].cast(pa.int64()).to_pylist()
    for n, (ts, off) in enumerate(zip(stamps, entries["offset"].to_pylist(), strict=True)):
        i = bisect.bisect_left(last, off)  # the batch holding `off`
        seen = running[i] if i < len(running) else None
        if seen != ts:
            out.append(
                ErrorRow(
                    f.info.file,
                    n * TIME_INDEX_ENTRY_SIZE,
                    TIME_INDEX_ENTRY_SIZE,
                    INDEX_INCONSISTENT,
                    f"entry {n}: timestamp {ts} is not the largest timestamp up to offset {off} ({seen})",
                    off,
                )
            )
    return out


def _txn_index(f: DumpFile, entries: pa.Table, batches: dict[int, pa.Table]) -> list[ErrorRow]:
    markers = set()
    for t in batches.values():
        for pid, lo, ctype in zip(
            t["producer_id"].to_pylist(),
            t["last_offset"].to_pylist(),
            t["control_type"].to_pylist(),
            strict=True,
        ):
            if ctype == "ABORT":
                markers.add((pid, lo))
    out = []
    for row in entries.to_pylist():
        if (row["producer_id"], row["last_offset"]) not in markers:
            out.append(
                ErrorRow(
                    f.info.file,
                    row["entry"] * ABORTED_TXN_ENTRY_SIZE,
                    ABORTED_TXN_ENTRY_SIZE,
                    INDEX_INCONSISTENT,
                    f"entry {row['entry']}: no ABORT marker of producer {row['producer_id']} at offset {row['last_offset']}",
                    row["last_offset"],
                )
            )
    return out


def _snapshot(f: DumpFile, entries: pa.Table) -> list[ErrorRow]:
    snap = f.info.base_offset
    if snap is None:
        return []
    out = []
    for i, row in enumerate(entries.to_pylist()):
        problems = []
        if row["last_offset"] >= snap:
            problems.append(
                (
                    f"lastOffset {row['last_offset']} is not below the snapshot offset {snap}",
                    row["last_offset"],
                )
            )
        if row["current_txn_first_offset"] >= snap:
            first = row["current_txn_first_offset"]
            problems.append((f"open transaction starts at {first}, after the snapshot", first))
        at = PRODUCER_SNAPSHOT_HEADER_SIZE + i * PRODUCER_SNAPSHOT_ENTRY_SIZE
        out.extend(
            ErrorRow(
                f.info.file,
                at,
                PRODUCER_SNAPSHOT_ENTRY_SIZE,
                INDEX_INCONSISTENT,
                f"producer {row['producer_id']}: {why}",
                off,
            )
            for why, off in problems
        )
    return out
