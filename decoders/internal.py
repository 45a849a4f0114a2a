"""Decode the records of `__consumer_offsets` and `__transaction_state` into their tables.

Input is a records batch of one of those topics (already decoded by the segment walker);
output is the offset_commits, group_metadata, group_records or txn_log rows plus error rows
for records that do not decode. Control records (transaction markers) are skipped here; they
are in the batches and records tables.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders import consumer_offsets as co
from decoders import transaction_log as tl
from decoders.columns import as_type, const
from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from decoders.errors import CORRUPT_BYTES, UNKNOWN_VERSION, DecodeError, ErrorRow, UnknownVersion
from decoders.schemas import TABLES
from decoders.transaction_log import V0_TIMESTAMPS

INTERNAL_TABLES = {
    CONSUMER_OFFSETS_TOPIC: ("offset_commits", "group_metadata", "group_records"),
    TRANSACTION_STATE_TOPIC: ("txn_log",),
}


def internal_tables_for(topic: str | None) -> tuple[str, ...]:
    return INTERNAL_TABLES.get(topic or "", ())


# Records decoded one by one together: keys and values become Python bytes for the
# per-record decoders of this many records at a time, their rows Arrow before the next
# (:func:`_one_by_one`), so a batch of a million tombstones holds a slice's dicts, not all.
SLICE_ROWS = 8192
# Records decoded together: both internal topics' are decoded over columns where they take
# the usual shapes (each distinct key and value head once, :func:`_transaction_state`; offset
# commits' values over the column, :func:`_consumer_offsets`): what costs is the ~30 Arrow
# calls per slice, not the records (an exactly-once app's million commits were 613 slices)
COLUMN_SLICE_ROWS = 65_536
CONSUMER_OFFSETS_TABLES = ("offset_commits", "group_metadata", "group_records")

_POSITION_FROM = {  # column of the internal tables <- column of the records table
    "broker": "broker",
    "log_partition": "partition",
    "log_offset": "offset",
    "record_timestamp": "timestamp",
    "batch_position": "batch_position",
}
_RECORD_FIELDS = {  # offset_commits columns copied from the record's batch
    "producer_id": "producer_id",
    "producer_epoch": "producer_epoch",
    "is_transactional": "is_transactional",
}


def decode_internal(
    records: pa.RecordBatch, file: str, errors: list[ErrorRow]
) -> Iterator[tuple[str, pa.Table]]:
    """The tables of one records batch of an internal topic (nothing for other topics), as
    (table, rows) a slice of records at a time, each table's rows in order; ``errors`` gets
    the slices' error rows.

    Location columns (broker, offsets, the record timestamp as int64 milliseconds...) are taken
    from the records' Arrow columns; only the keys and values pass through Python. Each slice's
    rows are handed on before the next is decoded: a compressed batch of a million
    `__consumer_offsets` tombstones (a few KB on disk) holds one slice's decoded rows, not a
    million (tests/test_hostile.py).
    """
    if records.num_rows == 0:
        return
    topic = records.column("topic")[0].as_py()
    if topic == CONSUMER_OFFSETS_TOPIC:
        decode, names = _consumer_offsets, CONSUMER_OFFSETS_TABLES
    elif topic == TRANSACTION_STATE_TOPIC:
        decode, names = _transaction_state, ("txn_log",)
    else:
        return
    for start in range(0, records.num_rows, COLUMN_SLICE_ROWS):
        chunk = records.slice(start, COLUMN_SLICE_ROWS)
        rows, errs = decode(chunk, file)
        errors.extend(errs)
        for t in names:
            yield t, _table(t, chunk, file, *rows[t])


def _decoded_fields(name: str) -> list[pa.Field]:
    """The columns of table ``name`` its records' keys and values give (the others come from
    the records' own columns)."""
    return [
        f
        for f in TABLES[name]
        if f.name not in _POSITION_FROM
        and f.name != "file"
        and not (name == "offset_commits" and f.name in _RECORD_FIELDS)
    ]


