"""Decode the records of `__consumer_offsets` and `__transaction_state` into their tables.

Input is a records batch of one of those topics (already decoded by the segment walker);
output is the offset_commits, group_metadata, group_records or txn_log rows plus error rows
for records that do not decode. Control records (transaction markers) are skipped here; they
are in the batches and records tables.
"""

from __future__ import annotations

import pyarrow as pa

from decoders import consumer_offsets as co
from decoders import transaction_log as tl
from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from decoders.errors import CORRUPT_BYTES, UNKNOWN_VERSION, DecodeError, ErrorRow, UnknownVersion
from decoders.schemas import TABLES

INTERNAL_TABLES = {
    CONSUMER_OFFSETS_TOPIC: ("offset_commits", "group_metadata", "group_records"),
    TRANSACTION_STATE_TOPIC: ("txn_log",),
}


def internal_tables_for(topic: str | None) -> tuple[str, ...]:
    return INTERNAL_TABLES.get(topic or "", ())


# Records decoded together: keys and values become Python bytes for the per-record decoders
# of this many records at a time, so a batch of a million tombstones holds a slice, not all.
SLICE_ROWS = 8192

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
    records: pa.RecordBatch, file: str
) -> tuple[dict[str, pa.Table], list[ErrorRow]]:
    """Tables for one records batch of an internal topic (empty dict for other topics).

    Location columns (broker, offsets, the record timestamp as int64 milliseconds...) are taken
    from the records' Arrow columns; only the keys and values pass through Python, a slice at a
    time.
    """
    if records.num_rows == 0:
        return {}, []
    topic = records.column("topic")[0].as_py()
    if topic == CONSUMER_OFFSETS_TOPIC:
        decode, names = _consumer_offsets, ("offset_commits", "group_metadata", "group_records")
    elif topic == TRANSACTION_STATE_TOPIC:
        decode, names = _transaction_state, ("txn_log",)
    else:
        return {}, []
    parts: dict[str, list[pa.Table]] = {t: [] for t in names}
    errors: list[ErrorRow] = []
    for start in range(0, records.num_rows, SLICE_ROWS):
        chunk = records.slice(start, SLICE_ROWS)
        rows, errs = decode(chunk, file)
        errors.extend(errs)
        for t in names:
            parts[t].append(_table(t, chunk, file, *rows[t]))
    return {t: pa.concat_tables(parts[t]) for t in names}, errors


def _table(name: str, chunk: pa.RecordBatch, file: str, keep: list[int], rows: list[dict]):
    """Decoded fields from ``rows``; location columns taken from ``chunk`` at rows ``keep``."""
    schema = TABLES[name]
    idx = pa.array(keep, pa.int64())
    decoded = [
        f
        for f in schema
        if f.name not in _POSITION_FROM
        and f.name != "file"
        and not (name == "offset_commits" and f.name in _RECORD_FIELDS)
    ]
    # one conversion of the row dicts into a struct array, in Arrow's own loop
    struct = pa.array(rows, pa.struct(decoded)) if rows else None
    cols = []
    for f in schema:
        if f.name in _POSITION_FROM:
            col = chunk.column(_POSITION_FROM[f.name]).take(idx)
            cols.append(col.cast(f.type) if col.type != f.type else col)
        elif name == "offset_commits" and f.name in _RECORD_FIELDS:
            cols.append(chunk.column(_RECORD_FIELDS[f.name]).take(idx).cast(f.type))
        elif f.name == "file":
            cols.append(pa.array([file] * len(keep), pa.string()))
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
    out = {t: ([], []) for t in ("offset_commits", "group_metadata", "group_records")}
    errors = []
    keys: dict[bytes, dict] = {}  # compacted topics repeat keys: decode each once per slice
    for i, key_bytes, value, is_control, offset, position in _inputs(chunk):
        if is_control:
            continue
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
        out[table][0].append(i)
        out[table][1].append(row)
    return out, errors


def _transaction_state(chunk: pa.RecordBatch, file: str):
    keep, rows, errors = [], [], []
    keys: dict[bytes, str] = {}  # a transactional id's records repeat its key: decoded once
    values: dict[bytes, dict] = {}  # ... and its states (tl.decode_values)
    for i, key, value, is_control, offset, position in _inputs(chunk):
        if is_control:
            continue
        try:
            if key is None:
                raise DecodeError("record without a key")
            tid = keys.get(key)
            if tid is None:
                tid = keys[key] = tl.decode_key(key)
            row = {"transactional_id": tid, "is_tombstone": value is None}
            if value is not None:
                row.update(tl.decode_values(value, values))
        except DecodeError as e:
            errors.append(_error(file, position, offset, e))
            continue
        keep.append(i)
        rows.append(row)
    return {"txn_log": (keep, rows)}, errors
