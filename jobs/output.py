"""Where and how a job writes: run identity, the run's directory, deterministic Parquet, and
the atomic swap that makes a retry or a backfill of the same run idempotent.

Airflow retries a task and backfills a date by running the same command again. A rerun with
the same run id must leave the same bytes and no duplicates, so:
- every table is written to a staging directory and swapped in by rename (a failed run leaves
  the previous output untouched; a rerun replaces, never appends);
- rows are put in a fixed order (hash-partitioned on every column, sorted within each file)
  and written by pyarrow under stable names (see :func:`write_parquet`);
- summaries carry the run id and logical date, not the wall-clock time of the run.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import shutil
import uuid

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # Spark's directory for a null partition value
SAFE = re.compile(r"[^A-Za-z0-9._=-]")


def run_id_of(run_id: str | None, logical_date: str | None) -> str:
    """The run id given (Airflow's ``{{ run_id }}``), else one derived from the logical date
    (a backfill of a date reuses it), else a fresh one. Made safe for any file system
    (HDFS refuses ':' in names)."""
    if run_id:
        return SAFE.sub("_", run_id)
    if logical_date:
        return SAFE.sub("_", f"logical-{logical_date}")
    return f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def run_dir(out: str, run_id: str, layout: str) -> str:
    """``out`` itself (flat) or ``out/<run id>`` (per_run)."""
    out = os.path.abspath(out)
    return os.path.join(out, run_id) if layout == "per_run" else out


def staging_dir(out: str, run_id: str) -> str:
    staging = os.path.join(os.path.abspath(out), f".staging-{run_id}")
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    return staging


def write_parquet(df, path: str, files: int, partition_by: str | None = None) -> dict[str, int]:
    """Write ``df`` as Parquet under ``path`` with the same bytes on every run; rows per file.

    The files are written by pyarrow inside the Spark tasks (``mapInArrow``): Spark's own
    Parquet writer lists each column's encodings in hash-set order, which changes from one JVM
    to the next, so its files differ byte-wise between identical runs. Each task writes
    ``part-<task>.parquet`` (under ``<partition_by>=<value>/`` when partitioned, Hive style);
    only the list of files and their row counts comes back to the driver.
    ``files`` > 0 first puts rows in a fixed order: hash-partitioned on every column into that
    many files, sorted within each; 0 keeps the input's partitions and order (a decode reads
    fixed byte ranges in order, so its order is already stable).
    """
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import MapType

    orderable = [f.name for f in df.schema.fields if not isinstance(f.dataType, MapType)]
    if files > 0 and orderable:
        df = df.repartition(files, *orderable).sortWithinPartitions(*orderable)
    schema = to_arrow_schema(df.schema, timezone="UTC")
    uri = path if "://" in path else "file://" + os.path.abspath(path)

    def write(batches):  # no hints: Spark infers its UDF type from them
        import pyarrow as pa
        from pyspark import TaskContext

        files = _TaskFiles(uri, TaskContext.get().partitionId(), schema, partition_by)
        for batch in batches:
            files.write(pa.Table.from_batches([batch]).cast(schema))
        yield files.close()

    written = df.mapInArrow(write, "file string, rows long").collect()  # one row per file
    if not written:  # an empty table is still a readable directory: its schema, no rows
        files_of = _TaskFiles(uri, 0, schema, None)
        files_of.write(schema.empty_table())
        files_of.close()
        return {}
    return {r["file"]: r["rows"] for r in written}


class _TaskFiles:
    """The Parquet files one task writes: one, or one per value of the partition column."""

    def __init__(self, uri: str, task: int, schema, partition_by: str | None) -> None:
        from pyarrow import fs as pafs

        self.filesystem, self.root = pafs.FileSystem.from_uri(uri)
        self.task, self.schema, self.partition_by = task, schema, partition_by
        self.full_schema = schema
        if partition_by is not None:
            self.schema = schema.remove(schema.get_field_index(partition_by))
        self.open: dict[object, list] = {}

    def write(self, table) -> None:
        import pyarrow.compute as pc

        if self.partition_by is None:
            self._writer(None).append(table)
            return
        keys = table.column(self.partition_by)
        for value in pc.unique(keys).to_pylist():
            chosen = pc.is_null(keys) if value is None else pc.equal(keys, value)
            rows = table.filter(chosen).drop_columns([self.partition_by])
            self._writer(HIVE_NULL if value is None else str(value)).append(rows)

    def _writer(self, value):
        import pyarrow.parquet as pq

        if value not in self.open:
            folder = self.root if value is None else f"{self.root}/{self.partition_by}={value}"
            self.filesystem.create_dir(folder, recursive=True)
            name = f"{folder}/part-{self.task:05d}.parquet"
            schema = self.schema if value is not None else self.full_schema
            w = pq.ParquetWriter(name, schema, filesystem=self.filesystem)
            self.open[value] = _Sink(w, name)
        return self.open[value]

    def close(self):
        import pyarrow as pa

        for sink in self.open.values():
            sink.writer.close()
        sinks = list(self.open.values())
        return pa.RecordBatch.from_arrays(
            [
                pa.array([s.name for s in sinks], pa.string()),
                pa.array([s.rows for s in sinks], pa.int64()),
            ],
            names=["file", "rows"],
        )


class _Sink:
    def __init__(self, writer, name: str) -> None:
        self.writer, self.name, self.rows = writer, name, 0

    def append(self, table) -> None:
        self.writer.write_table(table)
        self.rows += table.num_rows


def publish(staging: str, out: str, names: list[str], run_id: str) -> None:
    """Swap each staged output in by rename; the previous run's copy is removed afterwards."""
    os.makedirs(out, exist_ok=True)
    trash = os.path.join(os.path.dirname(os.path.abspath(staging)), f".replaced-{run_id}")
    os.makedirs(trash, exist_ok=True)
    for name in names:
        target = os.path.join(out, name)
        if os.path.lexists(target):
            os.replace(target, os.path.join(trash, name))
        os.replace(os.path.join(staging, name), target)
    shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)


def versions(spark) -> dict:
    from importlib.metadata import version

    import pyarrow

    return {
        "logreplay": version("logreplay"),
        "spark": spark.version,
        "pyarrow": pyarrow.__version__,
        "python": platform.python_version(),
    }
