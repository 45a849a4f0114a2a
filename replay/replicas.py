"""A partition replica's replay inside the task that decodes it.

The audit's scan (:mod:`jobs.scan`) reads every file of one partition directory in one task:
its logs in offset order, its `.snapshot` and `.txnindex` files. The batch headers the task
decodes are replayed right there (:func:`replay.grouped.partition_tables`, the same function
the grouped Spark plan and :mod:`replay.local` run), so that only the replay's results, a few
rows per partition and per transaction, go through Spark: shuffling 0.9 M batch headers of a
production-shaped gigabyte into a grouped function and converting them twice cost more than
decoding and replaying them (docs/architecture.md, step 3 of the audit).

Every replica is replayed; which replica the audit keeps is decided after the scan, from one
row per replica (its last offset and CRC-valid batches) that the task reports to the driver,
by the rule of :meth:`replay.plan.Audit._chosen_replicas` (:func:`chosen_replicas`). Pure Python over Arrow: no Spark here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from decoders.columns import outside_spark_range
from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from replay.grouped import (
    CLUSTER,
    COMMIT_COLUMNS,
    COORDINATOR_COLUMNS,
    COORDINATOR_SCHEMA,
    GROUP_SCHEMA,
    MARKER_COLUMNS,
    METADATA_COLUMNS,
    PARTITION_SCHEMA,
    Facts,
    cleaned_upto,
    coordinator_partition_tables,
    group_partition_tables,
    partition_tables,
)
from replay.partition import BATCH_COLUMNS

# the replica a replayed row comes from: the audit keeps the rows of the chosen one
REPLICA_BROKER = "replica_broker"
REPLICA_KEYS = (
    pa.field(CLUSTER, pa.string()),
    pa.field(REPLICA_BROKER, pa.string()),
    pa.field("replica_topic", pa.string()),
    pa.field("replica_partition", pa.int32()),
)
# what the scan's tasks replay, by scratch table: every partition replica's rows; the
# coordinator's, of a `__transaction_state` replica; the groups', of a `__consumer_offsets` one
REPLAYED_SCHEMA = pa.schema([*REPLICA_KEYS, *PARTITION_SCHEMA])
REPLAY_TABLES = {
    "replayed": REPLAYED_SCHEMA,
    "coordinated": pa.schema([*REPLICA_KEYS, *COORDINATOR_SCHEMA]),
    "grouped": pa.schema([*REPLICA_KEYS, *GROUP_SCHEMA]),
}
# the decoded tables of an internal topic's records the replay holds, and the columns it reads
HELD_RECORDS = {
    "txn_log": COORDINATOR_COLUMNS,
    "offset_commits": COMMIT_COLUMNS,
    "group_metadata": METADATA_COLUMNS,
}
# the decoded tables a replica's replay reads (the scan decodes them whether or not it writes
# them)
REPLAY_READS = ("batches", "segments", "producer_snapshots", "aborted_txns", *HELD_RECORDS)
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
    broadcast: frozenset[str] = frozenset()  # the groups declared broadcast-style


def millis(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A timestamp column as epoch milliseconds, null outside Spark's range (what
    ``unix_millis`` gives on the Spark side of the audit)."""
    ms = column.cast(pa.int64())
    return pc.if_else(outside_spark_range(ms), pa.scalar(None, pa.int64()), ms)


def _held(batch: pa.RecordBatch, column: str) -> pa.Array:
    """A batch column as the replay holds it until the replica ends: timestamps as Spark's
    milliseconds, the file path (one per file, repeated on every row) dictionary-encoded."""
    c = batch.column(column)
    if pa.types.is_timestamp(c.type):
        return millis(c)
    if column == "file":
        return pc.dictionary_encode(c)
    return c


def _holding(batch: pa.RecordBatch, columns) -> pa.RecordBatch:
    names = [c for c in columns if c in batch.schema.names]
    return pa.RecordBatch.from_arrays([_held(batch, c) for c in names], names=names)


