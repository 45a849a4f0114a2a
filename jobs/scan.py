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
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import NamedTuple

from decoders.planning import SPLITTABLE, ByteRange, pack, pack_units, split
from replay.replicas import REPLAY_READS, REPLAY_TABLES

CHANGED = "file changed size from"  # the reason decoders give a file that changed while read
# a task's decoded rows of one table wait for these many rows or bytes before being written
FLUSH_ROWS = 65_536
FLUSH_BYTES = 8 << 20
SUMMED = ("size", "bytes_valid", "bytes_padding", "bytes_corrupt", "entries", "records")


@dataclass
class ScanOptions:
    """What every task needs besides its ranges (pickled into the tasks)."""

    tables: list[str]
    deep: bool
    verify_crc: bool
    window_bytes: int | None
    memory_budget: int | None
    avro: dict | None
    # table -> (its Spark schema, the Arrow schema of its Parquet files)
    schemas: dict = field(default_factory=dict)
    partition_by: dict = field(default_factory=dict)  # table -> partition column or None
    # the audit's: replay every partition replica in the task that reads it (its files all in
    # one task), writing the replay.replicas.REPLAY_TABLES too
    replay: object | None = None

    @property
    def decoded(self) -> list[str]:
        """The decoders' tables the run writes (the others come from the replay)."""
        return [t for t in self.tables if t not in REPLAY_TABLES]

    @property
    def decoding(self) -> set[str]:
        """The decoders' tables the tasks decode: the written ones and what the replay reads."""
        return set(self.decoded) | (set(REPLAY_READS) if self.replay is not None else set())


def plan_scan(files, tables, range_bytes: int, min_tasks: int = 1,
              whole_replicas: bool = False) -> list[list[ByteRange]]:  # fmt: skip
    """Every file of the dump (each one is accounted for), logs larger than ``range_bytes``
    split at batch boundaries when a splittable table is asked for; packed into tasks (at
    least about ``min_tasks`` of them when the files allow). ``whole_replicas``: every file of
    one partition directory in one task, in the order discovered (logs by base offset), none
    split: the task replays the replica (a partition's replay is sequential by nature)."""
    if whole_replicas:
        units: dict[object, list[ByteRange]] = {}
        for f in files:
            key = replica_of(f) or ("file", f.path)
            units.setdefault(key, []).append(ByteRange(f, 0, f.size))
        return [t.ranges for t in pack_units(list(units.values()), range_bytes, min_tasks)]
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


def replica_of(f) -> tuple[str, str, int] | None:
    """(broker, topic, partition) of a file in a partition directory; None for the others."""
    if f.info.topic is None or f.info.partition is None:
        return None
    return (f.info.broker or "", f.info.topic, f.info.partition)


