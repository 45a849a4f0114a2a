"""A partition replica's replay inside the task that decodes it.

The audit's scan (:mod:`jobs.scan`) reads every file of one partition directory in one task:
its logs in offset order, its `.snapshot` and `.txnindex` files. The batch headers the task
decodes are replayed right there (:func:`replay.grouped.replay_partition`, and for an internal
topic the coordinator's or the groups' replay), so that only the replay's results, a few rows
per partition and per transaction, go through Spark: shuffling 0.9 M batch headers of a
production-shaped gigabyte into a grouped function and converting them twice cost more than
decoding and replaying them (docs/architecture.md, step 2 of the audit). The one-process runner
(:mod:`replay.local`) and a user's session (:mod:`replay.session_scan`) run the same unit.

Every replica is replayed; which replica the audit keeps is decided after the scan, from one
row per replica (:class:`ReplicaRow`: its last offset and CRC-valid batches) that the task
reports to the driver, by :func:`chosen_replicas`. Pure Python over Arrow: no Spark here.
"""

from __future__ import annotations

import json
import os
import tempfile
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders.batch_tables import HeaderBatch
from decoders.columns import (
    as_type,
    const,
    epoch_millis,
    in_spark_range,
    outside_spark_range,
    spark_millis,
)
from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from decoders.schemas import BATCHES, PRODUCER_SNAPSHOTS, table_of_rows
from decoders.snapshot import SnapshotEntries
from replay.carried import ReplicaIds, judged_prints, state_text
from replay.grouped import (
    COMMIT_COLUMNS,
    COORDINATOR_COLUMNS,
    COORDINATOR_KINDS,
    COORDINATOR_SCHEMA,
    GROUP_KINDS,
    GROUP_SCHEMA,
    LOG_ORDER,
    MARKER_COLUMNS,
    METADATA_COLUMNS,
    PARTITION_KINDS,
    PARTITION_SCHEMA,
    TXN_LOG_ORDER,
    Facts,
    InOrder,
    cleaned_upto,
    commit_events,
    marker_events,
    merged_in_order,
    metadata_events,
    replay_coordinator,
    replay_groups,
    replay_partition,
    txn_latest_epochs,
)
from replay.partition import BATCH_COLUMNS, cleaner_leftovers_end, leftovers_end
from replay.points import truncation_finding
from replay.previous import history_start
from replay.sides import LISTED, TOUCHED, Pairs
from replay.spill import local_dir, remove_file
from replay.tables import CLUSTER, in_union, rows_table

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
# each one's rows as its replay gives them (before the replica's keys)
REPLAY_UNIONS = {"replayed": PARTITION_SCHEMA, "coordinated": COORDINATOR_SCHEMA,
                 "grouped": GROUP_SCHEMA}  # fmt: skip
# the kinds of rows of each (their ``out``) and the columns each kind's rows fill
REPLAY_KINDS = {"replayed": PARTITION_KINDS, "coordinated": COORDINATOR_KINDS,
                "grouped": GROUP_KINDS}  # fmt: skip
# the column of a replay table that names each row's kind (a key of REPLAY_KINDS[table])
KIND_COLUMN = "out"


def kind_columns(table: str, kind: str) -> list[str]:
    """The columns the rows of ``kind`` of the replay table ``table`` fill (:data:`REPLAY_KINDS`):
    the replica's keys and the kind's own, in the table's order; ``out`` is the kind."""
    own = {*(f.name for f in REPLICA_KEYS), *REPLAY_KINDS[table][kind].names}
    return [f.name for f in REPLAY_TABLES[table] if f.name in own]


def kinds_apart(rows):
    """A replay table's rows (a table or a batch) as ``[(kind, its rows)]``, each kind (its
    ``out``) apart, kinds in sorted order and each kind's rows in their order: the job's scan
    writes each as files of their own (jobs.scan), a session's as streams of their own
    (replay.session_scan), so that a reader of one kind skips the others."""
    out = rows.column(KIND_COLUMN)
    kinds = sorted(pc.unique(out).to_pylist())
    if len(kinds) == 1:
        return [(kinds[0], rows)]
    if isinstance(rows, pa.Table):  # a filter costs per chunk: a task's rows are many small ones
        rows = rows.combine_chunks()
        out = rows.column(KIND_COLUMN)
    return [(kind, rows.filter(pc.equal(out, kind))) for kind in kinds]


# batch columns a replica's replay holds in memory; more go to a local spill file (SpillFile)
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
    # how the layout was read (replay.dumpinfo.LayoutFacts): the driver's, for the summary,
    # the coverage and the stale replicas' findings
    layout: object = field(default=None, compare=False, repr=False)
    # where a previous run's replays ended, by replica (cluster, topic, partition, broker):
    # its replay_states rows with their states, one per replica (`--since`;
    # replay.points.resume_from)
    points: dict = field(default_factory=dict, compare=False, repr=False)
    # the previous run's output, whose rows of the bytes before each point a replica that
    # goes on from its point hands on again (replay.previous); None: every replica replayed
    # from its log start, the points only reported
    previous: object = field(default=None, compare=False, repr=False)
    # each replica's high watermark at its broker's last replication-offset-checkpoint, as
    # ``"broker|topic|partition" -> offset`` (offsets below it were committed)
    high_watermarks: dict[str, int] = field(default_factory=dict)

    def cluster_of(self, broker: str) -> str:
        """The cluster of a broker directory ("" for none)."""
        return self.clusters.get(broker, "")