def _table(name: str, chunk: pa.RecordBatch, file: str, keep: list[int] | np.ndarray,
           rows: list[dict] | pa.StructArray):  # fmt: skip
    """Decoded fields from ``rows`` (dicts, or already a struct array); location columns
    taken from ``chunk`` at rows ``keep``."""
    schema = TABLES[name]
    idx = pa.array(np.asarray(keep, np.int64))
    # one conversion of the row dicts into a struct array, in Arrow's own loop
    if isinstance(rows, pa.StructArray):
        struct = rows if len(rows) else None
    else:
        struct = pa.array(rows, pa.struct(_decoded_fields(name))) if rows else None
    cols = []
    for f in schema:
        if f.name in _POSITION_FROM:
            col = chunk.column(_POSITION_FROM[f.name]).take(idx)
            cols.append(as_type(col, f.type))
        elif name == "offset_commits" and f.name in _RECORD_FIELDS:
            cols.append(as_type(chunk.column(_RECORD_FIELDS[f.name]).take(idx), f.type))
        elif f.name == "file":
            cols.append(const(file, len(keep), f.type))
        elif struct is None:
            cols.append(pa.nulls(0, f.type))
        else:
            cols.append(struct.field(f.name))
    return pa.Table.from_arrays(cols, schema=schema)


def _inputs(chunk: pa.RecordBatch):
    return zip(
        range(chunk.num_rows),
        chunk.column("key").to_pylist(),
        chunk.column("value").to_pylist(),
        chunk.column("is_control").to_pylist(),
        chunk.column("offset").to_pylist(),
        chunk.column("batch_position").to_pylist(),
        strict=True,
    )


def _error(file: str, position: int, offset: int, e: Exception) -> ErrorRow:
    kind = UNKNOWN_VERSION if isinstance(e, UnknownVersion) else CORRUPT_BYTES
    return ErrorRow(file, position, 0, kind, f"record at offset {offset}: {e}", offset)


def _consumer_offsets(chunk: pa.RecordBatch, file: str):
    """`__consumer_offsets` records: each distinct key decoded once; offset commits' values
    over the column where they have one of the usual layouts (:func:`co.offset_commit_columns`:
    an exactly-once app commits its offsets with every transaction, millions of records);
    group metadata, the other record types and anything unusual one by one."""
    n = chunk.num_rows
    control = _flags(chunk.column("is_control"))
    key_code, decoded_keys = _distinct_keys(chunk, control, co.decode_key)
    commit_key = np.array(
        [
            isinstance(k, dict) and k["key_type"] in (co.OFFSET_COMMIT_LEGACY, co.OFFSET_COMMIT)
            for k in decoded_keys
        ]
        + [False]  # fmt: skip
    )[key_code]
    values = chunk.column("value")
    commits = ~control & commit_key
    present = np.flatnonzero(commits & pc.is_valid(values).to_numpy(zero_copy_only=False))
    at, columns = co.offset_commit_columns(values.take(pa.array(present)))
    by_column = present[at]
    out, errors = _one_by_one(chunk, file, ~control & ~np.isin(np.arange(n), by_column))
    keep, singles = out["offset_commits"]
    # the commits decoded over the column, with those decoded one by one (tombstones too)
    fields = _decoded_fields("offset_commits")
    key_fields = pa.array([k if isinstance(k, dict) else None for k in decoded_keys] + [None],
                          pa.struct([f for f in fields if f.name in KEY_FIELDS]))  # fmt: skip
    from_keys = key_fields.take(pa.array(key_code[by_column])).flatten()
    named = dict(zip(KEY_FIELDS, from_keys, strict=True))
    columns = columns.append_column("is_tombstone", pa.repeat(False, len(by_column)))
    built = pa.StructArray.from_arrays(
        [named[f.name] if f.name in named else columns.column(f.name).combine_chunks().cast(f.type)
         for f in fields],
        fields=fields,
    )  # fmt: skip
    rows_at = np.concatenate([np.asarray(keep, np.int64), by_column])
    order = np.argsort(rows_at, kind="stable")
    out["offset_commits"] = (
        rows_at[order].tolist(),
        pa.concat_arrays([singles, built]).take(pa.array(order)),
    )
    return out, errors


KEY_FIELDS = ("group_id", "topic", "partition", "key_type")


