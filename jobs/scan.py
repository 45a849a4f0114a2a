"""One pass over a dump's bytes: each Spark task decodes its byte ranges once and writes every
table the run asks for as Parquet, with pyarrow, from the task itself.

Reading the dump once per table through the `kafka-segments` source sends every row into the
JVM and, to write it, back out to a Python worker: for small batches that costs far more than
decoding them. Here a task decodes its ranges with :func:`decoders.iter_file` asking for all
the tables at once, and hands each decoded Arrow batch straight to the run's Parquet files
(:class:`jobs.output._TaskFiles`: per-attempt names, whole-or-nothing files, same bytes for the
same run id); only file names, row counts and byte accounting come back to the driver.

Byte accounting stays per file: a segment larger than the range size is split into ranges at
batch boundaries (:mod:`decoders.planning`), each range accounts for the bytes it owns, and
the driver adds the ranges' accounting up into the file's one ``segments`` row.
"""

from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple

from decoders.planning import SPLITTABLE, ByteRange, TaskPlans, pack, split
from jobs.output import OUTPUT_COMPRESSION
from replay.replicas import KIND_COLUMN, REPLAY_TABLES, kind_columns, kinds_apart
from replay.scan_task import (
    ByteTotals,
    DecodeOptions,
    ReplicaRow,
    ScanTask,
    TaskReport,
    left_out_rows,
    merge_split,
    replica_tasks,
)

# a task's decoded rows of one table wait for these many rows or bytes before being written
FLUSH_ROWS = 65_536
FLUSH_BYTES = 8 << 20
SCRATCH_COMPRESSION = "lz4"  # pyarrow's name of Parquet's LZ4_RAW


@dataclass(frozen=True)
class ScanWritten:
    """The output tables an audit's scan tasks write themselves (replay.plan.SCAN_WRITTEN):
    their rows of the partitions only one broker holds (replay.replicas.held_once), in the
    table's own form, straight into the run's output directory ``base`` (files named
    ``scan-<task>-<key>-<attempt>``, apart from the copies' ``part-`` files); the rows of the
    partitions several brokers hold (``shared``) go to the scratch area as before, for the
    copies to keep the chosen replica's (jobs.copies)."""

    base: str
    key: str
    tables: dict  # output table -> (its replay.plan.Copied, its Arrow schema)
    shared: frozenset  # (cluster, topic, partition) held by several brokers


@dataclass
class ScanOptions:
    """A scan's decoding (:class:`replay.scan_task.DecodeOptions`) and how its tables are
    laid out as Parquet (pickled into the tasks)."""

    decode: DecodeOptions
    # table -> (its Spark schema, the Arrow schema of its Parquet files)
    schemas: dict = field(default_factory=dict)
    partition_by: dict = field(default_factory=dict)  # table -> partition column or None
    # the columns whose values each row group's statistics give (None: every column)
    statistics: tuple[str, ...] | None = None
    compression: str = OUTPUT_COMPRESSION  # Parquet's codec of the tables' files
    written: ScanWritten | None = None  # an audit's output tables its tasks write

    @property
    def tables(self) -> tuple[str, ...]:
        return self.decode.tables


def plan_scan(files, tables, range_bytes: int, min_tasks: int = 1,
              whole_replicas: bool = False) -> list[list[ByteRange]]:  # fmt: skip
    """Every file of the dump (each one is accounted for), logs larger than ``range_bytes``
    split at batch boundaries when a splittable table is asked for; packed into tasks (at
    least about ``min_tasks`` of them when the files allow). ``whole_replicas``: every file of
    one partition directory in one task, in the order discovered (logs by base offset), none
    split: the task replays the replica (a partition's replay is sequential by nature)."""
    if whole_replicas:
        return replica_tasks(files, range_bytes, min_tasks)
    indexes = {
        (f.log_dir, f.info.topic, f.info.partition, f.info.base_offset): f
        for f in files
        if f.kind == "index"
    }
    splittable = bool(set(tables) & SPLITTABLE)
    ranges: list[ByteRange] = []
    for f in files:
        if splittable and f.kind == "log" and f.size > range_bytes:
            index = indexes.get((f.log_dir, f.info.topic, f.info.partition, f.info.base_offset))
            ranges.extend(split(f, range_bytes, index))
        else:
            ranges.append(ByteRange(f, 0, f.size))
    return [t.ranges for t in pack(ranges, range_bytes, min_tasks)]


