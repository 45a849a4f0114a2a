"""Producer state snapshot files, `<offset>.snapshot` (docs/formats.md 9.4)."""

from __future__ import annotations

import struct

import crc32c
import numpy as np
import pyarrow as pa

from decoders import fixed
from decoders.accounting import Accounting, FileInfo
from decoders.columns import TIMESTAMP_MS, const
from decoders.constants import (
    NO_TIMESTAMP,
    PRODUCER_SNAPSHOT_COUNT_OFFSET,
    PRODUCER_SNAPSHOT_ENTRY_SIZE,
    PRODUCER_SNAPSHOT_HEADER_FORMAT,
    PRODUCER_SNAPSHOT_HEADER_SIZE,
    PRODUCER_SNAPSHOT_VERSION,
)
from decoders.errors import CORRUPT_BYTES, CRC_MISMATCH, UNKNOWN_VERSION, ErrorRow
from decoders.indexes import DEFAULT_INDEX_BUDGET, MAX_INDEX_BYTES, IndexResult
from decoders.schemas import PRODUCER_SNAPSHOTS
from decoders.source import ByteSource, reads_source


def _layout(fields: list[tuple[str, str]]) -> list[tuple[str, int, int, str]]:
    """(name, start, end, dtype) of fixed-width fields laid out one after the other."""
    out, at = [], 0
    for name, dt in fields:
        end = at + np.dtype(dt).itemsize
        out.append((name, at, end, dt))
        at = end
    assert at == PRODUCER_SNAPSHOT_ENTRY_SIZE
    return out


# A snapshot entry's fields in file order (ProducerSnapshot.json, PRODUCER_SNAPSHOT_ENTRY_FORMAT).
_ENTRY_FIELDS = _layout(
    [
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("last_sequence", ">i4"),
        ("last_offset", ">i8"),
        ("offset_delta", ">i4"),
        ("timestamp", ">i8"),
        ("coordinator_epoch", ">i4"),
        ("current_txn_first_offset", ">i8"),
    ]
)


@reads_source
def read_snapshot(
    src: ByteSource,
    info: FileInfo | None = None,
    memory_budget: int = DEFAULT_INDEX_BUDGET,
    as_values: bool = False,
) -> IndexResult:
    """Entries of a producer snapshot; a bad version, CRC or length makes the whole file corrupt
    (the broker then ignores it and rebuilds from the log), but entries are still shown.
    ``as_values``: the entries as :class:`SnapshotEntries` rather than their table."""
    info = info or FileInfo(file=src.name, kind="snapshot")
    limit = min(MAX_INDEX_BYTES, memory_budget // 4)
    too_big = src.size > limit
    # its CRC covers the whole file, so a snapshot is read whole, or not at all
    data = b"" if too_big else src.read_at(0, src.size)
    acct = Accounting(size=src.size)
    problems: list[tuple[str, str]] = []
    n = 0
    if too_big:
        problems.append(
            (
                CORRUPT_BYTES,
                f"{src.size} bytes is more than a producer snapshot holds within the memory budget ({limit} bytes); not decoded",
            )
        )
    elif len(data) < PRODUCER_SNAPSHOT_HEADER_SIZE:
        problems.append(
            (
                CORRUPT_BYTES,
                f"{len(data)} bytes is shorter than the {PRODUCER_SNAPSHOT_HEADER_SIZE}-byte header",
            )
        )
    else:
        version, crc, count = struct.unpack_from(PRODUCER_SNAPSHOT_HEADER_FORMAT, data, 0)
        if version != PRODUCER_SNAPSHOT_VERSION:
            problems.append((UNKNOWN_VERSION, f"snapshot version {version}"))
        computed = crc32c.crc32c(memoryview(data)[PRODUCER_SNAPSHOT_COUNT_OFFSET:])
        if computed != crc:
            problems.append(
                (CRC_MISMATCH, f"CRC-32C mismatch: stored {crc:#010x}, computed {computed:#010x}")
            )
        room = (len(data) - PRODUCER_SNAPSHOT_HEADER_SIZE) // PRODUCER_SNAPSHOT_ENTRY_SIZE
        if (
            count < 0
            or count * PRODUCER_SNAPSHOT_ENTRY_SIZE != len(data) - PRODUCER_SNAPSHOT_HEADER_SIZE
        ):
            problems.append(
                (
                    CORRUPT_BYTES,
                    f"header says {count} entries, the file holds {room} (+{(len(data) - PRODUCER_SNAPSHOT_HEADER_SIZE) % PRODUCER_SNAPSHOT_ENTRY_SIZE} bytes)",
                )
            )
        n = max(0, min(count, room))
    for kind, why in problems:
        acct.errors.append(ErrorRow(info.file, 0, src.size, kind, why))
    if problems:
        acct.corrupt = src.size
    else:
        acct.valid = src.size
    acct.batches = n
    header = min(len(data), PRODUCER_SNAPSHOT_HEADER_SIZE)
    raw = fixed.rows(data, PRODUCER_SNAPSHOT_ENTRY_SIZE, n, offset=header)
    entries = SnapshotEntries(
        info, {name: fixed.field(raw, a, dt) for name, a, _, dt in _ENTRY_FIELDS}
    )
    return IndexResult(entries if as_values else entries.table(), acct)


class SnapshotEntries:
    """A snapshot's entries before they are a table (:meth:`table`): a scan that only replays
    a quiet partition reads its snapshot's one or two entries as Python values
    (:meth:`values`), which the table's dozen Arrow columns cost more to build."""

    __slots__ = ("info", "fields", "num_rows")

    def __init__(self, info: FileInfo, fields: dict[str, np.ndarray]) -> None:
        self.info, self.fields = info, fields
        self.num_rows = len(fields["producer_id"])

    def _places(self) -> dict:
        i = self.info
        return {"broker": i.broker, "topic": i.topic, "partition": i.partition, "file": i.file,
                "snapshot_offset": i.base_offset}  # fmt: skip

    def table(self) -> pa.Table:
        n, places = self.num_rows, self._places()
        columns = {}
        for f in PRODUCER_SNAPSHOTS:
            if f.name in places:
                columns[f.name] = const(places[f.name], n, f.type)
            elif f.name == "timestamp":
                ts = self.fields["timestamp"]
                columns[f.name] = pa.array(ts, mask=ts == NO_TIMESTAMP).view(TIMESTAMP_MS)
            else:
                columns[f.name] = pa.array(self.fields[f.name])
        return pa.table(columns, schema=PRODUCER_SNAPSHOTS)

    def values(self, columns) -> list[list]:
        """Each column's values as the table's ``to_pylist`` gives them, but the timestamp as
        epoch milliseconds (None where there is none)."""
        n, places = self.num_rows, self._places()
        out = []
        for c in columns:
            if c in places:
                out.append([places[c]] * n)
            elif c == "timestamp":
                out.append([None if t == NO_TIMESTAMP else t for t in self.fields[c].tolist()])
            else:
                out.append(self.fields[c].tolist())
        return out
