"""The headers of a window's v2 batches as numpy columns, and the Arrow batches and records
tables built from them (DefaultRecordBatch.java; docs/tables.md).

One compiled pass reads every header field of a window at its named offset
(kernels.v2_header_fields). Nothing here is per record in Python but control records, of which
a batch has one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from decoders import kernels
from decoders.accounting import FileInfo
from decoders.columns import (
    CODEC_NAMES,
    UNKNOWN_CODEC_SLOT,
    const,
    timestamp_types,
    timestamps,
)
from decoders.constants import (
    COMPRESSION_CODEC_MASK,
    COMPRESSION_NONE,
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    LOG_OVERHEAD,
    MAGIC_VALUE_V2,
    MAX_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from decoders.control import control_key, control_type_name, end_txn_marker, is_txn_marker
from decoders.errors import CORRUPT_BYTES, DecodeError
from decoders.primitives import ByteReader
from decoders.record_walk import Walked
from decoders.schemas import BATCHES, HEADERS, RECORDS

# the types of V2Headers' fields from base_offset to count, in their order (DefaultRecordBatch's
# header: kernels.v2_header_fields reads them)
_HEADER_TYPES = ("i8", "i4", "u4", "i2", "i4", "i8", "i8", "i8", "i2", "i4", "i4")

# fail(headers, batch index, error kind, reason): marks a batch bad (see SegmentDecoder.fail)
Fail = Callable[["V2Headers", int, str, str], None]


@dataclass(slots=True)
class V2Headers:
    """The headers (RECORD_BATCH_OVERHEAD bytes) of a run of v2 batches, one numpy column per field, plus what the
    walker learns about each batch (its first error, whether its bytes count as corrupt)."""

    positions: np.ndarray
    sizes: np.ndarray
    abs_pos: np.ndarray
    entry_end: np.ndarray
    base_offset: np.ndarray
    leader_epoch: np.ndarray
    crc: np.ndarray
    attributes: np.ndarray
    last_delta: np.ndarray
    base_ts: np.ndarray
    max_ts: np.ndarray
    producer_id: np.ndarray
    producer_epoch: np.ndarray
    base_seq: np.ndarray
    count: np.ndarray
    errors: list
    bad: np.ndarray
    crc_valid: np.ndarray | None = None

    @classmethod
    def read(
        cls, buf: np.ndarray, base: int, positions: np.ndarray, sizes: np.ndarray
    ) -> V2Headers:
        n = len(positions)
        if n and (positions.min() < 0 or positions.max() + RECORD_BATCH_OVERHEAD > len(buf)):
            raise IndexError("a v2 batch header runs past the window")
        fields = [np.empty(n, dt) for dt in _HEADER_TYPES]
        kernels.v2_header_fields(buf, positions.astype(np.int64, copy=False), *fields)
        return cls(
            positions,
            sizes,
            positions + base,
            positions + LOG_OVERHEAD + sizes,
            *fields,
            [None] * n,
            np.zeros(n, bool),
        )

    @property
    def n(self) -> int:
        return len(self.positions)

    @property
    def last_offset(self) -> np.ndarray:
        return self.base_offset + self.last_delta

    @property
    def codec(self) -> np.ndarray:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def log_append(self) -> np.ndarray:
        return (self.attributes & TIMESTAMP_TYPE_MASK) != 0

    @property
    def transactional(self) -> np.ndarray:
        return (self.attributes & TRANSACTIONAL_FLAG_MASK) != 0

    @property
    def control(self) -> np.ndarray:
        return (self.attributes & CONTROL_FLAG_MASK) != 0

    @property
    def horizon(self) -> np.ndarray:
        return (self.attributes & DELETE_HORIZON_FLAG_MASK) != 0

    def records_area(self, i: int) -> tuple[int, int]:
        """[start, end) of batch i's records in the window."""
        return int(self.positions[i]) + RECORDS_OFFSET, int(self.entry_end[i])


def wrap_sequence(seq: np.ndarray) -> np.ndarray:
    """Sequence arithmetic wraps from Integer.MAX_VALUE to 0 (DefaultRecordBatch.incrementSequence)."""
    if seq.size and (seq.min() < 0 or seq.max() > MAX_SEQUENCE):
        return np.mod(seq, MAX_SEQUENCE + 1)
    return seq  # nothing wrapped: no division per row


# the longest records area of a control batch compared as bytes, all its rows at once; a
# marker's is ~17 bytes, a KRaft control record's a few dozen; a longer one (corrupt, or a
# control type of a later version) is decoded row by row
CONTROL_AREA_BYTES = 256