def scan_options(spark_schema_of, tables, deep, decode_conf, avro_topics) -> ScanOptions:
    """The options of a scan (a decode's, deep; an audit's, header-only); ``spark_schema_of(table,
    with_avro)`` gives a table's Spark schema (the Parquet files get the Arrow schema Spark's own
    writer path gave them)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    opts = ScanOptions(
        tables=list(tables),
        deep=deep,
        verify_crc=bool(decode_conf["verify_crc"]),
        window_bytes=int(decode_conf["window_bytes"]) if decode_conf.get("window_bytes") else None,
        memory_budget=int(decode_conf["memory_budget_mb"]) << 20
        if decode_conf.get("memory_budget_mb")
        else None,
        avro=avro_topics or None,
    )
    for t in tables:
        schema = spark_schema_of(t, t == "records" and bool(avro_topics))
        opts.schemas[t] = (schema, to_arrow_schema(schema, timezone="UTC"))
        opts.partition_by[t] = "topic" if "topic" in schema.fieldNames() else None
    return opts


def run_scan(spark, tasks: list[list[ByteRange]], opts: ScanOptions, base: str, key: str,
             kill: str) -> list[dict]:  # fmt: skip
    """Decode every task's ranges in Spark tasks, each writing its tables under ``base``; the
    small reports of the tasks (files written, accounting) come back."""
    n = len(tasks)
    done = _byte_counter(spark)

    def scan(batches):  # no hints: Spark infers its UDF type from them
        import pyarrow as pa
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        for b in batches:
            for i in b.column(0).to_pylist():
                reports = scan_ranges(tasks[i], opts, base, key, i, attempt, kill)
                if done is not None:
                    done.add(sum(r.size for r in tasks[i]))
                yield pa.RecordBatch.from_arrays(
                    [pa.array([json.dumps(r) for r in reports], pa.string())], names=["report"]
                )

    from jobs.output import described

    with described(spark, f"logreplay: scan ({', '.join(opts.tables)})"):
        rows = spark.range(0, n, 1, n).mapInArrow(scan, "report string").collect()
    return [json.loads(r["report"]) for r in rows]


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


def scan_ranges(ranges, opts: ScanOptions, base: str, key: str, task: int, attempt: int,
                kill: str | None = None) -> list[dict]:  # fmt: skip
    """One task: decode ``ranges`` once, write every requested table; the reports."""
    import decoders
    from jobs.output import _TaskFiles, kill_point

    sinks: dict[str, _TaskFiles] = {}
    reports: list[dict] = []
    totals = dict.fromkeys(("files", "size", "valid", "padding", "corrupt", "errors"), 0)
    first = [True]
    # decoded batches wait per table and go to Parquet together: a dump of many small files
    # gives a few rows per file, and one conversion and one row group per file cost more than
    # decoding them (13,966 writes: 9 of the 23 CPU s of the every-scenario dump's scan)
    pending: dict[str, list] = {}
    held = {t: [0, 0] for t in opts.tables}  # rows, bytes
    limit = min(FLUSH_BYTES, opts.memory_budget // 16) if opts.memory_budget else FLUSH_BYTES

    def write(table: str, batch) -> None:
        pending.setdefault(table, []).append(batch)
        held[table][0] += batch.num_rows
        held[table][1] += batch.nbytes
        if held[table][0] >= FLUSH_ROWS or held[table][1] >= limit:
            flush(table)

    def flush(table: str) -> None:
        batches, held[table] = pending.pop(table, None), [0, 0]
        if not batches:
            return
        if table not in sinks:
            arrow = opts.schemas[table][1]
            sinks[table] = _TaskFiles(base, table, task, attempt, key, arrow,
                                      opts.partition_by[table])  # fmt: skip
        sinks[table].write(_converted(batches, table, opts))
        if first[0]:
            first[0] = False
            if kill:
                kill_point(kill)

    from decoders.internal import internal_tables_for
    from decoders.layout import LOG_KINDS

    # a header-only run (the audit) decodes the records of the internal topics only, in a
    # second pass over their ranges: the batch-level tables and the accounting stay exactly
    # those of the header scan
    records = set() if opts.deep else opts.decoding & decoders.RECORD_TABLES
    wanted = (opts.decoding - records) | {"segments"}
    replica = None  # the replica whose files the task is reading (whole_replicas plans)

    def replayed() -> None:
        if replica is None:
            return

        def written(table: str, rows) -> None:  # a block of the replay's rows, as it goes
            for b in rows.to_batches():
                write(table, b)

        row = replica.replay(written)
        if row is not None:
            reports.append({"kind": "replica", **row})  # the driver chooses replicas from these

    if opts.replay is not None:
        from replay.replicas import ReplicaReplay
    try:
        for r in ranges:
            if opts.replay is not None:
                home = replica_of(r.file)
                if replica is None or home != replica.key:
                    replayed()
                    replica = None if home is None else ReplicaReplay(opts.replay, *home)
            partial = r.start != 0 or r.stop < r.file.size
            held_errors = None
            passes = [(wanted, opts.deep)]
            internal = set(internal_tables_for(r.file.info.topic)) & records
            if internal and r.file.kind.split(".")[0] in LOG_KINDS:
                passes.append((internal, True))
            for table, batch in (
                tb
                for tables, deep in passes
                for tb in decoders.iter_file(
                    r.file,
                    tuple(sorted(tables)),
                    deep=deep,
                    verify_crc=opts.verify_crc,
                    start=r.start,
                    stop=r.stop if r.stop < r.file.size else None,
                    window_bytes=opts.window_bytes,
                    memory_budget=opts.memory_budget,
                )
            ):
                if partial and table in ("errors", "segments"):
                    if table == "errors":
                        held_errors = batch
                    else:
                        reports.append(_partial(r, batch, held_errors, opts, write))
                    continue
                if table == "segments":
                    add_segment(totals, batch.to_pylist()[0])  # one row per file
                if replica is not None:
                    replica.add(table, batch)
                if table in opts.tables and batch.num_rows:
                    write(table, batch)
        replayed()
        for table in list(pending):
            flush(table)
    except BaseException:
        for s in sinks.values():
            s.abort()
        raise
    for table, s in sinks.items():
        files = s.close()
        for path, rows, value in zip(*(c.to_pylist() for c in files.columns), strict=True):
            reports.append({"kind": "file", "table": table, "path": path, "rows": rows,
                            "partition": value})  # fmt: skip
    reports.append({"kind": "totals", **totals})
    return reports


def _partial(r: ByteRange, segment, errors, opts: ScanOptions, write) -> dict:
    """A split file's range: its segments row goes to the driver to be added up; its error
    rows are written here, but for the whole-file ones (unreadable, changed while read), which
    every range of the file reports and the driver keeps once."""
    seg = segment.to_pylist()[0]
    whole = []
    if errors is not None:
        rows = errors.to_pylist()
        unreadable = seg["size"] != r.size  # the file could not be read: all its bytes counted
        whole = [e for e in rows if unreadable or e["reason"].startswith(CHANGED)]
        kept = [e for e in rows if e not in whole]
        if kept and "errors" in opts.tables:
            import decoders.schemas as schemas

            write("errors", schemas.from_rows("errors", kept).to_batches()[0])
    return {"kind": "partial", "file": r.file.path, "start": r.start, "stop": r.stop,
            "segment": seg, "whole_errors": whole}  # fmt: skip


def merge_partials(reports: list[dict]) -> tuple[list[dict], list[dict]]:
    """(segments rows, whole-file error rows) of the split files, from their ranges' reports."""
    by_file: dict[str, list[dict]] = {}
    for p in reports:
        if p["kind"] == "partial":
            by_file.setdefault(p["file"], []).append(p)
    segments, errors = [], []
    for path in sorted(by_file):
        parts = sorted(by_file[path], key=lambda p: p["start"])
        whole = [e for p in parts for e in p["whole_errors"]]
        rows = [p["segment"] for p in parts]
        row = dict(rows[0])
        unreadable = next(
            (p for p in parts if p["segment"]["size"] != p["stop"] - p["start"]), None
        )
        if unreadable is not None:  # the file as one unreadable whole, as a whole-file decode
            row = dict(unreadable["segment"])
            segments.append(row)
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


