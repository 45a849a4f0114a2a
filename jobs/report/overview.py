"""The report's header and overview plots: aggregates of the audit's tables computed by Spark
(group-bys and top-N in the executors); a few hundred rows at most reach the page."""

from __future__ import annotations

from jobs.report import figures
from jobs.report.source import AuditOutput, millis, rows

TOP = 40  # bars at most in a per-partition or per-group plot


def _one(df) -> dict:
    """The single row of an aggregate (an empty dict without the table)."""
    got = rows(df) if df is not None else []
    return got[0] if got else {}


def inputs(src: AuditOutput) -> dict:
    """Brokers, topics, partitions, bytes, records and time span of the audited dump."""
    from pyspark.sql import functions as F

    def total(c: str):
        return F.coalesce(F.sum(c), F.lit(0)).cast("long").alias(c)

    def distinct(c: str, name: str):
        # the set's size, not countDistinct: with other aggregates beside it, a distinct
        # count is planned as two aggregations (two shuffles, a Spark job more); a dump's
        # brokers and topics are few
        return F.size(F.collect_set(c)).cast("long").alias(name)

    seg = src.frame("segments")
    s = _one(
        seg
        and seg.agg(
            distinct("broker", "brokers"), F.count(F.lit(1)).alias("files"),
            total("size"), total("bytes_valid"), total("bytes_padding"), total("bytes_corrupt"),
            F.coalesce(F.sum(F.when(F.col("kind") == "log", F.col("size"))), F.lit(0))
            .cast("long").alias("log_bytes"),
        )
    )  # fmt: skip
    parts = src.frame("partitions")
    p = _one(
        parts
        and millis(parts, "last_timestamp").agg(
            distinct("topic", "topics"), F.count(F.lit(1)).alias("partitions"),
            total("data_records"), F.max("last_timestamp").alias("last_timestamp"),
        )
    )  # fmt: skip
    firsts = [
        millis(df, col).select(F.col(col).alias("t"))
        for table, col in (
            ("transactions", "first_timestamp"),
            ("lso_changes", "timestamp"),
            ("group_generations", "timestamp"),
        )  # fmt: skip
        if (df := src.frame(table)) is not None and col in df.columns
    ]
    first = None
    if firsts:  # the three logs' first timestamp: one aggregate over their union
        union = firsts[0]
        for df in firsts[1:]:
            union = union.unionByName(df)
        first = _one(union.agg(F.min("t").alias("t"))).get("t")
    errors = src.frame("errors")
    by_kind = rows(errors.groupBy("kind").count()) if errors is not None else []
    return {
        "brokers": s.get("brokers", 0),
        "topics": p.get("topics", 0),
        "partitions": p.get("partitions", 0),
        "files": s.get("files", 0),
        "bytes": s.get("size", 0),
        "log_bytes": s.get("log_bytes", 0),
        "records": p.get("data_records", 0),
        "first_timestamp": first,
        "last_timestamp": p.get("last_timestamp"),
        "bytes_valid": s.get("bytes_valid", 0),
        "bytes_padding": s.get("bytes_padding", 0),
        "bytes_corrupt": s.get("bytes_corrupt", 0),
        "errors": {r["kind"]: r["count"] for r in by_kind},
    }


def plots(src: AuditOutput) -> list[figures.Figure]:
    """The overview's plots, in page order; one whose tables are missing or empty is left out."""
    made = (
        _per_topic(src),
        _transactions_over_time(src),
        _group_generations(src),
        _producers_per_partition(src),
    )
    return [fig for fig in made if fig is not None]