def control_records(buf, h: V2Headers, fail: Fail) -> tuple[pa.Array, pa.Array]:
    """COMMIT/ABORT with coordinator epoch, KRaft control types named (markers are never
    compressed): the control type name and the marker's coordinator epoch of every batch.

    A marker's records area holds one record whose every byte is fixed by its type and
    coordinator epoch (deltas 0), so a log's markers repeat a few areas (a long-lived
    transactional producer leaves one marker per transaction in every partition it writes):
    the areas are compared as bytes, all the window's at once, and each distinct one is
    decoded once."""
    n = h.n
    rows = np.flatnonzero(h.control & (h.count > 0) & (h.codec == COMPRESSION_NONE))
    if not rows.size:  # most windows of a user topic: no marker to read
        return pa.nulls(n, pa.string()), pa.nulls(n, pa.int32())
    code = np.full(n, -1, np.int64)  # each batch's distinct area, -1: none decoded
    decoded: list[tuple[str | None, int | None, str | None]] = []
    start = h.positions[rows].astype(np.int64) + RECORDS_OFFSET
    end = h.entry_end[rows].astype(np.int64)
    length = end - start
    for size in np.unique(length):
        these = np.flatnonzero(length == size)
        if 0 < size <= CONTROL_AREA_BYTES:
            areas = buf[start[these, None] + np.arange(size)]
            if (areas == areas[0]).all():  # all alike (COMMITs of one coordinator epoch): no sort
                first, inverse = np.zeros(1, np.int64), np.zeros(these.size, np.int64)
            else:
                keys = np.ascontiguousarray(areas).view(np.dtype((np.void, int(size)))).ravel()
                _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            firsts = these[first]
        else:
            firsts, inverse = these, np.arange(these.size)
        code[rows[these]] = len(decoded) + inverse.ravel()
        decoded += [_control_record(buf, int(start[i]), int(end[i])) for i in firsts]
    for k, (_, _, error) in enumerate(decoded):
        if error is not None:  # a corrupt area: each batch of it said
            for i in np.flatnonzero(code == k):
                fail(h, int(i), CORRUPT_BYTES, f"control record: {error}")
    if not decoded:
        return pa.nulls(n, pa.string()), pa.nulls(n, pa.int32())
    names = pa.array([name for name, _, _ in decoded], pa.string())
    epochs = np.array([-1 if e is None else e for _, e, _ in decoded], np.int32)
    known = np.array([e is not None and err is None for _, e, err in decoded])
    of = np.maximum(code, 0)
    control_type = names.take(pa.array(of, mask=code < 0))
    return control_type, pa.array(epochs[of], mask=~((code >= 0) & known[of]))


def _control_record(buf, start: int, end: int) -> tuple[str | None, int | None, str | None]:
    """(type name, coordinator epoch of a COMMIT/ABORT marker, the reason it is corrupt): the
    name as far as the key decodes."""
    name = None
    try:
        key, value = _first_record_key_value(buf, start, end)
        _, ctype = control_key(key)
        name = control_type_name(ctype)
        epoch = end_txn_marker(value)[1] if is_txn_marker(ctype) else None
        return name, epoch, None
    except DecodeError as e:
        return name, None, str(e)


def _first_record_key_value(
    buf: np.ndarray, start: int, end: int
) -> tuple[bytes | None, bytes | None]:
    """Key and value of the first record of an uncompressed records area (control batches)."""
    r = ByteReader(memoryview(buf), start, end)
    length = r.varint()
    rend = r.pos + length
    if length < 0 or rend > end:
        raise DecodeError("record length out of range")
    r.end = rend
    r.int8()  # attributes
    r.varlong()  # timestamp delta
    r.varint()  # offset delta
    kl = r.varint()
    key = r.raw(kl) if kl >= 0 else None
    vl = r.varint()
    value = r.raw(vl) if vl >= 0 else None
    return key, value


def header_numbers(h: V2Headers) -> dict[str, np.ndarray]:
    """The batches table's columns that are the headers' numbers as they are, by name: one
    definition for the table (:func:`batches_table`) and for its rows as Python values
    (:class:`HeaderBatch`)."""
    last_seq = np.where(
        h.base_seq < 0, -1, wrap_sequence(h.base_seq.astype(np.int64) + h.last_delta)
    )
    return {
        "position": h.abs_pos.astype(np.int64, copy=False),
        "size": (h.sizes + LOG_OVERHEAD).astype(np.int32),
        "base_offset": h.base_offset,
        "last_offset": h.last_offset,
        "magic": np.full(h.n, MAGIC_VALUE_V2, np.int8),
        "crc": h.crc,
        "attributes": h.attributes,
        "is_transactional": h.transactional,
        "is_control": h.control,
        "has_delete_horizon": h.horizon,
        "partition_leader_epoch": h.leader_epoch,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_seq,
        "last_sequence": last_seq.astype(np.int32),
        "last_offset_delta": h.last_delta,
        "record_count": h.count,
    }


