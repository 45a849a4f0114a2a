"""The log entry framing every format shares: `offset | size | batch or message`.

Reading a field of an entry's head, checking an entry's CRC and walking the entries of a byte
string are needed by the segment walker, the resynchronisation after garbage, the planner, the
file sniffer and the simulator alike; they are written once here, at the named offsets of
:mod:`decoders.constants` (Records.java, DefaultRecordBatch.java, LegacyRecord.java).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

import crc32c
import numpy as np

from decoders import kernels
from decoders.constants import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_FORMAT,
    CRC_OFFSET,
    LEGACY_ENTRY_CRC_OFFSET,
    LEGACY_ENTRY_MAGIC_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V2,
    OFFSET_OFFSET,
    SIZE_OFFSET,
)

_OFFSET = struct.Struct(">q")
_SIZE = struct.Struct(">i")
_CRC = struct.Struct(">I")
_CRC32C_TABLES = kernels.crc32c_tables()
_MAGIC = struct.Struct(">b")


def entry_offset(head, at: int = 0) -> int:
    """The offset field of the entry at ``at`` (a v2 batch's baseOffset)."""
    return _OFFSET.unpack_from(head, at + OFFSET_OFFSET)[0]


def entry_size(head, at: int = 0) -> int:
    """The size field of the entry at ``at``: the bytes that follow the framing."""
    return _SIZE.unpack_from(head, at + SIZE_OFFSET)[0]


def entry_magic(head, at: int = 0) -> int:
    """The magic byte of the entry at ``at``, signed as Kafka reads it."""
    return _MAGIC.unpack_from(head, at + MAGIC_OFFSET)[0]


def stored_crc(entry, magic: int, at: int = 0) -> int:
    """The CRC an entry carries: the batch's CRC-32C (v2) or the message's CRC-32 (v0/v1)."""
    where = CRC_OFFSET if magic == MAGIC_VALUE_V2 else LEGACY_ENTRY_CRC_OFFSET
    return _CRC.unpack_from(entry, at + where)[0]


def computed_crc(entry, magic: int, at: int = 0, end: int | None = None) -> int:
    """The CRC of an entry's covered bytes: attributes..end (v2), magic..end (v0/v1)."""
    mv = memoryview(entry)
    end = len(mv) if end is None else end
    if magic == MAGIC_VALUE_V2:
        return crc32c.crc32c(mv[at + ATTRIBUTES_OFFSET : end])
    return zlib.crc32(mv[at + LEGACY_ENTRY_MAGIC_OFFSET : end])


def crc_holds(entry, magic: int) -> bool:
    """Whether a whole entry's stored CRC matches its bytes."""
    return computed_crc(entry, magic) == stored_crc(entry, magic)


def entry_crcs(
    buf: np.ndarray, positions: np.ndarray, sizes: np.ndarray, magics: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(computed, stored) CRC of each whole entry of a window (the same rule as
    :func:`computed_crc` and :func:`stored_crc`): small v2 batches by the compiled kernel in
    one call, the others here, one call into crc32c or zlib each."""
    n = len(positions)
    computed = np.empty(n, np.uint32)
    stored = np.empty(n, np.uint32)
    done = np.empty(n, np.bool_)
    kernels.small_batch_crcs(buf, positions, sizes, magics, _CRC32C_TABLES, computed, stored, done)
    if done.all():
        return computed, stored
    mv = memoryview(buf)
    crc_at = _CRC.unpack_from
    rest = np.flatnonzero(~done)
    for i, p, s, m in zip(
        rest.tolist(), positions[rest].tolist(), sizes[rest].tolist(), magics[rest].tolist(),
        strict=True,
    ):  # fmt: skip
        e = p + LOG_OVERHEAD + s
        if m == MAGIC_VALUE_V2:
            computed[i] = crc32c.crc32c(mv[p + ATTRIBUTES_OFFSET : e])
            stored[i] = crc_at(mv, p + CRC_OFFSET)[0]
        else:
            computed[i] = zlib.crc32(mv[p + LEGACY_ENTRY_MAGIC_OFFSET : e])
            stored[i] = crc_at(mv, p + LEGACY_ENTRY_CRC_OFFSET)[0]
    return computed, stored


def iter_entries(data, start: int = 0) -> Iterator[tuple[int, int, int]]:
    """(position, offset field, whole entry length) of each entry whose framing is in ``data``,
    following the size fields (for well-formed files the simulator wrote)."""
    pos = start
    while pos + LOG_OVERHEAD <= len(data):
        length = LOG_OVERHEAD + entry_size(data, pos)
        yield pos, entry_offset(data, pos), length
        pos += length


class BatchHeader(NamedTuple):
    """The fields of a v2 batch header, in file order (DefaultRecordBatch.java)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int


_BATCH_HEADER = struct.Struct(BATCH_HEADER_FORMAT)


def batch_header(batch, at: int = 0) -> BatchHeader:
    """The header of the v2 batch at ``at`` as Python values (one batch; windows use numpy)."""
    return BatchHeader(*_BATCH_HEADER.unpack_from(batch, at))
