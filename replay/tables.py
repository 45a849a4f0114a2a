"""Arrow schemas of the audit's derived tables, each column documented (field metadata ``doc``).

Timestamps are int64 milliseconds inside the replay functions and become
``timestamp[ms, UTC]`` columns (:data:`TIMESTAMP_COLUMNS`) when the audit writes its tables.
"""

from __future__ import annotations

import pyarrow as pa


def _f(name: str, typ: pa.DataType, doc: str) -> pa.Field:
    return pa.field(name, typ, metadata={"doc": doc})


I32, I64, STR, BOOL = pa.int32(), pa.int64(), pa.string(), pa.bool_()

FINDINGS = pa.schema(
    [
        _f("kind", STR, "finding kind (docs/findings.md vocabulary)"),
        _f("severity", STR, "info, warning, error or critical"),
        _f("topic", STR, "topic of the partition the finding is about"),
        _f("partition", I32, "partition"),
        _f("producer_id", I64, "producer id involved"),
        _f("producer_epoch", I32, "producer epoch involved"),
        _f("transactional_id", STR, "transactional id, when the coordinator's log names it"),
        _f("group_id", STR, "consumer group involved"),
        _f("first_offset", I64, "first offset concerned"),
        _f("last_offset", I64, "last offset concerned"),
        _f("record_count", I64, "records concerned"),
        _f("message", STR, "one readable sentence"),
        _f("evidence", STR, "JSON: every fact needed to check the finding by hand"),
    ]
)

TRANSACTIONS = pa.schema(
    [
        _f("topic", STR, "topic"),
        _f("partition", I32, "partition"),
        _f("producer_id", I64, "producer id"),
        _f("producer_epoch", I32, "epoch of the transaction's data batches"),
        _f("marker_epoch", I32, "epoch of the marker (data epoch + 1 with TV2 or a fence)"),
        _f("first_offset", I64, "first offset of the transaction's data in this partition"),
        _f("last_offset", I64, "last offset of its data"),
        _f("marker_offset", I64, "offset of its COMMIT/ABORT marker; null when OPEN"),
        _f("outcome", STR, "COMMIT, ABORT or OPEN (no marker at the end of the log)"),
        _f("record_count", I64, "data records of the transaction in this partition"),
        _f("batch_count", I64, "data batches"),
        _f("first_timestamp", I64, "max timestamp of its first batch"),
        _f("marker_timestamp", I64, "timestamp of the marker"),
        _f("coordinator_epoch", I32, "coordinator epoch in the marker"),
        _f("pinned_records", I64, "OPEN only: later data records held behind the LSO"),
        _f("open_ms", I64, "OPEN only: from its first batch to the partition's last timestamp"),
        _f("in_cleaned_range", BOOL, "starts where the log cleaner has been (not judged)"),
        _f(
            "bound_timestamp",
            I64,
            "OPEN only: time of the first marker after its first batch (leader's clock), an "
            "upper bound of when that batch was appended",
        ),
    ]
)

PRODUCER_STATES = pa.schema(
    [
        _f("topic", STR, "topic"),
        _f("partition", I32, "partition"),
        _f("producer_id", I64, "producer id"),
        _f("producer_epoch", I32, "epoch at the end of the log"),
        _f("last_sequence", I32, "last sequence of its last retained batch, -1 none"),
        _f("last_offset", I64, "last offset of that batch, -1 none"),
        _f("offset_delta", I32, "last offset - first offset of that batch"),
        _f("timestamp", I64, "last timestamp of the producer"),
        _f("coordinator_epoch", I32, "coordinator epoch of its last marker, -1 none"),
        _f("current_txn_first_offset", I64, "first offset of its open transaction, -1 none"),
        _f("snapshot_offset", I64, "newest .snapshot of the partition, if any"),
        _f("snapshot_matches", BOOL, "the replayed state at that offset equals the snapshot"),
        _f("snapshot_diff", STR, "JSON of the fields that differ"),
    ]
)

LSO_CHANGES = pa.schema(
    [
        _f("topic", STR, "topic"),
        _f("partition", I32, "partition"),
        _f("timestamp", I64, "when the last stable offset changed (batch timestamp)"),
        _f("log_end_offset", I64, "log end offset at that moment"),
        _f("lso", I64, "last stable offset from then on (10.6)"),
    ]
)

PARTITIONS = pa.schema(
    [
        _f("topic", STR, "topic"),
        _f("partition", I32, "partition"),
        _f("broker", STR, "the replica replayed (the most complete one)"),
        _f("log_start_offset", I64, "first offset in the dump"),
        _f("log_end_offset", I64, "last offset + 1"),
        _f("lso", I64, "last stable offset at the end of the log"),
        _f("cleaned_upto", I64, "offsets below show log-cleaner leftovers"),
        _f("data_records", I64, "data records replayed"),
        _f("last_timestamp", I64, "largest batch timestamp"),
        _f(
            "complete_from",
            I64,
            "offsets from here on are all in the dump (0: the whole history is; above: "
            "retention, cleaning or missing offsets took what is below)",
        ),
        _f(
            "copy_end_timestamp",
            I64,
            "the latest moment this copy is known to reach: its last marker (leader's clock) "
            "or its last batch",
        ),
    ]
)

