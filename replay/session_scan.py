"""The audit's scan in a user's own session: the same tasks as the jobs' scan, kept in Spark.

:func:`replay.audit` runs in a session the user made (any master, Spark Connect, any time zone
and settings), where the audit has no output directory for a scratch area. Its scan is the
jobs' scan all the same (:class:`replay.scan_task.ScanTask`: every file decoded once, every
replica replayed in the task that reads it), run with ``mapInArrow``; what a task gives, its
tables' batches and its report, leaves it as rows of (table, Arrow IPC stream) that Spark
keeps in its cache (memory, then disk), and each table is read back from there by a
``mapInArrow`` that opens the streams. A replay table's streams hold one kind of its rows
each, with that kind's columns (:func:`replay.replicas.kind_columns`), and each kind is opened
and kept on its own when the plan first asks for it: counting the findings converts the
transactions, never the LSO changes. So the session and the jobs replay alike, with the same
tasks, and a session's audit costs what the job's does rather than a plan of grouped replays
over a data source.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from decoders.planning import TaskPlans
from replay.replicas import (
    REPLAY_KINDS,
    REPLAY_TABLES,
    ReplaySpec,
    ReplicaRow,
    kind_columns,
    kinds_apart,
)
from replay.scan_task import (
    DecodeOptions,
    ScanTask,
    TaskReport,
    audit_options,
    audit_schema,
    left_out_rows,
    replica_tasks,
)
from replay.settings import AuditConfig
from replay.tables import clusters_of, with_cluster

REPORT = ""  # the ``table`` of a task's report row (its ``data``: the report as JSON)
KIND_MARK = "/"  # between a replay table's name and a kind of its rows, in ``table``
ROWS_SCHEMA = "table string, data binary"
# a task's batches of one table wait for these many rows or bytes, then leave as one stream
FLUSH_ROWS = 65_536
FLUSH_BYTES = 8 << 20
QUEUE_DEPTH = 4  # chunks a task's replay runs ahead of what has left the task
HANDOFF_BYTES = 4 << 20  # a chunk handed over between a task's threads


_SETTLED = [False]


def settled() -> None:
    """In a Python worker, once its modules are imported: ``gc.freeze()`` what it holds.
    PySpark's worker runs a full garbage collection after every task, which otherwise walks
    the objects of numpy, pyarrow, pandas and numba each time (a few hundred ms a task); the
    jobs' worker daemon (jobs.daemon) does the same before it forks."""
    if not _SETTLED[0]:
        import gc

        gc.freeze()
        _SETTLED[0] = True