@dataclass(frozen=True)
class ReplicaRow:
    """A replica a scan task replayed, as the driver is told of it: how complete it is (what
    :func:`chosen_replicas` reads)."""

    cluster: str
    topic: str
    partition: int
    broker: str
    end_offset: int | None
    crc_valid_batches: int
    cleaned_upto: int = 0  # below: the log cleaner's leftovers in this replica
    log_bytes: int = 0  # the bytes of its segment files (the coverage's unit of size)
    # where a previous run's replay of it ended, found again in this copy (replay.points.
    # resumed_at): whether its state holds, the bytes past the point, how the log changed
    since: dict | None = None
    # what its copy covers, as its ``partitions`` row says (the cross-log's sides read them:
    # replay.crosslog_runs): where its history is whole from, and the latest moment it reaches
    complete_from: int | None = None
    copy_end_timestamp: int | None = None

    @property
    def partition_key(self) -> tuple[str, str, int]:
        return (self.cluster, self.topic, self.partition)

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.cluster, self.topic, self.partition, self.broker)


HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"


def replay_spec(paths: list[str], config, listed: tuple | None = None) -> ReplaySpec:
    """What the scan's tasks need to replay the replicas they read, from the configuration
    (a :class:`replay.settings.AuditConfig`) and the small files read on the driver;
    ``listed``: the dump's listing (:func:`decoders.layout.dump_layout`) the caller made for
    its scan, else listed here (a dump of 10,000 partitions is 70,000 files, listed in ~1.2 s
    and its partitions' metadata read in ~1.3 s: once a run)."""
    from decoders.layout import dump_layout
    from replay.dumpinfo import cleaner_checkpoints, layout_facts

    listed = listed if listed is not None else dump_layout(paths)
    layout = layout_facts(paths, config.cluster, config.clusters, listed)
    return ReplaySpec(
        facts=config.facts(),
        cleaned=cleaner_checkpoints(paths, listed[0]),
        high_watermarks=cleaner_checkpoints(paths, listed[0], HIGH_WATERMARK_CHECKPOINT),
        compacted=frozenset(config.compacted_topics()),
        clusters=layout.clusters,
        broadcast=frozenset(config.declared_broadcast()),
        layout=layout,
    )