COORDINATOR_TXNS = pa.schema(
    [
        _f("transactional_id", STR, "transactional id"),
        _f("producer_id", I64, "producer id"),
        _f("data_epoch", I32, "epoch of the Ongoing records (the data's epoch)"),
        _f("marker_epoch", I32, "epoch of the Prepare record (the markers' epoch)"),
        _f("outcome", STR, "COMMIT, ABORT, or null while Ongoing"),
        _f("state_at_end", STR, "Ongoing, Prepare or Complete at the end of the log"),
        _f(
            "partitions",
            pa.list_(pa.struct([pa.field("topic", STR), pa.field("partition", I32)])),
            "partitions added to the transaction",
        ),
        _f("start_timestamp", I64, "TransactionStartTimestampMs"),
        _f("prepare_timestamp", I64, "time of the Prepare record"),
        _f("complete_timestamp", I64, "time of the Complete record"),
        _f("timeout_ms", I32, "transaction timeout"),
        _f("transaction_version", I32, "ClientTransactionVersion tag (0 when absent)"),
        _f("fenced", BOOL, "aborted by the coordinator with an epoch bump (timeout or fencing)"),
        _f(
            "maybe",
            BOOL,
            "its partitions are unknown: only records after cleaning survived (no Prepare)",
        ),
        _f("log_partition", I32, "__transaction_state partition holding it"),
        _f("first_log_offset", I64, "offset of its first surviving record there"),
        _f(
            "history_from_start",
            BOOL,
            "the producer's whole coordinator history is in the dump (not compacted away)",
        ),
        _f("latest_epoch", I32, "highest epoch the coordinator recorded for the producer id"),
    ]
)

GENERATIONS = pa.schema(
    [
        _f("group_id", STR, "consumer group"),
        _f("generation", I32, "generation id"),
        _f("state", STR, "Stable (members), Empty (none) or Dead (tombstone)"),
        _f("protocol_type", STR, "protocol type, 'consumer' for consumers"),
        _f("protocol", STR, "assignor chosen"),
        _f("leader", STR, "leader member id"),
        _f("member_count", I32, "members"),
        _f("members", pa.list_(STR), "member ids"),
        _f("assignment", STR, "JSON: topic-partition -> member ids"),
        _f("broadcast", BOOL, "some partition is assigned to several members"),
        _f("timestamp", I64, "time of the group record"),
        _f("log_partition", I32, "__consumer_offsets partition"),
        _f("log_offset", I64, "offset of the group record"),
    ]
)

TIMELINE = pa.schema(
    [
        _f("group_id", STR, "consumer group"),
        _f("topic", STR, "committed topic"),
        _f("partition", I32, "committed partition"),
        _f("committed_offset", I64, "effective committed offset; null after a tombstone"),
        _f("previous_offset", I64, "effective offset before"),
        _f("is_tombstone", BOOL, "the offset was deleted"),
        _f(
            "effective_timestamp",
            I64,
            "when it took effect (the COMMIT marker's for TxnOffsetCommit)",
        ),
        _f("commit_timestamp", I64, "commit timestamp in the record"),
        _f("effective_log_offset", I64, "offset in __consumer_offsets where it took effect"),
        _f("commit_log_offset", I64, "offset of the commit record"),
        _f("log_partition", I32, "__consumer_offsets partition"),
        _f("generation", I32, "group generation at the time"),
        _f("group_state", STR, "Stable, Empty or Dead at the time"),
        _f("broadcast", BOOL, "the partition was assigned to several members at the time"),
        _f("committers", I32, "members the partition was assigned to"),
        _f("is_transactional", BOOL, "a TxnOffsetCommit"),
        _f("producer_id", I64, "its producer, for transactional commits"),
    ]
)

CHECK_COUNTS = pa.schema(
    [
        _f("topic", STR, "partition the count is about, if any"),
        _f("partition", I32, "partition"),
        _f("check", STR, "what was counted: checked, or could not be checked and why"),
        _f("count", I64, "how many"),
    ]
)

DERIVED = {
    "findings": FINDINGS,
    "transactions": TRANSACTIONS,
    "producer_states": PRODUCER_STATES,
    "lso_changes": LSO_CHANGES,
    "partitions": PARTITIONS,
    "coordinator_transactions": COORDINATOR_TXNS,
    "group_generations": GENERATIONS,
    "offset_timeline": TIMELINE,
}

TIMESTAMP_COLUMNS = {
    "first_timestamp", "marker_timestamp", "timestamp", "last_timestamp", "start_timestamp",
    "prepare_timestamp", "complete_timestamp", "effective_timestamp", "commit_timestamp",
}  # fmt: skip


def union(*schemas: pa.Schema) -> pa.Schema:
    """One schema holding several tables' columns (first type wins), plus ``out`` naming the
    table of each row: a grouped function returns one table, the audit splits it."""
    fields: dict[str, pa.Field] = {"out": pa.field("out", STR)}
    for s in schemas:
        for f in s:
            fields.setdefault(f.name, f)
    return pa.schema(list(fields.values()))


def rows_table(schema: pa.Schema, out: str, rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([{**r, "out": out} for r in rows], schema=schema)
