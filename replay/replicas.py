"""A partition replica's replay inside the task that decodes it.

The audit's scan (:mod:`jobs.scan`) reads every file of one partition directory in one task:
its logs in offset order, its `.snapshot` and `.txnindex` files. The batch headers the task
decodes are replayed right there (:func:`replay.grouped.partition_tables`, the same function
the grouped Spark plan and :mod:`replay.local` run), so that only the replay's results, a few
rows per partition and per transaction, go through Spark: shuffling 0.9 M batch headers of a
production-shaped gigabyte into a grouped function and converting them twice cost more than
decoding and replaying them (docs/architecture.md, step 3 of the audit).

Every replica is replayed; which replica the audit keeps is decided after the scan, from one
row per replica (:data:`REPLICA_SCHEMA`: its last offset and CRC-valid batches), by the rule
of :meth:`replay.plan.Audit._chosen_replicas`. Pure Python over Arrow: no Spark here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from decoders.columns import outside_spark_range
from replay.grouped import CLUSTER, PARTITION_SCHEMA, Facts, cleaned_upto, partition_tables
from replay.partition import BATCH_COLUMNS

# the replica a replayed row comes from: the audit keeps the rows of the chosen one
REPLICA_BROKER = "replica_broker"
REPLAYED_SCHEMA = pa.schema(
    [
        pa.field(CLUSTER, pa.string()),
        pa.field(REPLICA_BROKER, pa.string()),
        pa.field("replica_topic", pa.string()),
        pa.field("replica_partition", pa.int32()),
        *PARTITION_SCHEMA,
    ]
)
REPLICA_SCHEMA = pa.schema(
    [
        pa.field(CLUSTER, pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("broker", pa.string()),
        pa.field("end_offset", pa.int64()),  # the highest last offset of any of its batches
        pa.field("crc_valid_batches", pa.int64()),
    ]
)
# the side rows a partition's replay compares with (producer snapshot entries, `.txnindex`
# files and entries), shaped alike here and by replay.plan.Audit._partition_side: column ->
# Arrow type
SIDE_COLUMNS = {
    "snapshot_offset": pa.int64(), "producer_id": pa.int64(), "producer_epoch": pa.int32(),
    "last_sequence": pa.int32(), "last_offset": pa.int64(), "offset_delta": pa.int32(),
    "coordinator_epoch": pa.int32(), "current_txn_first_offset": pa.int64(),
    "timestamp": pa.int64(), "file": pa.string(), "first_offset": pa.int64(),
    "last_stable_offset": pa.int64(),
}  # fmt: skip


@dataclass(frozen=True)
class ReplaySpec:
    """What a task needs to replay the replicas it reads (pickled into the tasks): the
    configuration's facts, the cleaner checkpoints read on the driver, the topics declared
    compacted, and the cluster of every broker directory."""

    facts: Facts
    cleaned: dict[str, int] = field(default_factory=dict)
    compacted: frozenset[str] = frozenset()
    clusters: dict[str, str] = field(default_factory=dict)


def millis(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A timestamp column as epoch milliseconds, null outside Spark's range (what
    ``unix_millis`` gives on the Spark side of the audit)."""
    ms = column.cast(pa.int64())
    return pc.if_else(outside_spark_range(ms), pa.scalar(None, pa.int64()), ms)


def _held(batch: pa.RecordBatch, column: str) -> pa.Array:
    """A batch column as the replay holds it until the replica ends: timestamps as Spark's
    milliseconds, the file path (one per file, repeated on every row) dictionary-encoded."""
    if column == "max_timestamp":
        return millis(batch.column(column))
    if column == "file":
        return pc.dictionary_encode(batch.column(column))
    return batch.column(column)


class ReplicaReplay:
    """Collects one replica's decoded rows (batch headers, snapshot entries, `.txnindex`
    files and entries), then replays it. Holds the batch columns the replay reads (~70 bytes
    a batch), never the records."""

    def __init__(self, spec: ReplaySpec, broker: str, topic: str, partition: int) -> None:
        self.spec, self.broker, self.topic, self.partition = spec, broker, topic, partition
        self.key = (broker, topic, partition)
        self.batches: list[pa.RecordBatch] = []
        self.side: list[dict] = []

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        """A decoded batch of one of the scan's tables, from a file of this replica."""
        if not batch.num_rows:
            return
        if table == "batches":
            names = [c for c in BATCH_COLUMNS if c in batch.schema.names]
            self.batches.append(
                pa.RecordBatch.from_arrays([_held(batch, c) for c in names], names=names)
            )
        elif table == "producer_snapshots":
            self._side("snapshot", batch)
        elif table == "aborted_txns":
            self._side("aborted", batch)
        elif table == "segments":
            kinds = batch.column("kind").to_pylist()
            files = batch.column("file").to_pylist()
            self.side += [
                {"_row": "txnindex_file", **dict.fromkeys(SIDE_COLUMNS), "file": f}
                for k, f in zip(kinds, files, strict=True)
                if k == "txnindex"
            ]

    def _side(self, row: str, batch: pa.RecordBatch) -> None:
        have = set(batch.schema.names)
        cols = {}
        for c, t in SIDE_COLUMNS.items():
            if c not in have:
                cols[c] = pa.nulls(batch.num_rows, t)
            elif c == "timestamp":
                cols[c] = millis(batch.column(c))
            else:
                cols[c] = batch.column(c).cast(t)
        rows = pa.table(cols).to_pylist()
        self.side += [{"_row": row, **r} for r in rows]

    @property
    def cluster(self) -> str:
        return self.spec.clusters.get(self.broker, "")

    def result(self) -> tuple[pa.Table, pa.Table] | None:
        """(the replay's rows, :data:`REPLAYED_SCHEMA`; the replica's row,
        :data:`REPLICA_SCHEMA`); None for a replica without batches (the audit has no
        partition to replay there)."""
        if not self.batches:
            return None
        bt = pa.Table.from_batches(self.batches)
        self.batches = []
        end = pc.max(bt.column("last_offset")).as_py()
        ok = pc.sum(pc.cast(pc.fill_null(bt.column("crc_valid"), False), pa.int64())).as_py()
        upto = cleaned_upto(
            self.spec.cleaned, set(self.spec.compacted), self.broker, self.topic, self.partition,
            None if end is None else end + 1,
        )  # fmt: skip
        bt = bt.append_column("broker", pa.array([self.broker] * bt.num_rows, pa.string()))
        t = partition_tables(self.topic, self.partition, bt, self.side, self.spec.facts, upto)
        n = t.num_rows
        keys = {
            CLUSTER: pa.array([self.cluster] * n, pa.string()),
            REPLICA_BROKER: pa.array([self.broker] * n, pa.string()),
            "replica_topic": pa.array([self.topic] * n, pa.string()),
            "replica_partition": pa.array([self.partition] * n, pa.int32()),
        }
        rows = pa.table({**keys, **{c: t.column(c) for c in t.schema.names}})
        replica = pa.Table.from_pylist(
            [{CLUSTER: self.cluster, "topic": self.topic, "partition": self.partition,
              "broker": self.broker, "end_offset": end, "crc_valid_batches": ok or 0}],
            schema=REPLICA_SCHEMA,
        )  # fmt: skip
        return rows.cast(REPLAYED_SCHEMA), replica
