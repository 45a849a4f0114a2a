"""The records of v2 batches walked into Arrow's buffers by the compiled kernels
(decoders.kernels: walk_records, copy_slices, copy_headers), with no Python object per record.

Two passes over a chunk, both compiled: the walk validates every record and notes where each
key, value and header list lies and how many bytes they add up to; the copies then write each
binary column into a buffer of exactly that size. The buffers come from numpy here, not from
numba inside the kernels: numba's allocations are fresh pages on every call (a page fault per
4 KiB written, which cost more than the walk itself), numpy's allocator reuses its memory.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from decoders import kernels
from decoders.columns import binary, valid_utf8

# Scratch columns of the walk, per record: key and value position and length, where its headers
# start and how many there are.
_SCRATCH = (
    ("key_pos", np.int64),
    ("key_len", np.int32),
    ("value_pos", np.int64),
    ("value_len", np.int32),
    ("header_pos", np.int64),
    ("header_count", np.int32),
)


class Walked(NamedTuple):
    """A walk's records: per record its offset and timestamp, the binary columns asked for
    (None otherwise); per batch its status, records decoded (the records are in batch order)
    and error position."""

    offset: np.ndarray
    timestamp: np.ndarray
    key: pa.Array | None
    value: pa.Array | None
    headers: pa.Array | None
    status: np.ndarray
    decoded: np.ndarray
    error_pos: np.ndarray


class RecordWalker:
    """Walks records areas into :class:`Walked` columns, keeping its scratch columns from one
    call to the next (they never leave this object; what does is allocated fresh)."""

    def __init__(self) -> None:
        self._scratch = {name: np.empty(0, dt) for name, dt in _SCRATCH}
        self._capacity = 0

    def walk(
        self,
        buf: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        counts: np.ndarray,
        base_offsets: np.ndarray,
        base_timestamps: np.ndarray,
        fixed_timestamps: np.ndarray,
        *,
        keys: bool = True,
        values: bool = True,
        headers: bool = True,
    ) -> Walked:
        """The records of the areas ``buf[starts[i]:ends[i]]`` (see kernels.walk_records for the
        arguments); ``keys``, ``values``, ``headers``: which binary columns to copy out (every
        record is validated whichever are)."""
        cap = int(kernels.record_capacity(starts, ends, counts))
        s = self._scratch_for(cap)
        offset = np.empty(cap, np.int64)
        timestamp = np.empty(cap, np.int64)
        n, status, decoded, error_pos, n_headers, kb, vb, hkb, hvb = kernels.walk_records(
            buf, starts, ends, counts, base_offsets, base_timestamps, fixed_timestamps,
            offset, timestamp, s["key_pos"], s["key_len"], s["value_pos"],
            s["value_len"], s["header_pos"], s["header_count"],
        )  # fmt: skip
        return Walked(
            offset[:n],
            timestamp[:n],
            _binary(buf, s["key_pos"][:n], s["key_len"][:n], kb) if keys else None,
            _binary(buf, s["value_pos"][:n], s["value_len"][:n], vb) if values else None,
            _headers(buf, s["header_pos"][:n], s["header_count"][:n], n_headers, hkb, hvb)
            if headers
            else None,
            status,
            decoded,
            error_pos,
        )

    def _scratch_for(self, cap: int) -> dict[str, np.ndarray]:
        if cap > self._capacity:
            self._capacity = max(cap, 2 * self._capacity)
            self._scratch = {name: np.empty(self._capacity, dt) for name, dt in _SCRATCH}
        return self._scratch


def _binary(buf: np.ndarray, pos: np.ndarray, lens: np.ndarray, size: int) -> pa.Array:
    """The slices ``buf[pos[i]:pos[i] + lens[i]]`` as a binary column (negative length: null)."""
    n = pos.size
    offsets = np.empty(n + 1, np.int32)
    data = np.empty(size, np.uint8)
    kernels.copy_slices(buf, pos, lens, offsets, data)
    return binary(offsets, data, lens < 0, pa.binary())


def _headers(
    buf: np.ndarray,
    header_pos: np.ndarray,
    header_count: np.ndarray,
    n_headers: int,
    key_bytes: int,
    value_bytes: int,
) -> pa.Array:
    """The records' headers as list<struct<key: string, value: binary>> (RecordHeader: a key is
    a Java String, never null; a value may be)."""
    n = header_pos.size
    lists = np.empty(n + 1, np.int32)
    key_offsets = np.empty(n_headers + 1, np.int32)
    key_data = np.empty(key_bytes, np.uint8)
    value_offsets = np.empty(n_headers + 1, np.int32)
    value_data = np.empty(value_bytes, np.uint8)
    value_len = np.empty(n_headers, np.int32)
    kernels.copy_headers(
        buf, header_pos, header_count, lists, key_offsets, key_data,
        value_offsets, value_data, value_len,
    )  # fmt: skip
    keys = valid_utf8(binary(key_offsets, key_data, None, pa.string()))
    values = binary(value_offsets, value_data, value_len < 0, pa.binary())
    entries = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
    return pa.ListArray.from_arrays(pa.array(lists), entries)
