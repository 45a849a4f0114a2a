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
from decoders.errors import CORRUPT_BYTES, UNKNOWN_VERSION, DecodeError, ErrorRow
from decoders.schemas import from_rows

INTERNAL_TABLES = {
    CONSUMER_OFFSETS_TOPIC: ("offset_commits", "group_metadata", "group_records"),
    TRANSACTION_STATE_TOPIC: ("txn_log",),
}


def internal_tables_for(topic: str | None) -> tuple[str, ...]:
    return INTERNAL_TABLES.get(topic or "", ())


def decode_internal(
    records: pa.RecordBatch, file: str
) -> tuple[dict[str, pa.Table], list[ErrorRow]]:
    """Tables for one records batch of an internal topic (empty dict for other topics)."""
    if records.num_rows == 0:
        return {}, []
    topic = records.column("topic")[0].as_py()
    cols = records.select(
        [
            "broker",
            "partition",
            "offset",
            "timestamp",
            "key",
            "value",
            "producer_id",
            "producer_epoch",
            "is_transactional",
            "is_control",
            "batch_position",
        ]
    ).to_pydict()
    cols["timestamp"] = records.column("timestamp").cast(pa.int64()).to_pylist()
    cols["file"] = [file] * records.num_rows
    rows = [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]
    if topic == CONSUMER_OFFSETS_TOPIC:
        return _consumer_offsets(rows)
    if topic == TRANSACTION_STATE_TOPIC:
        return _transaction_state(rows)
    return {}, []


def _position(r: dict) -> dict:
    return {
        "broker": r["broker"],
        "log_partition": r["partition"],
        "log_offset": r["offset"],
        "record_timestamp": r["timestamp"],
        "batch_position": r["batch_position"],
        "file": r["file"],
    }


def _error(r: dict, e: Exception) -> ErrorRow:
    kind = (
        UNKNOWN_VERSION if isinstance(e, (co.UnknownVersion, tl.UnknownVersion)) else CORRUPT_BYTES
    )
    return ErrorRow(
        r["file"], r["batch_position"], 0, kind, f"record at offset {r['offset']}: {e}", r["offset"]
    )


def _consumer_offsets(rows: list[dict]) -> tuple[dict[str, pa.Table], list[ErrorRow]]:
    commits, groups, others, errors = [], [], [], []
    for r in rows:
        if r["is_control"]:
            continue
        try:
            if r["key"] is None:
                raise DecodeError("record without a key")
            key = co.decode_key(r["key"])
            ktype = key["key_type"]
            value = r["value"]
            if ktype in (co.OFFSET_COMMIT_LEGACY, co.OFFSET_COMMIT):
                row = {
                    **key,
                    "is_tombstone": value is None,
                    "producer_id": r["producer_id"],
                    "producer_epoch": r["producer_epoch"],
                    "is_transactional": r["is_transactional"],
                    **_position(r),
                }
                if value is not None:
                    row.update(co.decode_offset_commit(value))
                commits.append(row)
            elif ktype == co.GROUP_METADATA:
                row = {**key, "is_tombstone": value is None, **_position(r)}
                if value is not None:
                    row.update(co.decode_group_metadata(value))
                groups.append(row)
            else:
                row = {
                    **key,
                    "record": co.RECORD_NAMES[ktype],
                    "is_tombstone": value is None,
                    **_position(r),
                }
                if value is not None:
                    decoded = co.decode_group_value(ktype, value)
                    row["value_version"] = decoded["value_version"]
                    row["fields"] = co.fields_json(decoded)
                others.append(row)
        except DecodeError as e:
            errors.append(_error(r, e))
    tables = {
        "offset_commits": from_rows("offset_commits", commits),
        "group_metadata": from_rows("group_metadata", groups),
        "group_records": from_rows("group_records", others),
    }
    return tables, errors


def _transaction_state(rows: list[dict]) -> tuple[dict[str, pa.Table], list[ErrorRow]]:
    out, errors = [], []
    for r in rows:
        if r["is_control"]:
            continue
        try:
            if r["key"] is None:
                raise DecodeError("record without a key")
            row = {
                "transactional_id": tl.decode_key(r["key"]),
                "is_tombstone": r["value"] is None,
                **_position(r),
            }
            if r["value"] is not None:
                row.update(tl.decode_value(r["value"]))
            out.append(row)
        except DecodeError as e:
            errors.append(_error(r, e))
    return {"txn_log": from_rows("txn_log", out)}, errors