def _per_topic(src: AuditOutput) -> figures.Figure | None:
    """Bytes (of log segments) and records per topic, the TOP largest by bytes, on two axes:
    records come from the partitions table, bytes from the segments table."""
    from pyspark.sql import functions as F

    seg = src.frame("segments", ["topic", "kind", "size"])
    size = {}
    if seg is not None:
        per = (seg.where((F.col("kind") == "log") & F.col("topic").isNotNull())
               .groupBy("topic").agg(F.sum("size").alias("size"))
               .orderBy(F.desc("size"), "topic").limit(TOP))  # fmt: skip
        size = {r["topic"]: r["size"] for r in rows(per)}
    parts = src.frame("partitions", ["topic", "data_records"])
    recs = {}
    if parts is not None:
        per = parts.groupBy("topic").agg(F.sum("data_records").alias("n"))
        per = per.where(F.col("topic").isin(list(size))) if size else per.orderBy(
            F.desc("n"), "topic").limit(TOP)  # fmt: skip
        recs = {r["topic"]: r["n"] for r in rows(per)}
    # ties by records, then by name: a set's order of strings changes from one process to the
    # next, and the page must not
    topics = sorted(set(size) | set(recs),
                    key=lambda t: (-(size.get(t) or 0), -(recs.get(t) or 0), t))[:TOP]  # fmt: skip
    if not topics:
        return None
    fig = figures.bars(
        "bytes and records per topic (log segments)",
        "topic",
        "bytes",
        {
            "bytes": {"x": topics, "y": [size.get(t, 0) for t in topics]},
        },
    )
    fig["data"].append(
        {
            "type": "bar",
            "name": "records",
            "x": topics,
            "y": [recs.get(t, 0) for t in topics],
            "yaxis": "y2",
            "offsetgroup": 2,
            "marker": {"color": figures.PALETTE[1]},
        }
    )
    fig["data"][0]["offsetgroup"] = 1
    fig["layout"]["yaxis2"] = {"title": {"text": "records"}, "overlaying": "y",
                               "side": "right"}  # fmt: skip
    fig["layout"]["margin"]["r"] = 70
    return fig


def _transactions_over_time(src: AuditOutput) -> figures.Figure | None:
    """Transactions per outcome over time, stacked in coarse buckets of their first batch."""
    from pyspark.sql import functions as F

    tx = src.frame("transactions", ["outcome", "first_timestamp"])
    span = {}
    if tx is not None:
        tx = millis(tx).where(F.col("first_timestamp").isNotNull())
        span = _one(tx.agg(F.min("first_timestamp").alias("lo"),
                           F.max("first_timestamp").alias("hi")))  # fmt: skip
    if span.get("lo") is None:
        return None
    lo, hi = span["lo"], span["hi"]
    # coarse buckets (>= 1 s, about 60 over the span): each partition's leader clock only
    # places a transaction in its bucket, no order between partitions is claimed
    width = max(1000, (hi - lo) // 60 + 1)
    bucket = (F.floor(F.col("first_timestamp") / width) * width).cast("long")
    counted = rows(tx.groupBy(bucket.alias("bucket"), "outcome").count())
    series = {}
    for outcome, colour in figures.OUTCOME_COLOURS.items():
        mine = sorted((r for r in counted if r["outcome"] == outcome),
                      key=lambda r: r["bucket"])  # fmt: skip
        if mine:
            series[outcome.lower()] = {"x": [r["bucket"] for r in mine],
                                       "y": [r["count"] for r in mine], "color": colour}  # fmt: skip
    return figures.bars(
        f"transactions per outcome ({width // 1000} s buckets of their first batch)",
        "first batch timestamp (each partition's leader clock, bucketed)",
        "transactions",
        series,
        stacked=True,
        date_x=True,
    )


def _group_generations(src: AuditOutput) -> figures.Figure | None:
    """Consumer-group rebalances: the 12 busiest groups' generations, each on its own
    coordinator log's time."""
    from pyspark.sql import functions as F

    gens = src.frame("group_generations", ["group_id", "generation", "timestamp"])
    busiest = []
    if gens is not None:
        per = gens.groupBy("group_id").count().orderBy(F.desc("count"), "group_id").limit(12)
        busiest = [r["group_id"] for r in rows(per)]
    if not busiest:
        return None
    got = rows(gens.where(F.col("group_id").isin(busiest)))
    series = {}
    for g in sorted(busiest):
        mine = sorted((r for r in got if r["group_id"] == g),
                      key=lambda r: (r["timestamp"] or 0))  # fmt: skip
        series[g] = {"x": [r["timestamp"] for r in mine], "y": [r["generation"] for r in mine]}
    return figures.lines(
        "consumer-group generations (rebalances)",
        "group record timestamp (each group's coordinator log)",
        "generation",
        series,
        date_x=True,
    )


def _producers_per_partition(src: AuditOutput) -> figures.Figure | None:
    """Producer ids with state per partition, the TOP partitions with the most."""
    from pyspark.sql import functions as F

    ps = src.frame("producer_states", ["topic", "partition", "producer_id"])
    per = []
    if ps is not None:
        per = rows(ps.groupBy("topic", "partition").agg(F.count(F.lit(1)).alias("count"))
                   .orderBy(F.desc("count"), "topic", "partition").limit(TOP))  # fmt: skip
    if not per:
        return None
    return figures.bars(
        f"producers per partition (top {len(per)})",
        "partition",
        "producer ids with state",
        {
            "producers": {
                "x": [f"{r['topic']}-{r['partition']}" for r in per],
                "y": [r["count"] for r in per],
            }
        },  # fmt: skip
    )