def millis(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A timestamp column as epoch milliseconds, null outside Spark's range (what
    ``unix_millis`` gives on the Spark side of the audit)."""
    ms = epoch_millis(column)
    if in_spark_range(ms):
        return ms
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
    have = set(batch.schema.names)  # (each .names is a fresh list)
    names = [c for c in columns if c in have]
    return pa.RecordBatch.from_arrays([_held(batch, c) for c in names], names=names)


class HeldHeaders:
    """A few batches a replica holds as they were decoded (:class:`HeaderBatch`), until its
    replay reads them: as rows (:meth:`rows`, for :meth:`PartitionReplay._few`), or as the
    table :func:`_holding` makes of their batches rows (:meth:`table`; a spill, a replay out
    of order), made only then."""

    __slots__ = ("headers",)

    def __init__(self, headers: HeaderBatch) -> None:
        self.headers = headers

    @property
    def num_rows(self) -> int:
        return self.headers.num_rows

    def get_total_buffer_size(self) -> int:
        """What it holds (the headers' numpy columns, a few objects each), as measured."""
        return HELD_HEADER_BYTES * self.headers.num_rows

    def batch(self) -> pa.RecordBatch:
        return _holding(self.headers.table(), BATCH_COLUMNS)

    def table(self) -> pa.Table:
        return pa.Table.from_batches([self.batch()])

    def rows(self) -> list[dict]:
        """The batches as the replay reads rows: ``_replay_columns(self.table()).to_pylist()``,
        without the table (:data:`BATCH_COLUMNS`; the max timestamp as Spark's milliseconds,
        null outside its range)."""
        values = self.headers.values(HELD_HEADER_COLUMNS)
        values[_MAX_TIMESTAMP] = spark_millis(values[_MAX_TIMESTAMP])
        return [dict(zip(HELD_HEADER_COLUMNS, v, strict=True)) for v in zip(*values, strict=True)]


# a snapshot entry's side columns
SNAPSHOT_SIDE_COLUMNS = tuple(c for c in SIDE_COLUMNS if c in PRODUCER_SNAPSHOTS.names)
_SNAPSHOT_TIMESTAMP = SNAPSHOT_SIDE_COLUMNS.index("timestamp")
# the columns of a batches row a replica holds (those of BATCH_COLUMNS the table has); the
# bytes a batch held as decoded takes (~2,250 measured for windows of 8 batches, against ~260
# for its held columns); a replica's windows held so at most (the rest as their columns)
HELD_HEADER_COLUMNS = tuple(c for c in BATCH_COLUMNS if c in BATCHES.names)
_MAX_TIMESTAMP = HELD_HEADER_COLUMNS.index("max_timestamp")
HELD_HEADER_BYTES = 2_304
HELD_HEADERS = 16


# where a replay's rows go as dicts: (scratch table, the replica's keys, rows), :func:`keyed_rows`
RowsSink = Callable[[str, tuple, list[dict]], None]


class ReplicaReplay:
    """Collects one replica's decoded rows (batch headers, snapshot entries, `.txnindex`
    files and entries; of an internal topic, the records of :data:`HELD_RECORDS` and the
    markers of `__consumer_offsets`), then replays it (:meth:`replay`). Each kind of row is a
    :class:`_Stream` in the order read, holding only the columns its replay reads (~70-80
    bytes a batch header); past :data:`HOLD_BYTES` held in all, every stream goes to a local
    spill file (Arrow IPC, in Spark's local directories) that the replay reads back a piece at
    a time, so a task's memory does not grow with its partition: a 2 GB partition of small
    batches, 1.6 M of them, held 580 MB before; the `__consumer_offsets` partition of an
    exactly-once app's group (a commit with every transaction) and the `__transaction_state`
    partition of its transactional id grow by ~300 bytes an event, 0.5 M events in the 17.67 GB
    benchmark dump. Never a user topic's records."""

    def __init__(self, spec: ReplaySpec, broker: str, topic: str, partition: int) -> None:
        self.spec, self.broker, self.topic, self.partition = spec, broker, topic, partition
        self.key = (broker, topic, partition)
        self.logs: list = []  # its segment files (DumpFile), for the point of a previous run
        self.topic_id: str | None = None  # its partition.metadata's: a re-created topic's differs
        self.side: list[dict] = []
        self.batches = _Stream()  # the batch columns the partition's replay reads
        self.records = {t: _Stream() for t in HELD_RECORDS}  # an internal topic's
        self.markers = _Stream()  # a `__consumer_offsets` replica's COMMIT/ABORT batches
        self.held_bytes = 0  # in memory, over every stream
        self.held_headers = 0  # windows held as decoded (HeldHeaders)
        self.batch_rows = 0
        # what the replay needs before its first piece, and the replica's row, as they come
        self.in_order = True  # every base offset at or after the one before it
        self.records_in_order = True  # every record's offset after the one before it
        self.last_record: dict[str, int] = {}
        self.first_offset: int | None = None
        self.last_base: int | None = None
        self.end: int | None = None  # the largest last offset
        self.crc_valid = 0
        self.log_bytes = 0
        self.leftovers_end = 0
        # of a `__transaction_state` replica: (transactional id, producer id) -> highest epoch
        self.latest_epoch: dict[tuple[str, int], int] = {}
        # going on from a previous run's point (replay.previous.Resuming; the scan task reads
        # only the bytes past it), and what the task found of that point (points.resumed_at)
        self.resuming = None
        self.since: dict | None = None

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        """A decoded batch of one of the scan's tables, from a file of this replica."""
        if not batch.num_rows:
            return
        if table == "batches":
            if isinstance(batch, HeaderBatch):
                self._header_batch(batch)
            else:
                self._batches(_holding(batch, BATCH_COLUMNS))
        elif table in HELD_RECORDS:
            self._records(table, _holding(batch, HELD_RECORDS[table]))
        elif table == "producer_snapshots":
            self._side("snapshot", batch)
        elif table == "aborted_txns":
            self._side("aborted", batch)
        elif table == "segments":  # a scan task hands each file's row to segment() directly
            for row in batch.to_pylist():
                self.segment(row)

    def segment(self, row: dict) -> None:
        """One file of this replica as the decoders accounted for it (its ``segments`` row)."""
        if row["kind"] == "log":
            self.log_bytes += row["size"]
        elif row["kind"] == "txnindex":
            self.side.append({"_row": "txnindex_file", **dict.fromkeys(SIDE_COLUMNS),
                              "file": row["file"]})  # fmt: skip

    def _batches(self, b: pa.RecordBatch) -> None:
        base, last = b.column("base_offset"), b.column("last_offset")
        crc = b.column("crc_valid")  # null: not known valid
        self._saw_batches(
            None if base.null_count else base.to_numpy(),
            pc.max(last).as_py() if last.null_count else int(last.to_numpy().max()),
            crc.true_count if pa.types.is_boolean(crc.type) else 0,
            cleaner_leftovers_end(b),
            b.num_rows,
        )  # fmt: skip
        self._hold(self.batches, b)
        if self.topic == CONSUMER_OFFSETS_TOPIC:
            control = pc.and_(pc.fill_null(b.column("is_control"), False),
                              pc.greater(pc.fill_null(b.column("record_count"), 0), 0))  # fmt: skip
            markers = b.filter(control).select(list(MARKER_COLUMNS))
            if markers.num_rows:
                self._hold(self.markers, markers)

    def _header_batch(self, hb: HeaderBatch) -> None:
        """A few batches as decoded (:class:`HeaderBatch`), held as they came: what
        :meth:`_batches` learns of a table, from their numbers; their rows made when the
        replay reads them (:class:`HeldHeaders`). A `__consumer_offsets` replica's go as a
        table (its markers are held as columns), and so do a replica's past its first
        :data:`HELD_HEADERS` windows (a quiet partition has one; held as decoded, a window
        of a few batches takes ~8 times the memory of its held columns)."""
        if self.topic == CONSUMER_OFFSETS_TOPIC or self.held_headers >= HELD_HEADERS:
            self._batches(_holding(hb.table(), BATCH_COLUMNS))
            return
        self.held_headers += 1
        x, h = hb.numbers, hb.h
        self._saw_batches(
            x["base_offset"],
            int(x["last_offset"].max()),
            0 if h.crc_valid is None else int(h.crc_valid.sum()),
            leftovers_end(x["magic"], x["base_offset"], x["last_offset"], x["record_count"],
                          x["is_control"], x["has_delete_horizon"]),
            hb.num_rows,
        )  # fmt: skip
        self._hold(self.batches, HeldHeaders(hb))

    def _saw_batches(self, offsets: np.ndarray | None, end: int | None, crc_valid: int,
                     leftovers: int, n: int) -> None:  # fmt: skip
        """What the replay needs before its first piece, of ``n`` batches read: their base
        offsets in file order (None: one is missing), their largest last offset, how many
        are known CRC-valid, the end of the cleaner's leftovers among them."""
        if offsets is None:
            self.in_order = False
        else:
            if (self.last_base is not None and offsets[0] < self.last_base) or (
                np.diff(offsets) < 0
            ).any():
                self.in_order = False
            if self.first_offset is None:
                self.first_offset = int(offsets[0])
            self.last_base = int(offsets[-1])
        if end is not None:
            self.end = end if self.end is None else max(self.end, end)
        self.crc_valid += crc_valid
        self.leftovers_end = max(self.leftovers_end, leftovers)
        self.batch_rows += n

    def _records(self, table: str, b: pa.RecordBatch) -> None:
        offsets = b.column("log_offset")
        if offsets.null_count:
            self.records_in_order = False
        else:
            values = offsets.to_numpy()
            last = self.last_record.get(table)
            if (last is not None and values[0] <= last) or (np.diff(values) <= 0).any():
                self.records_in_order = False
            self.last_record[table] = int(values[-1])
        if table == "txn_log":
            for k, epoch in txn_latest_epochs(b).items():
                self.latest_epoch[k] = max(self.latest_epoch.get(k, -1), epoch)
        self._hold(self.records[table], b)

    def _hold(self, stream: _Stream, b: pa.RecordBatch) -> None:
        self.held_bytes += stream.add(b)
        if self.held_bytes > HOLD_BYTES:
            for s in self._streams():
                s.spill_out()
            self.held_bytes = 0

    def _streams(self) -> list[_Stream]:
        return [self.batches, self.markers, *self.records.values()]

    def _side(self, row: str, batch: pa.RecordBatch) -> None:
        """A snapshot's entries or a `.txnindex`'s as rows of :data:`SIDE_COLUMNS` (a few per
        partition: converted as Python values, not column by column)."""
        empty = dict.fromkeys(SIDE_COLUMNS)
        if isinstance(batch, SnapshotEntries):  # a snapshot's entries as decoded
            values = batch.values(SNAPSHOT_SIDE_COLUMNS)
            values[_SNAPSHOT_TIMESTAMP] = spark_millis(values[_SNAPSHOT_TIMESTAMP])
            self.side += [{"_row": row, **empty, **dict(zip(SNAPSHOT_SIDE_COLUMNS, v, strict=True))}
                          for v in zip(*values, strict=True)]  # fmt: skip
            return
        names = set(batch.schema.names)
        have = [c for c in SIDE_COLUMNS if c in names]
        if "timestamp" in have:
            batch = batch.set_column(batch.schema.get_field_index("timestamp"), "timestamp",
                                     millis(batch.column("timestamp")))  # fmt: skip
        self.side += [{"_row": row, **empty, **r} for r in batch.select(have).to_pylist()]

    @property
    def cluster(self) -> str:
        return self.spec.cluster_of(self.broker)

    @property
    def partition_key(self) -> tuple[str, str, int]:
        return (self.cluster, self.topic, self.partition)

    @property
    def replica_keys(self) -> tuple[str, str, str, int]:
        """The values of :data:`REPLICA_KEYS` its rows carry."""
        return (self.cluster, self.broker, self.topic, self.partition)

    @property
    def row_key(self) -> tuple[str, str, int, str]:
        """(cluster, topic, partition, broker), as :attr:`ReplaySpec.points` names it."""
        return (self.cluster, self.topic, self.partition, self.broker)

    def replay(
        self,
        write: Callable[[str, pa.Table], None],
        write_now: Callable[[str, pa.Table], None] | None = None,
        write_rows: RowsSink | None = None,
    ) -> ReplicaRow | None:
        """Replay the replica: its rows go to ``write(scratch table, rows)`` a block at a time
        (:data:`REPLAY_TABLES`; the coordinator's and the groups' for an internal topic's
        replica; ``write_now``: where the rows handed on from a previous run go, written as
        given rather than gathered, else ``write``; ``write_rows``: where a partition's
        replay hands its last rows as dicts, with the replica's keys, for the caller to convert
        with other replicas' (:func:`keyed_rows`), else converted here). Returns the
        replica's row (its cluster, topic, partition, broker, ``end_offset`` and
        ``crc_valid_batches``, what
        :func:`chosen_replicas` reads); None for a replica without batches (the audit has no
        partition to replay there)."""
        try:
            if not self.batch_rows and self.resuming is None:
                return None
            return self._replay(write, write_now or write, write_rows)
        finally:
            for s in self._streams():
                s.close()
            self.held_bytes = 0

    def _replay(self, write: Callable[[str, pa.Table], None],
                write_now: Callable[[str, pa.Table], None],
                write_rows: RowsSink | None) -> ReplicaRow:  # fmt: skip
        pairs = Pairs(self.topic, self.partition)  # every row seen as it goes out

        def seen(sink: Callable[[str, pa.Table], None]):
            """A table's rows to ``sink`` with the replica's keys, seen by ``pairs`` first."""

            def to_table(table: str) -> Callable[[pa.Table], None]:
                def given(rows: pa.Table) -> None:
                    pairs.saw(table, rows)
                    sink(table, self._keyed(rows, table))

                return given

            return to_table

        to, now = seen(write), seen(write_now)
        keys = self.replica_keys
        held = None
        if write_rows is not None:

            def held(rows: list[dict]) -> None:
                pairs.saw_rows(rows)
                write_rows("replayed", keys, rows)

        resuming = self.resuming
        latest = dict(self.latest_epoch)
        end = self.end
        if resuming is not None and resuming.log_end > 0:
            end = max(-1 if end is None else end, resuming.log_end - 1)
        upto = cleaned_upto(
            self.spec.cleaned, set(self.spec.compacted), self.broker, self.topic, self.partition,
            None if end is None else end + 1,
        )  # fmt: skip
        state = None if resuming is None else self._resume(resuming, now, latest, upto)
        source = self._source()
        # an internal topic's replay_states row waits for its records' state; the others go
        # out with the partition's other rows (one table: a quiet partition's cost is per table)
        carried: list[dict] = []
        internal = self.topic in (TRANSACTION_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC)
        hw = self.spec.high_watermarks.get(f"{self.broker}|{self.topic}|{self.partition}")
        crc_valid = self.crc_valid
        if resuming is not None:
            crc_valid += resuming.state.get("crc_valid_batches", 0)
        ids = ReplicaIds(self.topic_id, hw, self.cluster,
                         resuming.findings if resuming is not None else (), crc_valid)  # fmt: skip
        summary = replay_partition(self.topic, self.partition, source, self.side,
                                   self.spec.facts, upto, to("replayed"),
                                   carried.append if internal else None, ids, state,
                                   held)  # fmt: skip
        judged: list[dict] = []  # the records' replay's findings before its end
        records_state = self._replay_records(summary, to, judged)
        # the partition's state and, of an internal topic, its records' (replay.carried)
        for row in carried:
            row["records_state"] = state_text(records_state)
            row["findings"] = judged_prints(json.loads(row["findings"]), judged, self.cluster)
            to("replayed")(rows_table(PARTITION_SCHEMA, "carried", [row]))
        point = self.spec.points.get(self.row_key)
        since = self.since  # found by the scan task (ScanTask._from_point)
        lost = None if since is None else truncation_finding(point, since, self.topic,
                                                             self.partition)  # fmt: skip
        if lost is not None:
            to("replayed")(rows_table(PARTITION_SCHEMA, "finding", [lost]))
        self._give_pairs(pairs, to, held)
        # a replica read past a point: the bytes of its segments, all of them, as any replica's
        log_bytes = self.log_bytes if resuming is None else sum(f.size for f in self.logs)
        return ReplicaRow(self.cluster, self.topic, self.partition, self.broker, end,
                          crc_valid, int(summary.get("cleaned_upto") or 0),
                          log_bytes, since, summary.get("complete_from"),
                          summary.get("copy_end_timestamp"))  # fmt: skip

    @staticmethod
    def _give_pairs(pairs: Pairs, to: Callable[[str], Callable[[pa.Table], None]],
                    held: Callable[[list[dict]], None] | None) -> None:  # fmt: skip
        """The replica's pairs of replay.sides, once its replay has given every other row: a
        partition's with its last rows where it hands them as dicts (converted with other
        replicas'), a coordinator's as its own rows."""
        touched = pairs.touched_rows()
        if touched and held is not None:
            held([{**r, "out": TOUCHED} for r in touched])
        elif touched:
            to("replayed")(rows_table(PARTITION_SCHEMA, TOUCHED, touched))
        listed = pairs.listed_rows()
        if listed:
            to("coordinated")(rows_table(COORDINATOR_SCHEMA, LISTED, listed))

    def _resume(self, resuming, now: Callable[[str], Callable[[pa.Table], None]],
                latest: dict, upto: int) -> dict:  # fmt: skip
        """The replay's state where the previous run ended (``latest``, the coordinator's
        epochs, updated with the carried ones); what the previous run judged is handed on."""
        if resuming.records_state is not None and self.topic == TRANSACTION_STATE_TOPIC:
            for t, p, e in resuming.records_state["latest_epoch"]:
                latest[(t, p)] = max(latest.get((t, p), -1), e)
        state, trim = resuming.state, None
        start = self._log_start_now(state)
        if start is not None:  # retention moved the log start: its history starts there
            state = {**state, "log_start": start}
            trim = history_start(self.spec.previous, self.cluster, self.topic,
                                 self.partition, resuming, start)  # fmt: skip
        # the cleaner went past the previous run's end: records after the point may be
        # gone, and what was judged whole is now, as in a full audit, in the cleaned range
        self._hand_on_carried(now, latest, cleaned_past=upto > resuming.log_end,
                              trim_below=trim)  # fmt: skip
        return state

    def _source(self):
        """The replica's batches for its replay: in order, as the scan reads a log, a piece at
        a time; out of order (a damaged log), all of them, sorted by the replay."""
        if self.in_order:  # (a few batches held as decoded given as such: PartitionReplay._few)
            return InOrder(partial(self.batches.pieces, True), self.broker, self.first_offset,
                           self.leftovers_end)  # fmt: skip
        bt = pa.concat_tables([_plain_files(p) for p in self.batches.pieces()])
        return bt.append_column("broker", pa.array([self.broker] * bt.num_rows, pa.string()))

    def _replay_records(self, summary: dict, to: Callable[[str], Callable[[pa.Table], None]],
                        judged: list[dict]) -> dict | None:  # fmt: skip
        """An internal topic's records replayed (the coordinator's, the groups'): their state
        at the end, ``judged`` given the findings before it; None for a user topic."""
        resuming = self.resuming
        records_resumed = resuming.records_state if resuming is not None else None
        if self.topic == TRANSACTION_STATE_TOPIC:
            # where this partition's whole history starts: its own replay's summary
            return replay_coordinator(
                self._in_log_order(self.records["txn_log"], TXN_LOG_ORDER),
                {self.partition: summary["complete_from"]},
                self.latest_epoch,
                to("coordinated"),
                records_resumed,
                judged,
            )
        if self.topic == CONSUMER_OFFSETS_TOPIC:
            return replay_groups(self._group_events(), self.spec.broadcast,
                                 to("grouped"), records_resumed, judged)  # fmt: skip
        return None

    def _log_start_now(self, state: dict) -> int | None:
        """Where this copy of a resumed user partition's log starts, where retention moved
        it past the carried log start (the lowest segment's base offset: retention deletes
        whole segments from the oldest, ``UnifiedLog.deleteOldSegments``, and the cleaner
        keeps a group's first base offset); None where it did not. Not of an internal topic
        (compacted only: its log start does not move, and its records' replays carry where
        their history is whole by themselves)."""
        if self.topic in (TRANSACTION_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC):
            return None
        bases = [f.info.base_offset for f in self.logs
                 if f.kind == "log" and f.info.base_offset is not None]  # fmt: skip
        carried = state.get("log_start")
        if not bases or carried is None or min(bases) <= carried:
            return None
        return min(bases)

    def _hand_on_carried(self, to: Callable[[str], Callable[[pa.Table], None]],
                         latest: dict[tuple[str, int], int], cleaned_past: bool,
                         trim_below: int | None = None) -> None:  # fmt: skip
        """The rows the previous run handed on for the bytes before the point, handed on
        again first (replay.previous): the stages across partitions judge the history this
        copy reaches back to (``cleaned_past``: the cleaner's reach now passes the point;
        ``trim_below``: where the history handed on starts, retention having moved the log
        start past the carried one; see carried_rows)."""
        from replay.previous import HAND_ON_ROWS, carried_rows

        for table, kind, t in carried_rows(self.spec.previous, self.cluster, self.topic,
                                           self.partition, self.resuming, latest,
                                           cleaned_past, trim_below):  # fmt: skip
            for at in range(0, t.num_rows, HAND_ON_ROWS):
                to(table)(in_union(t.slice(at, HAND_ON_ROWS), REPLAY_UNIONS[table], kind))

    def _in_log_order(self, stream: _Stream, order) -> Iterator[pa.Table]:
        """A stream's pieces in log order: as read, or (records out of order: a damaged log)
        all of them sorted."""
        if self.records_in_order:
            return stream.pieces()
        whole = pa.concat_tables(list(stream.pieces()))
        return iter([whole.take(pc.sort_indices(whole, order))] if whole.num_rows else [])

    def _group_events(self) -> Iterator[pa.Table]:
        """The partition's commits, group metadata and markers as events in log order: three
        streams each in log order merged a piece at a time (or, out of order, sorted whole)."""
        streams = [
            (commit_events(p) for p in self.records["offset_commits"].pieces()),
            (metadata_events(p) for p in self.records["group_metadata"].pieces()),
            (marker_events(self.partition, p) for p in self.markers.pieces()),
        ]
        if self.records_in_order and self.in_order:
            return merged_in_order(streams)
        parts = [p for s in streams for p in s if p.num_rows]
        if not parts:
            return iter([])
        whole = pa.concat_tables(parts, promote_options="permissive")
        return iter([whole.take(pc.sort_indices(whole, LOG_ORDER))])

    def _keyed(self, t: pa.Table, table: str) -> pa.Table:
        """Rows of the replay with the replica they come from, in the scratch table's schema."""
        keys = zip(self.replica_keys, REPLICA_KEYS, strict=True)
        return _with_keys(t, table, [const(k, t.num_rows, f.type) for k, f in keys])


def keyed_rows(table: str, rows: list[dict], keys: list[tuple]) -> pa.Table:
    """Replays' rows of the scratch table ``table`` as dicts (``out`` naming each row's kind),
    each with its replica's keys (cluster, broker, topic, partition): one table of the scratch
    table's schema. A scan task gathers the rows of its replicas and converts them together
    (replay.scan_task): a quiet partition's replay ends with a row or a few, whose conversion
    cost more than their replay."""
    columns = zip(*keys, strict=True)
    return _with_keys(table_of_rows(REPLAY_UNIONS[table], rows), table,
                      [pa.array(c, f.type) for c, f in zip(columns, REPLICA_KEYS, strict=True)])  # fmt: skip


def _with_keys(t: pa.Table, table: str, keys: list[pa.Array]) -> pa.Table:
    """``t`` (a replay's rows) with the replicas' key columns (:data:`REPLICA_KEYS`, in their
    order), in the scratch table's schema. Column by column, cast only where a type differs: a
    whole-table cast of ~50 columns cost more than a quiet partition's replay."""
    by_name = {f.name: k for f, k in zip(REPLICA_KEYS, keys, strict=True)}
    columns = []
    for f in REPLAY_TABLES[table]:
        if f.name in by_name:
            columns.append(by_name[f.name])
            continue
        column = t.column(f.name)
        columns.append(as_type(column, f.type))
    return pa.Table.from_arrays(columns, schema=REPLAY_TABLES[table])


class _Stream:
    """One kind of a replica's rows in the order read: in memory, or, once the replica spills
    (:meth:`ReplicaReplay._hold`), in a spill file followed by what came after."""

    def __init__(self) -> None:
        self.memory: list[pa.RecordBatch] = []
        self.spill: SpillFile | None = None

    def add(self, b: pa.RecordBatch | HeldHeaders) -> int:
        """Hold ``b``; the bytes it holds."""
        self.memory.append(b)
        return b.get_total_buffer_size()  # (nbytes walks every column: ~25 us a batch)

    def spill_out(self) -> None:
        if not self.memory:
            return
        if self.spill is None:
            self.spill = SpillFile()
        for b in self.memory:
            self.spill.write(b.batch() if isinstance(b, HeldHeaders) else b)
        self.memory = []

    def pieces(self, as_held: bool = False) -> Iterator[pa.Table | HeldHeaders]:
        """What was added, in order: the spilled pieces, then the rest (tables; ``as_held``:
        a few batches held as decoded as they are held, :class:`HeldHeaders`)."""
        if self.spill is not None:
            for b in self.spill.read():
                yield pa.Table.from_batches([b])
        for b in self.memory:
            if isinstance(b, HeldHeaders):
                yield b if as_held else b.table()
            else:
                yield pa.Table.from_batches([b])

    def close(self) -> None:
        self.memory = []
        if self.spill is not None:
            self.spill.close()
            self.spill = None


class SpillFile:
    """Batches past a memory bound in an Arrow IPC stream file in the local directories Spark
    gives its Python workers (``SPARK_LOCAL_DIRS``, as PySpark's own spills use; else the
    temporary directory), read back a batch at a time: a replica's batch columns past
    :data:`HOLD_BYTES`, a cross-log merge pass's runs (jobs.crosslog_scratch). Removed by
    :meth:`close`, or when dropped."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(
            prefix="logreplay-spill-", suffix=".arrows", dir=local_dir()
        )
        self.sink = os.fdopen(fd, "wb")
        self.writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._remove = weakref.finalize(self, remove_file, self.path, self.sink)

    def write(self, batch: pa.RecordBatch) -> None:
        if self.writer is None:
            self.writer = pa.ipc.new_stream(self.sink, batch.schema)
        self.writer.write_batch(batch)

    def read(self) -> Iterator[pa.RecordBatch]:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.sink.close()
        if not os.path.getsize(self.path):  # nothing was written
            return
        # read into memory, not mapped: a piece may outlive the reading (never the file)
        with pa.OSFile(self.path, "rb") as source:
            yield from pa.ipc.open_stream(source)

    def close(self) -> None:
        self._remove()


def _plain_files(t: pa.Table) -> pa.Table:
    """The file column as plain strings: pieces held apart have dictionaries of their own."""
    i = t.schema.get_field_index("file")
    if i < 0 or not pa.types.is_dictionary(t.schema.field(i).type):
        return t
    return t.set_column(i, "file", t.column(i).cast(pa.string()))


def replica_filter(
    replicas: list[ReplicaRow], chosen: set[tuple]
) -> tuple[tuple[str, ...], bool] | None:
    """Which replicas' replayed rows to keep, as the shorter list: (keys "cluster\\0topic\\0
    partition\\0broker", whether the listed ones are left out); None to keep every row (one
    replica of each partition)."""
    others = {r.key for r in replicas} - chosen
    if not others:
        return None
    listed = tuple("\0".join(map(str, k)) for k in sorted(min(others, chosen, key=len)))
    return listed, len(others) <= len(chosen)


def kept_mask(rows, kept: tuple[tuple[str, ...], bool] | None) -> pa.Array | None:
    """Which of a replay table's ``rows`` (a table or a batch with the replica's keys,
    :data:`REPLICA_KEYS`) come from a replica the audit keeps: ``kept`` as
    by :func:`replica_filter` (keys "cluster\\0topic\\0partition\\0broker", whether
    the listed ones are left out); None where every row is kept."""
    if kept is None:
        return None
    listed, excluded = kept
    keep = pc.is_in(_replica_keys(rows, broker=True), value_set=pa.array(listed, pa.string()))
    return pc.fill_null(pc.invert(keep) if excluded else keep, False)


def held_once(rows, shared: frozenset[tuple[str, str, int]]) -> pa.Array | None:
    """Which of a replay table's ``rows`` come from a partition only one broker of its cluster
    holds, not one of ``shared`` (replay.scan_task.replicated_partitions: (cluster, topic,
    partition) held by several): the audit keeps every such row, whatever replicas it
    chooses (:func:`chosen_replicas` chooses among a partition's brokers); None where every
    row does."""
    if not shared:
        return None
    listed = pa.array(sorted("\0".join(map(str, k)) for k in shared), pa.string())
    held = pc.is_in(_replica_keys(rows, broker=False), value_set=listed)
    return pc.invert(pc.fill_null(held, False))


def _replica_keys(rows, broker: bool) -> pa.Array:
    """Each row's replica as one text, "cluster\\0topic\\0partition" and, with ``broker``,
    "\\0broker" (how :func:`replica_filter` and :func:`held_once` list replicas and
    partitions)."""
    parts = [rows.column(CLUSTER), rows.column("replica_topic"),
             pc.cast(rows.column("replica_partition"), pa.string())]  # fmt: skip
    if broker:
        parts.append(rows.column(REPLICA_BROKER))
    return pc.binary_join_element_wise(*parts, "\0")


def chosen_replicas(replicas: list[ReplicaRow]) -> set[tuple[str, str, int, str]]:
    """(cluster, topic, partition, broker) of the replica the audit keeps per partition of a
    cluster, from one row per replica: highest last offset, then most batches with a valid
    CRC, then the smallest broker name (docs/architecture.md: replay one, compare the others).
    The one definition of the choice; one row per partition replica reaches the driver, never
    a batch."""
    best: dict[tuple, str] = {}
    order = sorted(replicas, key=lambda r: (-r.end_offset, -r.crc_valid_batches, r.broker))
    for r in order:
        best.setdefault(r.partition_key, r.broker)
    return {(*k, b) for k, b in best.items()}


def cleaned_bounds(replicas: list[ReplicaRow]) -> dict[tuple[str, str, int], int]:
    """(cluster, topic, partition) -> the highest offset below which any of its replicas holds
    the log cleaner's leftovers: replicas are cleaned independently, so inside that range two
    of them may hold different bytes for one batch (replay.rules.CLEANED_IDENTITY)."""
    out: dict[tuple[str, str, int], int] = {}
    for r in replicas:
        if r.cleaned_upto > 0:
            out[r.partition_key] = max(out.get(r.partition_key, 0), r.cleaned_upto)
    return out


def replicated_topics(replicas: list[ReplicaRow]) -> list[str]:
    """Topics with a partition held by two brokers or more in one cluster: the only ones whose
    batches the replica-divergence check needs."""
    held: dict[tuple, int] = {}
    for r in replicas:
        held[r.partition_key] = held.get(r.partition_key, 0) + 1
    return sorted({k[1] for k, n in held.items() if n > 1})
