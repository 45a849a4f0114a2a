"""Where and how a job writes: run identity, the run's directory on any filesystem,
deterministic Parquet, and the manifest that commits a run.

Object stores have no atomic rename, so a run is never swapped in; it is committed:
- every table is written by the Spark tasks themselves with pyarrow (no Hadoop connector
  needed) as ``<table>/[topic=<t>/]part-<task>-<run key>-<attempt>.parquet``: the run key is a
  hash of the run id, so a rerun of the same run writes the same names and bytes, and each task
  attempt has a name of its own (a retried or speculative attempt never overwrites another);
- each file appears whole or not at all (an object store publishes an upload when it
  completes; on local disks and HDFS a file is written under a hidden name and renamed);
- the run's commit record (``summary.json`` of an audit, ``_manifest.json`` of a decode) is
  written LAST, in one atomic put or rename. It lists every file of every table with its row
  count, and readers (the gate included, :func:`read_tables`) read only the files it lists. A
  run killed at any point before it leaves the previous commit, and the files that commit
  lists, untouched; a concurrent run's files are invisible until its own commit;
- after the commit, the files of the replaced run and debris of killed attempts are removed.
Summaries carry the run id and logical date, not the wall-clock time of the run, and the
layout version (:data:`LAYOUT_VERSION`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import re
import uuid
from typing import Any, NamedTuple

from decoders import seams
from decoders.filesystems import export_s3_settings, filesystem

LAYOUT_VERSION = 2
SUMMARY, MANIFEST = "summary.json", "_manifest.json"
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # Spark's directory for a null partition value
SAFE = re.compile(r"[^A-Za-z0-9._=-]")
# a task's file of a table (jobs.scan.ScanWritten's are "scan-")
PART = re.compile(r"^\.?(?:part|scan)-\d{5}-(?P<key>[0-9a-f]{12})-\d+\.parquet(\.tmp)?$")
# schemes Spark's own Parquet reader handles in pip's PySpark; others are read by pyarrow
SPARK_READABLE = ("", "file", "hdfs")
# Parquet's codec of the output tables' files: Snappy, which every reader knows (the scratch
# area's, read by the run alone, is jobs.scan.SCRATCH_COMPRESSION)
OUTPUT_COMPRESSION = "snappy"


# -- run identity ------------------------------------------------------------------------------


def run_id_of(run_id: str | None, logical_date: str | None) -> str:
    """The run id given (Airflow's ``{{ run_id }}``), else one derived from the logical date
    (a backfill of a date reuses it), else a fresh one. Made safe for any file system
    (HDFS refuses ':' in names)."""
    if run_id:
        return SAFE.sub("_", run_id)
    if logical_date:
        return SAFE.sub("_", f"logical-{logical_date}")
    return f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def run_key(run_id: str) -> str:
    """The run's tag in file names: stable for a run id, short, safe everywhere."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:12]


def normalized(uri: str) -> str:
    """A directory as the jobs name it: an absolute path, or a URI without a trailing '/'."""
    return uri.rstrip("/") if "://" in uri else os.path.abspath(uri)


def run_dir(out: str, run_id: str, layout: str) -> str:
    """``out`` itself (flat) or ``out/<run id>`` (per_run), as an absolute path or a URI."""
    out = normalized(out)
    return f"{out}/{run_id}" if layout == "per_run" else out


# -- storage settings ----------------------------------------------


def prepare_storage(conf: dict) -> dict[str, str]:
    """Before the Spark session starts: export `storage.s3` keys into the AWS variables (local
    mode's Python workers inherit them) and arm the test seams (decoders.seams); returns the
    variables to forward to Spark's Python workers (:func:`forward_env`)."""
    return export_s3_settings((conf.get("storage") or {}).get("s3")) | seams.armed()


def forward_env(spark, env: dict[str, str]) -> None:
    """Give Spark's Python workers (on any executor) the driver's storage settings: the
    SparkContext's environment travels with every Python function Spark ships."""
    try:
        context = spark.sparkContext
    except Exception:  # a Spark Connect client has none: its server's workers need the env
        return
    context.environment.update(env)


# -- a job's run -------------------------------------------------------------------------------


class Run(NamedTuple):
    """A writing job's run: its session, run id, output directory, the commit record it
    replaces (None for a first run) and the run key of its file names."""

    spark: Any
    run_id: str
    out: OutputDir
    previous: dict | None
    key: str


def start_run(args, conf: dict, app_name: str, record: str, full_jit: bool = False) -> Run:
    """How a job that writes a run starts (`decode`, `audit`): storage settings exported, the
    session, those settings forwarded to its workers, the run id and its directory, and the
    commit record (``record``: SUMMARY or MANIFEST) this run will replace. ``full_jit``: see
    jobs.session.full_jit."""
    from jobs.session import spark_session

    env = prepare_storage(conf)
    # both jobs read the dump through their own scan (jobs.scan), not through the source
    spark = spark_session(args.master, app_name, conf, source=False, full_jit=full_jit)
    forward_env(spark, env)
    run_id = run_id_of(args.run_id, args.logical_date)
    out = OutputDir(run_dir(args.out, run_id, conf["output"]["layout"]))
    return Run(spark, run_id, out, out.read_json(record), run_key(run_id))


# -- the output directory ----------------------------------------------------------------------


class OutputDir:
    """A run's output directory on any filesystem pyarrow reaches (local paths included)."""

    def __init__(self, uri: str) -> None:
        self.uri = normalized(uri)
        self.fs, self.root = filesystem(self.uri)
        self.root = self.root.rstrip("/")
        # local disks and HDFS rename atomically; object stores publish an upload whole
        self.renames = self.fs.type_name in ("local", "hdfs")

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def child(self, rel: str) -> str:
        """A URI (or absolute path) that Spark tasks can resolve on their own."""
        return f"{self.uri}/{rel}"

    @property
    def spark_readable(self) -> bool:
        return self.uri.split("://")[0] in SPARK_READABLE if "://" in self.uri else True

    def exists(self) -> bool:
        from pyarrow import fs as pafs

        return self.fs.get_file_info(self.root).type == pafs.FileType.Directory

    def read_json(self, rel: str) -> tuple[dict | None, object]:
        """(document, modification time) of a JSON file; (None, None) when absent."""
        from pyarrow import fs as pafs

        info = self.fs.get_file_info(self.path(rel))
        if info.type != pafs.FileType.File:
            return None, None
        with self.fs.open_input_stream(self.path(rel)) as f:
            return json.loads(f.read().decode()), info.mtime

    def write_bytes(self, rel: str, data: bytes, kill: str | None = None) -> None:
        """Write a file that readers see whole or not at all."""
        final = self.path(rel)
        self.fs.create_dir(final.rsplit("/", 1)[0], recursive=True)
        if not self.renames:  # an upload becomes visible when it completes
            if kill:
                seams.reached(kill)
            with self.fs.open_output_stream(final) as f:
                f.write(data)
            return
        folder, name = final.rsplit("/", 1)
        tmp = f"{folder}/.{name}.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(data)
        if kill:
            seams.reached(kill)
        if self.fs.type_name == "hdfs" and self.fs.get_file_info(final).size is not None:
            self.fs.delete_file(final)  # HDFS's rename does not replace
        self.fs.move(tmp, final)

    def write_json(self, rel: str, doc: dict, kill: str | None = None) -> None:
        text = json.dumps(doc, indent=2, sort_keys=True, default=str)
        self.write_bytes(rel, text.encode(), kill)

    def subdirectories(self) -> list[str]:
        """Names of the directories right under this one (none if it does not exist)."""
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(self.root, recursive=False, allow_not_found=True)
        found = self.fs.get_file_info(selector)
        return [i.base_name for i in found if i.type == pafs.FileType.Directory]

    def files_under(self, rel: str) -> list[tuple[str, object]]:
        """(path relative to the directory, modification time) of every file under ``rel``."""
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(self.path(rel), recursive=True, allow_not_found=True)
        start = len(self.root) + 1
        return [
            (i.path[start:], i.mtime)
            for i in self.fs.get_file_info(selector)
            if i.type == pafs.FileType.File
        ]

    def upload_tree(self, local_dir: str, rel: str, kill: str | None = None) -> list[str]:
        """Copy a local directory's files under ``rel``, each file whole; their paths."""
        written = []
        for folder, _dirs, names in sorted(os.walk(local_dir)):
            for name in sorted(names):
                src = os.path.join(folder, name)
                target = f"{rel}/{os.path.relpath(src, local_dir).replace(os.sep, '/')}"
                with open(src, "rb") as f:
                    self.write_bytes(target, f.read())
                written.append(target)
                if kill and len(written) == 1:
                    seams.reached(kill)
        return written

    def delete(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(rel))


# -- writing tables ----------------------------------------------------------------------------


@contextlib.contextmanager
def described(spark, text: str):
    """The Spark jobs of the block carry ``text`` as their description (the Spark UI's and the
    event log's name for them, per driver thread); nothing where the session has no
    SparkContext (Spark Connect)."""
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect raises its own "not supported" error for sparkContext
        yield
        return
    sc.setJobDescription(text)
    try:
        yield
    finally:
        sc.setJobDescription(None)


def write_table(df, out: OutputDir, table: str, files: int, partition_by: str | None, key: str,
                kill: str, single: bool = False) -> dict:  # fmt: skip
    """Write ``df`` as Parquet under ``out/table`` with the same bytes on every run; the table's
    entry for the commit record (Spark schema, partition column, files with row counts).

    The files are written by pyarrow inside the Spark tasks (``mapInArrow``): Spark's own
    Parquet writer lists each column's encodings in hash-set order, which changes from one JVM
    to the next, so its files differ byte-wise between identical runs; and pip's PySpark has
    no S3 connector. Each task attempt writes ``part-<task>-<key>-<attempt>.parquet`` (under
    ``<partition_by>=<value>/`` when partitioned, Hive style); only the names and row counts of
    the files of successful attempts come back to the driver.
    ``files`` > 0 first puts rows in a fixed order: hash-partitioned on every column into that
    many files, sorted within each; 0 keeps the input's partitions and order (a decode reads
    fixed byte ranges in order, so its order is already stable). ``single``: ``df`` is one
    partition already (a small dump's plan: replay.plan.Audit.single), which one file keeps
    without a shuffle.
    """
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import MapType

    orderable = [f.name for f in df.schema.fields if not isinstance(f.dataType, MapType)]
    if files > 0 and orderable:
        spread = df.coalesce(1) if single and files == 1 else df.repartition(files, *orderable)
        df = spread.sortWithinPartitions(*orderable)
    schema = to_arrow_schema(df.schema, timezone="UTC")
    base, folder = out.uri, table

    def write(batches):  # no hints: Spark infers its UDF type from them
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        sink = _TaskFiles(base, folder, ctx.partitionId(), ctx.attemptNumber(), key, schema,
                          partition_by)  # fmt: skip
        try:
            for i, batch in enumerate(batches):
                sink.write(pa.Table.from_batches([batch]).cast(schema))
                if i == 0:
                    seams.reached(kill)
        except BaseException:
            sink.abort()
            raise
        yield sink.close()

    with described(df.sparkSession, f"logreplay: write {table}"):
        written = df.mapInArrow(write, "file string, rows long, value string").collect()
    listed = sorted(
        (
            {"path": r["file"], "rows": r["rows"]}
            | ({"partition": r["value"]} if partition_by else {})
            for r in written
        ),
        key=lambda f: f["path"],
    )
    return table_entry(out.uri, table, key, df.schema, listed, partition_by)


def write_empty(df, out: OutputDir, table: str, key: str) -> dict:
    """Table ``table`` with ``df``'s schema and no rows, written without running ``df``; its
    entry for the commit record, as :func:`write_table` gives it."""

    return table_entry(out.uri, table, key, df.schema, [])


def table_entry(base: str, table: str, key: str, schema, files: list[dict],
                partition_by: str | None = None) -> dict:  # fmt: skip
    """A table's entry for the commit record (:func:`write_table`'s): its Spark ``schema``,
    partition column, and the ``files`` its tasks wrote under ``base/table`` (each its path,
    rows, and the partition column's value where partitioned) in path order; one file of no
    rows where none was written, so that an empty table is still readable."""
    from pyspark.sql.pandas.types import to_arrow_schema

    files = sorted(files, key=lambda f: f["path"])
    if not files:
        files = empty_table_files(base, table, key, to_arrow_schema(schema, timezone="UTC"))
    return {
        "schema": json.loads(schema.json()),
        "partition_by": partition_by if "partition" in files[0] else None,
        "rows": sum(f["rows"] for f in files),
        "files": files,
    }


def task_files(written) -> list[dict]:
    """The files a task wrote (:meth:`_TaskFiles.close`'s batch) as an entry lists them."""
    paths, rows = written.column("file").to_pylist(), written.column("rows").to_pylist()
    return [{"path": p, "rows": r} for p, r in zip(paths, rows, strict=True)]


def empty_table_files(base: str, table: str, key: str, schema) -> list[dict]:
    """The file list of a table with no rows: one file of its Arrow ``schema`` and no rows,
    so that an empty table is still readable."""
    sink = _TaskFiles(base, table, 0, 0, key, schema, None)
    sink.write(schema.empty_table())
    return [{"path": f, "rows": 0} for f in sink.close().column("file").to_pylist()]


class _TaskFiles:
    """The Parquet files one task attempt writes: one, or one per value of the partition
    column; each under a hidden name until closed where the filesystem renames atomically."""

    def __init__(self, base: str, folder: str, task: int, attempt: int, key: str, schema,
                 partition_by: str | None, statistics: tuple[str, ...] | None = None,
                 columns_of=None, prefix: str = "part", compression: str = OUTPUT_COMPRESSION
                 ) -> None:  # fmt: skip
        self.out = OutputDir(base)
        self.compression = compression  # Parquet's codec of the files
        # the columns whose min/max each row group records (None: every column)
        self.statistics = True if statistics is None else list(statistics)
        # ``prefix``: of the files' names, which another job's files in the folder have not
        self.folder, self.name = folder, f"{prefix}-{task:05d}-{key}-{attempt}.parquet"
        self.full_schema, self.schema, self.partition_by = schema, schema, partition_by
        if partition_by is not None:
            self.schema = schema.remove(schema.get_field_index(partition_by))
        # a partition value's columns (the others null in each of its rows): its files hold
        # those only, and a reader gives the others as nulls (None: every column)
        self.columns_of = columns_of
        self._schemas: dict[str, object] = {}
        self.open: dict[object, _Sink] = {}

    def write(self, table) -> None:
        import pyarrow.compute as pc

        if self.partition_by is None:
            self._sink(None).append(table)
            return
        keys = table.column(self.partition_by)
        values = pc.unique(keys).to_pylist()
        for value in values:
            rows = table
            if len(values) > 1:  # (a task's flush is mostly one topic's: no filter, no copy)
                rows = table.filter(pc.is_null(keys) if value is None else pc.equal(keys, value))
            rows = rows.drop_columns([self.partition_by])
            if self.columns_of is not None and value is not None:
                rows = rows.select(self._schema_of(str(value)).names)
            self._sink(HIVE_NULL if value is None else str(value)).append(rows)

    def _schema_of(self, value: str) -> object:
        """The schema of a partition value's files."""
        import pyarrow as pa

        if self.columns_of is None or value == HIVE_NULL:
            return self.schema
        if value not in self._schemas:
            self._schemas[value] = pa.schema([self.schema.field(c) for c in self.columns_of(value)])
        return self._schemas[value]

    def _sink(self, value) -> _Sink:
        import pyarrow.parquet as pq

        if value not in self.open:
            folder = self.folder if value is None else f"{self.folder}/{self.partition_by}={value}"
            rel = f"{folder}/{self.name}"
            target = self.out.path(f"{folder}/.{self.name}.tmp" if self.out.renames else rel)
            self.out.fs.create_dir(self.out.path(folder), recursive=True)
            schema = self._schema_of(value) if value is not None else self.full_schema
            w = pq.ParquetWriter(target, schema, filesystem=self.out.fs,
                                 use_dictionary=_dictionary_columns(schema),
                                 write_statistics=self.statistics,
                                 compression=self.compression)  # fmt: skip
            self.open[value] = _Sink(w, rel, target, value)
        return self.open[value]

    def abort(self) -> None:
        for sink in self.open.values():
            try:
                sink.writer.close()
                self.out.fs.delete_file(sink.target)
            except OSError:
                pass

    def close(self):
        import pyarrow as pa

        sinks = list(self.open.values())
        for sink in sinks:
            sink.writer.close()
            if sink.target != self.out.path(sink.rel):
                self.out.fs.move(sink.target, self.out.path(sink.rel))
        return pa.RecordBatch.from_arrays(
            [
                pa.array([s.rel for s in sinks], pa.string()),
                pa.array([s.rows for s in sinks], pa.int64()),
                pa.array([None if s.value == HIVE_NULL else s.value for s in sinks], pa.string()),
            ],
            names=["file", "rows", "value"],
        )


def _dictionary_columns(schema) -> list[str]:
    """The columns Parquet dictionary-encodes: the text ones (topics, clusters, kinds, outcomes,
    files: few values each). Numbers are offsets, timestamps and ids, nearly all distinct: a
    dictionary tried on them is given up after its first page, and trying cost ~9% of a
    replay's task (docs/benchmarks.md)."""
    import pyarrow as pa

    return [f.name for f in schema if pa.types.is_string(f.type)]


class _Sink:
    def __init__(self, writer, rel: str, target: str, value) -> None:
        self.writer, self.rel, self.target, self.value, self.rows = writer, rel, target, value, 0

    def append(self, table) -> None:
        self.writer.write_table(table)
        self.rows += table.num_rows


# -- committing --------------------------------------------------------------------------------


def commit(
    out: OutputDir, name: str, doc: dict, previous, gate: tuple[str, list[str]] | None = None
) -> None:
    """Write the commit record ``name`` last, then remove what no commit lists any more: the
    files of the commit it replaces (``previous``: (document, modification time) read before
    the run wrote anything), debris of killed attempts (files of this run's key, or older than
    the replaced commit) and, given ``gate`` = (folder, files kept), older gate files."""
    doc = {**doc, "layout": LAYOUT_VERSION}
    out.write_json(name, doc, kill="commit:manifest")
    seams.reached("commit:done")
    listed = {f["path"] for t in doc.get("tables", {}).values() for f in t["files"]}
    before, before_time = previous
    key = doc.get("run_key")
    stale: set[str] = set()
    tables = set(doc.get("tables", {}))
    if before and before.get("layout") == LAYOUT_VERSION:
        stale |= {f["path"] for t in before["tables"].values() for f in t["files"]} - listed
        tables |= set(before["tables"])
    for table in sorted(tables):
        for rel, mtime in out.files_under(table):
            m = PART.match(rel.rsplit("/", 1)[-1])
            if rel in listed or not m:
                continue
            if m["key"] == key or (before_time is not None and mtime <= before_time):
                stale.add(rel)
    if gate is not None:
        stale |= {rel for rel, _ in out.files_under(gate[0])} - set(gate[1])
    for i, rel in enumerate(sorted(stale)):
        out.delete(rel)
        if i == 0:
            seams.reached("commit:cleanup")


def committed(out: OutputDir) -> tuple[str | None, dict | None]:
    """(name, document) of the directory's commit record: summary.json, else _manifest.json."""
    for name in (SUMMARY, MANIFEST):
        doc, _ = out.read_json(name)
        if doc is not None:
            return name, doc
    return None, None


# -- reading committed tables ------------------------------------------------------------------


def read_tables(spark, out: OutputDir, doc: dict) -> dict:
    """The committed tables of ``doc`` as DataFrames (only the files it lists)."""
    if doc.get("layout") != LAYOUT_VERSION:
        return _read_unversioned(spark, out)
    return {name: read_table(spark, out, name, entry) for name, entry in doc["tables"].items()}


def read_table(spark, out: OutputDir, name: str, entry: dict):
    """One committed table: Spark's Parquet reader where pip's PySpark reaches the scheme,
    else the files read by pyarrow inside Spark tasks (:mod:`jobs.parquet_source`)."""
    from pyspark.sql.types import StructType

    schema = StructType.fromJson(entry["schema"])
    if out.spark_readable:
        paths = [out.child(f["path"]) for f in entry["files"]]
        return spark.read.schema(schema).option("basePath", out.child(name)).parquet(*paths)
    from jobs.parquet_source import NAME, register

    register(spark)
    files = [[out.child(f["path"]), f.get("partition")] for f in entry["files"]]
    return (
        spark.read.format(NAME)
        .option("files", json.dumps(files))
        .option("schema", json.dumps(entry["schema"]))
        .option("partition_by", entry.get("partition_by") or "")
        .option("time_zone", spark.conf.get("spark.sql.session.timeZone"))
        .load()
    )


def read_rows(out: OutputDir, entry: dict, columns: list[str] | None = None) -> list[dict]:
    """The rows of a small written table (a few per check or cluster), read on the driver with
    pyarrow: no Spark job for what the job itself just wrote."""
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for f in entry["files"]:
        if not f["rows"]:
            continue
        with out.fs.open_input_file(out.path(f["path"])) as src:
            rows.extend(pq.read_table(src, columns=columns).to_pylist())
    return rows


def committed_rows(out: OutputDir, entry: dict, most_rows: int) -> int | None:
    """The rows the files ``entry`` lists hold, by their own footers, when at most
    ``most_rows``; else None (no file opened when the commit record declares more)."""
    got = _within(out, entry, most_rows, None)
    return None if got is None else got[0]


def read_columns(out: OutputDir, entry: dict, columns: list[str], most_rows: int):
    """``columns`` (one or more) of a committed table as one Arrow table on the driver, read
    with pyarrow from the files ``entry`` lists, when they hold at most ``most_rows`` rows
    (their footers, not what the commit record declares); else None, and the caller reads
    it with Spark. A column held in the table's directory names (``partition_by``) is left
    to Spark."""
    if not columns or entry.get("partition_by") in columns:
        return None
    got = _within(out, entry, most_rows, columns)
    return None if got is None else got[1]


def _within(out: OutputDir, entry: dict, most_rows: int, columns: list[str] | None):
    """(rows, ``columns`` of them as one Arrow table, or None without columns) of the files
    ``entry`` lists, each file opened once, its footer counted before its columns are read;
    None as soon as the rows exceed ``most_rows``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = entry.get("files") or []
    if not files or sum(f.get("rows") or 0 for f in files) > most_rows:
        return None
    rows, parts = 0, []
    for f in files:
        with out.fs.open_input_file(out.path(f["path"])) as src:
            pf = pq.ParquetFile(src)
            rows += pf.metadata.num_rows
            if rows > most_rows:
                return None
            if columns is not None:
                parts.append(pf.read(columns=columns))
    return rows, pa.concat_tables(parts) if columns is not None else None


def _read_unversioned(spark, out: OutputDir) -> dict:
    """An output of layout 1 (before manifests listed files): every table directory whole."""
    from pyarrow import fs as pafs

    if not out.spark_readable:
        raise ValueError(f"{out.uri}: no layout {LAYOUT_VERSION} commit record to read")

    selector = pafs.FileSelector(out.root, allow_not_found=True)
    names = sorted(
        i.base_name
        for i in out.fs.get_file_info(selector)
        if i.type == pafs.FileType.Directory and not i.base_name.startswith((".", "_", "gate"))
    )
    return {n: spark.read.parquet(out.child(n)) for n in names}


def redacted(conf: dict) -> dict:
    """The configuration as a summary records it: a plain document (a loaded RunConfig is a
    mapping), no secrets."""
    conf = {k: conf[k] for k in conf}
    s3 = (conf.get("storage") or {}).get("s3") or {}
    if not s3.get("secret_access_key"):
        return conf
    return {**conf, "storage": {**conf["storage"], "s3": {**s3, "secret_access_key": "***"}}}


def versions(spark) -> dict:
    from importlib.metadata import version

    import pyarrow

    return {
        "logreplay": version("logreplay"),
        "spark": spark.version,
        "pyarrow": pyarrow.__version__,
        "python": platform.python_version(),
    }