def _converted(batches: list, table: str, opts: ScanOptions):
    """Decoded batches of one table as one table of its Parquet schema (:func:`to_output`),
    converted together; one by one where their decoded schemas differ."""
    import pyarrow as pa

    if table in REPLAY_TABLES:  # built by the replay in the schema of its Parquet files
        return pa.Table.from_batches(batches).cast(opts.schemas[table][1])
    try:
        whole = pa.Table.from_batches(batches).combine_chunks()
    except pa.ArrowInvalid:  # schemas differ between the batches
        return pa.concat_tables([to_output(b, table, opts) for b in batches])
    return to_output(whole.to_batches()[0], table, opts) if whole.num_rows else whole


def to_output(batch, table: str, opts: ScanOptions):
    """A decoded batch as the table's Parquet schema: Avro columns decoded, timestamps Spark
    cannot hold nulled, types as Spark gives them (no unsigned ints, UTC microseconds)."""
    import pyarrow as pa

    from decoders import avro
    from decoders.spark import _spark_safe, arrow_for_spark, table_schema

    if table == "records" and opts.avro:
        batch = avro.decode_batch(batch, opts.avro)
    target = pa.schema(
        [pa.field(f.name, arrow_for_spark(f.type))
         for f in table_schema(table, table == "records" and bool(opts.avro))]
    )  # fmt: skip
    return pa.Table.from_batches([_spark_safe(batch).cast(target)]).cast(opts.schemas[table][1])


