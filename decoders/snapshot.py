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
    src: ByteSource, info: FileInfo | None = None, memory_budget: int = DEFAULT_INDEX_BUDGET
) -> IndexResult:
    """Entries of a producer snapshot; a bad version, CRC or length makes the whole file corrupt
    (the broker then ignores it and rebuilds from the log), but entries are still shown."""
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
    cols = {name: fixed.field(raw, a, dt) for name, a, _, dt in _ENTRY_FIELDS}
    ts = cols.pop("timestamp")
    table = pa.table(
        {
            "broker": const(info.broker, n, pa.string()),
            "topic": const(info.topic, n, pa.string()),
            "partition": const(info.partition, n, pa.int32()),
            "file": const(info.file, n, pa.string()),
            "snapshot_offset": const(info.base_offset, n, pa.int64()),
            **{
                k: pa.array(v)
                for k, v in cols.items()
                if k
                in ("producer_id", "producer_epoch", "last_sequence", "last_offset", "offset_delta")
            },
            "timestamp": pa.array(ts, mask=ts == -1).view(TIMESTAMP_MS),
            "coordinator_epoch": pa.array(cols["coordinator_epoch"]),
            "current_txn_first_offset": pa.array(cols["current_txn_first_offset"]),
        },
        schema=PRODUCER_SNAPSHOTS,
    )
    return IndexResult(table, acct)
