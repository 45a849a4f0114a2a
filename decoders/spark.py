"""The `kafka-segments` PySpark data source: the only module of `decoders` that imports Spark.

    from decoders.spark import register
    register(spark)
    df = (spark.read.format("kafka-segments").option("table", "records")
          .option("topics", "orders").load("s3://bucket/dump/"))

Options: ``table`` (any of decoders.TABLES, default ``batches``), ``path`` / ``paths`` (one path
or a JSON list; URIs allowed), ``topics`` and ``partitions`` (comma lists, pruned at planning),
``deep`` (default true; false is the header-only scan), ``verify_crc`` (default true),
``range_bytes`` (default 128 MiB), ``window_bytes`` (default 8 MiB), ``memory_budget_mb``
(what decoding one file may hold; default: the decoder's), ``skip_files`` (JSON object of
path -> reason: files left out, reported as error rows; see :mod:`jobs.resilience`), ``avro`` (records only:
JSON of topic -> Avro encoding and schemas, see :func:`decoders.avro.to_option`; adds the
``decoded`` and ``decode_error`` columns), ``columns`` (a comma list: the table has only these
columns, in that order; Spark's Python data sources cannot prune columns themselves, and
for ``records`` the key, value and headers a query leaves out are then never copied out of
the segment). Equality and IN filters
on ``topic`` and ``partition`` in a query are pushed down and prune the same way.

Each task decodes byte ranges of segments (see :mod:`decoders.planning`) and yields Arrow
batches cast to exactly the schema Spark expects; nothing passes through the driver.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, In, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import decoders
from decoders import avro
from decoders.columns import epoch_millis, in_spark_range, outside_spark_range
from decoders.planning import DEFAULT_RANGE_BYTES, ByteRange, plan
from decoders.schemas import TABLES

NAME = "kafka-segments"
# Tables whose topic and partition columns are those of the file they come from (in
# offset_commits they name the committed partition instead), so filters on them prune files.
LOCATION_TABLES = {
    "segments",
    "batches",
    "records",
    "index_entries",
    "producer_snapshots",
    "aborted_txns",
    "errors",
}
DEFAULT_TABLE = "batches"
SKIP_OPTION = "skip_files"  # JSON object: path (as listed by decoders.discover) -> reason


def spark_type(t: pa.DataType) -> DataType:
    if pa.types.is_string(t):
        return StringType()
    if pa.types.is_binary(t):
        return BinaryType()
    if pa.types.is_boolean(t):
        return BooleanType()
    if pa.types.is_int8(t):
        return ByteType()
    if pa.types.is_int16(t):
        return ShortType()
    if pa.types.is_int32(t):
        return IntegerType()
    if pa.types.is_int64(t) or pa.types.is_uint32(t):  # Spark has no unsigned types
        return LongType()
    if pa.types.is_timestamp(t):
        return TimestampType()
    if pa.types.is_list(t):
        return ArrayType(spark_type(t.value_type), True)
    if pa.types.is_struct(t):
        return StructType([StructField(f.name, spark_type(f.type), True) for f in t])
    raise TypeError(f"no Spark type for {t}")


def spark_schema(table: str) -> StructType:
    return _struct(TABLES[table])


def _struct(schema: pa.Schema) -> StructType:
    return StructType(
        [
            StructField(
                f.name,
                spark_type(f.type),
                True,
                {"comment": (f.metadata or {}).get(b"doc", b"").decode()},
            )
            for f in schema
        ]
    )


# Spark's Arrow exchange carries TimestampType as UTC instants whatever the session time zone:
# the worker checks a data source's batches against `to_arrow_schema(schema, timezone="UTC")`
# (pyspark.sql.worker.plan_data_source_read.records_to_arrow_batches), and the session zone only
# changes how instants are shown and parsed. So the zone is fixed, never the session's.
ARROW_TIME_ZONE = "UTC"


def arrow_for_spark(t: pa.DataType, tz: str = ARROW_TIME_ZONE) -> pa.DataType:
    """The Arrow type Spark expects back for a column of our type."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=tz)
    if pa.types.is_uint32(t):
        return pa.int64()
    if pa.types.is_list(t):
        return pa.list_(pa.field("element", arrow_for_spark(t.value_type, tz)))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, arrow_for_spark(f.type, tz)) for f in t])
    return t