class Scanned(NamedTuple):
    """What a scan gives the driver: a few rows per table, file and replica, never a batch."""

    tables: dict  # commit-record entry of every table: Spark schema, partition column, files
    accounting: dict  # byte accounting over every file
    tasks: int
    replicas: list[dict]  # with a replay: one row per replica (replay.replicas.chosen_replicas)


def scan_tables(spark, files, opts: ScanOptions, base: str, key: str, range_bytes: int,
                kill: str | None, skipped: dict[str, str] | None = None, min_tasks: int = 1
                ) -> Scanned:  # fmt: skip
    """Decode ``files`` once and write ``opts.tables`` under ``base`` (a URI or path).
    ``skipped``: files left out of the run
    (path -> reason, see jobs.resilience), not decoded: each gets its error and segments rows
    from the driver, all its bytes counted corrupt. ``min_tasks``: see :func:`plan_scan` (the
    decode job keeps 1: its files follow from the dump and the range size alone)."""
    import decoders
    from jobs.output import OutputDir, _TaskFiles, empty_table_files, kill_point

    skipped = skipped or {}
    left_out = [f for f in files if f.path in skipped]
    files = [f for f in files if f.path not in skipped]
    tasks = plan_scan(files, opts.decoded, range_bytes, min_tasks, opts.replay is not None)
    reports = run_scan(spark, tasks, opts, base, key, kill)
    if kill:
        kill_point(kill.split(":")[0] + ":staged-table")
    listed: dict[str, list[dict]] = {t: [] for t in opts.tables}

    def add(table: str, written) -> None:
        for path, rows, value in zip(*(c.to_pylist() for c in written.columns), strict=True):
            part = {"partition": value} if opts.partition_by[table] else {}
            listed[table].append({"path": path, "rows": rows} | part)

    for r in reports:
        if r["kind"] == "file":
            part = {"partition": r["partition"]} if opts.partition_by[r["table"]] else {}
            listed[r["table"]].append({"path": r["path"], "rows": r["rows"]} | part)
    # split files: the driver adds their ranges' accounting up (one small row per file)
    seg_rows, whole_errors = merge_partials(reports)
    for f in left_out:
        for table, batch in decoders.skipped_file(f, skipped[f.path], ("segments", "errors")):
            (seg_rows if table == "segments" else whole_errors).extend(batch.to_pylist())
    for table, rows in (("segments", seg_rows), ("errors", whole_errors)):
        if table in listed and rows:
            from decoders.schemas import from_rows

            schema = opts.schemas[table][1]
            sink = _TaskFiles(base, table, len(tasks), 0, key, schema, opts.partition_by[table])
            for b in from_rows(table, rows).to_batches():
                sink.write(to_output(b, table, opts))
            add(table, sink.close())
    entries = {}
    for table, files_of in listed.items():
        schema, arrow = opts.schemas[table]
        files_of.sort(key=lambda f: f["path"])
        files_of = files_of or empty_table_files(OutputDir(base).uri, table, key, arrow)
        entries[table] = {
            "schema": json.loads(schema.json()),
            "partition_by": opts.partition_by[table] if "partition" in files_of[0] else None,
            "rows": sum(f["rows"] for f in files_of),
            "files": files_of,
        }
    replicas = [
        {k: v for k, v in r.items() if k != "kind"} for r in reports if r["kind"] == "replica"
    ]
    return Scanned(entries, accounting(reports, seg_rows), len(tasks), replicas)


def accounting(reports: list[dict], split_files: list[dict]) -> dict:
    """Valid/padding/corrupt byte totals over every file: the tasks' sums of the files they
    decoded whole, plus the split files' rows the driver added up."""
    acct = dict.fromkeys(("files", "size", "valid", "padding", "corrupt", "errors"), 0)
    for r in reports:
        if r["kind"] == "totals":
            for k in acct:
                acct[k] += r[k]
    for row in split_files:
        add_segment(acct, row)
    return acct


