"""One scan task's work, without Spark: decode byte ranges once, asking the decoders for every
table the run needs at once, and replay each partition replica as soon as its files are read.

Every way of running the audit goes through :class:`ScanTask`: the jobs' scan writes what it
yields to Parquet in Spark tasks (:mod:`jobs.scan`), a user's session keeps it in Spark's cache
(:mod:`replay.session_scan`), and the one-process runner (:mod:`replay.local`) loops over the
dump's replicas in this process. What a task tells its caller besides rows is typed: one
:class:`ReplicaRow` per replica replayed (the driver chooses the replica it keeps from these,
:func:`replay.replicas.chosen_replicas`), one :class:`SplitRange` per range of a file split
over several tasks (the driver adds their accounting up), and the task's :class:`ByteTotals`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from decoders.batch_tables import HeaderBatch
from decoders.planning import ByteRange
from replay.grouped import INTERNAL_TOPICS
from replay.partition import PartitionReplay
from replay.replicas import (
    REPLAY_READS,
    REPLAY_TABLES,
    ReplaySpec,
    ReplicaReplay,
    ReplicaRow,
    keyed_rows,
)
from replay.tables import CLUSTER, with_cluster

CHANGED = "file changed size from"  # the reason decoders give a file that changed while read
# the segments columns summed over the ranges of a split file
SUMMED = ("size", "bytes_valid", "bytes_padding", "bytes_corrupt", "entries", "records")
# the decoded tables the audit writes to its scan's output (the rest it only replays)
AUDIT_DECODED = ("batches", "segments", "errors")

Sink = Callable[[str, pa.RecordBatch], None]
# files' ``segments`` rows, and replays' last rows, a task gathers before it converts and gives
# them (ScanTask._segment, ScanTask._held_rows)
GATHERED_ROWS = 4096


def audit_schema(table: str) -> pa.Schema:
    """The Arrow schema of a table an audit's scan gives: a replay's
    (:data:`replay.replicas.REPLAY_TABLES`, the replica's keys first), or a decoded table's
    with the :data:`CLUSTER` of its broker last."""
    import decoders

    if table in REPLAY_TABLES:
        return REPLAY_TABLES[table]
    return decoders.TABLES[table].append(pa.field(CLUSTER, pa.string()))


@dataclass(frozen=True)
class DecodeOptions:
    """What every scan task needs besides its ranges (pickled into the tasks): the tables to
    give, how to decode, and for the audit the spec to replay every replica with (its files
    all in one task) and whether decoded rows carry their broker's cluster."""

    tables: tuple[str, ...]
    deep: bool
    verify_crc: bool
    window_bytes: int | None
    memory_budget: int | None
    avro: dict | None = None
    replay: ReplaySpec | None = None
    # the partitions (cluster, topic, partition) whose batch headers an audit gives: those a
    # replica divergence can show (:func:`replicated_partitions`), each with the offset its
    # replicas are compared from (0 but where every replica goes on from a previous run's
    # point); None: every one
    headers_of: dict[tuple[str, str, int], int] | None = field(default=None, hash=False)

    @property
    def decoded(self) -> tuple[str, ...]:
        """The decoders' tables the run gives (the others come from the replay)."""
        return tuple(t for t in self.tables if t not in REPLAY_TABLES)

    @property
    def decoding(self) -> set[str]:
        """The decoders' tables the tasks decode: the given ones and what the replay reads."""
        return set(self.decoded) | (set(REPLAY_READS) if self.replay is not None else set())


@dataclass(frozen=True)
class SplitRange:
    """A range of a file split over several tasks: its ``segments`` row, to be added up with
    the other ranges' by the driver, and the error rows every range of the file reports (an
    unreadable file, a file that changed while read), which the driver keeps once."""

    file: str
    start: int
    stop: int
    segment: dict
    whole_errors: list[dict]


@dataclass
class ByteTotals:
    """Valid, padding and corrupt bytes over the files a task (or a run) accounted for."""

    files: int = 0
    size: int = 0
    valid: int = 0
    padding: int = 0
    corrupt: int = 0
    errors: int = 0

    def add_segment(self, seg: dict) -> None:
        """One file's ``segments`` row."""
        self.files += 1
        self.size += seg["size"]
        self.valid += seg["bytes_valid"]
        self.padding += seg["bytes_padding"]
        self.corrupt += seg["bytes_corrupt"]
        self.errors += seg["error_count"]

    def add(self, other: ByteTotals) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


@dataclass
class TaskReport:
    """All a scan task reports to the driver: never a decoded row, only these few facts (and,
    from the jobs' scan, the files it wrote)."""

    replicas: list[ReplicaRow] = field(default_factory=list)
    split: list[SplitRange] = field(default_factory=list)
    totals: ByteTotals = field(default_factory=ByteTotals)
    files: list[dict] = field(default_factory=list)  # jobs.scan: {table, path, rows, partition}

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> TaskReport:
        return cls(
            replicas=[ReplicaRow(**r) for r in d["replicas"]],
            split=[SplitRange(**s) for s in d["split"]],
            totals=ByteTotals(**d["totals"]),
            files=list(d["files"]),
        )


def replica_of(f) -> tuple[str, str, int] | None:
    """(broker, topic, partition) of a file in a partition directory; None for the others."""
    if f.info.topic is None or f.info.partition is None:
        return None
    return (f.info.broker or "", f.info.topic, f.info.partition)


def topic_id_of(files) -> str | None:
    """The topic id a partition directory's `partition.metadata` names (None: no such file, or
    one that does not parse: the errors table says so): as the dump's listing read it, where
    it did (decoders.layout.DumpFile.topic_id: the id its layout tells incarnations by, without
    a third read of the file in a quiet partition's few milliseconds)."""
    import contextlib

    from decoders.checkpoints import MAX_TEXT_BYTES, partition_metadata
    from decoders.errors import DecodeError

    f = next((f for f in files if f.kind == "partition_metadata"), None)
    if f is None:
        return None
    if f.id_listed:
        return f.topic_id
    try:
        with contextlib.closing(f.open()) as src:
            return partition_metadata(src.read_at(0, min(src.size, MAX_TEXT_BYTES)))["topic_uuid"]
    except (OSError, DecodeError, KeyError):
        return None


def replica_units(files) -> list[list[ByteRange]]:
    """The dump's files as units a task reads whole: every file of one partition directory
    together, in the order discovered (logs by base offset); each other file alone."""
    units: dict[object, list[ByteRange]] = {}
    for f in files:
        key = replica_of(f) or ("file", f.path)
        units.setdefault(key, []).append(ByteRange(f, 0, f.size))
    # a cleaner's completed `.swap` first: the segments it replaces are known when they come
    return [sorted(u, key=lambda r: r.file.kind != SWAP_LOG) for u in units.values()]


SWAP_LOG = "log.swap"


class Recovery:
    """Which of a replica's files its broker's log recovery keeps (LogLoader,
    `removeTempFilesAndCollectSwapFiles` and `completeSwapOperations`): files scheduled for
    deletion (`.deleted`) and an interrupted cleaning's output (`.cleaned`) are dropped, and so
    is a `.swap` at or above the lowest `.cleaned` offset (KAFKA-6264: part of an incomplete
    operation); any other `.swap` replaces the segments whose offsets it covers. Every file is
    still decoded and accounted; the files dropped, or replaced, are not replayed nor compared
    between replicas."""

    def __init__(self, files) -> None:
        cleaned = [f.info.base_offset for f in files
                   if f.kind == "log.cleaned" and f.info.base_offset is not None]  # fmt: skip
        self.min_cleaned = min(cleaned, default=None)
        self.covered: list[list[int]] = []  # each kept swap's [first offset, last offset + 1)

    def keeps(self, f) -> bool:
        kind, base = f.kind, f.info.base_offset
        if kind.endswith(".swap"):  # a swap segment, and its indexes
            return self.min_cleaned is None or base is None or base < self.min_cleaned
        if "." in kind:  # x.deleted, x.cleaned
            return False
        if kind in ("log", "index", "timeindex", "txnindex") and base is not None:
            return not any(a <= base < b for a, b in self.covered)
        return True

    def saw(self, f, batch: pa.RecordBatch) -> None:
        """A kept swap's batches: the offsets it covers."""
        if f.kind != SWAP_LOG or not batch.num_rows:
            return
        lo = pc.min(batch.column("base_offset")).as_py()
        hi = pc.max(batch.column("last_offset")).as_py()
        if lo is None or hi is None:
            return
        if not self.covered or self.covered[-1][0] != f.info.base_offset:
            self.covered.append(
                [f.info.base_offset if f.info.base_offset is not None else lo, hi + 1]
            )
        else:
            self.covered[-1][1] = max(self.covered[-1][1], hi + 1)


def audit_options(files, config, spec: ReplaySpec) -> DecodeOptions:
    """The scan of an audit (``config``: a :class:`replay.settings.AuditConfig`): header-only,
    every replica replayed with ``spec``, giving the decoders' accounting, the batch headers
    of the partitions held by several brokers and the replays' rows."""
    return DecodeOptions(
        tables=(*AUDIT_DECODED, *REPLAY_TABLES),
        deep=False,
        verify_crc=config.verify_crc,
        window_bytes=config.window_bytes or None,
        memory_budget=(config.memory_budget_mb << 20) or None,
        replay=spec,
        headers_of=replicated_partitions(files, spec),
    )


def replicated_partitions(files, spec: ReplaySpec) -> dict[tuple[str, str, int], int]:
    """(cluster, topic, partition) of the partitions whose directories two brokers or more of
    one cluster hold: the only batch headers the replica-divergence check reads, known from
    the listing before anything is decoded; each with the offset from which its replicas'
    headers are compared. A run that goes on from a previous run's points compares them from
    the lowest of its replicas' points (the previous run compared what every replica held
    then: below the lowest end); a replica without a point of its own (a new one) is compared
    from its start."""
    brokers: dict[tuple[str, str, int], set[str]] = {}
    for f in files:
        home = replica_of(f)
        if home is not None:
            broker, topic, partition = home
            brokers.setdefault((spec.cluster_of(broker), topic, partition), set()).add(broker)
    out = {}
    for k, held in brokers.items():
        if len(held) > 1:
            ends = [(spec.points.get((*k, b)) or {}).get("log_end_offset") for b in held]
            out[k] = min((e or 0) for e in ends) if spec.previous is not None else 0
    return out


def replica_tasks(files, range_bytes: int, min_tasks: int = 1) -> list[list[ByteRange]]:
    """The tasks of an audit's scan: :func:`replica_units` packed into tasks of about
    ``range_bytes`` (at least about ``min_tasks`` of them when the files allow), none split:
    each task replays the replicas it reads (a partition's replay is sequential by nature)."""
    from decoders.planning import pack_units

    return [t.ranges for t in pack_units(replica_units(files), range_bytes, min_tasks)]


class ScanTask:
    """Decode ``ranges`` once and hand every wanted table's batches to ``sink`` (decoded
    tables, and with a replay spec the replays' rows, :data:`replay.replicas.REPLAY_TABLES`,
    a block at a time as the replays go); :attr:`report` holds what the driver is told.
    ``sink_now``: where a sink gathers batches before it writes them, one that writes what it
    is given at once (the rows a replica hands on from a previous run: a slice at a time, so
    that what a task holds of them does not grow with the days carried); else ``sink``."""

    # what only a replica's replay reads given as Python values (a quiet partition's few
    # batches, its snapshot's entries: _decode); off, as tables (the tests compare both)
    as_values = True

    def __init__(self, opts: DecodeOptions, sink: Sink, sink_now: Sink | None = None) -> None:
        self.opts, self.sink, self.sink_now = opts, sink, sink_now or sink
        self.report = TaskReport()
        self.segments: list[dict] = []  # files' rows not yet given (_segment), their brokers
        self.segment_brokers: list[str] = []
        self.rows: dict[str, list[dict]] = {}  # replays' rows not yet given (_held_rows)
        self.row_keys: dict[str, list[tuple]] = {}
        # a header-only run (the audit) decodes the records of the internal topics only, from
        # the same read (decoders.decode_file's records_apart): the batch-level tables and the
        # accounting stay exactly those of the header scan
        import decoders

        self.records = set() if opts.deep else opts.decoding & decoders.RECORD_TABLES
        self.wanted = (opts.decoding - self.records) | {"segments"}

    def run(self, ranges: Iterable[ByteRange]) -> TaskReport:
        import itertools

        ranges = list(ranges)
        files_of: dict[object, list] = {}  # each replica's files, grouped once
        for x in ranges:
            files_of.setdefault(replica_of(x.file), []).append(x.file)
        # each replica's files come together (replica_units): read, then replayed
        for home, unit in itertools.groupby(ranges, key=lambda r: replica_of(r.file)):
            unit = list(unit)
            if self.opts.replay is None:
                for r in unit:
                    self._decode(r, None)
                continue
            replica = None
            recovery = Recovery(files_of[home])
            if home is not None:
                replica = ReplicaReplay(self.opts.replay, *home)
                replica.logs = [f for f in files_of[home] if f.kind == "log"]
                replica.topic_id = topic_id_of(files_of[home])
                headers, unit = self._from_point(replica, unit)
                for r in headers:  # compared with the other replicas, judged before
                    self._decode(r, None, recovery, ("batches",))
            for r in unit:
                self._decode(r, replica, recovery)
            self._replay(replica)
        self._give_segments()
        self._give_rows()
        return self.report

    def _from_point(self, replica: ReplicaReplay, unit: list[ByteRange]
                    ) -> tuple[list[ByteRange], list[ByteRange]]:  # fmt: skip
        """(ranges read for their batch headers only, ranges read and replayed) of a replica.
        Where a previous run's replay of it ended (``--since``: its own ``replay_states`` row)
        and its state holds in this copy, the bytes past the point only
        (:func:`past_point`), the replay going on from the carried state; of a partition
        several brokers hold, also the headers from where its replicas are compared
        (:func:`replicated_partitions`) to the point, for the divergence check. Else all of
        them, replayed."""
        from replay.points import resume_from, resumed_at
        from replay.previous import Resuming

        spec = self.opts.replay
        point = spec.points.get(replica.row_key)
        if point is None:
            return [], unit
        since, where = resumed_at(point, replica.logs, replica.topic_id)
        replica.since = since
        resuming = Resuming.of(point) if spec.previous is not None else None
        if resuming is None or where is None or not where.carried:
            return [], unit
        replica.resuming = resuming
        compared = (self.opts.headers_of or {}).get(replica.partition_key)
        headers: list[ByteRange] = []
        if compared is not None and compared < resuming.log_end:
            start = {r.file.path: r.start for r in where.ranges}
            earlier = resume_from({"log_end_offset": compared, "segment_base_offset": None,
                                   "segment_position": None}, replica.logs)  # fmt: skip
            for r in earlier.ranges:
                stop = start.get(r.file.path, r.stop)
                if r.start < stop:
                    headers.append(ByteRange(r.file, r.start, stop))
        return headers, past_point(unit, where.ranges, resuming.log_end)

    def _decode(self, r: ByteRange, replica: ReplicaReplay | None,
                recovery: Recovery | None = None, only: tuple[str, ...] | None = None
                ) -> None:  # fmt: skip
        """One range: every wanted table (``only`` those), to the replica and to the sink (a
        file the broker's recovery would drop or replace: its accounting only,
        :class:`Recovery`)."""
        kept = recovery is None or recovery.keeps(r.file)
        if not kept:
            replica = None
        partial = r.start != 0 or r.stop < r.file.size
        held_errors = None
        # what only the replica's replay reads, given as Python values, never a table: a user
        # partition log's windows of a few batches (decoders.batch_tables.HeaderBatch), a
        # producer snapshot's entries (decoders.snapshot.SnapshotEntries)
        replayed = self.as_values and replica is not None and only is None
        as_rows = (replayed and r.file.kind == "log" and replica.topic not in INTERNAL_TOPICS
                   and not self._gives_batches(r.file))  # fmt: skip
        entries = (replayed and r.file.kind == "snapshot"
                   and "producer_snapshots" not in self.opts.tables)  # fmt: skip
        for table, batch in self._decoded(r, only, PartitionReplay.small_piece if as_rows else 0,
                                          entries):  # fmt: skip
            if table == "segments":  # the file's row, a dict: it comes last
                self._segment(r, batch, held_errors, replica, partial)
                continue
            if partial and table == "errors":
                held_errors = batch
                continue
            if replica is not None:
                replica.add(table, batch)
            if table == "batches" and recovery is not None and kept:
                recovery.saw(r.file, batch)
            if table in self.opts.tables and batch.num_rows and (kept or table != "batches"):
                self._give(table, batch, r.file)

    def _decoded(self, r: ByteRange, only: tuple[str, ...] | None = None, header_rows: int = 0,
                 snapshot_values: bool = False):  # fmt: skip
        """(table, batch) of the range's wanted tables, then ("segments", the file's row)
        (``header_rows``, ``snapshot_values``: decoders.decode_file's)."""
        import decoders
        from decoders.internal import internal_tables_for
        from decoders.layout import LOG_KINDS

        tables = self.wanted if only is None else set(only)
        internal = set(internal_tables_for(r.file.info.topic)) & self.records
        apart = only is None and bool(internal) and r.file.kind.split(".")[0] in LOG_KINDS
        segment = yield from decoders.decode_file(
            r.file,
            tuple(sorted(tables | internal if apart else tables)),
            deep=self.opts.deep,
            verify_crc=self.opts.verify_crc,
            start=r.start,
            stop=r.stop if r.stop < r.file.size else None,
            window_bytes=self.opts.window_bytes,
            memory_budget=self.opts.memory_budget,
            records_apart=apart,
            header_rows=header_rows,
            snapshot_values=snapshot_values,
        )
        if "segments" in tables:
            yield "segments", segment

    def _segment(self, r: ByteRange, row: dict, errors: pa.RecordBatch | None,
                 replica: ReplicaReplay | None, partial: bool) -> None:  # fmt: skip
        """A file's ``segments`` row: added up, told to its replica and gathered to be given
        with other files' (one conversion for :data:`GATHERED_ROWS` files: a quiet partition's
        six files cost more converted one by one than decoded); a split file's range goes to
        the driver instead (:meth:`_split`)."""
        if partial:
            self.report.split.append(self._split(r, row, errors))
            return
        self.report.totals.add_segment(row)
        if replica is not None:
            replica.segment(row)
        if "segments" in self.opts.tables:
            self.segments.append(row)
            self.segment_brokers.append(r.file.info.broker or "")
            if len(self.segments) >= GATHERED_ROWS:
                self._give_segments()

    def _give_segments(self) -> None:
        """The gathered ``segments`` rows to the sink, in an audit with their brokers' clusters."""
        if not self.segments:
            return
        import decoders

        batch = decoders.segments_batch(self.segments)
        if self.opts.replay is not None:
            cluster_of = self.opts.replay.cluster_of
            batch = with_cluster(batch, pa.array([cluster_of(b) for b in self.segment_brokers],
                                                 pa.string()))  # fmt: skip
        self.segments, self.segment_brokers = [], []
        self.sink("segments", batch)

    def _give(self, table: str, batch: pa.RecordBatch | HeaderBatch, file) -> None:
        """A decoded batch to the sink; in an audit, with its broker's cluster (and batch
        headers only of the partitions :attr:`DecodeOptions.headers_of` names)."""
        if table == "batches" and not self._gives_batches(file):
            return
        if isinstance(batch, HeaderBatch):
            batch = batch.table()
        if self.opts.replay is not None:
            batch = with_cluster(batch, self.opts.replay.cluster_of(file.info.broker or ""))
        self.sink(table, batch)

    def _gives_batches(self, file) -> bool:
        """Whether a file's ``batches`` rows go to the sink: an audit's of the partitions
        several brokers hold only (:attr:`DecodeOptions.headers_of`)."""
        if "batches" not in self.opts.tables:
            return False
        kept = self.opts.headers_of
        if self.opts.replay is None or kept is None:
            return True
        cluster = self.opts.replay.cluster_of(file.info.broker or "")
        return (cluster, file.info.topic, file.info.partition) in kept

    def _replay(self, replica: ReplicaReplay | None) -> None:
        if replica is None:
            return

        def rows(table: str, t: pa.Table) -> None:  # a block of the replay's rows, as it goes
            self._give_rows(table)  # after what waits of the table: each kind keeps its order
            for b in t.to_batches():
                self.sink(table, b)

        def rows_now(table: str, t: pa.Table) -> None:  # rows handed on from a previous run
            self._give_rows(table)
            for b in t.to_batches():
                self.sink_now(table, b)

        row = replica.replay(rows, rows_now, self._held_rows)
        if row is not None:
            self.report.replicas.append(row)

    def _held_rows(self, table: str, keys: tuple, rows: list[dict]) -> None:
        """A replay's last rows as dicts, gathered with other replicas' (:data:`GATHERED_ROWS`
        at most) and converted together (replay.replicas.keyed_rows)."""
        self.rows.setdefault(table, []).extend(rows)
        self.row_keys.setdefault(table, []).extend([keys] * len(rows))
        if len(self.rows[table]) >= GATHERED_ROWS:
            self._give_rows(table)

    def _give_rows(self, table: str | None = None) -> None:
        """The gathered rows of ``table`` (default every one's) to the sink."""
        for t in [table] if table is not None else list(self.rows):
            rows, keys = self.rows.pop(t, None), self.row_keys.pop(t, None)
            if rows:
                for b in keyed_rows(t, rows, keys).to_batches():
                    self.sink(t, b)

    def _split(self, r: ByteRange, seg: dict, errors) -> SplitRange:
        """A split file's range: its segments row goes to the driver to be added up; its error
        rows are given here, but for the whole-file ones (unreadable, changed while read),
        which every range of the file reports and the driver keeps once."""
        whole = []
        if errors is not None:
            rows = errors.to_pylist()
            unreadable = seg["size"] != r.size  # the file could not be read: all bytes counted
            whole = [e for e in rows if unreadable or e["reason"].startswith(CHANGED)]
            kept = [e for e in rows if e not in whole]
            if kept and "errors" in self.opts.tables:
                import decoders.schemas as schemas

                self._give("errors", schemas.from_rows("errors", kept).to_batches()[0], r.file)
        return SplitRange(r.file.path, r.start, r.stop, seg, whole)


# a segment's files besides its log, by kind (and their `.swap`, `.cleaned`, `.deleted`)
SEGMENT_KINDS = ("log", "index", "timeindex", "txnindex")


def past_point(unit: list[ByteRange], reads: list[ByteRange], log_end: int) -> list[ByteRange]:
    """A replica's ranges past a previous run's point: of its segments, the ranges ``reads``
    gives (replay.points.resume_from: the rest of the point's segment, every later one whole);
    a segment's indexes only where its log is read whole (a partly read segment's index entries
    point below the point too); the producer snapshots beyond the point's log end; every other
    file of the directory (its metadata, checkpoints)."""
    from replay.partition import segment_of

    by_path = {r.file.path: r for r in reads}
    whole = {r.file.info.base_offset for r in reads if r.start == 0}
    out = []
    for r in unit:
        f = r.file
        if f.kind == "log":
            if f.path in by_path:
                out.append(by_path[f.path])
            continue
        base = segment_of(f.path)
        base = base if isinstance(base, int) else None
        if f.kind == "snapshot":
            if base is not None and base > log_end:
                out.append(r)
        elif f.kind.split(".")[0] in SEGMENT_KINDS and base is not None:
            if base in whole:
                out.append(r)
        else:
            out.append(r)
    return out


def left_out_rows(files, skipped: dict[str, str]) -> dict[str, list[dict]]:
    """The segments and errors rows of files a run left out, not decoded (see
    jobs.resilience): an error naming each file and the reason, all its bytes counted
    corrupt."""
    import decoders

    rows: dict[str, list[dict]] = {"segments": [], "errors": []}
    for f in files:
        for table, batch in decoders.skipped_file(f, skipped[f.path], ("segments", "errors")):
            rows[table].extend(batch.to_pylist())
    return rows


def merge_split(split: list[SplitRange]) -> tuple[list[dict], list[dict]]:
    """(segments rows, whole-file error rows) of the split files, from their ranges."""
    by_file: dict[str, list[SplitRange]] = {}
    for p in split:
        by_file.setdefault(p.file, []).append(p)
    segments, errors = [], []
    for path in sorted(by_file):
        parts = sorted(by_file[path], key=lambda p: p.start)
        whole = [e for p in parts for e in p.whole_errors]
        rows = [p.segment for p in parts]
        row = dict(rows[0])
        unreadable = next((p for p in parts if p.segment["size"] != p.stop - p.start), None)
        if unreadable is not None:  # the file as one unreadable whole, as a whole-file decode
            segments.append(dict(unreadable.segment))
            errors.extend(whole[:1])
            continue
        for k in SUMMED:
            row[k] = sum(x[k] or 0 for x in rows)
        firsts = [x["first_offset"] for x in rows if x["first_offset"] is not None]
        lasts = [x["last_offset"] for x in rows if x["last_offset"] is not None]
        row["first_offset"] = min(firsts) if firsts else None
        row["last_offset"] = max(lasts) if lasts else None
        changed = whole[:1]
        row["error_count"] = sum(x["error_count"] for x in rows) - len(whole) + len(changed)
        row["error"] = next((x["error"] for x in rows if x["error"]), None)
        segments.append(row)
        errors.extend(changed)
    return segments, errors