class SegmentRanges(InputPartition):
    """One task: byte ranges of segments (or whole index/snapshot/checkpoint files), and the
    files a run left out (``skipped``: file and why) whose error and segments rows it emits."""

    def __init__(
        self,
        index: int,
        ranges: list[ByteRange],
        skipped: list[tuple[decoders.DumpFile, str]] | None = None,
    ) -> None:
        super().__init__(index)
        self.ranges = ranges
        self.skipped = skipped or []


def _bool(v: str | None, default: bool) -> bool:
    return default if v is None else v.strip().lower() in ("1", "true", "yes", "on")


def _paths(options) -> list[str]:
    if options.get("paths"):
        raw = options["paths"]
        try:
            paths = json.loads(raw)
        except ValueError:
            paths = raw.split(",")
        return [p for p in ([paths] if isinstance(paths, str) else paths) if p]
    if options.get("path"):
        return [options["path"]]
    raise ValueError("kafka-segments needs a path: .load(path) or .option('paths', '[...]')")


class KafkaSegmentsReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.table = options.get("table", DEFAULT_TABLE)
        self.paths = _paths(options)
        self.deep = _bool(options.get("deep"), True)
        self.verify_crc = _bool(options.get("verify_crc"), True)
        self.range_bytes = int(options.get("range_bytes", DEFAULT_RANGE_BYTES))
        self.window_bytes = int(options["window_bytes"]) if options.get("window_bytes") else None
        budget = options.get("memory_budget_mb")
        self.memory_budget = int(budget) << 20 if budget else None
        self.topic_filter = (
            {t.strip() for t in options["topics"].split(",")} if options.get("topics") else None
        )
        self.partition_filter = (
            {int(p) for p in options["partitions"].split(",")}
            if options.get("partitions")
            else None
        )
        self.avro = _avro(options, self.table)
        # files a run leaves out because decoding them failed the Spark task after every
        # attempt (jobs.resilience): path -> reason; they appear only as error/segments rows
        self.skip: dict[str, str] = json.loads(options.get(SKIP_OPTION) or "{}")
        full = table_schema(self.table, self.avro is not None)
        self.columns = _columns(options, full)
        self.target = pa.schema(
            [pa.field(f.name, arrow_for_spark(f.type)) for f in _selected(full, self.columns)]
        )
        # the records' columns built: those asked for, and the value an Avro decoding reads
        self.record_columns = None
        if self.columns is not None and self.table == "records":
            self.record_columns = set(self.columns) | ({"value"} if self.avro else set())

    def pushFilters(self, filters):  # noqa: N802 (Spark's name)
        """topic = x, topic IN (...), partition = n, partition IN (...) prune files; others stay."""
        for f in filters:
            column = (
                f.attribute[0] if isinstance(f, (EqualTo, In)) and len(f.attribute) == 1 else None
            )
            values = (
                {f.value} if isinstance(f, EqualTo) else set(f.value) if isinstance(f, In) else None
            )
            located = self.table in LOCATION_TABLES
            if column == "topic" and located:
                self.topic_filter = (
                    values if self.topic_filter is None else self.topic_filter & values
                )
            elif column == "partition" and located:
                self.partition_filter = (
                    values if self.partition_filter is None else self.partition_filter & values
                )
            else:
                yield f

    def partitions(self):
        files = decoders.discover(self.paths)
        skipped = [(f, self.skip[f.path]) for f in files if f.path in self.skip]
        if self.skip:
            files = [f for f in files if f.path not in self.skip]
        tasks = plan(
            files,
            self.table,
            range_bytes=self.range_bytes,
            topics=self.topic_filter,
            partitions=self.partition_filter,
        )
        parts = [SegmentRanges(i, t.ranges) for i, t in enumerate(tasks)] or [SegmentRanges(0, [])]
        parts[0].skipped = [
            (f, why)
            for f, why in skipped
            if (self.topic_filter is None or f.info.topic in self.topic_filter)
            and (self.partition_filter is None or f.info.partition in self.partition_filter)
        ]
        return parts

    def read(self, partition: SegmentRanges) -> Iterator[pa.RecordBatch]:
        for file, why in partition.skipped:
            for _, batch in decoders.skipped_file(file, why, (self.table,)):
                yield self._spark(batch)
        for r in partition.ranges:
            stop = r.stop if r.stop < r.file.size else None
            for _, batch in decoders.iter_file(
                r.file,
                (self.table,),
                deep=self.deep or self.table not in decoders.RECORD_TABLES,
                verify_crc=self.verify_crc,
                start=r.start,
                stop=stop,
                window_bytes=self.window_bytes,
                memory_budget=self.memory_budget,
                record_columns=self.record_columns,
            ):
                if batch.num_rows:
                    if self.avro is not None:
                        batch = avro.decode_batch(batch, self.avro)
                    yield self._spark(batch)

    def _spark(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A decoded batch as Spark reads it: the columns asked for, in the types it holds."""
        if self.columns is not None:
            batch = batch.select(self.columns)
        return _spark_safe(batch).cast(self.target)


def _columns(options, schema: pa.Schema) -> list[str] | None:
    """The ``columns`` option as a list of the table's columns (None: all of them)."""
    raw = options.get("columns")
    if not raw or not raw.strip():
        return None
    names = [c.strip() for c in raw.split(",") if c.strip()]
    unknown = [c for c in names if c not in schema.names]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown} in option columns; known: {', '.join(schema.names)}")  # fmt: skip
    if len(set(names)) != len(names):
        raise ValueError(f"option columns names a column twice: {raw!r}")
    return names