def add_segment(acct: dict, seg: dict) -> None:
    """Add one file's ``segments`` row to running byte totals."""
    acct["files"] += 1
    acct["size"] += seg["size"]
    acct["valid"] += seg["bytes_valid"]
    acct["padding"] += seg["bytes_padding"]
    acct["corrupt"] += seg["bytes_corrupt"]
    acct["errors"] += seg["error_count"]


SCRATCH = "_scratch"  # under a run's output directory: <out>/_scratch/<run key>/<table>/


class Scratch:
    """A run's scratch area, ``<out>/_scratch/<run key>/``: the dump's decoded tables
    (:func:`decoded_once`) and the replay's intermediate tables (:meth:`stash`), Parquet in the
    run's own output directory so that every executor reaches it."""

    def __init__(self, spark, area, key: str, scanned: Scanned, opts: ScanOptions) -> None:
        self.spark, self.area, self.key = spark, area, key
        self.entries, self.opts = scanned.tables, opts
        self.replicas = scanned.replicas  # with a replay: one row per partition replica

    def decoded(self, table: str):
        """A decoded table, read back as a DataFrame."""
        from jobs.output import read_table

        df = read_table(self.spark, self.area, table, self.entries[table])
        return df.select(*self.opts.schemas[table][0].fieldNames())  # partition column in place

    def stash(self, name: str, df):
        """Write ``df`` under ``stash/<name>/`` (pyarrow in the tasks, as every output) and
        read it back: what reads it after starts from these files, not from its lineage."""
        from jobs.output import read_table, write_table

        folder = f"stash/{name}"
        entry = write_table(df, self.area, folder, 0, None, self.key, "audit:stash")
        return read_table(self.spark, self.area, folder, entry)


@contextmanager
def decoded_once(spark, files, tables, conf: dict, out, key: str,
                 skipped: dict[str, str] | None = None, replay=None):  # fmt: skip
    """Decode the dump once into the run's scratch area and give the :class:`Scratch` for the
    ``with`` block; the scratch area is removed after it. A killed attempt's scratch files are
    removed by the next attempt of the same run. ``replay`` (a :class:`replay.replicas.
    ReplaySpec`): the tasks also replay every partition replica they read, and the scratch
    area holds the :data:`REPLAY_TABLES`."""
    from decoders.spark import _struct, table_schema
    from jobs.output import OutputDir

    scratch = OutputDir(out.child(f"{SCRATCH}/{key}"))
    _remove(scratch)

    def spark_schema(table: str, with_avro: bool):
        return _struct(REPLAY_TABLES.get(table) or table_schema(table, with_avro))

    if replay is not None:
        tables = [*tables, *REPLAY_TABLES]
    opts = scan_options(spark_schema, tables, False, conf, None)
    if replay is not None:
        opts.replay = replay
        for t in REPLAY_TABLES:  # a few rows per partition: one file per task, unpartitioned
            opts.partition_by[t] = None
    # the scratch tables' files are the run's own: as many tasks as keep the cores busy
    scanned = scan_tables(
        spark, files, opts, scratch.uri, key, int(conf["range_bytes"]), None, skipped,
        min_tasks=2 * _parallelism(spark),
    )  # fmt: skip
    try:
        yield Scratch(spark, scratch, key, scanned, opts)
    finally:
        _remove(scratch)


def _parallelism(spark) -> int:
    """The cores Spark runs tasks on (the shuffle partitions where the session has no
    SparkContext: Spark Connect)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect raises its own "not supported" error for sparkContext
        return int(spark.conf.get("spark.sql.shuffle.partitions"))


def _remove(scratch) -> None:
    with suppress(FileNotFoundError, OSError):
        scratch.fs.delete_dir(scratch.root)
    if scratch.fs.type_name == "local":  # the scratch folder too, unless another run uses it
        with suppress(OSError):
            os.rmdir(scratch.root.rsplit("/", 1)[0])
