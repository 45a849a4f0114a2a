"""Arrow schemas of every table the decoders produce, each column documented.

The documentation lives in each field's metadata (key ``doc``), so it travels with the data
into Parquet and Spark, and ``logreplay dump --schema`` (and :func:`describe`) can print it.
Timestamps are ``timestamp[ms, UTC]``; Kafka's NO_TIMESTAMP (-1) becomes null.
"""

from __future__ import annotations

import functools

import pyarrow as pa

TS = pa.timestamp("ms", tz="UTC")


def _f(name: str, typ: pa.DataType, doc: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable=nullable, metadata={"doc": doc})


def _location(log_level: bool = True) -> list[pa.Field]:
    fields = [
        _f(
            "broker",
            pa.string(),
            "broker id from meta.properties, else the log directory's path in the dump",
        ),
        _f("topic", pa.string(), "topic, from the partition directory name"),
        _f("partition", pa.int32(), "partition number, from the partition directory name"),
    ]
    if log_level:
        fields.append(_f("file", pa.string(), "path of the file inside the dump"))
    return fields


TOPIC_PARTITIONS = pa.list_(
    pa.struct([pa.field("topic", pa.string()), pa.field("partitions", pa.list_(pa.int32()))])
)
HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

SEGMENTS = pa.schema(
    _location()
    + [
        _f(
            "kind",
            pa.string(),
            "log, index, timeindex, txnindex, snapshot, kraft_snapshot, leader_epoch_checkpoint, partition_metadata, meta_properties, offset_checkpoint, other",
        ),
        _f(
            "base_offset",
            pa.int64(),
            "offset in the 20-digit file name (snapshot: the snapshot offset)",
        ),
        _f("size", pa.int64(), "file size in bytes"),
        _f("bytes_valid", pa.int64(), "bytes that decoded cleanly"),
        _f("bytes_padding", pa.int64(), "zero bytes at the end (preallocation or a crash)"),
        _f(
            "bytes_corrupt",
            pa.int64(),
            "bytes that did not decode: CRC mismatch, garbage, truncated tail",
        ),
        _f("entries", pa.int64(), "batches (log), entries (indexes, snapshots, checkpoints)"),
        _f("records", pa.int64(), "records in the log file (from batch headers)"),
        _f("first_offset", pa.int64(), "first offset in the file, null when empty"),
        _f("last_offset", pa.int64(), "last offset in the file, null when empty"),
        _f("error_count", pa.int64(), "number of error rows for this file"),
        _f("error", pa.string(), "the first error's reason, null when clean"),
    ]
)

BATCHES = pa.schema(
    _location()
    + [
        _f("position", pa.int64(), "byte position of the batch (entry) in the file"),
        _f("size", pa.int32(), "bytes of the whole entry (12 + batchLength)"),
        _f("base_offset", pa.int64(), "baseOffset (v2); for v0/v1 the first inner offset"),
        _f("last_offset", pa.int64(), "baseOffset + lastOffsetDelta (v2); entry offset (v0/v1)"),
        _f("magic", pa.int8(), "message format: 0, 1 or 2"),
        _f("crc", pa.uint32(), "stored CRC (CRC-32C for v2, CRC-32 for v0/v1)"),
        _f("crc_valid", pa.bool_(), "stored CRC equals the computed one; null when not checked"),
        _f("attributes", pa.int16(), "raw attributes"),
        _f(
            "compression",
            pa.string(),
            "none, gzip, snappy, lz4, zstd, or unknown (codes 5-7; attributes hold the code)",
        ),
        _f("timestamp_type", pa.string(), "CreateTime, LogAppendTime or NoTimestampType (v0)"),
        _f("is_transactional", pa.bool_(), "attribute bit 4"),
        _f(
            "is_control",
            pa.bool_(),
            "attribute bit 5: a control batch (transaction marker, KRaft control)",
        ),
        _f(
            "has_delete_horizon",
            pa.bool_(),
            "attribute bit 6 (KIP-534): baseTimestamp holds the delete horizon",
        ),
        _f("partition_leader_epoch", pa.int32(), "partitionLeaderEpoch, -1 when unknown or v0/v1"),
        _f("base_timestamp", TS, "baseTimestamp; null when -1 or when it holds a delete horizon"),
        _f("max_timestamp", TS, "maxTimestamp (v2) or the message timestamp (v1)"),
        _f("delete_horizon", TS, "delete horizon when has_delete_horizon, else null"),
        _f("producer_id", pa.int64(), "producerId, -1 = NO_PRODUCER_ID"),
        _f("producer_epoch", pa.int16(), "producerEpoch, -1 = NO_PRODUCER_EPOCH"),
        _f("base_sequence", pa.int32(), "baseSequence, -1 = NO_SEQUENCE"),
        _f(
            "last_sequence", pa.int32(), "baseSequence + lastOffsetDelta with wrap-around at 2^31-1"
        ),
        _f("last_offset_delta", pa.int32(), "lastOffsetDelta (v2)"),
        _f(
            "record_count",
            pa.int32(),
            "recordsCount from the header (v2) or inner messages (v0/v1)",
        ),
        _f(
            "control_type",
            pa.string(),
            "ABORT, COMMIT or a KRaft control type; null for data batches and cleaned markers",
        ),
        _f("coordinator_epoch", pa.int32(), "transaction marker's coordinator epoch"),
        _f("error", pa.string(), "why this batch is not fully valid, null when it is"),
    ]
)