def _selected(schema: pa.Schema, columns: list[str] | None) -> pa.Schema:
    return schema if columns is None else pa.schema([schema.field(c) for c in columns])


def table_schema(table: str, with_avro: bool) -> pa.Schema:
    schema = TABLES[table]
    for f in avro.COLUMNS if with_avro else ():
        schema = schema.append(f)
    return schema


def _avro(options, table: str) -> dict | None:
    if not options.get("avro"):
        return None
    if table != "records":
        raise ValueError("the avro option applies to the records table only")
    return avro.from_option(options["avro"])


def _spark_safe(batch: pa.RecordBatch) -> pa.RecordBatch:
    import pyarrow.compute as pc

    columns = list(batch.columns)
    changed = False
    for i, f in enumerate(batch.schema):
        if pa.types.is_timestamp(f.type) and batch.column(i).null_count < len(batch):
            ms = epoch_millis(batch.column(i))
            if not in_spark_range(ms):
                bad = outside_spark_range(ms)
                columns[i] = pc.if_else(bad, pa.scalar(None, f.type), batch.column(i))
                changed = True
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema) if changed else batch


def spark_batch(
    batch: pa.RecordBatch, table: str, target: pa.Schema, avro_topics: dict | None = None
) -> pa.Table:
    """A decoded batch of ``table`` as Spark holds it, in ``target`` (the Arrow form of its
    Spark schema, ``to_arrow_schema(..., timezone="UTC")``): Avro columns decoded, timestamps
    Spark cannot hold nulled, types as Spark gives them (no unsigned ints, UTC microseconds).
    Columns an audit adds after the decoders' (the cluster of the broker) are kept."""
    with_avro = table == "records" and bool(avro_topics)
    if with_avro:
        batch = avro.decode_batch(batch, avro_topics)
    decoded = table_schema(table, with_avro)
    fields = [pa.field(f.name, arrow_for_spark(f.type)) for f in decoded]
    fields += [batch.schema.field(n) for n in batch.schema.names if n not in decoded.names]
    return pa.Table.from_batches([_spark_safe(batch).cast(pa.schema(fields))]).cast(target)


def spark_table(
    batches: list[pa.RecordBatch], table: str, target: pa.Schema, avro_topics: dict | None = None
) -> pa.Table:
    """Decoded batches of one table as one table in ``target`` (:func:`spark_batch`),
    converted together: a dump of many small files gives a few rows per file, and one
    conversion per batch costs more than decoding them; one by one where their decoded
    schemas differ."""
    try:
        whole = pa.Table.from_batches(batches).combine_chunks()
    except pa.ArrowInvalid:  # schemas differ between the batches
        return pa.concat_tables([spark_batch(b, table, target, avro_topics) for b in batches])
    if not whole.num_rows:
        return target.empty_table()
    return spark_batch(whole.to_batches()[0], table, target, avro_topics)


class KafkaSegmentsDataSource(DataSource):
    """Decoded Kafka log-segment dumps as Spark tables."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        table = self.options.get("table", DEFAULT_TABLE)
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}; known: {', '.join(TABLES)}")
        full = table_schema(table, _avro(self.options, table) is not None)
        return _struct(_selected(full, _columns(self.options, full)))

    def reader(self, schema: StructType) -> KafkaSegmentsReader:
        return KafkaSegmentsReader(self.options)


def register(spark) -> None:
    """Register `kafka-segments` with a session, classic or Spark Connect alike (both have
    ``spark.dataSource.register`` and ``spark.conf``). Nothing depends on the session's time
    zone or Arrow settings, so one call per session is all a user needs."""
    # Spark refuses a reader with pushFilters unless Python filter pushdown is on.
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(KafkaSegmentsDataSource)
