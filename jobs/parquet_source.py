"""`logreplay-parquet`: the Parquet files a commit record lists, read by pyarrow inside Spark
tasks.

pip's PySpark has no Hadoop S3 (or GCS) connector, and many clusters lack one; the gate still
reads an output on object storage without loading a table on the driver: each file is one
task, opened through :mod:`decoders.filesystems` in the Python worker and streamed in record
batches. Options: ``files`` (JSON list of [URI, partition value]), ``schema`` (the table's
Spark schema as JSON, from the commit record), ``partition_by`` (the Hive partition column
whose value comes from the file's place, not its contents), ``time_zone`` (the session's).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

NAME = "logreplay-parquet"
BATCH_ROWS = 65536


class ParquetFile(InputPartition):
    def __init__(self, index: int, uri: str, value: str | None) -> None:
        super().__init__(index)
        self.uri, self.value = uri, value


def _schema(options) -> StructType:
    """The table's schema with the partition column last, where Spark's reader puts it."""
    schema = StructType.fromJson(json.loads(options["schema"]))
    part = options.get("partition_by") or None
    if part is None:
        return schema
    return StructType([f for f in schema.fields if f.name != part] + [schema[part]])


class ParquetReader(DataSourceReader):
    def __init__(self, options, schema: StructType, time_zone: str) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.files = json.loads(options["files"])
        self.partition_by = options.get("partition_by") or None
        # Spark checks timestamps come back as timestamp[us, <session time zone>]: the same
        # instants, labelled with the session's zone
        self.target = to_arrow_schema(schema, timezone=time_zone)

    def partitions(self):
        return [ParquetFile(i, uri, value) for i, (uri, value) in enumerate(self.files)]

    def read(self, partition: ParquetFile) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        from decoders.filesystems import filesystem

        fs, path = filesystem(partition.uri)
        with fs.open_input_file(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS):
                if batch.num_rows:
                    yield self._conform(batch, partition.value)

    def _conform(self, batch: pa.RecordBatch, value: str | None) -> pa.RecordBatch:
        columns = []
        for field in self.target:
            if field.name == self.partition_by and field.name not in batch.schema.names:
                column = pa.array([value] * batch.num_rows, pa.string())
            elif field.name not in batch.schema.names:  # a file of fewer columns (a kind's)
                column = pa.nulls(batch.num_rows, field.type)
            else:
                column = batch.column(field.name)
            columns.append(column.cast(field.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.target)


class ManifestParquetSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return _schema(self.options)

    def reader(self, schema: StructType) -> ParquetReader:
        return ParquetReader(self.options, schema, self.options.get("time_zone") or "UTC")


def register(spark) -> None:
    spark.dataSource.register(ManifestParquetSource)