RECORDS = pa.schema(
    _location(log_level=False)
    + [
        _f("offset", pa.int64(), "record offset"),
        _f("timestamp", TS, "record timestamp (LogAppendTime batches: the batch's maxTimestamp)"),
        _f("timestamp_type", pa.string(), "CreateTime, LogAppendTime or NoTimestampType"),
        _f("key", pa.binary(), "record key, null when absent"),
        _f("value", pa.binary(), "record value, null for a tombstone"),
        _f("headers", HEADERS, "record headers in order; a header value may be null"),
        _f("producer_id", pa.int64(), "the batch's producerId"),
        _f("producer_epoch", pa.int16(), "the batch's producerEpoch"),
        _f("sequence", pa.int32(), "baseSequence + offsetDelta with wrap, -1 without a producer"),
        _f("is_transactional", pa.bool_(), "the batch is transactional"),
        _f("is_control", pa.bool_(), "a control record (never returned to consumers)"),
        _f("crc_valid", pa.bool_(), "the batch's CRC is valid"),
        _f("batch_position", pa.int64(), "byte position of the batch in its file"),
        _f(
            "segment",
            pa.int64(),
            "base offset of the segment (its 20-digit file name); with broker, topic and partition it names the file",
        ),
    ]
)

_LOG_POSITION = [
    _f("broker", pa.string(), "broker holding this internal-topic replica"),
    _f("log_partition", pa.int32(), "partition of the internal topic holding the record"),
    _f("log_offset", pa.int64(), "offset of the record in the internal topic"),
    _f("record_timestamp", TS, "timestamp of the internal-topic record"),
    _f("batch_position", pa.int64(), "byte position of the batch in the file"),
    _f("file", pa.string(), "path of the segment inside the dump"),
]

OFFSET_COMMITS = pa.schema(
    [
        _f("group_id", pa.string(), "consumer group"),
        _f("topic", pa.string(), "committed topic"),
        _f("partition", pa.int32(), "committed partition"),
        _f(
            "committed_offset",
            pa.int64(),
            "next offset the group will consume; null for a tombstone",
        ),
        _f("leader_epoch", pa.int32(), "leader epoch of the committed offset (v3+), -1 unknown"),
        _f("metadata", pa.string(), "client metadata string"),
        _f("commit_timestamp", TS, "coordinator time of the commit"),
        _f("expire_timestamp", TS, "explicit expiry (value v1 only)"),
        _f("is_tombstone", pa.bool_(), "null value: the offset was deleted or expired"),
        _f("value_version", pa.int16(), "OffsetCommitValue version 0-4; null for tombstones"),
        _f("key_type", pa.int16(), "record type 0 (legacy) or 1"),
        _f("producer_id", pa.int64(), "transactional offset commit: the producer; else -1"),
        _f(
            "producer_epoch", pa.int16(), "transactional offset commit: the producer epoch; else -1"
        ),
        _f(
            "is_transactional",
            pa.bool_(),
            "written by TxnOffsetCommit; takes effect at the COMMIT marker",
        ),
    ]
    + _LOG_POSITION
)

