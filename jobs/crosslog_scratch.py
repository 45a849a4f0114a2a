"""The cross-log judgement over the scratch area's files, in Python tasks (replay.crosslog_runs).

Two Spark jobs of Python tasks, no rows through the JVM: the runs (each task reads its share of
the scan's ``replayed`` and ``coordinated`` files once and writes its stream rows as sorted
runs, Arrow IPC files in the scratch area, each kind's buckets one after another) and the
judgement (a task per bucket of producer ids: its runs merged and judged, the findings and
counts written as the ``cross`` table's Parquet files, which the plan reads back as it reads
any intermediate table: jobs.scan.Scratch.later). A small dump's (replay.plan.one_task) is one
task doing both, its runs held in memory. Only file names and row counts reach the driver.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from decoders import seams
from decoders.planning import TaskPlans
from jobs.copies import BATCH_ROWS as READ_ROWS
from jobs.copies import THREADS, in_runs
from replay.crosslog_runs import (
    BATCH_ROWS,
    COORD,
    IDS,
    KINDS,
    OUTPUT,
    SOURCES,
    ProducerIds,
    RunWriter,
    StreamFacts,
    fanned_in,
    judge_runs,
    stream_rows,
)
from replay.replicas import REPLICA_KEYS, kind_columns

RUNS = "cross-runs"  # under the scratch area: the runs' files


@dataclass(frozen=True)
class RunsTask:
    """One runs task: scratch files (table, path, kind of row) read in order."""

    part: int
    files: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class JudgeTask:
    """One judging task: its bucket's runs of each kind, each (path, first batch, batches);
    ``files``: the runs tasks' files where the task makes its runs itself (one task)."""

    bucket: int
    runs: dict[int, tuple[tuple[str, int, int], ...]]
    files: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Written:
    """Where a task writes a table: its folder in the scratch area, the run's key, the schema."""

    folder: str
    key: str
    schema: object  # Arrow

    def writer(self, area: str, part: int, attempt: int):
        from jobs.output import _TaskFiles

        return _TaskFiles(area, self.folder, part, attempt, self.key, self.schema, None)


