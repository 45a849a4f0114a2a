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

import contextlib
import os
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
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
    InOrder,
    cleaned_upto,
    coordinator_partition_tables,
    group_partition_tables,
    partition_tables,
)
from replay.partition import BATCH_COLUMNS, cleaner_leftovers_end

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
# batch columns a replica's replay holds in memory; more go to a local spill file (_Spill)
HOLD_BYTES = 64 << 20
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
    replays it. Holds the batch columns the replay reads (~70-80 bytes a batch), at most
    :data:`HOLD_BYTES` of them in memory: beyond, they go to a local spill file (Arrow IPC,
    in Spark's local directories) that the replay reads back a piece at a time, so a task's
    memory does not grow with its partition (a 2 GB partition of small batches, 1.6 M of
    them, held 580 MB before). Of the internal topics it holds the record columns the
    coordinator's and the groups' replays read; never a user topic's records."""

    def __init__(self, spec: ReplaySpec, broker: str, topic: str, partition: int) -> None:
        self.spec, self.broker, self.topic, self.partition = spec, broker, topic, partition
        self.key = (broker, topic, partition)
        self.records: dict[str, list[pa.RecordBatch]] = {t: [] for t in HELD_RECORDS}
        self.side: list[dict] = []
        self.held: list[pa.RecordBatch] = []  # the latest batch columns, in the order read
        self.held_bytes = 0
        self.spill: _Spill | None = None  # the earlier ones, once past HOLD_BYTES
        self.batch_rows = 0
        # what the replay needs before its first piece, and the replica's row, as they come
        self.in_order = True  # every base offset at or after the one before it
        self.first_offset: int | None = None
        self.last_base: int | None = None
        self.end: int | None = None  # the largest last offset
        self.crc_valid = 0
        self.leftovers_end = 0
        self.markers: list[pa.Table] = []  # of a `__consumer_offsets` replica

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        """A decoded batch of one of the scan's tables, from a file of this replica."""
        if not batch.num_rows:
            return
        if table == "batches":
            self._batches(_holding(batch, BATCH_COLUMNS))
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

    def _batches(self, b: pa.RecordBatch) -> None:
        base = b.column("base_offset")
        if base.null_count:
            self.in_order = False
        else:
            offsets = base.to_numpy()
            if (self.last_base is not None and offsets[0] < self.last_base) or (
                np.diff(offsets) < 0
            ).any():
                self.in_order = False
            if self.first_offset is None:
                self.first_offset = int(offsets[0])
            self.last_base = int(offsets[-1])
        end = pc.max(b.column("last_offset")).as_py()
        if end is not None:
            self.end = end if self.end is None else max(self.end, end)
        self.crc_valid += (
            pc.sum(pc.cast(pc.fill_null(b.column("crc_valid"), False), pa.int64())).as_py() or 0
        )
        self.leftovers_end = max(self.leftovers_end, cleaner_leftovers_end(b))
        if self.topic == CONSUMER_OFFSETS_TOPIC:
            control = pc.and_(pc.fill_null(b.column("is_control"), False),
                              pc.greater(pc.fill_null(b.column("record_count"), 0), 0))  # fmt: skip
            self.markers.append(
                pa.Table.from_batches([b.filter(control)]).select(list(MARKER_COLUMNS))
            )
        self.batch_rows += b.num_rows
        self.held.append(b)
        self.held_bytes += b.nbytes
        if self.held_bytes > HOLD_BYTES:
            if self.spill is None:
                self.spill = _Spill()
            for h in self.held:
                self.spill.write(h)
            self.held, self.held_bytes = [], 0

    def _pieces(self) -> Iterator[pa.Table]:
        """The held batch columns in the order read: the spilled ones, then the rest."""
        if self.spill is not None:
            for b in self.spill.read():
                yield pa.Table.from_batches([b])
        for b in self.held:
            yield pa.Table.from_batches([b])

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
        if not self.batch_rows:
            return None
        end = self.end
        upto = cleaned_upto(
            self.spec.cleaned, set(self.spec.compacted), self.broker, self.topic, self.partition,
            None if end is None else end + 1,
        )  # fmt: skip
        try:
            if self.in_order:  # as the scan reads a log: a piece at a time
                source = InOrder(self._pieces, self.broker, self.first_offset, self.leftovers_end)
            else:  # out of order (a damaged log): all of it, sorted by the replay
                pieces = [_plain_files(p) for p in self._pieces()]
                bt = pa.concat_tables(pieces)
                source = bt.append_column(
                    "broker", pa.array([self.broker] * bt.num_rows, pa.string())
                )
            t = partition_tables(
                self.topic, self.partition, source, self.side, self.spec.facts, upto
            )
        finally:
            self.held, self.held_bytes = [], 0
            if self.spill is not None:
                self.spill.close()
        out = {"replayed": self._keyed(t, "replayed")}
        if self.topic == TRANSACTION_STATE_TOPIC:
            # where this partition's whole history starts: its own replay's summary
            summary = t.filter(pc.equal(t.column("out"), "partition"))
            whole = {self.partition: summary.column("complete_from")[0].as_py()}
            coord = coordinator_partition_tables(self._records("txn_log"), whole)
            out["coordinated"] = self._keyed(coord, "coordinated")
        elif self.topic == CONSUMER_OFFSETS_TOPIC:
            markers = pa.concat_tables(self.markers)
            groups = group_partition_tables(
                self.partition, self._records("offset_commits"),
                self._records("group_metadata"), markers, self.spec.broadcast,
            )  # fmt: skip
            out["grouped"] = self._keyed(groups, "grouped")
        replica = {CLUSTER: self.cluster, "topic": self.topic, "partition": self.partition,
                   "broker": self.broker, "end_offset": end,
                   "crc_valid_batches": self.crc_valid}  # fmt: skip
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


class _Spill:
    """A replica's batch columns past :data:`HOLD_BYTES`, in an Arrow IPC stream file in the
    local directories Spark gives its Python workers (``SPARK_LOCAL_DIRS``, as PySpark's own
    spills use; else the temporary directory); removed once read, or when the replay is
    dropped."""

    def __init__(self) -> None:
        local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or tempfile.gettempdir()
        fd, self.path = tempfile.mkstemp(prefix="logreplay-replica-", suffix=".arrows", dir=local)
        self.sink = os.fdopen(fd, "wb")
        self.writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._remove = weakref.finalize(self, _remove_file, self.path, self.sink)

    def write(self, batch: pa.RecordBatch) -> None:
        if self.writer is None:
            self.writer = pa.ipc.new_stream(self.sink, batch.schema)
        self.writer.write_batch(batch)

    def read(self) -> Iterator[pa.RecordBatch]:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.sink.close()
        # read into memory, not mapped: a piece may outlive the reading (never the file)
        with pa.OSFile(self.path, "rb") as source:
            yield from pa.ipc.open_stream(source)

    def close(self) -> None:
        self._remove()


def _remove_file(path: str, sink) -> None:
    sink.close()
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _plain_files(t: pa.Table) -> pa.Table:
    """The file column as plain strings: pieces held apart have dictionaries of their own."""
    i = t.schema.get_field_index("file")
    if i < 0 or not pa.types.is_dictionary(t.schema.field(i).type):
        return t
    return t.set_column(i, "file", t.column(i).cast(pa.string()))


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
