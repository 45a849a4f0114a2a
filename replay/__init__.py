"""Replay of decoded Kafka logs: the state machines (pure Python over Arrow), the Spark plans
that run them (:mod:`replay.plan`, :mod:`replay.checks`); the scenario simulator is the
top-level package :mod:`simulator`.

    from replay import audit_session
    with audit_session(spark, ["s3://bucket/dump/"], conf="my.yaml") as tables:
        tables["findings"].show()
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "audit", "audit_session", "committed_offsets_at", "findings_history", "load_conf", "lso_at",
]  # fmt: skip


def load_conf(
    conf: str | dict | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> dict[str, Any]:
    """The validated configuration: embedded defaults, a YAML file (path) or a dict of the same
    shape over them, then `key=value` overrides. Raises replay.config.ConfigError."""
    from replay.config import load

    return load(conf, overrides)


def audit(spark, paths, conf: str | dict | None = None, since: str | None = None):
    """Replay a dump; DataFrames by table name (see :mod:`replay.tables`). ``conf``: a YAML
    path or a dict shaped like conf/default.yaml (e.g. ``{"groups": {"g": {"isolation":
    "read_uncommitted"}}}``), validated. ``since``: a previous audit's committed output of an
    earlier copy of the same dump, which this one goes on from, reading only the bytes past
    where its replays ended (docs/incremental.md; refused with ValueError as `logreplay audit
    --since` refuses it). The tables it caches stay cached until the session's cache is
    cleared; :func:`audit_session` releases them at the end of a ``with`` block."""
    from replay.plan import audit as run

    config = load_conf(conf)
    return run(spark, list(paths), config, since=_previous(since, config))


def audit_session(spark, paths, conf: str | dict | None = None, since: str | None = None):
    """:func:`audit` as a context manager: ``with audit_session(spark, paths) as tables:``;
    what the audit cached is unpersisted when the block ends."""
    from replay.plan import audit_session as session

    config = load_conf(conf)
    return session(spark, list(paths), config, since=_previous(since, config))


def _previous(since: str | None, config):
    """``since`` as the plan takes it: a callable checking the previous output against the
    dump's clusters (its layout), giving (points, previous tables) (jobs.history)."""
    if since is None:
        return None

    def resolve(clusters: set[str]):
        from importlib.metadata import version

        from jobs import history
        from jobs.output import LAYOUT_VERSION

        previous = history.previous_output(since, None, history.day_text(None), clusters,
                                           config, version("logreplay"), LAYOUT_VERSION)  # fmt: skip
        return history.points_of(previous), history.previous_tables(previous)

    return resolve


def findings_history(spark, tables, since: str | None, conf: str | dict | None = None,
                     logical_date: str | None = None):  # fmt: skip
    """This audit's findings (``tables`` of :func:`audit`) against a previous run's committed
    output, as `logreplay audit --since` tells them (docs/usage.md "Scheduled audits"): a
    DataFrame of ``findings_history`` rows (new, provisional, still present or gone).
    ``since``: the previous output's path or URI (None: every finding is new); ``conf``: the
    configuration the audit ran with; ``logical_date``: the day judged (default today, UTC). Raises
    ValueError naming why a previous output cannot be built on (another dump, another
    configuration, not committed, a later day, another version)."""
    from importlib.metadata import version

    from jobs import history
    from jobs.output import LAYOUT_VERSION

    config = load_conf(conf)
    day = history.day_text(logical_date)
    previous = None
    if since is not None:
        clusters = {r[0] for r in tables["partitions"].select("cluster").distinct().collect()}
        previous = history.previous_output(since, None, day, clusters, config,
                                           version("logreplay"), LAYOUT_VERSION)  # fmt: skip
    return history.history_of(spark, tables["findings"], previous, day, f"api-{day}")


def _instant(when):
    """``when`` (a datetime, naive meaning UTC, or an ISO string like '2026-01-01 00:00:05')
    as a Spark timestamp literal of that instant, whatever the session's time zone."""
    import datetime as dt

    from pyspark.sql import functions as F

    if isinstance(when, str):
        when = dt.datetime.fromisoformat(when)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    micros = (when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    return F.timestamp_micros(F.lit(micros))  # exact: no float rounding


def committed_offsets_at(tables, when):
    """Every group's effective committed offset per partition at time ``when`` (a datetime or
    a 'YYYY-MM-DD HH:MM:SS' string, UTC): transactional commits count from their COMMIT marker."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    t = tables["offset_timeline"].filter(F.col("effective_timestamp") <= _instant(when))
    # among the commits stamped no later than T, the latest in log order (one group's commits
    # share one __consumer_offsets partition: its offsets order them exactly)
    w = Window.partitionBy("cluster", "group_id", "topic", "partition").orderBy(
        F.desc("effective_log_offset"), F.desc("effective_timestamp")
    )
    return (
        t.withColumn("_r", F.row_number().over(w))
        .filter("_r = 1")
        .select(
            "cluster",
            "group_id",
            "topic",
            "partition",
            "committed_offset",
            "effective_timestamp",
            "generation",
        )
    )


def lso_at(tables, when):
    """Every partition's last stable offset at time ``when``: the first offset of the oldest
    transaction open then; null when none was open (the LSO was the high watermark, which the
    log does not record), with the log end offset known at that moment."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    t = tables["lso_changes"].filter(F.col("timestamp") <= _instant(when))
    # the furthest log position stamped no later than T: events of one partition are ordered by
    # their offsets, while their timestamps come from different machines' clocks
    w = Window.partitionBy("cluster", "topic", "partition").orderBy(
        F.desc("log_end_offset"), F.desc("timestamp")
    )
    latest = t.withColumn("_r", F.row_number().over(w)).filter("_r = 1")
    return latest.select(
        "cluster",
        "topic",
        "partition",
        F.when(F.col("lso") < F.col("log_end_offset"), F.col("lso")).alias("lso"),
        F.col("log_end_offset").alias("log_end_offset_then"),
        F.col("timestamp").alias("since"),
    )
