"""The committed tables of an audit's output directory, read with pyarrow column by column.

A report reads only the files the run's ``summary.json`` lists (:mod:`jobs.output`: what a
killed or concurrent run left is invisible), only the columns a plot needs, and filters rows
before they are materialised; what reaches the report is aggregates and windows around the
findings shown, never a whole data table.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from jobs.output import SUMMARY, OutputDir


class AuditOutput:
    """One committed audit run: its summary and lazily opened datasets of its tables."""

    def __init__(self, uri: str) -> None:
        self.out = OutputDir(uri)
        summary, _ = self.out.read_json(SUMMARY)
        if summary is None:
            raise FileNotFoundError(f"{uri}: no {SUMMARY}; run `logreplay audit --out` first")
        self.summary: dict = summary
        self._sets: dict[str, ds.Dataset | None] = {}

    @property
    def uri(self) -> str:
        return self.out.uri

    def dataset(self, name: str) -> ds.Dataset | None:
        """The table's committed files as one dataset (hive partition column restored)."""
        if name not in self._sets:
            entry = (self.summary.get("tables") or {}).get(name)
            if not entry or not entry["files"]:
                self._sets[name] = None
            else:
                paths = [self.out.path(f["path"]) for f in entry["files"]]
                part = entry.get("partition_by")
                partitioning = (
                    ds.partitioning(pa.schema([(part, pa.string())]), flavor="hive")
                    if part
                    else None
                )
                self._sets[name] = ds.dataset(
                    paths,
                    filesystem=self.out.fs,
                    format="parquet",
                    partitioning=partitioning,
                    partition_base_dir=self.out.path(name) if part else None,
                )
        return self._sets[name]

    def read(self, name: str, columns: list[str], where: pc.Expression | None = None) -> pa.Table:
        """Selected columns and rows of a table; an empty table when the run has none."""
        d = self.dataset(name)
        if d is None:
            return pa.table({c: pa.array([], pa.null()) for c in columns})
        have = [c for c in columns if c in d.schema.names]
        return d.to_table(columns=have, filter=where)

    def rows(self, name: str, columns: list[str], where: pc.Expression | None = None) -> list[dict]:
        return self.read(name, columns, where).to_pylist()


def field(name: str) -> pc.Expression:
    return pc.field(name)


def as_millis(table: pa.Table) -> pa.Table:
    """Timestamp columns as int64 milliseconds: plots take epoch numbers, and Python's datetime
    cannot hold every timestamp a broker wrote."""
    cols = [
        c.cast(pa.timestamp("ms", tz=c.type.tz), safe=False).cast(pa.int64())
        if pa.types.is_timestamp(c.type)
        else c
        for c in table.columns
    ]
    return pa.table(cols, names=table.column_names)


def millis_rows(table: pa.Table) -> list[dict]:
    return as_millis(table).to_pylist()