def judge_scratch(spark, scratch, folder: str, ids_folder: str, facts, stream: StreamFacts,
                  tasks: int, ids_ready=None) -> tuple[dict, dict]:  # fmt: skip
    """The ``cross`` table (replay.crosslog_runs.OUTPUT) of the scan in ``scratch`` (a
    jobs.scan.Scratch) written under ``folder`` of its area, and the transactions' lookup of
    transactional ids (replay.crosslog_runs.IDS) under ``ids_folder``; their entries, as
    jobs.output.write_table gives them. ``tasks``: the runs tasks at most; one means one
    task for both steps. The runs tasks write the lookup (each the ids of the coordinator
    transactions it reads: replay.crosslog_runs.ProducerIds), so that what joins it need
    not wait for the judgement: ``ids_ready`` is given its entry as soon as it is written."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from jobs.output import described, table_entry
    from replay.plan import struct_type

    schema, ids_schema = struct_type(OUTPUT), struct_type(IDS)
    out = Written(folder, scratch.key, to_arrow_schema(schema, timezone="UTC"))
    ids_out = Written(ids_folder, scratch.key, to_arrow_schema(ids_schema, timezone="UTC"))
    area = scratch.area.uri
    listed, rows = [], []
    for table, kinds in SOURCES.items():  # (a replay table's files are each of one kind)
        for f in scratch.entries.get(table, {}).get("files", ()):
            if f["rows"] and f.get("partition") in kinds:
                listed.append((table, f["path"], f["partition"]))
                rows.append(f["rows"])

    def entry(where: Written, s, written: list[dict]) -> dict:
        files = [f for f in written if f["path"].startswith(f"{where.folder}/")]
        return table_entry(area, where.folder, where.key, s, files)

    ready = ids_ready is None  # whether ids_ready has what it waits for
    if tasks <= 1 or stream.buckets <= 1:
        judging = [JudgeTask(0, {}, tuple(listed))] if listed else []
        ids_written: list[dict] = []
    else:
        judging, ids_written = _made_runs(spark, in_runs(listed, rows, tasks), area, stream,
                                          ids_out)  # fmt: skip
        if not ready:
            ids_ready(entry(ids_out, ids_schema, ids_written))
            ready = True
    judge_plans = TaskPlans(judging)

    def judge(batches):  # no hints: Spark infers its UDF type from them
        import pyarrow as pa
        from pyspark import TaskContext

        from replay.session_scan import settled

        settled()
        attempt = TaskContext.get().attemptNumber()
        for b in batches:
            for i in b.column(0).to_pylist():
                written = judge_task(judge_plans[i], i, area, (out, ids_out), attempt, facts,
                                     stream)  # fmt: skip
                yield pa.RecordBatch.from_arrays([pa.array([json.dumps(written)])],
                                                 names=["files"])  # fmt: skip

    done = []
    if judging:
        n = len(judging)
        with described(spark, "logreplay: cross-log judgement"):
            done = spark.range(0, n, 1, n).mapInArrow(judge, "files string").collect()
    written = ids_written + [f for r in done for f in json.loads(r["files"])]
    ids_entry = entry(ids_out, ids_schema, written)
    if not ready:  # one task made the runs and judged them
        ids_ready(ids_entry)
    return entry(out, schema, written), ids_entry


def _made_runs(spark, parts: list[list], area: str, stream: StreamFacts, ids_out: Written
               ) -> tuple[list[JudgeTask], list[dict]]:  # fmt: skip
    """The runs job (a task per part of the scan's files): the judging tasks of the runs it
    made, and the files of the transactions' lookup it wrote."""
    from jobs.output import described

    plans = TaskPlans(RunsTask(i, tuple(run)) for i, run in enumerate(parts))

    def make_runs(batches):  # no hints: Spark infers its UDF type from them
        import pyarrow as pa
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        for b in batches:
            for i in b.column(0).to_pylist():
                made = runs_task(plans[i], area, stream, attempt, ids_out)
                yield pa.RecordBatch.from_arrays([pa.array([json.dumps(made)])],
                                                 names=["runs"])  # fmt: skip

    n = len(plans)
    with described(spark, "logreplay: cross-log runs"):
        made = spark.range(0, n, 1, n).mapInArrow(make_runs, "runs string").collect()
    by_bucket: dict[int, dict[int, list]] = {}
    ids_written: list[dict] = []
    for r in made:
        task_runs, files = json.loads(r["runs"])
        ids_written += files
        for kind, bucket, path, first, count in task_runs:
            by_bucket.setdefault(bucket, {}).setdefault(kind, []).append((path, first, count))
    judging = [JudgeTask(b, {k: tuple(v) for k, v in sorted(runs.items())})
               for b, runs in sorted(by_bucket.items())]  # fmt: skip
    return judging, ids_written


def _scratch_rows(scratch, files, stream: StreamFacts):
    """Every stream row (kind, rows) of scratch ``files`` (table, path, the kind of row its
    rows are), in their order, a batch of a file at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for table, path, kind in files:
        with scratch.fs.open_input_file(scratch.path(path)) as f:
            file = pq.ParquetFile(f)
            wanted = {*(k.name for k in REPLICA_KEYS), *kind_columns(table, kind)}
            columns = [c for c in file.schema_arrow.names if c in wanted]
            for batch in file.iter_batches(READ_ROWS, columns=columns, use_threads=THREADS):
                if batch.num_rows:
                    made = stream_rows(table, kind, pa.Table.from_batches([batch]), stream)
                    if made is not None:
                        yield made


class _RunFiles:
    """A runs task's files (Arrow IPC, lz4): one per flush and kind of row, each bucket's run
    a range of its batches; closed whatever ends the task."""

    def __init__(self, scratch, part: int, attempt: int) -> None:
        self.scratch, self.part, self.attempt = scratch, part, attempt
        self.flush = 0  # the writer's flushes so far
        self.made: list[tuple] = []  # (kind, bucket, path, first batch, batches)
        self.open: tuple | None = None  # ((flush, kind), sink, writer, path, batches)

    def __enter__(self) -> _RunFiles:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.open is not None:
            _, sink, writer, _, _ = self.open
            writer.close()
            sink.close()
            self.open = None

    def write(self, kind: int, bucket: int, t) -> None:
        import pyarrow as pa

        at = (self.flush, kind)
        if self.open is None or self.open[0] != at:  # a flush's kinds come one after another
            self.close()
            rel = f"{RUNS}/part-{self.part:05d}-{self.attempt}-{self.flush:04d}-{kind}.arrow"
            self.scratch.fs.create_dir(self.scratch.path(RUNS), recursive=True)
            sink = self.scratch.fs.open_output_stream(self.scratch.path(rel))
            options = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=THREADS)
            self.open = (at, sink, pa.ipc.new_file(sink, t.schema, options=options), rel, 0)
        _, sink, writer, rel, first = self.open
        batches = t.to_batches(BATCH_ROWS)
        for batch in batches:
            writer.write_batch(batch)
        self.made.append((kind, bucket, rel, first, len(batches)))
        self.open = (at, sink, writer, rel, first + len(batches))


def runs_task(task: RunsTask, area: str, stream: StreamFacts, attempt: int,
              ids_out: Written) -> tuple[list, list[dict]]:  # fmt: skip
    """One runs task: its stream rows written as sorted runs under :data:`RUNS`, each run as
    (kind, bucket, path, first batch, batches); and the ids of the producers whose
    coordinator transactions it read, as a file of the lookup ``ids_out`` (its files)."""
    from jobs.output import OutputDir

    scratch = OutputDir(area)
    ids = ProducerIds()
    with _RunFiles(scratch, task.part, attempt) as files:
        writer = RunWriter(stream, files.write)
        for kind, rows in _scratch_rows(scratch, task.files, stream):
            if kind == COORD:
                ids.add(rows)
            writer.add(kind, rows)
            if not writer.rows:  # it wrote what it held
                files.flush += 1
        writer.flush()
    return files.made, _write_ids(ids, ids_out, area, task.part, attempt)


def _write_ids(ids: ProducerIds, where: Written, area: str, part: int, attempt: int
               ) -> list[dict]:  # fmt: skip
    """A task's :class:`ProducerIds` written as a file of the lookup (none where it saw no
    coordinator transaction): its files."""
    from jobs.output import task_files

    table = ids.table()
    if not table.num_rows:
        return []
    sink = where.writer(area, part, attempt)
    try:
        sink.write(table.cast(where.schema))
    except BaseException:
        sink.abort()
        raise
    return task_files(sink.close())


def _stored_run(batches):
    """A merge pass's run (:func:`replay.crosslog_runs.fanned_in`), written whole to a local
    spill file (replay.replicas.SpillFile) and read back a batch at a time; the file removed
    once read, or when the run is dropped unread."""
    from replay.replicas import SpillFile

    spill = SpillFile()
    for b in batches:
        spill.write(b)
    return _read_once(spill)


def _read_once(spill):
    try:
        yield from spill.read()
    finally:
        spill.close()


def _run_batches(scratch, path: str, first: int, count: int):
    import pyarrow as pa

    with scratch.fs.open_input_file(scratch.path(path)) as f:
        reader = pa.ipc.open_file(f, options=pa.ipc.IpcReadOptions(use_threads=THREADS))
        for i in range(first, first + count):
            yield reader.get_batch(i)


def judge_task(task: JudgeTask, part: int, area: str, outs: tuple[Written, Written],
               attempt: int, facts, stream: StreamFacts) -> list[dict]:  # fmt: skip
    """One judging task: its bucket's producer ids judged, written as one Parquet file of
    ``outs[0]``; where it makes its runs itself (one task for both steps), their
    transactional ids as a file of the lookup ``outs[1]``."""
    from jobs.output import OutputDir, task_files

    scratch = OutputDir(area)
    out, ids_out = outs
    ids_files: list[dict] = []
    if task.files:  # one task: its runs made here, held
        held: dict[int, list] = {k: [] for k in KINDS}
        ids = ProducerIds()
        writer = RunWriter(stream, lambda kind, _b, t: held[kind].append(t), 1 << 62, 1 << 62)
        for kind, rows in _scratch_rows(scratch, task.files, stream):
            if kind == COORD:
                ids.add(rows)
            writer.add(kind, rows)
        writer.flush()
        runs_of = {k: [iter(t.to_batches(BATCH_ROWS)) for t in ts] for k, ts in held.items()}
        ids_files = _write_ids(ids, ids_out, area, part, attempt)
    else:  # a kind of many runs (a long history) merged in passes first, through local files
        runs_of = {
            k: fanned_in([_run_batches(scratch, *run) for run in runs], _stored_run)
            for k, runs in task.runs.items()
        }
    sink = out.writer(area, part, attempt)
    try:
        for i, t in enumerate(judge_runs(runs_of, facts, stream.clusters)):
            sink.write(t.cast(out.schema))
            if i == 0:
                seams.reached("audit:stash")
    except BaseException:
        sink.abort()
        raise
    return task_files(sink.close()) + ids_files
