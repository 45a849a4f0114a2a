"""Arrow columns built from numpy buffers: no Python object per row.

Shared by every table builder (batches, records, index entries, snapshots).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from decoders import kernels
from decoders.constants import (
    COMPRESSION_NAMES,
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    SPARK_MAX_MS,
    SPARK_MIN_MS,
)

TIMESTAMP_TYPES = pa.array([CREATE_TIME, LOG_APPEND_TIME], pa.string())
# codec number -> name; one slot past the last codec for every unknown one
CODEC_NAMES = pa.array([*(COMPRESSION_NAMES[c] for c in range(5)), "unknown"], pa.string())
UNKNOWN_CODEC_SLOT = len(CODEC_NAMES) - 1


def const(value, n: int, typ: pa.DataType) -> pa.Array:
    """A column holding one value (topic, broker, file), built from buffers, not per row."""
    if value is None:
        return pa.nulls(n, typ)
    if pa.types.is_string(typ):
        b = value.encode("utf-8")
        offsets = np.arange(n + 1, dtype=np.int64) * len(b)
        if offsets[-1] < 2**31:
            return pa.Array.from_buffers(
                typ, n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b * n)]
            )
    return pa.repeat(pa.scalar(value, typ), n)


def timestamps(values: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    """Epoch milliseconds as UTC timestamps; NO_TIMESTAMP (and ``mask``) as null."""
    null = values == NO_TIMESTAMP
    if mask is not None:
        null = null | mask
    return pa.array(values, pa.int64(), mask=null).cast(pa.timestamp("ms", tz="UTC"))


def binary(buf: np.ndarray, pos: np.ndarray, lens: np.ndarray, typ: pa.DataType) -> pa.Array:
    """Slices of ``buf`` as a binary (or string) column; a negative length is null."""
    n = pos.size
    offsets, data = kernels.gather(buf, pos, lens)
    null = lens < 0
    validity = None
    null_count = int(null.sum())
    if null_count:
        validity = pa.py_buffer(np.packbits(~null, bitorder="little"))
    return pa.Array.from_buffers(
        typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count
    )


def valid_utf8(arr: pa.Array) -> pa.Array:
    """Header keys are Java Strings; replace any invalid UTF-8 rather than emit a broken array."""
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        raw = pa.Array.from_buffers(
            pa.binary(), len(arr), arr.buffers(), arr.null_count, arr.offset
        )
        return pa.array(
            [None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()],
            pa.string(),
        )


def outside_spark_range(ms: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Where epoch milliseconds fall outside Spark's timestamps (years 1..9999): a garbage
    header can hold any int64; such values become null on the way into Spark
    (decoders.spark) and in the audit's replay in the scan (replay.replicas). Null in, false
    out."""
    import pyarrow.compute as pc

    return pc.fill_null(pc.or_(pc.less(ms, SPARK_MIN_MS), pc.greater(ms, SPARK_MAX_MS)), False)