def scan_options(spark_schema_of, tables, deep, decode_conf, avro_topics,
                 replay=None) -> ScanOptions:  # fmt: skip
    """The options of a scan (a decode's, deep; an audit's, header-only, with the ``replay``
    spec its tasks replay every replica with); ``spark_schema_of(table, with_avro)`` gives a
    table's Spark schema (the Parquet files get the Arrow schema Spark's own writer path gave
    them)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    opts = ScanOptions(
        DecodeOptions(
            tables=tuple(tables),
            deep=deep,
            verify_crc=bool(decode_conf["verify_crc"]),
            window_bytes=int(decode_conf["window_bytes"])
            if decode_conf.get("window_bytes")
            else None,
            memory_budget=int(decode_conf["memory_budget_mb"]) << 20
            if decode_conf.get("memory_budget_mb")
            else None,
            avro=avro_topics or None,
            replay=replay,
        )
    )
    for t in tables:
        schema = spark_schema_of(t, t == "records" and bool(avro_topics))
        opts.schemas[t] = (schema, to_arrow_schema(schema, timezone="UTC"))
        # a replay's tables: a file per task and kind of row (each of the kind's own columns:
        # TaskTables), the decoded tables' per topic
        by = "topic" if "topic" in schema.fieldNames() else None
        opts.partition_by[t] = KIND_COLUMN if t in REPLAY_TABLES else by
    return opts


def run_scan(spark, tasks: list[list[ByteRange]], opts: ScanOptions, base: str, key: str,
             kill: str | None) -> list[TaskReport]:  # fmt: skip
    """Decode every task's ranges in Spark tasks, each writing its tables under ``base``; the
    small reports of the tasks (files written, accounting, replicas) come back."""
    n = len(tasks)
    done = _byte_counter(spark)
    plans = TaskPlans(tasks)  # each task unpickles its own ranges

    def scan(batches):  # no hints: Spark infers its UDF type from them
        import pyarrow as pa
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        for b in batches:
            for i in b.column(0).to_pylist():
                ranges = plans[i]
                report = scan_ranges(ranges, opts, base, key, i, attempt, kill)
                if done is not None:
                    done.add(sum(r.size for r in ranges))
                yield pa.RecordBatch.from_arrays(
                    [pa.array([json.dumps(report.to_json())], pa.string())], names=["report"]
                )

    from jobs.output import described

    with described(spark, f"logreplay: scan ({', '.join(opts.tables)})"):
        rows = spark.range(0, n, 1, n).mapInArrow(scan, "report string").collect()
    return [TaskReport.from_json(json.loads(r["report"])) for r in rows]


def _byte_counter(spark):
    """An accumulator of the bytes finished tasks decoded, shown by the job's progress; None
    where the session has no SparkContext (Spark Connect: the progress shows phases only)."""
    from jobs import progress

    try:
        counter = spark.sparkContext.accumulator(0)
    except Exception:  # Spark Connect raises its own "not supported" error for sparkContext
        return None
    progress.bytes_decoded(lambda: counter.value)
    return counter


class TaskTables:
    """One task attempt's Parquet files of every table, the decoded batches of a table held
    until enough rows or bytes wait (:data:`FLUSH_ROWS`, :data:`FLUSH_BYTES`) and converted
    and written together: a dump of many small files gives a few rows per file, and one
    conversion and one row group per file cost more than decoding them (13,966 writes: 9 of
    the 23 CPU s of the every-scenario dump's scan)."""

    def __init__(self, opts: ScanOptions, base: str, key: str, task: int, attempt: int,
                 kill: str | None) -> None:  # fmt: skip
        self.opts, self.base, self.key, self.task, self.attempt = opts, base, key, task, attempt
        self.kill = kill  # the test-only kill point reached at the first write (jobs.output)
        self.sinks: dict = {}
        self.written: dict = {}  # the output tables' files it writes (ScanWritten)
        self.pending: dict[str, list] = {}
        self.held = {t: [0, 0] for t in opts.tables}  # rows, bytes
        budget = opts.decode.memory_budget
        self.limit = min(FLUSH_BYTES, budget // 16) if budget else FLUSH_BYTES

    def write(self, table: str, batch) -> None:
        # a replay table's rows go apart by kind as they come (a replay hands on one kind's
        # rows at a time): split at the flush, the rows held would be gathered into one
        # table of the union's ~55 columns and filtered per kind, a copy of every row
        pieces = kinds_apart(batch) if table in REPLAY_TABLES else [(None, batch)]
        self.pending.setdefault(table, []).extend(pieces)
        held = self.held[table]
        held[0] += batch.num_rows
        held[1] += batch.get_total_buffer_size()  # (nbytes: ~25 us a batch)
        if held[0] >= FLUSH_ROWS or held[1] >= self.limit:
            self.flush(table)

    def write_now(self, table: str, batch) -> None:
        """``batch`` written at once, with what waits of its table (the rows a replica hands on
        from a previous run: what a task holds of them is a slice, whatever the days carried;
        gathered up to the flush limits, their conversion and encoding held 44 MB of Arrow for
        a week's transactions of one partition, 11 MB written a slice at a time:
        docs/benchmarks.md, "memory with the days carried")."""
        self.write(table, batch)
        self.flush(table)

    def flush(self, table: str) -> None:
        batches, self.held[table] = self.pending.pop(table, None), [0, 0]
        if not batches:
            return
        first = not self.sinks
        if table not in self.sinks:
            from jobs.output import _TaskFiles

            arrow = self.opts.schemas[table][1]
            columns_of = partial(kind_columns, table) if table in REPLAY_TABLES else None
            self.sinks[table] = _TaskFiles(self.base, table, self.task, self.attempt, self.key,
                                           arrow, self.opts.partition_by[table],
                                           self.opts.statistics, columns_of,
                                           compression=self.opts.compression)  # fmt: skip
        kinds: dict = {}
        for kind, rows in batches:
            kinds.setdefault(kind, []).append(rows)
        # each kind's rows to files of their own (the sink's partitions), kinds in sorted order
        for kind in [None] if None in kinds else sorted(kinds):
            rows = self._output(table, kind, _converted(kinds[kind], table, self.opts))
            if rows.num_rows:
                self.sinks[table].write(rows)
        if first and self.kill:
            from decoders import seams

            seams.reached(self.kill)

    def _output(self, table: str, kind: str | None, rows):
        """``rows`` of one kind of a scratch table, written as the output tables the scan
        writes (:class:`ScanWritten`) take them; what goes to the scratch area (the rows of
        the partitions several brokers hold: the stages that read such a table read these
        and the written ones, :meth:`Scratch.written_rows`)."""
        import pyarrow.compute as pc

        from jobs.copies import CopyTask, project
        from jobs.output import _TaskFiles
        from replay.replicas import held_once

        scan = self.opts.written
        if scan is None or kind is None:
            return rows
        for name, (copied, schema) in scan.tables.items():
            if (copied.source, copied.out) != (table, kind):
                continue
            once = held_once(rows, scan.shared)
            mine = rows if once is None else rows.filter(once)
            if mine.num_rows:
                if name not in self.written:
                    self.written[name] = _TaskFiles(scan.base, name, self.task, self.attempt,
                                                    scan.key, schema, None, prefix="scan")  # fmt: skip
                task = CopyTask(name, self.task, copied, (), None, schema)
                self.written[name].write(project(mine, task, None))
            rows = rows.slice(0, 0) if once is None else rows.filter(pc.invert(once))
        return rows

    def close(self) -> list[dict]:
        """Write what waits, close every file; the files written (table, path, rows, the
        partition column's value; ``output``: a file of an output table, :class:`ScanWritten`,
        its path under the output directory)."""
        for table in list(self.pending):
            self.flush(table)
        files = []
        for sinks, output in ((self.sinks, {}), (self.written, {"output": True})):
            for table, s in sinks.items():
                written = s.close()
                for path, rows, value in zip(*(c.to_pylist() for c in written.columns),
                                             strict=True):  # fmt: skip
                    files.append({"table": table, "path": path, "rows": rows,
                                  "partition": value} | output)  # fmt: skip
        return files

    def abort(self) -> None:
        for s in [*self.sinks.values(), *self.written.values()]:
            s.abort()


def scan_ranges(ranges, opts: ScanOptions, base: str, key: str, task: int, attempt: int,
                kill: str | None = None) -> TaskReport:  # fmt: skip
    """One task: decode ``ranges`` once (replaying each replica, for an audit), write every
    requested table; what the driver is told."""
    out = TaskTables(opts, base, key, task, attempt, kill)
    try:
        report = ScanTask(opts.decode, out.write, out.write_now).run(ranges)
    except BaseException:
        out.abort()
        raise
    report.files = out.close()
    return report


def _converted(batches: list, table: str, opts: ScanOptions):
    """Decoded batches of one table as one table of its Parquet schema, converted together
    (:func:`replay.session_scan.spark_rows`: the session's scan holds them alike)."""
    from replay.session_scan import spark_rows

    return spark_rows(batches, table, opts.schemas[table][1], opts.decode.avro)


def to_output(batch, table: str, opts: ScanOptions):
    """A decoded batch as the table's Parquet schema (:func:`decoders.spark.spark_batch`)."""
    from decoders.spark import spark_batch

    return spark_batch(batch, table, opts.schemas[table][1], opts.decode.avro)


class Scanned(NamedTuple):
    """What a scan gives the driver: a few rows per table, file and replica, never a batch."""

    tables: dict  # commit-record entry of every table: Spark schema, partition column, files
    accounting: dict  # byte accounting over every file
    tasks: int
    replicas: list[ReplicaRow]  # with a replay: one row per replica
    # the files of the output tables the tasks wrote (ScanWritten): table -> [{path, rows}]
    written: dict | None = None


def scan_tables(spark, files, opts: ScanOptions, base: str, key: str, range_bytes: int,
                kill: str | None, skipped: dict[str, str] | None = None, min_tasks: int = 1
                ) -> Scanned:  # fmt: skip
    """Decode ``files`` once and write ``opts.tables`` under ``base`` (a URI or path).
    ``skipped``: files left out of the run (path -> reason, see jobs.resilience), not decoded:
    each gets its error and segments rows from the driver, all its bytes counted corrupt.
    ``min_tasks``: see :func:`plan_scan` (the decode job keeps 1: its files follow from the
    dump and the range size alone)."""
    from decoders import seams
    from jobs.output import OutputDir, _TaskFiles, table_entry

    skipped = skipped or {}
    left_out = [f for f in files if f.path in skipped]
    files = [f for f in files if f.path not in skipped]
    whole = opts.decode.replay is not None
    tasks = plan_scan(files, opts.decode.decoded, range_bytes, min_tasks, whole)
    reports = run_scan(spark, tasks, opts, base, key, kill)
    if kill:
        seams.reached(kill.split(":")[0] + ":staged-table")
    listed: dict[str, list[dict]] = {t: [] for t in opts.tables}
    written: dict[str, list[dict]] = {t: [] for t in (opts.written.tables if opts.written else ())}
    for r in reports:
        for f in r.files:
            if f.get("output"):
                written[f["table"]].append({"path": f["path"], "rows": f["rows"]})
                continue
            part = {"partition": f["partition"]} if opts.partition_by[f["table"]] else {}
            listed[f["table"]].append({"path": f["path"], "rows": f["rows"]} | part)
    # split files and files left out: their rows from the driver (one small row per file)
    seg_rows, whole_errors = merge_split([s for r in reports for s in r.split])
    driver_rows = {"segments": seg_rows, "errors": whole_errors}
    for table, rows in left_out_rows(left_out, skipped).items():
        driver_rows[table] = driver_rows[table] + rows
    for table, rows in driver_rows.items():
        if table in listed and rows:
            from decoders.schemas import from_rows

            schema = opts.schemas[table][1]
            sink = _TaskFiles(base, table, len(tasks), 0, key, schema, opts.partition_by[table],
                              opts.statistics, compression=opts.compression)  # fmt: skip
            for b in from_rows(table, rows).to_batches():
                sink.write(to_output(_clustered(b, opts.decode), table, opts))
            for path, n, value in zip(*(c.to_pylist() for c in sink.close().columns), strict=True):
                part = {"partition": value} if opts.partition_by[table] else {}
                listed[table].append({"path": path, "rows": n} | part)
    entries = {
        table: table_entry(OutputDir(base).uri, table, key, opts.schemas[table][0], files_of,
                           opts.partition_by[table])
        for table, files_of in listed.items()
    }  # fmt: skip
    replicas = [row for r in reports for row in r.replicas]
    if opts.written is not None:
        _held_as_listed(replicas, opts.written.shared)
    acct = accounting(reports, driver_rows["segments"])
    return Scanned(entries, acct, len(tasks), replicas, written)


def _held_as_listed(replicas: list[ReplicaRow], shared: frozenset) -> None:
    """That no partition the scan's tasks took for one broker's (:class:`ScanWritten`) had
    replicas of several brokers replayed: their rows were written whole, as only the copies
    of a partition held once may be (else a fault of this code, not of the dump)."""
    brokers: dict[tuple, set[str]] = {}
    for r in replicas:
        brokers.setdefault(r.partition_key, set()).add(r.broker)
    wrong = sorted(k for k, held in brokers.items() if len(held) > 1 and k not in shared)
    if wrong:
        raise RuntimeError(f"partitions listed as held once were replayed from several brokers: "
                           f"{wrong[:5]}")  # fmt: skip


def _clustered(batch, opts: DecodeOptions):
    """A decoded batch the driver made, with its broker's cluster in an audit (as the scan's
    tasks give theirs, :class:`replay.scan_task.ScanTask`)."""
    from replay.tables import clusters_of, with_cluster

    if opts.replay is None:
        return batch
    return with_cluster(batch, clusters_of(batch.column("broker"), opts.replay.clusters))


def accounting(reports: list[TaskReport], split_files: list[dict]) -> dict:
    """Valid/padding/corrupt byte totals over every file: the tasks' sums of the files they
    decoded whole, plus the split files' rows the driver added up."""
    acct = ByteTotals()
    for r in reports:
        acct.add(r.totals)
    for row in split_files:
        acct.add_segment(row)
    return vars(acct)


SCRATCH = "_scratch"  # under a run's output directory: <out>/_scratch/<run key>/<table>/


class Scratch:
    """A run's scratch area, ``<out>/_scratch/<run key>/``, as the audit's plan reads it
    (:class:`replay.plan.ScanOutput`): the scan's tables (:func:`decoded_once`) and the
    plan's intermediate tables (:meth:`later`), Parquet in the run's own output directory so
    that every executor reaches it.

    An intermediate table is written there and read back: the stages after it start from
    those files, and their plans no longer carry the lineage a cached DataFrame keeps for
    recomputation (Spark ships a stage's plan and lineage with every task: ~30 MB per task on
    the every-scenario dump, half the audit's time); files are also reliable where an executor
    is lost. Each is planned and written on a background thread of the driver while the job
    writes the tables that do not read it: a small dump's Spark jobs are mostly the driver's
    planning and scheduling latency, so jobs in flight side by side keep the cores busy."""

    def __init__(self, spark, area, key: str, scanned: Scanned, opts: ScanOptions,
                 dump_bytes: int) -> None:  # fmt: skip
        self.spark, self.area, self.key = spark, area, key
        self.entries, self.opts = scanned.tables, opts
        # the output tables the scan's tasks wrote in part (ScanWritten): table -> files
        self.written = scanned.written or {}
        self.replicas = scanned.replicas  # one row per partition replica replayed
        self.accounting = scanned.accounting  # the bytes the scan read (valid, corrupt...)
        self.spec = opts.decode.replay  # what the replay knew of the dump (its layout)
        self.dump_bytes = dump_bytes
        self.background = None
        self.pending: list = []
        # the first pool's tables not planned yet (first_planned)
        self.unplanned = 0
        self.planning = threading.Condition()
        # each table (and each kind of a replay table's rows) as one DataFrame, made when first
        # asked for: the plan reads them many times, from several threads, and each reading
        # made anew was a file listing and a few hundred calls into the driver's JVM (a
        # column reference each), a share of a small dump's audit
        self.opened: dict[tuple, object] = {}
        self.opening = threading.RLock()  # rows() opens its table inside

    def _kept(self, key: tuple, make):
        with self.opening:
            if key not in self.opened:
                self.opened[key] = make()
            return self.opened[key]

    def table(self, name: str, topics: list[str] | None = None):
        """A table of the scan, read back as a DataFrame (of ``topics`` only, if given: the
        decoded tables' files are partitioned by topic, and Spark reads only theirs)."""
        from pyspark.sql import functions as F

        from jobs.output import read_table
        from replay.sql import names

        def read():
            df = read_table(self.spark, self.area, name, self.entries[name])
            if topics is not None:
                df = df.filter(F.col("topic").isin(*topics))
            # the partition column in its place, the columns named in one expression list
            return df.selectExpr(*names(self.opts.schemas[name][0].fieldNames()))

        return self._kept(("table", name, None if topics is None else tuple(topics)), read)

    def rows(self, table: str, kind: str):
        """A replay table's rows of one kind (the scan wrote each kind's as files of their
        own, a partition of the table, which Spark's filter prunes to)."""
        from pyspark.sql import functions as F

        from replay.replicas import kind_columns
        from replay.sql import names

        def read():
            df = self.table(table).filter(F.col("out") == kind)
            return df.selectExpr(*names(kind_columns(table, kind)))

        return self._kept(("rows", table, kind), read)

    def written_rows(self, name: str):
        """The rows of output table ``name`` the scan's tasks wrote into the output
        (:class:`ScanWritten`: its partitions only one broker holds), read as a DataFrame of
        the table's own columns; None where they wrote none."""
        from jobs.output import OutputDir, read_table

        files = [f for f in self.written.get(name, []) if f["rows"]]
        if not files:
            return None
        written = self.opts.written
        schema = json.loads(written.tables[name][0].schema.json())
        entry = {"schema": schema, "partition_by": None, "files": files}
        return self._kept(
            ("written", name), lambda: read_table(self.spark, OutputDir(written.base), name, entry)
        )

    def later(self, name: str, build, first: bool = False, findings: bool = True,
              write=None):  # fmt: skip
        """``build()`` written under ``stash/<name>/`` on a background thread and read back;
        gives what waits for it. ``first``: its jobs in the pool that goes first
        (:data:`jobs.session.POOLS`); ``findings`` does not matter: the job writes every
        table. ``write``: instead of ``build``, what writes the table itself (given its folder,
        gives its entry, as jobs.output.write_table does)."""
        return self._submit(name, build, first, write).result

    def _submit(self, name: str, build, first: bool, write):
        """:meth:`later`'s work submitted: its future."""
        from concurrent.futures import ThreadPoolExecutor

        from jobs.session import FIRST_POOL, STASH_POOL

        if self.background is None:
            self.background = ThreadPoolExecutor(2, thread_name_prefix="logreplay-stash")
        pool = FIRST_POOL if first else STASH_POOL
        if first:
            with self.planning:
                self.unplanned += 1
        future = self.background.submit(self._stash, name, build, pool, write)
        self.pending.append(future)
        return future

    def first_planned(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until the first pool's tables are planned: the
        driver's planning of a query is calls into its JVM, slowed where the executors' tasks
        take the cores (local mode: the same machine), and a job submitted after another
        waits for its tasks to leave a core; so the output tables' copies, which nothing
        waits for, start once the longest chain's query is planned (its stages then take
        each free core first), not beside its planning."""
        with self.planning:
            self.planning.wait_for(lambda: self.unplanned <= 0, timeout)

    def judged_cross(self, facts, stream, tasks: int, ids: str):
        """The cross-log judgement's table (replay.plan.Audit's ``cross``) judged by Python
        tasks over the scan's files (jobs.crosslog_scratch), in the first pool, and the
        transactions' lookup ``ids`` (their transactional ids) written beside it: what waits
        for the table, and what waits for the lookup's entry (jobs.audit.write_tables), which
        is written before the judgement starts: the transactions' copy runs beside it."""
        from concurrent.futures import FIRST_COMPLETED, Future, wait

        from jobs.crosslog_scratch import judge_scratch

        written: Future = Future()

        def write(folder: str) -> dict:
            cross, _ = judge_scratch(self.spark, self, folder, f"lookup/{ids}", facts, stream,
                                     tasks, written.set_result)  # fmt: skip
            return cross

        judged = self._submit("cross", None, True, write)

        def lookup() -> dict:
            wait([written, judged], return_when=FIRST_COMPLETED)
            if not written.done():
                judged.result()  # its error, or its cancelling, where the lookup was not written
            return written.result()

        return judged.result, lookup

    def _stash(self, name: str, build, pool: str, write=None):
        from jobs.output import read_table, write_table
        from jobs.session import FIRST_POOL, SCHEDULER_POOL

        # under the FAIR scheduler (conf/default.yaml), the pools the findings wait for: their
        # stages take free cores beside the output tables' copies and writes, not after them
        with suppress(Exception):  # Spark Connect: no SparkContext (its server schedules)
            self.spark.sparkContext.setLocalProperty(SCHEDULER_POOL, pool)
        folder = f"stash/{name}"
        try:
            df = build() if write is None else None
        finally:
            if pool == FIRST_POOL:
                with self.planning:
                    self.unplanned -= 1
                    self.planning.notify_all()
        if write is not None:
            entry = write(folder)
        else:
            entry = write_table(df, self.area, folder, 0, None, self.key, "audit:stash")
        return read_table(self.spark, self.area, folder, entry)

    def release(self) -> None:
        """Once the background writes have ended (however they ended: the caller's error is
        the one it sees)."""
        if self.background is not None:
            # its threads joined: every write that started has ended, those queued are
            # cancelled; a future neither (seen once, after an error on the driver) has nothing
            # left that could end it, and waiting for it would hang the run
            self.background.shutdown(wait=True, cancel_futures=True)
            for future in self.pending:
                future.cancel()
            self.background, self.pending = None, []


@contextmanager
def decoded_once(spark, files, conf: dict, out, key: str, skipped: dict[str, str] | None,
                 replay):  # fmt: skip
    """Decode the dump once into the run's scratch area, every replica replayed by the task
    that reads it (``replay``: a :class:`replay.replicas.ReplaySpec`), and give the
    :class:`Scratch` for the ``with`` block; the scratch area is removed after it. A killed
    attempt's scratch files are removed by the next attempt of the same run."""
    from decoders.spark import _struct
    from jobs.output import OutputDir
    from replay.scan_task import AUDIT_DECODED, audit_schema, replicated_partitions
    from replay.session_scan import parallelism

    scratch = OutputDir(out.child(f"{SCRATCH}/{key}"))
    _remove(scratch)

    def spark_schema(table: str, with_avro: bool):
        return _struct(audit_schema(table))

    tables = [*AUDIT_DECODED, *REPLAY_TABLES]
    opts = scan_options(spark_schema, tables, False, conf, None, replay)
    shared = replicated_partitions(files, replay)
    opts.decode = replace(opts.decode, headers_of=shared)
    opts.written = _scan_written(out, key, frozenset(shared))
    # what reads the scratch tables reads a kind's files whole, or a table's: no row group is
    # skipped by its statistics, which were a quarter of writing the replay tables' rows
    opts.statistics = ()
    # and they are the run's own, read by its Spark and pyarrow only: LZ4_RAW, which both
    # write and read faster than Snappy at about its size (docs/benchmarks.md)
    opts.compression = SCRATCH_COMPRESSION
    # the scratch tables' files are the run's own: as many tasks as keep the cores busy
    scanned = scan_tables(
        spark, files, opts, scratch.uri, key, int(conf["range_bytes"]), None, skipped,
        min_tasks=2 * parallelism(spark),
    )  # fmt: skip
    done = Scratch(spark, scratch, key, scanned, opts, sum(f.size for f in files))
    try:
        yield done
    finally:
        done.release()
        _remove(scratch)


def _scan_written(out, key: str, shared: frozenset) -> ScanWritten:
    """The output tables an audit's scan tasks write (:class:`ScanWritten`)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from replay.plan import scan_written

    tables = {
        name: (copied, to_arrow_schema(copied.schema, timezone="UTC"))
        for name, copied in scan_written().items()
    }
    return ScanWritten(out.uri, key, tables, shared)


def _remove(scratch) -> None:
    with suppress(FileNotFoundError, OSError):
        scratch.fs.delete_dir(scratch.root)
    if scratch.fs.type_name == "local":  # the scratch folder too, unless another run uses it
        with suppress(OSError):
            os.rmdir(scratch.root.rsplit("/", 1)[0])