def _one_by_one(chunk: pa.RecordBatch, file: str, wanted: np.ndarray):
    """:func:`_records_one_by_one` of :data:`SLICE_ROWS` of the ``wanted`` records at a time,
    each slice's rows made a struct array before the next is decoded: per table (the rows'
    indexes in the chunk, their decoded fields), and the errors, all in record order."""
    at = np.flatnonzero(wanted)
    parts: dict[str, tuple[list, list]] = {t: ([], []) for t in CONSUMER_OFFSETS_TABLES}
    errors: list[ErrorRow] = []
    for start in range(0, len(at), SLICE_ROWS):
        out, errs = _records_one_by_one(chunk, file, at[start : start + SLICE_ROWS])
        errors += errs
        for t, (keep, rows) in out.items():
            if rows:
                parts[t][0].append(np.asarray(keep, np.int64))
                parts[t][1].append(pa.array(rows, pa.struct(_decoded_fields(t))))
    return {
        t: (np.concatenate(keep) if keep else np.zeros(0, np.int64),
            pa.concat_arrays(rows) if rows else pa.array([], pa.struct(_decoded_fields(t))))
        for t, (keep, rows) in parts.items()
    }, errors  # fmt: skip


def _records_one_by_one(chunk: pa.RecordBatch, file: str, rows: np.ndarray):
    """The records at ``rows`` (ascending indexes) of a `__consumer_offsets` chunk decoded one
    by one: their rows by table, and the errors of those that do not decode."""
    out = {t: ([], []) for t in CONSUMER_OFFSETS_TABLES}
    errors = []
    keys: dict[bytes, dict] = {}  # compacted topics repeat keys: decode each once per slice
    part = chunk.take(pa.array(rows))
    for i, key_bytes, value, _control, offset, position in _inputs(part):
        try:
            if key_bytes is None:
                raise DecodeError("record without a key")
            key = keys.get(key_bytes)
            if key is None:
                key = keys[key_bytes] = co.decode_key(key_bytes)
            ktype = key["key_type"]
            if ktype in (co.OFFSET_COMMIT_LEGACY, co.OFFSET_COMMIT):
                table, row = "offset_commits", {**key, "is_tombstone": value is None}
                if value is not None:
                    row.update(co.decode_offset_commit(value))
            elif ktype == co.GROUP_METADATA:
                table, row = "group_metadata", {**key, "is_tombstone": value is None}
                if value is not None:
                    row.update(co.decode_group_metadata(value))
            else:
                table = "group_records"
                row = {**key, "record": co.RECORD_NAMES[ktype], "is_tombstone": value is None}
                if value is not None:
                    decoded = co.decode_group_value(ktype, value)
                    row["value_version"] = decoded["value_version"]
                    row["fields"] = co.fields_json(decoded)
        except DecodeError as e:
            errors.append(_error(file, position, offset, e))
            continue
        out[table][0].append(int(rows[i]))
        out[table][1].append(row)
    return out, errors