def parallelism(spark: SparkSession) -> int:
    """The cores Spark runs tasks on (Spark Connect has no SparkContext to ask: its
    ``spark.default.parallelism`` if set, else 2)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect raises its own "not supported" error for sparkContext
        return int(spark.conf.get("spark.default.parallelism", "0") or 0) or 2


def spark_schemas(table: str, kind: str | None = None):
    """(Spark schema, its Arrow form as Spark exchanges it) of a table of an audit's scan, or
    of its rows of one ``kind`` (a replay table's: :func:`replay.replicas.kind_columns`)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from decoders.spark import _struct

    struct = _struct(audit_schema(table))
    if kind is not None:
        own = set(kind_columns(table, kind))
        struct = StructType([f for f in struct.fields if f.name in own])
    return struct, to_arrow_schema(struct, timezone="UTC")


def stream_keys(tables) -> dict[str, tuple[str, str | None]]:
    """The ``table`` of each kind of stream a scan task gives: a decoded table's name, or a
    replay table's and one kind of its rows -> (table, kind or None)."""
    keys: dict[str, tuple[str, str | None]] = {}
    for table in tables:
        if table in REPLAY_KINDS:
            keys.update({f"{table}{KIND_MARK}{k}": (table, k) for k in REPLAY_KINDS[table]})
        else:
            keys[table] = (table, None)
    return keys


def by_kind(table: str, batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
    """A batch a scan task gives, as (stream key, batch): a replay table's rows of each kind
    with that kind's columns; a decoded table's as it is."""
    kinds = REPLAY_KINDS.get(table)
    if kinds is None:
        yield table, batch
        return
    for kind, rows in kinds_apart(batch):
        if kind not in kinds:  # a replay gives no other: its rows would have no table
            raise ValueError(f"rows of kind {kind!r} in the replay table {table}")
        yield f"{table}{KIND_MARK}{kind}", rows.select(kind_columns(table, kind))


class CachedScan:
    """The scan's output in Spark's cache (:class:`replay.plan.ScanOutput`)."""

    def __init__(
        self,
        spark: SparkSession,
        paths: list[str],
        config: AuditConfig,
        spec: ReplaySpec,
        skip: dict[str, str],
        files: list | None = None,
    ) -> None:
        """``files``: the dump's files as the spec's listing gave them, else listed here."""
        import decoders

        self.spark, self.cached, self.spec = spark, [], spec
        self.background, self.pending = None, []
        self.opened: dict[str, DataFrame] = {}
        self.opening = threading.Lock()  # the background builds open kinds of rows too
        files = decoders.discover(paths) if files is None else files
        self.dump_bytes = sum(f.size for f in files)
        left_out = [f for f in files if f.path in skip]
        files = [f for f in files if f.path not in skip]
        opts = audit_options(files, config, spec)
        tasks = replica_tasks(files, config.range_bytes, 2 * parallelism(spark))
        # each stream's (Spark schema, Arrow schema), by key: a decoded table's name, or a
        # replay table's and a kind of its rows
        self.streams = {key: spark_schemas(*of) for key, of in stream_keys(opts.tables).items()}
        arrow = {key: s[1] for key, s in self.streams.items()}

        plans = TaskPlans(tasks)  # each task unpickles its own ranges

        def scan(batches):  # no hints: Spark infers its UDF type from them
            settled()
            for b in batches:
                for i in b.column(0).to_pylist():
                    yield from task_rows(plans[i], opts, arrow)

        n = max(len(tasks), 1)
        self.output = self._keep(spark.range(0, len(tasks), 1, n).mapInArrow(scan, ROWS_SCHEMA))
        reports = [
            TaskReport.from_json(json.loads(r["data"]))
            for r in self.output.filter(F.col("table") == REPORT).select("data").collect()
        ]
        self.replicas: list[ReplicaRow] = [row for r in reports for row in r.replicas]
        from replay.plan import stage_tasks

        self.partitions = stage_tasks(spark, self.dump_bytes)
        self.extra = self._left_out(left_out, skip, spec)

    def table(self, name: str, topics: list[str] | None = None) -> DataFrame:
        """A decoded table of the scan (of ``topics`` only, if given), read once."""
        if name in REPLAY_TABLES:
            raise ValueError(f"{name} is read a kind of rows at a time (rows)")
        return self._open(name, topics)

    def rows(self, table: str, kind: str) -> DataFrame:
        """A replay table's rows of one kind, opened when first asked for and kept: the
        stages after read each several times, and every later read is Spark's own."""
        key = f"{table}{KIND_MARK}{kind}"
        with self.opening:  # the background builds ask too
            if key not in self.opened:
                self.opened[key] = self._keep(self._open(key))
            return self.opened[key]

    def _open(self, key: str, topics: list[str] | None = None) -> DataFrame:
        struct, arrow = self.streams[key]
        wanted = None if topics is None else pa.array(sorted(set(topics)), pa.string())

        def opened(batches):  # no hints: Spark infers its UDF type from them
            settled()
            for b in batches:
                for data in b.column(0).to_pylist():
                    for batch in pa.ipc.open_stream(data):
                        if wanted is not None:  # before Spark converts the rows
                            batch = batch.filter(pc.is_in(batch.column("topic"), wanted))
                        yield batch

        rows = self.output.filter(F.col("table") == key).select("data")
        # as many partitions as the stages after run tasks (the scan's tasks keep the cores
        # busy; a table of a few rows per partition need not be read by as many)
        df = rows.coalesce(self.partitions).mapInArrow(opened, struct)
        if key in self.extra:
            df = df.unionByName(self.extra[key])
            if topics is not None:
                df = df.filter(F.col("topic").isin(*topics))
        return df

    def written_rows(self, name: str) -> DataFrame | None:
        """None: the session's scan writes no output table itself (:meth:`rows` has them)."""
        return None

    def later(self, name: str, build: Callable[[], DataFrame], first: bool = False,
              findings: bool = True) -> Callable[[], DataFrame]:  # fmt: skip
        """``build()`` kept, and computed at once on a background thread of the driver if the
        findings read it: the cross-log and leakage stages run side by side with each other
        and with the planning of the tables that read them, as the job's do (a small dump's
        Spark jobs are mostly latency); a query that reads it meanwhile waits for its cached
        pieces. What only other tables read (the checks' counts) is planned and kept when
        one of them is first asked for: a caller that counts the findings pays nothing for
        it."""
        from concurrent.futures import ThreadPoolExecutor

        from pyspark.util import inheritable_thread_target

        if not findings:
            return _once(lambda: self._keep(build()))
        df = self._keep(build())
        if self.background is None:
            self.background = ThreadPoolExecutor(2, thread_name_prefix="logreplay-later")
        # the caller's job group, description and tags go with it (Spark's pinned threads)
        counted = inheritable_thread_target(self.spark)(df.count)
        self.pending.append(self.background.submit(counted))
        return lambda: df

    def release(self) -> None:
        """Once the background computations have ended (however they ended: the caller's
        error is the one it sees)."""
        from concurrent.futures import wait

        if self.background is not None:
            self.background.shutdown(wait=True, cancel_futures=True)
            wait(self.pending)
            self.background, self.pending = None, []
        for df in self.cached:
            df.unpersist()
        self.cached = []

    def _keep(self, df: DataFrame) -> DataFrame:
        from pyspark import StorageLevel

        self.cached.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    def _left_out(self, files, skip, spec: ReplaySpec) -> dict[str, DataFrame]:
        """The segments and errors rows of the files left out, made on the driver."""
        from decoders.schemas import from_rows

        out = {}
        for table, rows in left_out_rows(files, skip).items():
            if not rows:
                continue
            t = from_rows(table, rows)
            t = with_cluster(t, clusters_of(t.column("broker"), spec.clusters))
            made = spark_rows(t.to_batches(), table, self.streams[table][1])
            out[table] = self.spark.createDataFrame(made)
        return out


def _once(make: Callable[[], DataFrame]) -> Callable[[], DataFrame]:
    """``make`` called by the first caller only (whichever thread), its result given to all."""
    lock, made = threading.Lock(), []

    def get() -> DataFrame:
        with lock:
            if not made:
                made.append(make())
            return made[0]

    return get


def task_rows(ranges, opts: DecodeOptions, arrow: dict[str, pa.Schema]) -> Iterator[pa.RecordBatch]:
    """One scan task's output as rows of (table, Arrow IPC stream): its tables' batches
    gathered per table (a replay table's per kind of rows: :func:`by_kind`) into streams of up
    to :data:`FLUSH_ROWS` rows or :data:`FLUSH_BYTES`, then its report; ``arrow``: each
    stream's schema by key. The task runs on a thread of its own and hands its batches over in
    chunks through a queue (:func:`_handed_over`), so that what it holds is bounded however
    long the replays' output (the replays hand their rows on through a callback, a block at a
    time); the rows a replica hands on from a previous run go out a slice at a time, with what
    waits of their stream (ScanTask's ``sink_now``)."""
    pending: dict[str, list[pa.RecordBatch]] = {}
    held: dict[str, list[int]] = {}
    tables: dict[str, str] = {}  # stream key -> its table

    def stream(key: str) -> pa.RecordBatch:
        rows = spark_rows(pending.pop(key), tables[key], arrow[key])
        held.pop(key)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, arrow[key]) as w:
            w.write_table(rows)
        return _row(key, sink.getvalue().to_pybytes())

    report: list[TaskReport] = []

    def work(give: Callable[[str, pa.RecordBatch, bool], None]) -> None:
        task = ScanTask(opts, lambda t, b: give(t, b, False), lambda t, b: give(t, b, True))
        report.append(task.run(ranges))

    for table, given, now in _handed_over(work):
        for key, batch in by_kind(table, given):
            tables[key] = table
            pending.setdefault(key, []).append(batch)
            n = held.setdefault(key, [0, 0])
            n[0] += batch.num_rows
            n[1] += batch.get_total_buffer_size()
            if now or n[0] >= FLUSH_ROWS or n[1] >= FLUSH_BYTES:
                yield stream(key)
    for key in list(pending):
        yield stream(key)
    yield _row(REPORT, json.dumps(report[0].to_json()).encode())


def spark_rows(batches: list[pa.RecordBatch], table: str, target: pa.Schema,
               avro_topics: dict | None = None) -> pa.Table:  # fmt: skip
    """A scan task's batches of one table as one table in ``target``, the Arrow form of its
    Spark schema: the replays' tables are made in it; decoded ones are converted together
    (:func:`decoders.spark.spark_table`)."""
    if table in REPLAY_TABLES:
        return pa.Table.from_batches(batches).cast(target)
    from decoders.spark import spark_table

    return spark_table(batches, table, target, avro_topics)


def _row(table: str, data: bytes) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([table], pa.string()), pa.array([data], pa.binary())], names=["table", "data"]
    )