def batches_table(info: FileInfo, h: V2Headers, control_type, coord_epoch) -> pa.RecordBatch:
    """One batches row per header (docs/tables.md, batches)."""
    n = h.n
    columns = {
        "broker": const(info.broker, n, pa.string()),
        "topic": const(info.topic, n, pa.string()),
        "partition": const(info.partition, n, pa.int32()),
        "file": const(info.file, n, pa.string()),
        **{name: pa.array(values) for name, values in header_numbers(h).items()},
        "crc_valid": pa.array(h.crc_valid) if h.crc_valid is not None else pa.nulls(n, pa.bool_()),
        "compression": CODEC_NAMES.take(
            pa.array(np.minimum(h.codec, UNKNOWN_CODEC_SLOT).astype(np.int8))
        ),
        "timestamp_type": timestamp_types(h.log_append),
        "base_timestamp": timestamps(h.base_ts, mask=h.horizon),
        "max_timestamp": timestamps(h.max_ts),
        "delete_horizon": timestamps(h.base_ts, mask=~h.horizon),
        "control_type": control_type,
        "coordinator_epoch": coord_epoch,
        "error": pa.array(h.errors, pa.string()),
    }
    return pa.RecordBatch.from_arrays([columns[f.name] for f in BATCHES], schema=BATCHES)


class HeaderBatch:
    """A window's batches rows before they are a table (:func:`batches_table`, made by
    :meth:`table` where it is wanted): a scan that only replays a quiet partition reads its
    few batches as Python values (:meth:`values`), which the ~30 Arrow columns of the table
    cost more to build than (8 batches: ~110 of a quiet partition's ~1,000 us, then as much
    again to read them back as rows)."""

    __slots__ = ("info", "h", "control_type", "coord_epoch", "num_rows", "_table", "_numbers")

    def __init__(self, info: FileInfo, h: V2Headers, control_type, coord_epoch) -> None:
        self.info, self.h = info, h
        self.control_type, self.coord_epoch = control_type, coord_epoch
        self.num_rows = h.n
        self._table: pa.RecordBatch | None = None
        self._numbers: dict[str, np.ndarray] | None = None

    @property
    def numbers(self) -> dict[str, np.ndarray]:
        """:func:`header_numbers` of its headers."""
        if self._numbers is None:
            self._numbers = header_numbers(self.h)
        return self._numbers

    def table(self) -> pa.RecordBatch:
        if self._table is None:
            self._table = batches_table(self.info, self.h, self.control_type, self.coord_epoch)
        return self._table

    def values(self, columns: Sequence[str]) -> list[list]:
        """Each column's values as the table's ``to_pylist`` gives them, but timestamps as epoch
        milliseconds (None where null)."""
        h, n, numbers = self.h, self.h.n, self.numbers
        places = {"broker": self.info.broker, "topic": self.info.topic,
                  "partition": self.info.partition, "file": self.info.file}  # fmt: skip
        out = []
        for c in columns:
            if c in numbers:
                out.append(numbers[c].tolist())
            elif c in places:
                out.append([places[c]] * n)
            elif c == "crc_valid":
                out.append([None] * n if h.crc_valid is None else h.crc_valid.tolist())
            elif c == "max_timestamp":
                out.append([None if t == NO_TIMESTAMP else t for t in h.max_ts.tolist()])
            elif c == "control_type":
                out.append(_values(self.control_type))
            elif c == "coordinator_epoch":
                out.append(_values(self.coord_epoch))
            else:  # the table's own conversion, timestamps as their milliseconds
                column = self.table().column(c)
                if pa.types.is_timestamp(column.type):
                    column = column.cast(pa.int64())
                out.append(column.to_pylist())
        return out


def _values(column: pa.Array) -> list:
    return [None] * len(column) if column.null_count == len(column) else column.to_pylist()


def records_table(
    info: FileInfo, sel: np.ndarray, walk: Walked, h: V2Headers,
    columns: frozenset[str] | None = None,
) -> pa.RecordBatch:  # fmt: skip
    """Arrow records from the kernels' walk of batches ``sel`` (indexes into ``h``). ``columns``:
    the columns a caller reads (None: all); of the others, the ones that copy bytes out of the
    records area (key, value, headers) are left null (the walk did not copy them)."""
    n = walk.offset.size

    def each(column: np.ndarray) -> np.ndarray:  # a batch's field on each of its records
        return np.repeat(column[sel], walk.decoded)

    seq_base = each(h.base_seq).astype(np.int64)
    seq = np.where(seq_base < 0, -1, wrap_sequence(seq_base + (walk.offset - each(h.base_offset))))

    def given(column: pa.Array | None, typ: pa.DataType) -> pa.Array:
        return pa.nulls(n, typ) if column is None else column

    return pa.RecordBatch.from_arrays(
        [
            const(info.broker, n, pa.string()),
            const(info.topic, n, pa.string()),
            const(info.partition, n, pa.int32()),
            pa.array(walk.offset),
            timestamps(walk.timestamp),
            timestamp_types(each(h.log_append)),
            given(walk.key, pa.binary()),
            given(walk.value, pa.binary()),
            given(walk.headers, HEADERS),
            pa.array(each(h.producer_id)),
            pa.array(each(h.producer_epoch)),
            pa.array(seq.astype(np.int32)),
            pa.array(each(h.transactional)),
            pa.array(each(h.control)),
            pa.array(each(h.crc_valid)) if h.crc_valid is not None else pa.nulls(n, pa.bool_()),
            pa.array(each(h.abs_pos)),
            const(info.base_offset, n, pa.int64()),
        ],
        schema=RECORDS,
    )