def _transaction_state(chunk: pa.RecordBatch, file: str):
    """`__transaction_state` records over columns: each distinct key decoded once; a version 0
    value once per distinct *head*, its bytes before the two timestamps that end it (a TV0/1
    producer writes the same few states for its whole life, a transaction every 100 ms: its
    records differ in nothing else), the timestamps read for the whole column at once; any
    other value (version 1, tagged fields) one by one. Returns the kept rows and their decoded
    fields as one struct array."""
    n = chunk.num_rows
    control = _flags(chunk.column("is_control"))
    key_code, tids = _distinct_keys(chunk, control, tl.decode_key)
    bad_key = np.array([isinstance(t, DecodeError) for t in tids] + [True])[key_code]
    failed: dict[int, DecodeError] = {
        int(i): tids[key_code[i]] if key_code[i] >= 0 else DecodeError("record without a key")
        for i in np.flatnonzero(~control & bad_key)
    }
    values = chunk.column("value")
    rows = ~control & ~bad_key
    present = rows & pc.is_valid(values).to_numpy(zero_copy_only=False)
    size = pc.fill_null(pc.binary_length(values), 0).to_numpy(zero_copy_only=False)
    version0 = _flags(pc.equal(pc.binary_slice(values, 0, 2), b"\x00\x00"))
    candidate = present & version0 & (size > V0_TIMESTAMPS.size + 2)
    heads = pc.dictionary_encode(pc.binary_slice(values, 0, -V0_TIMESTAMPS.size))
    head_code = np.where(
        candidate, pc.fill_null(heads.indices, -1).to_numpy(zero_copy_only=False), -1
    )
    decoded: list[dict] = [{"is_tombstone": True}]  # 0: a tombstone's fields
    source = np.zeros(n, np.int64)  # each row's entry of ``decoded``
    # a head decoded once, from its first record, if its decoding describes it whole
    template = np.full(len(heads.dictionary) + 1, -1, np.int64)
    codes, first = np.unique(head_code, return_index=True)
    for h, i in zip(codes.tolist(), first.tolist(), strict=True):
        if h < 0:
            continue
        value = values[i].as_py()
        try:
            row = tl.decode_value(value)
        except DecodeError:
            continue  # one by one below, each reporting its error
        last, start = V0_TIMESTAMPS.unpack_from(value, len(value) - V0_TIMESTAMPS.size)
        if row["last_update_timestamp"] == last and row["start_timestamp"] == (
            None if start == -1 else start
        ):
            template[h] = len(decoded)
            decoded.append({**row, "is_tombstone": False})
    stamped = template[head_code] >= 0
    source[stamped] = template[head_code[stamped]]
    for i in np.flatnonzero(present & ~stamped).tolist():  # anything else: one by one
        try:
            row = tl.decode_value(values[i].as_py())
        except DecodeError as e:
            failed[i] = e.with_traceback(None)
            continue
        source[i] = len(decoded)
        decoded.append({**row, "is_tombstone": False})
    position, offset = chunk.column("batch_position"), chunk.column("offset")
    errors = [
        _error(file, position[i].as_py(), offset[i].as_py(), e) for i, e in sorted(failed.items())
    ]
    keep = np.flatnonzero(rows & ~np.isin(np.arange(n), list(failed)))
    struct = pa.array(decoded, pa.struct(_decoded_fields("txn_log"))).take(pa.array(source[keep]))
    fields = dict(zip([f.name for f in struct.type], struct.flatten(), strict=True))
    # each kept record's id taken by its key's index (a kept record's key decoded)
    ids = pa.array([t if isinstance(t, str) else None for t in tids], pa.string())
    fields["transactional_id"] = ids.take(pa.array(key_code[keep]))
    if stamped[keep].any():
        last, start = _trailing_stamps(values, keep[stamped[keep]])
        at = stamped[keep]
        fields["last_update_timestamp"] = _with(
            fields["last_update_timestamp"], at, last, np.zeros(len(last), bool)
        )
        fields["start_timestamp"] = _with(fields["start_timestamp"], at, start, start == -1)
    struct = pa.StructArray.from_arrays(list(fields.values()), fields=list(struct.type))
    return {"txn_log": (keep, struct)}, errors


def _distinct_keys(chunk: pa.RecordBatch, control: np.ndarray, decode) -> tuple[np.ndarray, list]:
    """Each distinct key of the chunk's data records decoded once: each record's index among
    them (-1: no key, or a control record: a marker's key is no record's) and the decoded
    keys, a key that does not decode as its error (without its traceback, whose frame would
    keep the chunk's columns alive)."""
    keys = pc.dictionary_encode(
        pc.if_else(control, pa.scalar(None, pa.binary()), chunk.column("key")), null_encoding="mask"
    )
    decoded = []
    for k in keys.dictionary.to_pylist():
        try:
            decoded.append(decode(k))
        except DecodeError as e:
            decoded.append(e.with_traceback(None))
    return pc.fill_null(keys.indices, -1).to_numpy(zero_copy_only=False), decoded


def _flags(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return pc.fill_null(column, False).to_numpy(zero_copy_only=False)


def _trailing_stamps(values: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two int64s ending each of the values ``rows`` (a version 0 value's last update and
    transaction start timestamps), read over the column."""
    tail = pc.binary_slice(values.take(pa.array(rows)), -V0_TIMESTAMPS.size)
    tail = tail.cast(pa.binary(V0_TIMESTAMPS.size))
    both = np.frombuffer(tail.buffers()[1], ">i8")[2 * tail.offset : 2 * (tail.offset + len(tail))]
    return both[0::2].astype(np.int64), both[1::2].astype(np.int64)


def _with(column: pa.Array, at: np.ndarray, new: np.ndarray, none: np.ndarray) -> pa.Array:
    """``column`` (int64 or timestamp) with rows ``at`` set to ``new``, null where ``none``."""
    merged = pc.fill_null(column.cast(pa.int64()), 0).to_numpy(zero_copy_only=False).copy()
    nulls = pc.is_null(column).to_numpy(zero_copy_only=False).copy()
    merged[at], nulls[at] = new, none
    return pa.array(merged, pa.int64(), mask=nulls).cast(column.type)