MEMBER = pa.struct(
    [
        pa.field("member_id", pa.string()),
        pa.field("instance_id", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("client_host", pa.string()),
        pa.field("rebalance_timeout_ms", pa.int32()),
        pa.field("session_timeout_ms", pa.int32()),
        pa.field("subscription_version", pa.int16()),
        pa.field("subscribed_topics", pa.list_(pa.string())),
        pa.field("owned_partitions", TOPIC_PARTITIONS),
        pa.field("subscription_generation", pa.int32()),
        pa.field("rack_id", pa.string()),
        pa.field("subscription_user_data", pa.binary()),
        pa.field("assignment_version", pa.int16()),
        pa.field("assigned_partitions", TOPIC_PARTITIONS),
        pa.field("assignment_user_data", pa.binary()),
        pa.field("subscription", pa.binary()),
        pa.field("assignment", pa.binary()),
        pa.field("protocol_error", pa.string()),
    ]
)

GROUP_METADATA = pa.schema(
    [
        _f("group_id", pa.string(), "group"),
        _f("generation", pa.int32(), "generation id"),
        _f("protocol_type", pa.string(), "consumer, connect, ... ('' if none)"),
        _f(
            "protocol",
            pa.string(),
            "selected assignor (range, roundrobin, sticky, cooperative-sticky, ...)",
        ),
        _f("leader", pa.string(), "leader member id"),
        _f("state_timestamp", TS, "currentStateTimestamp (v2+)"),
        _f(
            "members",
            pa.list_(MEMBER),
            "members: ids, client, timeouts, raw protocol bytes and, for protocol_type consumer, the "
            "decoded subscription (topics, owned partitions, generation, rack) and assignment",
        ),
        _f("is_tombstone", pa.bool_(), "null value: the group was deleted"),
        _f("value_version", pa.int16(), "GroupMetadataValue version 0-4"),
    ]
    + _LOG_POSITION
)

GROUP_RECORDS = pa.schema(
    [
        _f("group_id", pa.string(), "group"),
        _f("key_type", pa.int16(), "record type (3-24: KIP-848, KIP-932, streams groups)"),
        _f("record", pa.string(), "record name, e.g. ConsumerGroupMemberMetadata"),
        _f("member_id", pa.string(), "member for member-level records"),
        _f("is_tombstone", pa.bool_(), "null value: the record was deleted"),
        _f("value_version", pa.int16(), "value version"),
        _f("fields", pa.string(), "decoded value fields as JSON (topic ids as UUID strings)"),
    ]
    + _LOG_POSITION
)

TXN_LOG = pa.schema(
    [
        _f("transactional_id", pa.string(), "transactional.id"),
        _f("producer_id", pa.int64(), "producer id"),
        _f("producer_epoch", pa.int16(), "producer epoch"),
        _f("timeout_ms", pa.int32(), "transaction timeout"),
        _f(
            "state",
            pa.string(),
            "Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead, PrepareEpochFence",
        ),
        _f("partitions", TOPIC_PARTITIONS, "partitions in the transaction; null in Empty"),
        _f("last_update_timestamp", TS, "TransactionLastUpdateTimestampMs"),
        _f("start_timestamp", TS, "TransactionStartTimestampMs, null when none started"),
        _f("previous_producer_id", pa.int64(), "tagged field 0 (v1), -1 default"),
        _f("next_producer_id", pa.int64(), "tagged field 1 (v1), -1 default"),
        _f("client_transaction_version", pa.int16(), "tagged field 2 (v1), 0 default"),
        _f("is_tombstone", pa.bool_(), "null value: the transactional id expired"),
        _f("value_version", pa.int16(), "TransactionLogValue version 0 or 1"),
    ]
    + _LOG_POSITION
)

INDEX_ENTRIES = pa.schema(
    _location()
    + [
        _f("kind", pa.string(), "index (offset index) or timeindex"),
        _f("entry", pa.int32(), "entry number"),
        _f("position", pa.int64(), "byte position of the entry in the index file"),
        _f("relative_offset", pa.int32(), "offset relative to the segment's base offset"),
        _f("offset", pa.int64(), "absolute offset"),
        _f("log_position", pa.int64(), "offset index: position in the .log file"),
        _f("timestamp", TS, "time index: the timestamp"),
    ]
)

PRODUCER_SNAPSHOTS = pa.schema(
    _location()
    + [
        _f("snapshot_offset", pa.int64(), "log end offset when the snapshot was taken (file name)"),
        _f("producer_id", pa.int64(), "ProducerId"),
        _f("producer_epoch", pa.int16(), "Epoch"),
        _f("last_sequence", pa.int32(), "LastSequence, -1 if none"),
        _f("last_offset", pa.int64(), "LastOffset, -1 if only markers"),
        _f("offset_delta", pa.int32(), "OffsetDelta of the last batch"),
        _f("timestamp", TS, "last timestamp"),
        _f("coordinator_epoch", pa.int32(), "coordinator epoch of the last marker"),
        _f(
            "current_txn_first_offset",
            pa.int64(),
            "first offset of the open transaction, -1 if none",
        ),
    ]
)

ABORTED_TXNS = pa.schema(
    _location()
    + [
        _f("entry", pa.int32(), "entry number in the .txnindex file"),
        _f("version", pa.int16(), "entry version (0)"),
        _f("producer_id", pa.int64(), "producer of the aborted transaction"),
        _f("first_offset", pa.int64(), "first offset of the transaction in this partition"),
        _f("last_offset", pa.int64(), "offset of the ABORT marker"),
        _f("last_stable_offset", pa.int64(), "LSO when the abort completed"),
    ]
)

ERRORS = pa.schema(
    _location()
    + [
        _f("position", pa.int64(), "byte position of the problem in the file"),
        _f("length", pa.int64(), "bytes affected"),
        _f(
            "kind",
            pa.string(),
            "crc_mismatch, truncated_batch, corrupt_bytes, unknown_version, index_inconsistent, "
            "decode_failed",
        ),
        _f("reason", pa.string(), "what exactly is wrong"),
        _f("offset", pa.int64(), "log offset concerned, when known"),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "segments": SEGMENTS,
    "batches": BATCHES,
    "records": RECORDS,
    "offset_commits": OFFSET_COMMITS,
    "group_metadata": GROUP_METADATA,
    "group_records": GROUP_RECORDS,
    "txn_log": TXN_LOG,
    "index_entries": INDEX_ENTRIES,
    "producer_snapshots": PRODUCER_SNAPSHOTS,
    "aborted_txns": ABORTED_TXNS,
    "errors": ERRORS,
}


def describe(table: str) -> list[tuple[str, str, str]]:
    """(column, type, doc) for every column of a table."""
    return [
        (f.name, str(f.type), (f.metadata or {}).get(b"doc", b"").decode()) for f in TABLES[table]
    ]


def empty(table: str) -> pa.Table:
    return TABLES[table].empty_table()


def from_rows(table: str, rows: list[dict]) -> pa.Table:
    """Build a table from row dicts (cold paths only: indexes, snapshots, internal records,
    a file's one segments row)."""
    return table_of_rows(TABLES[table], rows)


def table_of_rows(schema: pa.Schema, rows: list[dict]) -> pa.Table:
    """Row dicts as a table of ``schema`` (a key a row lacks: null; a key the schema lacks:
    ignored), converted as one struct array: a row or a few of a wide table cost a third of a
    conversion column by column, per file of a dump and per partition of a replay."""
    struct = pa.array(rows, type=_struct_of(schema))
    return pa.Table.from_arrays(struct.flatten(), schema=schema)


@functools.lru_cache(maxsize=64)
def _struct_of(schema: pa.Schema) -> pa.StructType:
    """The struct type of a schema's fields (made once per schema: ~50 fields take a while)."""
    return pa.struct(list(schema))
