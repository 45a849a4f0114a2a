"""Arrow columns built from numpy buffers: no Python object per row.

Shared by every table builder (batches, records, index entries, snapshots).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from decoders.constants import (
    COMPRESSION_NAMES,
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    SPARK_MAX_MS,
    SPARK_MIN_MS,
)

TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")  # every timestamp column the decoders build
TIMESTAMP_TYPES = pa.array([CREATE_TIME, LOG_APPEND_TIME], pa.string())
# codec number -> name; one slot past the last codec for every unknown one
CODEC_NAMES = pa.array([*(COMPRESSION_NAMES[c] for c in range(5)), "unknown"], pa.string())
UNKNOWN_CODEC_SLOT = len(CODEC_NAMES) - 1


# the largest all-null column built of each type (nulls), at most this many rows
NULLS_KEPT = 1 << 17
_NULLS: dict[pa.DataType, pa.Array] = {}


def nulls(n: int, typ: pa.DataType) -> pa.Array:
    """``n`` nulls of ``typ``: a slice of one column kept per type (a replay's block of rows
    fills the ~55 columns of its union schema that a kind lacks with nulls, a block at a
    time, and each new column of nulls was an allocation and zeroing of its buffers)."""
    if n > NULLS_KEPT:
        return pa.nulls(n, typ)
    kept = _NULLS.get(typ)
    if kept is None or len(kept) < n:
        kept = _NULLS[typ] = pa.nulls(max(n, 1024, 2 * len(kept or ())), typ)
    return kept.slice(0, n)


def as_type(column: pa.Array | pa.ChunkedArray, typ: pa.DataType):
    """``column`` cast to ``typ``, as it is where it has that type already (a cast of a column
    to its own type still goes through Arrow's compute dispatch)."""
    return column if column.type == typ else column.cast(typ)


def const(value, n: int, typ: pa.DataType) -> pa.Array:
    """A column holding one value (topic, broker, file), built from buffers, not per row."""
    if value is None:
        return nulls(n, typ)
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
    return pa.array(values, pa.int64(), mask=null).view(TIMESTAMP_MS)


def epoch_millis(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A timestamp column of milliseconds as its int64 values: the same buffers seen as
    another type (a cast costs more than the few rows of a quiet partition's column)."""
    typ = column.type
    if not (pa.types.is_timestamp(typ) and typ.unit == "ms"):
        return column.cast(pa.int64())
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([c.view(pa.int64()) for c in column.chunks], pa.int64())
    return column.view(pa.int64())


def timestamp_types(log_append: np.ndarray) -> pa.Array:
    """Each row's timestamp type by name; one constant column when the rows agree (they do in
    all but a topic whose message.timestamp.type changed)."""
    n = log_append.size
    if not log_append.any():
        return const(CREATE_TIME, n, pa.string())
    if log_append.all():
        return const(LOG_APPEND_TIME, n, pa.string())
    return TIMESTAMP_TYPES.take(pa.array(log_append.view(np.int8)))


def binary(
    offsets: np.ndarray, data: np.ndarray, null: np.ndarray | None, typ: pa.DataType
) -> pa.Array:
    """A binary (or string) column over Arrow's buffers as the kernels write them, without
    copying them: int32 offsets of n + 1 entries, the data they index, where a value is null."""
    n = offsets.size - 1
    null_count = 0 if null is None else int(np.count_nonzero(null))
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if null_count else None
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


def spark_millis(stamps: list) -> list:
    """Epoch milliseconds given as Python values, None where :func:`outside_spark_range` says
    so (a few rows a replay reads as values: replay.replicas)."""
    return [t if t is None or SPARK_MIN_MS <= t <= SPARK_MAX_MS else None for t in stamps]


def in_spark_range(ms: pa.Array | pa.ChunkedArray) -> bool:
    """Whether every non-null value of epoch milliseconds is a Spark timestamp: one min/max,
    so the common case (every column of a healthy log) builds no mask
    (:func:`outside_spark_range` for the rows that are not)."""
    import pyarrow.compute as pc

    if not ms.null_count:  # numpy's min and max cost less than one Arrow call on a few rows
        values = ms.to_numpy()
        return not values.size or (values.min() >= SPARK_MIN_MS and values.max() <= SPARK_MAX_MS)
    low, high = pc.min_max(ms).values()
    return not low.is_valid or (low.as_py() >= SPARK_MIN_MS and high.as_py() <= SPARK_MAX_MS)
