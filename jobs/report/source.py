"""The committed tables of an audit's output directory, as Spark DataFrames.

A report reads only the files the run's ``summary.json`` lists (:mod:`jobs.output`: what a
killed or concurrent run left is invisible). Every aggregate and every window around a finding
is computed by Spark (in the executors, over the whole table); what reaches the driver is the
aggregates and windows the page plots, a few hundred rows per plot, never a whole data table.
"""

from __future__ import annotations

import pyarrow as pa

from jobs.output import SUMMARY, OutputDir, read_table


class AuditOutput:
    """One committed audit run: its summary and, lazily, its tables as DataFrames."""

    def __init__(self, uri: str, spark, summary: dict | None = None) -> None:
        """``summary``: the run's summary as the audit holds it before committing it (its
        tables written, its verdict to come); default the committed ``summary.json``."""
        self.out = OutputDir(uri)
        if summary is None:
            summary, _ = self.out.read_json(SUMMARY)
        if summary is None:
            raise FileNotFoundError(f"{uri}: no {SUMMARY}; run `logreplay audit --out` first")
        self.summary: dict = summary
        self.spark = spark
        self._frames: dict = {}

    @property
    def single(self) -> bool:
        """Whether the run's tables are few enough rows in all for a query to read each as one
        partition (replay.plan.one_task), which their groupings and joins read without a
        shuffle."""
        from replay.plan import one_task

        rows = self.summary.get("rows")
        return isinstance(rows, dict) and one_task(sum(rows.values()))

    @property
    def uri(self) -> str:
        return self.out.uri

    def frame(self, name: str, columns: list[str] | None = None):
        """The table's committed files as a DataFrame (``columns`` it has, in that order);
        None when the run has no such table."""
        if name not in self._frames:
            entry = (self.summary.get("tables") or {}).get(name)
            ok = entry and entry.get("files")
            df = read_table(self.spark, self.out, name, entry) if ok else None
            if df is not None and self.single:
                df = df.coalesce(1)
            self._frames[name] = df
        df = self._frames[name]
        if df is None or columns is None:
            return df
        return df.select(*[c for c in columns if c in df.columns])


def millis(df, *names: str):
    """``df`` with its timestamp columns (``names``, else every one) as int64 epoch
    milliseconds: plots take epoch numbers, and Python's datetime cannot hold every timestamp
    a broker wrote."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    stamps = [
        f.name
        for f in df.schema.fields
        if isinstance(f.dataType, TimestampType) and (not names or f.name in names)
    ]
    # only those columns replaced, in place: a column expression per column of the table was a
    # call into the driver's JVM each, most of a small report query's planning
    return df.withColumns({c: F.unix_millis(F.col(c)) for c in stamps}) if stamps else df


def rows(df) -> list[dict]:
    """The (small: aggregated or windowed) result of ``df`` on the driver, timestamps as epoch
    milliseconds."""
    if df is None:
        return []
    table: pa.Table = millis(df).toArrow()
    return table.to_pylist()