class ReplicaReplay:
    """Collects one replica's decoded rows (batch headers, snapshot entries, `.txnindex`
    files and entries; of an internal topic, the records of :data:`HELD_RECORDS`), then
    replays it. Holds the batch columns the replay reads (~70 bytes a batch) and, of the
    internal topics, the record columns the coordinator's and the groups' replays read; never
    a user topic's records."""

    def __init__(self, spec: ReplaySpec, broker: str, topic: str, partition: int) -> None:
        self.spec, self.broker, self.topic, self.partition = spec, broker, topic, partition
        self.key = (broker, topic, partition)
        self.batches: list[pa.RecordBatch] = []
        self.records: dict[str, list[pa.RecordBatch]] = {t: [] for t in HELD_RECORDS}
        self.side: list[dict] = []

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        """A decoded batch of one of the scan's tables, from a file of this replica."""
        if not batch.num_rows:
            return
        if table == "batches":
            self.batches.append(_holding(batch, BATCH_COLUMNS))
        elif table in HELD_RECORDS:
            self.records[table].append(_holding(batch, HELD_RECORDS[table]))
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

    def _records(self, table: str) -> pa.Table:
        held, self.records[table] = self.records[table], []
        if not held:  # none: the columns' types as held
            from decoders.schemas import TABLES

            empty = pa.RecordBatch.from_pylist([], schema=TABLES[table])
            held = [_holding(empty, HELD_RECORDS[table])]
        return pa.Table.from_batches(held)

    def result(self) -> tuple[dict[str, pa.Table], dict] | None:
        """The replay's rows by scratch table (:data:`REPLAY_TABLES`; the coordinator's and the
        groups' for an internal topic's replica) and the replica's row (its cluster, topic,
        partition, broker, ``end_offset`` and ``crc_valid_batches``, what
        :func:`chosen_replicas` reads); None for a replica without batches (the audit has no
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
        out = {"replayed": self._keyed(t, "replayed")}
        if self.topic == TRANSACTION_STATE_TOPIC:
            # where this partition's whole history starts: its own replay's summary
            summary = t.filter(pc.equal(t.column("out"), "partition"))
            whole = {self.partition: summary.column("complete_from")[0].as_py()}
            coord = coordinator_partition_tables(self._records("txn_log"), whole)
            out["coordinated"] = self._keyed(coord, "coordinated")
        elif self.topic == CONSUMER_OFFSETS_TOPIC:
            control = pc.and_(pc.fill_null(bt.column("is_control"), False),
                              pc.greater(pc.fill_null(bt.column("record_count"), 0), 0))  # fmt: skip
            markers = bt.filter(control).select(list(MARKER_COLUMNS))
            groups = group_partition_tables(
                self.partition, self._records("offset_commits"),
                self._records("group_metadata"), markers, self.spec.broadcast,
            )  # fmt: skip
            out["grouped"] = self._keyed(groups, "grouped")
        replica = {CLUSTER: self.cluster, "topic": self.topic, "partition": self.partition,
                   "broker": self.broker, "end_offset": end, "crc_valid_batches": ok or 0}  # fmt: skip
        return out, replica

    def _keyed(self, t: pa.Table, table: str) -> pa.Table:
        """Rows of the replay with the replica they come from."""
        n = t.num_rows
        keys = {
            CLUSTER: pa.array([self.cluster] * n, pa.string()),
            REPLICA_BROKER: pa.array([self.broker] * n, pa.string()),
            "replica_topic": pa.array([self.topic] * n, pa.string()),
            "replica_partition": pa.array([self.partition] * n, pa.int32()),
        }
        rows = pa.table({**keys, **{c: t.column(c) for c in t.schema.names}})
        return rows.cast(REPLAY_TABLES[table])


def chosen_replicas(replicas: list[dict]) -> set[tuple[str, str, int, str]]:
    """(cluster, topic, partition, broker) of the replica the audit keeps per partition of a
    cluster, from one row per replica (:meth:`ReplicaReplay.result`): highest last offset, then
    most batches with a valid CRC, then the smallest broker name (the rule of
    :meth:`replay.plan.Audit._chosen_replicas`, docs/architecture.md: replay one, compare the
    others). One row per partition replica reaches the driver, never a batch."""
    best: dict[tuple, str] = {}
    order = sorted(replicas, key=lambda r: (-r["end_offset"], -r["crc_valid_batches"], r["broker"]))
    for r in order:
        best.setdefault((r[CLUSTER], r["topic"], r["partition"]), r["broker"])
    return {(*k, b) for k, b in best.items()}


def replicated_topics(replicas: list[dict]) -> list[str]:
    """Topics with a partition held by two brokers or more in one cluster: the only ones whose
    batches the replica-divergence check needs."""
    held: dict[tuple, int] = {}
    for r in replicas:
        k = (r[CLUSTER], r["topic"], r["partition"])
        held[k] = held.get(k, 0) + 1
    return sorted({k[1] for k, n in held.items() if n > 1})