class _Closed(Exception):
    """The consumer of :func:`_handed_over` stopped early: the producer gives up."""


_END = object()


def _handed_over(work: Callable[[Callable[[str, pa.RecordBatch, bool], None]], None]):
    """What ``work(give)`` gives (table, batch, whether it goes out at once), as an iterator:
    ``work`` runs on a thread of its own; what it gives is handed over in chunks of
    :data:`HANDOFF_BYTES` (a hand-over per batch costs a switch between the threads each), at
    most :data:`QUEUE_DEPTH` chunks waiting; an exception of ``work`` is raised here; closing
    the iterator early stops ``work`` at its next hand-over."""
    q: queue.Queue = queue.Queue(QUEUE_DEPTH)
    closed = threading.Event()
    failure: list[BaseException] = []
    chunk: list[tuple[str, pa.RecordBatch, bool]] = []
    held = [0]

    def put(item) -> None:
        while not closed.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Closed

    def give(table: str, batch: pa.RecordBatch, now: bool) -> None:
        chunk.append((table, batch, now))
        held[0] += batch.get_total_buffer_size()
        if held[0] >= HANDOFF_BYTES:
            put(list(chunk))
            chunk.clear()
            held[0] = 0

    def run() -> None:
        try:
            work(give)
            put(list(chunk))
        except _Closed:
            pass
        except BaseException as e:  # noqa: BLE001 - raised again on the consumer's side
            failure.append(e)
        finally:
            with contextlib.suppress(_Closed):
                put(_END)

    worker = threading.Thread(target=run, name="logreplay-scan-task", daemon=True)
    worker.start()
    try:
        while True:
            items = q.get()
            if items is _END:
                break
            yield from items
    finally:
        closed.set()
        worker.join()
    if failure:
        raise failure[0]
