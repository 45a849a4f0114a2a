"""The audit's stages across partitions, as Spark plans over a scan's output.

Every replica of every partition is replayed where it is read, by one unit
(:class:`replay.replicas.ReplicaReplay`, run by :class:`replay.scan_task.ScanTask` in the
scan's tasks): producer state and transactions per partition, the transaction coordinator per
`__transaction_state` partition, the groups per `__consumer_offsets` partition. What is left
for Spark needs several partitions at once: the choice of the replica kept per partition, each
producer's partitions against its coordinator's log (:mod:`replay.crosslog`), aborted reads
per partition against every group's commits (:mod:`replay.leakage`), their propagation,
replica divergence and the decoders' errors (:mod:`replay.checks`). Nothing but small per-run
facts reaches the driver.

A scan's output (:class:`ScanOutput`) is the jobs' scratch area of Parquet files
(:class:`jobs.scan.Scratch`) or, in a user's session, Spark's cache
(:class:`replay.session_scan.CachedScan`); the plan is the same over either.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import reduce
from typing import Protocol

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark.sql.window import Window

from decoders.brokers import LABEL_MARK
from decoders.constants import TRANSACTION_STATE_TOPIC
from decoders.spark import _struct, spark_type
from replay import checks, sql
from replay import tables as T
from replay.crosslog import RAW_OUTCOMES
from replay.crosslog_stream import (
    CLUSTER_CODE,
    COORD,
    CROSSLOG_SCHEMA,
    INT_SLOTS,
    KIND,
    OUTCOME_CODE,
    SIDE,
    STREAM_FIELDS,
    STREAM_ORDER,
    TEXT_SLOTS,
    TOPIC_CODE,
    TXN,
    StreamCodes,
    judge_stream,
)
from replay.grouped import INTERNAL_TOPICS, Facts, with_shares
from replay.leakage import KIND as LEAK_KIND
from replay.leakage import NOT_COMMITTED, leaks_stream
from replay.leakage import OFFSET as LEAK_OFFSET
from replay.leakage import TXN_COLUMNS as LEAK_TXN_COLUMNS
from replay.remediation import target_of
from replay.replicas import (
    REPLAY_KINDS,
    REPLICA_BROKER,
    ReplaySpec,
    ReplicaRow,
    chosen_replicas,
    cleaned_bounds,
    replay_spec,
    replica_filter,
    replicated_topics,
)
from replay.rules import DIVERGENCE
from replay.scan_task import audit_schema
from replay.session_scan import settled
from replay.settings import AuditConfig
from replay.sides import LISTED, TOUCHED
from replay.tables import CLUSTER

# dump bytes per task of the audit's grouped stages: their number follows from the dump's
# size (at most spark.sql.shuffle.partitions), never from a session's default of 200 tasks
BYTES_PER_TASK = 128 << 20
# a run whose scan decoded at most this many batches runs each stage after the scan as one
# task: the rows those stages read (transactions, partitions, commits, counts) are at most a
# few per batch, and every shuffle is a Spark job of its own (adaptive execution submits each
# map stage apart) whose scheduling costs more than so few rows
SINGLE_ROWS = 50_000


def one_task(rows: int) -> bool:
    """Whether stages over ``rows`` rows (or batches decoded) run as one task (SINGLE_ROWS)."""
    return rows <= SINGLE_ROWS


class ScanOutput(Protocol):
    """What the plan reads: a scan of the dump whose tasks replayed every replica
    (:class:`replay.scan_task.ScanTask`)."""

    replicas: list[ReplicaRow]  # one row per partition replica replayed
    dump_bytes: int
    spec: ReplaySpec  # what the replay knew of the dump (its layout: replay.dumpinfo)

    def table(self, name: str, topics: list[str] | None = None) -> DataFrame:
        """A decoded table the scan gave (:data:`replay.scan_task.AUDIT_DECODED`, with the
        cluster of each row's broker), of ``topics`` only if given."""

    def rows(self, table: str, kind: str) -> DataFrame:
        """A replayed table's rows of one kind (:data:`replay.replicas.REPLAY_KINDS`): the
        replica's keys and the kind's columns (:func:`replay.replicas.kind_columns`)."""

    def written_rows(self, name: str) -> DataFrame | None:
        """The rows of a :data:`SCAN_WRITTEN` table the scan's tasks wrote into the output
        themselves (those of the partitions one broker holds; :meth:`rows` gives the others),
        in the table's columns; None where they wrote none."""

    def later(self, name: str, build: Callable[[], DataFrame], first: bool = False,
              findings: bool = True) -> Callable[[], DataFrame]:  # fmt: skip
        """An intermediate table several outputs read, computed once (written and read back,
        or cached); gives what waits for it. ``first``: the longest chain of the tables after
        it, whose stages go before any other where the scheduler allows; ``findings``: whether
        the findings read it (a caller that may read only them need not compute it at once)."""

    def release(self) -> None:
        """Let go of what the scan and its intermediate tables hold."""


def struct_type(schema: pa.Schema) -> StructType:
    return StructType([StructField(f.name, spark_type(f.type), True) for f in schema])


UNION_PARTITIONING = "spark.sql.unionOutputPartitioning"


def union_keeps_partitioning(spark: SparkSession) -> bool:
    """Whether the session's union of children partitioned alike keeps their partitioning
    (:data:`UNION_PARTITIONING`, true by default since Spark 4.1, read once per query's
    planning); where it is off, or unknown to the session, a union concatenates its children's
    partitions and a stream spread part by part would reach its tasks in pieces."""
    try:
        return str(spark.conf.get(UNION_PARTITIONING)).strip().lower() == "true"
    except Exception:  # noqa: BLE001 - a Spark without the setting: it concatenates
        return False


def spread_each(spark: SparkSession, parts: list[DataFrame],
                spread: Callable[[DataFrame], DataFrame]) -> DataFrame:  # fmt: skip
    """The union of ``parts`` as ``spread`` (a repartition by keys) spreads it: each part spread
    on its own where the session's union keeps its children's partitioning
    (:func:`union_keeps_partitioning`), else the union spread as one. Either way every key's
    rows of every part are in one partition, the same for each part."""
    if not union_keeps_partitioning(spark):
        return spread(reduce(DataFrame.unionByName, parts))
    return reduce(DataFrame.unionByName, [spread(p) for p in parts])


def local_frame(spark: SparkSession, rows: list[tuple], schema: pa.Schema) -> DataFrame:
    """A DataFrame of rows the driver made (a replica's counts, a partition's size, a card's
    keys): handed to Spark as one Arrow table, which it plans as a local relation. A list of
    Python rows becomes an RDD instead, its rows unpickled by tasks of their own in every
    stage that reads them: a fixed cost of every small run."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(struct_type(schema), timezone="UTC")
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in arrow]
    return spark.createDataFrame(
        pa.Table.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, arrow, strict=True)], schema=arrow
        )  # fmt: skip
    )


def _split(df: DataFrame, out: str, schema: pa.Schema) -> DataFrame:
    """One output table of a replay's rows (``out`` names each row's table), with the cluster
    they belong to."""
    return df.filter(F.col("out") == out).selectExpr(*sql.names([CLUSTER, *schema.names]))


def _timestamps(df: DataFrame) -> DataFrame:
    """``df`` with its epoch-millisecond columns as timestamps, in one list of SQL expressions
    (a column expression each was ~10 calls into the driver's JVM)."""
    return df.selectExpr(
        *[f"timestamp_millis({sql.name(c)}) AS {sql.name(c)}" if c in T.TIMESTAMP_COLUMNS
          else sql.name(c) for c in df.columns]
    )  # fmt: skip


def _millis(df: DataFrame, columns: list[str]) -> DataFrame:
    """``columns`` of ``df`` (an output table's), its timestamps as epoch milliseconds again:
    as the scratch area holds them (:func:`_timestamps` undone)."""
    return df.selectExpr(
        *[f"unix_millis({sql.name(c)}) AS {sql.name(c)}" if c in T.TIMESTAMP_COLUMNS
          else sql.name(c) for c in columns]
    )  # fmt: skip


def stage_tasks(spark: SparkSession, dump_bytes: int) -> int:
    """Tasks of each grouped stage: one per :data:`BYTES_PER_TASK` of dump, at most the
    session's ``spark.sql.shuffle.partitions``. A user's session keeps Spark's default of 200,
    and a plan that caches its grouped replays keeps every shuffle's partitions (adaptive
    execution may not change a cached plan's partitioning): a 1 MB dump ran stages of 200 tasks
    and more."""
    most = int(spark.conf.get("spark.sql.shuffle.partitions"))
    # two at least: one becomes a single partition without its keys, which a cogroup then
    # shuffles again into the session's default (spark.sql.requireAllClusterKeysForCoPartition)
    return max(1, min(most, max(2, math.ceil(dump_bytes / BYTES_PER_TASK))))


@dataclass(frozen=True)
class Copied:
    """How an output table's rows come from a scan's table, kept and laid out but neither
    joined nor grouped: a caller with the scratch area copies them (jobs.copies) instead of
    running the table's query. ``out``: keep the rows of that kind (the replay tables' ``out``
    column); ``replicas``: (replica keys, whether those are the ones left out), as
    :func:`replica_filter` gives them; ``lookup``: the name of a small table of
    :attr:`Tables.lookups` (one row per key: :data:`LOOKUP_KEYS`) whose other columns each
    row gets, as a left join by key gives them (a transaction its producer's transactional id
    from the coordinator's log)."""

    source: str
    schema: StructType  # the output's, as the table's query gives it (_copied_schema)
    out: str | None = None
    replicas: tuple[tuple[str, ...], bool] | None = None
    lookup: str | None = None


# the key of a copied table's lookup (Copied.lookup): a producer id of a cluster
LOOKUP_KEYS = (CLUSTER, "producer_id")


def _copied_schema(source: str, columns: list[str] | None = None) -> StructType:
    """The Spark schema an output table has when it is copied from the scan's table ``source``
    (:class:`Copied`): what its query gives, so either way the same. A replay table's
    ``columns`` keep the scan's types and comments, timestamps become Spark timestamps
    (``_timestamps``: no comment); a decoded table is laid out as :meth:`Audit.decoded` lays it
    out. tests/test_copies.py compares them with the queries' schemas."""
    fields = {f.name: f for f in _struct(audit_schema(source)).fields}
    if columns is not None:
        return StructType(
            [StructField(c, TimestampType(), True) if c in T.TIMESTAMP_COLUMNS else fields[c]
             for c in columns]
        )  # fmt: skip
    # the scratch files of a decoded table are partitioned by topic (jobs.scan): Spark reads
    # that column from the directory names, without its comment
    fields = {n: StructField(n, f.dataType, True) if n == "topic" else f for n, f in fields.items()}
    return StructType(
        [fields["broker"], *[fields[n] for n in fields if n not in ("broker", CLUSTER)],
         StructField(CLUSTER, StringType(), False)]
    )  # fmt: skip


class Audit:
    """One audit's plan over a scan's output: :meth:`run` gives its tables."""

    def __init__(self, spark: SparkSession, config: AuditConfig, scan: ScanOutput) -> None:
        self.spark, self.config, self.scan = spark, config, scan
        self.tasks = stage_tasks(spark, scan.dump_bytes)
        self.single = one_task(sum(r.crc_valid_batches for r in scan.replicas))
        self._frames: dict[tuple, DataFrame] = {}  # _made
        self._making = threading.RLock()

    def _by(self, df: DataFrame, *keys) -> DataFrame:
        """``df`` spread by ``keys`` for a grouped stage; a small dump's (:attr:`single`) in
        one partition, which every grouping and join reads without a shuffle."""
        return df.coalesce(1) if self.single else df.repartition(self.tasks, *keys)

    def _by_each(self, parts: list[DataFrame], *keys) -> DataFrame:
        """The union of ``parts`` spread by ``keys``, each part spread on its own: Spark's union
        of children partitioned alike keeps their partitioning (task i reads partition i of
        each: ``spark.sql.unionOutputPartitioning``, Spark 4.1 on), so each part's map stage
        runs once its own input is there, not once every part's is (the cross-log's
        partition entries and coordinator transactions, nearly all of a long-lived
        producer's stream, waited for the five small stages of its few side rows). Where the
        session's union would concatenate instead (that setting off) or the dump is small
        (one partition), the union spread as one (:meth:`_by`)."""
        if self.single:
            return self._by(reduce(DataFrame.unionByName, parts), *keys)
        return spread_each(self.spark, parts, lambda df: self._by(df, *keys))

    def _one(self, df: DataFrame) -> DataFrame:
        """``df`` as the stages after the scan read it: one partition in a small dump's."""
        return df.coalesce(1) if self.single else df

    def _later(self, name: str, build: Callable[[], DataFrame], **how) -> Callable[[], DataFrame]:
        """The scan's :meth:`ScanOutput.later`, read back as :meth:`_one` reads the scan's."""
        wait = self.scan.later(name, build, **how)
        return lambda: self._one(wait())

    def decoded(self, table: str, topics: list[str] | None = None) -> DataFrame:
        """A decoded table (of ``topics`` only, if given) with the cluster of its broker
        directory ("" for none), broker first and cluster last (the column order the written
        tables keep)."""

        def make() -> DataFrame:
            df = self.scan.table(table, topics)
            others = sql.names(c for c in df.columns if c not in ("broker", CLUSTER))
            cluster = sql.name(CLUSTER)
            return self._one(
                df.selectExpr("broker", *others, f"coalesce({cluster}, '') AS {cluster}")
            )

        return self._made(("decoded", table, None if topics is None else tuple(topics)), make)

    def replayed(self, table: str, kind: str, kept: tuple[tuple[str, ...], bool] | None
                 ) -> DataFrame:  # fmt: skip
        """The rows of ``kind`` the scan's tasks replayed into ``table`` (:data:`REPLAY_KINDS`),
        of the chosen replicas only (``kept``, :func:`replica_filter`): filtered by a literal
        list, where a join would add a broadcast job to every stage that reads them."""

        def make() -> DataFrame:
            rows = self.scan.rows(table, kind)
            if kept is not None:
                listed, excluded = kept
                key = F.concat_ws(
                    "\0", CLUSTER, "replica_topic", F.col("replica_partition").cast("string"),
                    REPLICA_BROKER,
                )  # fmt: skip
                rows = rows.filter(~key.isin(*listed) if excluded else key.isin(*listed))
            return self._one(
                rows.selectExpr(*sql.names([CLUSTER, *REPLAY_KINDS[table][kind].names]))
            )

        return self._made(("replayed", table, kind, kept), make)

    def _with_written(self, name: str, rows: DataFrame) -> DataFrame:
        """``rows`` (a :data:`SCAN_WRITTEN` table's, from the scratch area: of the partitions
        several brokers hold) and those the scan's tasks wrote into the output (the others),
        as one DataFrame of ``rows``' columns."""
        written = self.scan.written_rows(name)
        if written is None:
            return rows
        return self._made(
            ("written", name),
            lambda: self._one(rows.unionByName(_millis(written, rows.columns))),
        )

    def _made(self, key: tuple, make: Callable[[], DataFrame]) -> DataFrame:
        """The DataFrame of ``key``, made by ``make`` when first asked for and kept: the plan
        (and its threads) reads each table of the scan many times, and each made anew was a
        few hundred calls into the driver's JVM (a column reference each)."""
        with self._making:
            if key not in self._frames:
                self._frames[key] = make()
            return self._frames[key]

    # -- the plan ---------------------------------------------------------------------------------
    def run(self) -> Tables:
        kept = replica_filter(self.scan.replicas, chosen_replicas(self.scan.replicas))

        def part(kind: str) -> DataFrame:  # a partition replay's rows of one kind
            return self.replayed("replayed", kind, kept)

        def coord(kind: str) -> DataFrame:  # the coordinators'
            return self.replayed("coordinated", kind, kept)

        def groups(kind: str) -> DataFrame:  # the groups'
            return self.replayed("grouped", kind, kept)

        # the judgement over the scan's files first: the audit's longest chain, it needs none of
        # the frames below, whose planning (a few hundred calls into the JVM, a listing of the
        # scan's written files) it would otherwise wait for with the cores idle
        judged = self._judged_cross(kept)
        transactions = part("transaction")
        partitions = part("partition")
        coord_txns = coord("coord_txn")
        timeline = self._with_written("offset_timeline", groups("timeline"))
        # each producer id's partitions, as the replays gathered them (replay.sides)
        pairs = [part(TOUCHED), coord(LISTED)]

        # one task per producer id: a long-lived producer's judgement is the audit's longest chain
        # (by Python tasks over the scan's files where it has them: _judged_cross)
        def stream() -> DataFrame:
            return self._cross_log(transactions, coord_txns, partitions, pairs)

        cross, ids = judged or (self._later("cross", stream, first=True), None)
        routed, routing = self._routed(timeline, partitions)
        leaks = self._later("leaks", lambda: self._leakage(transactions, routed, partitions))

        def findings() -> DataFrame:
            replayed, carried = part("finding"), None
            if self.scan.spec.previous is not None:
                # a previous run's divergence findings (replay.previous) go on with this run's
                diverged = F.col("kind") == DIVERGENCE.kind
                carried, replayed = replayed.filter(diverged), replayed.filter(~diverged)
            found = [
                replayed,
                coord("finding"),
                groups("finding"),
                _split(cross(), "finding", T.FINDINGS),
                checks.integrity(self.decoded("errors")),
                leaks(),
                checks.propagation(leaks(), transactions, coord_txns),
                *self._across_replicas(carried),
            ]
            every = self._one(reduce(DataFrame.unionByName, found))
            return checks.remediations(every, target_of(self.config.remediation))

        all_counts = self._later(
            "counts",
            lambda: self._counts(
                part("count"), cross(), routing, self._leakage_counts(transactions, routed)
            ),
            findings=False,
        )

        def counts() -> DataFrame:
            return all_counts().groupBy(CLUSTER, "check").agg(F.sum("count").alias("count"))

        def stamped(build: Callable[[], DataFrame]) -> Callable[[], DataFrame]:
            return lambda: _timestamps(build())

        return Tables(
            {
                "transactions": stamped(lambda: self._with_txn_ids(transactions, coord_txns)),
                "producer_states": stamped(lambda: part("producer_state")),
                "lso_changes": stamped(lambda: part("lso")),
                "partitions": stamped(lambda: partitions),
                "coordinator_transactions": stamped(lambda: coord_txns),
                "group_generations": stamped(lambda: groups("generation")),
                "offset_timeline": stamped(lambda: timeline),
                # where each replica's replay ended, and its state: what a later run goes
                # on from (replay.carried); every replica's, each going on from its own
                "replay_states": lambda: self.replayed("replayed", "carried", None),
                # the decoding accounting, for the gate's data expectations: one row per file,
                # one per rejected byte range
                "segments": lambda: self.decoded("segments"),
                "errors": lambda: self.decoded("errors"),
                "findings": stamped(findings),
                "checks": stamped(counts),
                "coverage": lambda: self._coverage(all_counts()),
            },
            _copies(kept),
            {"txn_ids": lambda: _txn_ids(coord_txns)},
            self.single,
            {"txn_ids": ids} if ids is not None else None,
        )

    def _across_replicas(self, carried: DataFrame | None) -> list[DataFrame]:
        """The findings judged from the dump's layout and its replicas side by side: replicas
        that diverge (``carried``: a previous run's, going on) and stale layout entries."""
        found = []
        topics = replicated_topics(self.scan.replicas)  # where replicas can diverge
        batches = cleaned = None
        if topics:
            batches = self.decoded("batches", topics)
            bounds = cleaned_bounds(self.scan.replicas)
            if bounds:
                cleaned = local_frame(
                    self.spark,
                    [(*k, v) for k, v in sorted(bounds.items())],
                    pa.schema([(CLUSTER, pa.string()), ("topic", pa.string()),
                               ("partition", pa.int32()), ("cleaned_upto", pa.int64())]),
                )  # fmt: skip
        diverging = checks.divergence(batches, cleaned, carried)
        if diverging is not None:
            found.append(diverging)
        stale = self._layout().findings
        if stale:
            found.append(self._driver_rows(stale, T.FINDINGS))
        return found

    # -- what could be judged --------------------------------------------------------------------
    def _layout(self):
        from replay.dumpinfo import LayoutFacts

        return getattr(self.scan.spec, "layout", None) or LayoutFacts()

    def _driver_rows(self, rows: list[dict], schema: pa.Schema) -> DataFrame:
        """A few rows made on the driver (the layout's, the replicas'), with their cluster."""
        full = pa.schema([pa.field(CLUSTER, pa.string()), *schema])
        made = [tuple(r.get(f.name) for f in full) for r in rows]
        return local_frame(self.spark, made, full)

    def _leakage_counts(self, pt: DataFrame, timeline: DataFrame) -> DataFrame:
        """The "leakage" coverage family (replay.coverage.leakage_counts): each partition's
        aborted or open transactions with data, judged where a group committed on it."""
        from replay import coverage as C

        keys = [CLUSTER, "topic", "partition"]
        exposed = _not_committed(pt).select(
            *keys, F.lit(1).alias("_txn"), F.lit(0).alias("_commit")
        )
        # only the commits of those partitions count (_seen), kept by a lookup as the leakage
        # keeps them (_exposed): a long-lived group's millions of commits were shuffled whole
        # to be grouped (an explicit shuffle leaves no partial aggregation before it), and
        # where no partition holds one (a healthy dump) no stage reads the timeline
        committed = (
            timeline.filter(F.col("committed_offset").isNotNull())
            .join(_exposed(pt), keys, "left_semi")
            .select(*keys, F.lit(0).alias("_txn"), F.lit(1).alias("_commit"))
        )
        # one aggregation of both (a kept plan's shuffles are sized here)
        per = (
            self._by(exposed.unionByName(committed), *keys).groupBy(*keys)
            .agg(F.sum("_txn").alias("count"), F.max("_commit").alias("_seen"))
            .filter(F.col("count") > 0)
        )  # fmt: skip
        check = F.when(F.col("_seen") > 0, F.lit(C.LEAKAGE_JUDGED)).otherwise(C.LEAKAGE_NO_COMMITS)
        return per.select(*keys, check.alias("check"), F.col("count").cast("long"))

    def _counts(self, counted: DataFrame, cross: DataFrame, routing: DataFrame | None,
                leakage: DataFrame) -> DataFrame:  # fmt: skip
        """Every check count (the replays' ``counted``, the cross-log judge's, the commits'
        routing to a re-created topic's incarnations, the layout's and the replicas' made on
        the driver), by cluster, partition and check."""
        from replay.coverage import replica_counts

        driver = self._layout().counts + replica_counts(self.scan.replicas)
        found = [counted, _split(cross, "count", T.CHECK_COUNTS)]
        found.append(leakage)
        if routing is not None:
            found.append(routing)
        if driver:
            found.append(self._driver_rows(driver, T.CHECK_COUNTS))
        keys = (CLUSTER, "topic", "partition", "check")
        # a kept plan's shuffles are sized here (see _cross_log)
        every = self._by(reduce(DataFrame.unionByName, found), *keys)
        return every.groupBy(*keys).agg(F.sum("count").alias("count"))

    def _routed(
        self, timeline: DataFrame, partitions: DataFrame
    ) -> tuple[DataFrame, DataFrame | None]:
        """The commits of a re-created topic's name, each with the incarnation it fits
        (replay.incarnations: its time between the incarnation's first batch and its copy's
        end, widened by the clock tolerance), those fitting none or several left out; and their
        counts. Only where the layout found several incarnations of a name (else the timeline
        as it is, and no Spark job)."""
        from replay import coverage as C

        layout = self._layout().described or {}
        if not layout.get("stale_replicas") and not layout.get("undecided_topics"):
            return timeline, None
        tol = self.config.clock_tolerance_ms
        keys = [CLUSTER, "topic", "partition"]
        p = partitions.select(*keys, "first_timestamp", "copy_end_timestamp").withColumn(
            "_name", F.split("topic", LABEL_MARK).getItem(0)
        )
        at = [CLUSTER, "_name", "partition"]
        many = self._by(p, *at).groupBy(*at).count().filter("count > 1").drop("count")
        windows = p.join(many, at).select(
            CLUSTER, F.col("_name").alias("topic"), "partition", F.col("topic").alias("_label"),
            (F.col("first_timestamp") - tol).alias("_lo"), (F.col("copy_end_timestamp") + tol).alias("_hi"),
        )  # fmt: skip
        plain = timeline.join(F.broadcast(windows.select(*keys).distinct()), keys, "left_anti")
        ts = F.col("effective_timestamp")
        fit = (F.col("_lo").isNull() | (ts >= F.col("_lo"))) & (F.col("_hi").isNull() | (ts <= F.col("_hi")))  # fmt: skip
        fit = F.when(ts.isNull(), F.col("_lo").isNull() & F.col("_hi").isNull()).otherwise(fit)
        named = self._by(  # a kept plan's shuffles are sized here
            timeline.withColumn("_id", F.monotonically_increasing_id()).join(
                F.broadcast(windows), keys
            ),
            "_id",
        )
        fits = named.filter(fit).withColumn("_fits", F.count("*").over(Window.partitionBy("_id")))
        one = fits.filter(F.col("_fits") == 1)
        routed = plain.unionByName(
            one.withColumn("topic", F.col("_label")).select(*timeline.columns)
        )
        ids = named.select(*keys, "_id").distinct()
        per = self._by(ids.join(one.select("_id"), "_id", "left_semi"), *keys)
        judged = per.groupBy(*keys).count().withColumn("check", F.lit(C.COMMITS_ROUTED))
        every = self._by(ids, *keys).groupBy(*keys).count()
        left = (
            every.join(judged.select(*keys, F.col("count").alias("_one")), keys, "left")
            .select(*keys, (F.col("count") - F.coalesce("_one", F.lit(0))).alias("count"))
            .withColumn("check", F.lit(C.COMMITS_UNDECIDED))
        )
        counts = judged.unionByName(left).select(CLUSTER, *T.CHECK_COUNTS.names)
        return routed, counts

    def _coverage(self, counts: DataFrame) -> DataFrame:
        """The coverage table (replay.coverage): each count as its family, judged or not and
        why, in its unit, with the partition's log bytes (its largest replica)."""
        from replay.coverage import CHECKS, partition_bytes

        meaning = local_frame(
            self.spark,
            [(w, c.family, c.judged, c.reason or None, c.unit) for w, c in CHECKS.items()],
            pa.schema([("check", pa.string()), ("family", pa.string()), ("judged", pa.bool_()),
                       ("reason", pa.string()), ("unit", pa.string())]),
        )  # fmt: skip
        rows = counts.join(F.broadcast(meaning), "check", "left").select(
            CLUSTER, F.coalesce("family", F.lit("other")).alias("family"), "topic", "partition",
            F.coalesce("judged", F.lit(True)).alias("judged"), "reason",
            F.coalesce("unit", "check").alias("unit"), "count",
        )  # fmt: skip
        keys = [CLUSTER, "family", "topic", "partition", "judged", "reason", "unit"]
        rows = self._by(rows, *keys[:4]).groupBy(*keys)
        rows = rows.agg(F.sum("count").cast("long").alias("count"))
        rows = rows.filter(F.col("count") > 0)  # a zero count says nothing
        sizes = [(*k, n) for k, n in sorted(partition_bytes(self.scan.replicas).items())]
        logs = local_frame(
            self.spark,
            sizes,
            pa.schema([(CLUSTER, pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                       ("bytes", pa.int64())]),
        )  # fmt: skip
        on = [CLUSTER, "topic", "partition"]
        return rows.join(F.broadcast(logs), on, "left").select(CLUSTER, *T.COVERAGE.names)

    # -- partitions against the coordinator -------------------------------------------------------
    def _crosslog_facts(self) -> Facts:
        return replace(self.config.facts(), anchors=self._layout().anchors)

    def _judged_cross(self, kept) -> tuple[Callable[[], DataFrame], Callable[[], dict]] | None:
        """The cross-log judgement by Python tasks over the scan's own files, where the scan
        has them (jobs.scan.Scratch.judged_cross: replay.crosslog_runs), else None (a
        session's cached scan: :meth:`_cross_log`). The same findings and counts: no row
        goes through Spark's shuffle and sort, nor through the JVM at all. With it, what waits
        for the transactions' lookup of transactional ids it writes (:func:`_txn_ids`'s rows:
        the judgement reads every coordinator transaction of each producer id anyway)."""
        judged = getattr(self.scan, "judged_cross", None)
        if judged is None:
            return None
        from replay.crosslog_runs import StreamFacts

        buckets = 1 if self.single else self.tasks
        stream = StreamFacts.of(self.scan.replicas, kept, buckets)
        wait, ids = judged(self._crosslog_facts(), stream, buckets, "txn_ids")
        return (lambda: self._one(wait())), ids

    def _cross_log(self, pt: DataFrame, ct: DataFrame, partitions: DataFrame,
                   pairs: list[DataFrame]) -> DataFrame:  # fmt: skip
        """Every partition against the coordinator's log, per producer id, by order
        (replay.crosslog); also the hanging transactions (their timeout is the coordinator's).

        One stream per task, sorted by (cluster, producer id, what each partition's copy
        covers, the coordinator's transactions in its log order, each partition's entries in
        offset order: replay.crosslog_stream.STREAM_ORDER), judged a batch at a time: Spark's
        sort spills, and no producer's history is gathered into one group (a Kafka Streams
        thread under TV0/1 writes millions of transactions under one producer id). The plan
        over a session's cached scan; a job's makes the same stream without Spark
        (:meth:`_judged_cross`)."""
        schema = pa.schema([pa.field(CLUSTER, pa.string()), *CROSSLOG_SCHEMA])
        facts = self._crosslog_facts()

        codes = stream_codes(self.scan.replicas)  # the rows' text, as the stream sends it

        def judge(batches):  # no hints: Spark infers its UDF type from them
            settled()
            for t in judge_stream(batches, facts, codes):
                yield from t.to_batches()

        txn_fields = STREAM_FIELDS[TXN].values()
        txns = pt.selectExpr(*_stream_row(TXN, sql.named(txn_fields),
                                          p1="coalesce(first_offset, marker_offset)"))  # fmt: skip
        parts = [txns, self._stream_sides(pairs, partitions), _stream_coord(ct, partitions)]
        keyed = [crosslog_keyed(self.spark, part, self.scan.replicas, coded=True)
                 for part in parts]  # fmt: skip
        order = keyed[0][1]
        _c, k1 = SORT_KEYS
        return (
            self._by_each([k for k, _order in keyed], _c, CLUSTER, "producer_id")
            .sortWithinPartitions(*order)
            .drop("_p1", "_p2", k1)
            .mapInArrow(judge, struct_type(schema))
        )

    def _stream_sides(self, pairs: list[DataFrame], partitions: DataFrame) -> DataFrame:
        """The cross-log stream's SIDE rows: what each copy of a partition a producer touched
        (wrote a transaction into, or its coordinator listed) covers. ``pairs``: the replays'
        (producer id, partition) pairs (replay.sides: a few a replica, however many
        transactions), made distinct across replicas here."""
        columns = [CLUSTER, "producer_id", "topic", "partition"]
        touched = reduce(DataFrame.unionByName, [p.select(*columns) for p in pairs])
        # every shuffle of a plan that is kept (ScanOutput.later) is sized here: adaptive
        # execution does not change a cached plan's partitioning
        side_cols = ("complete_from", "copy_end_timestamp")
        sides = (
            self._by(touched, CLUSTER, "producer_id")
            .distinct()
            .join(
                F.broadcast(partitions.select(CLUSTER, "topic", "partition", *side_cols)),
                [CLUSTER, "topic", "partition"],
            )
        )
        return sides.selectExpr(*_stream_row(SIDE, sql.named(side_cols)))

    def _with_txn_ids(self, pt: DataFrame, ct: DataFrame) -> DataFrame:
        # one row per transactional producer id: broadcast, so that the transactions keep their
        # partitioning (a join by producer id puts a long-lived producer's history in one task)
        return pt.join(F.broadcast(_txn_ids(ct)), list(LOOKUP_KEYS), "left").select(
            CLUSTER, *[f.name for f in T.TRANSACTIONS], *TXN_ID_COLUMNS
        )

    # -- leakage ----------------------------------------------------------------------------------
    def _leakage(self, pt: DataFrame, timeline: DataFrame, partitions: DataFrame) -> DataFrame:
        """Aborted reads per partition (replay.leakage), of the partitions holding an aborted
        or open transaction only (the others cannot leak): their transactions and their groups'
        commits as one stream per task sorted by offset, judged a batch at a time; no
        partition's history is gathered into one group."""
        schema = pa.schema([pa.field(CLUSTER, pa.string()), *T.FINDINGS])
        declared = self.config.declared_isolation()
        tolerance = self.config.clock_tolerance_ms

        def judge(batches):  # no hints: Spark infers its UDF type from them
            settled()
            for t in leaks_stream(batches, declared, tolerance, CLUSTER):
                yield from t.to_batches()

        by = [CLUSTER, "topic", "partition"]
        ends = partitions.select(*by, "copy_end_timestamp")
        t = _with_data(pt)
        exposed = _exposed(pt)
        # each side's columns as one list of SQL expressions (replay.plan._stream_row)
        keys, kind, offset = sql.names(by), sql.name(LEAK_KIND), sql.name(LEAK_OFFSET)
        txns = (
            t.join(exposed, by, "left_semi")
            .join(F.broadcast(ends), by, "left")
            .selectExpr(
                *keys, f"1 AS {kind}", f"CAST(first_offset AS BIGINT) AS {offset}",
                *sql.names(LEAK_TXN_COLUMNS), "CAST(NULL AS STRING) AS group_id",
                *[f"CAST(NULL AS BIGINT) AS {sql.name(c)}"
                  for c in ("committed_offset", "effective_timestamp", "effective_log_offset",
                            "commit_producer_id")],
            )
        )  # fmt: skip
        types = {f.name: f.dataType.simpleString() for f in pt.schema.fields}
        commits = (
            timeline.filter(F.col("committed_offset").isNotNull())
            .join(exposed, by, "left_semi")
            .selectExpr(
                *keys, f"0 AS {kind}", f"CAST(committed_offset AS BIGINT) AS {offset}",
                *[f"CAST(NULL AS {types.get(c, 'bigint')}) AS {sql.name(c)}" for c in LEAK_TXN_COLUMNS],
                "group_id", "CAST(committed_offset AS BIGINT) AS committed_offset",
                "CAST(effective_timestamp AS BIGINT) AS effective_timestamp",
                "CAST(effective_log_offset AS BIGINT) AS effective_log_offset",
                "CAST(producer_id AS BIGINT) AS commit_producer_id",
            )
        )  # fmt: skip
        stream = txns.unionByName(commits, allowMissingColumns=False)
        keyed = _with_sort_keys(self.spark, stream, self.scan.replicas, sql.name(LEAK_OFFSET))
        return (
            self._by(keyed, *by)
            .sortWithinPartitions(*SORT_KEYS, *by, LEAK_OFFSET, LEAK_KIND)
            .drop(*SORT_KEYS)
            .mapInArrow(judge, struct_type(schema))
        )


def _with_data(pt: DataFrame) -> DataFrame:
    """The partitions' transactions with data, of user topics: what a group reads."""
    return pt.filter(~F.col("topic").isin(*INTERNAL_TOPICS) & (F.col("record_count") > 0))


def _not_committed(pt: DataFrame) -> DataFrame:
    """The transactions of :func:`_with_data` aborted or open: what a ``read_uncommitted``
    group may read (replay.leakage)."""
    return _with_data(pt).filter(F.col("outcome").isin(*NOT_COMMITTED))


def _exposed(pt: DataFrame) -> DataFrame:
    """The partitions holding a transaction of :func:`_not_committed` (few; none in a healthy
    dump), broadcast: a side joined to them is kept by a lookup, not shuffled and sorted to be
    joined, and where there are none adaptive execution drops that side before any stage
    reads it."""
    return F.broadcast(_not_committed(pt).select(CLUSTER, "topic", "partition").distinct())


# what the transactions table adds to the partitions' transactions, from the coordinator's log
TXN_ID_COLUMNS = ("transactional_id", "coordinator_fenced")


def _txn_ids(ct: DataFrame) -> DataFrame:
    """One row per transactional producer id of the coordinator's log (:data:`LOOKUP_KEYS`):
    its transactional id and whether the coordinator fenced it."""
    return ct.groupBy(*LOOKUP_KEYS).agg(
        F.max("transactional_id").alias("transactional_id"),
        F.max(F.col("fenced").cast("int")).cast("boolean").alias("coordinator_fenced"),
    )


def _stream_row(kind: int, columns: dict[str, str], topic: str = "topic",
                partition: str = "`partition`", p1: str = "0", p2: str = "0") -> list[str]:  # fmt: skip
    """One kind's columns in the cross-log stream's shared slots (STREAM_FIELDS), as SQL
    expressions (``columns``: field -> its expression) for one ``selectExpr``: a column
    expression object per slot was ~10 calls into the driver's JVM each, ~1,000 for the
    stream, most of the time its plan took to build on a small dump."""
    fields = STREAM_FIELDS[kind]
    given = {slot: columns[name] for slot, name in fields.items()}
    return [
        sql.name(CLUSTER), "CAST(producer_id AS BIGINT) AS producer_id", f"{kind} AS {sql.name(KIND)}",
        f"CAST({topic} AS STRING) AS topic", f"CAST({partition} AS INT) AS `partition`",
        *[f"CAST({given.get(n, 'NULL')} AS BIGINT) AS {sql.name(n)}" for n in INT_SLOTS],
        *[f"CAST({given.get(n, 'NULL')} AS STRING) AS {sql.name(n)}" for n in TEXT_SLOTS],
        f"CAST({p1} AS BIGINT) AS `_p1`", f"CAST({p2} AS BIGINT) AS `_p2`",
    ]  # fmt: skip


# a stream's leading sort keys (_with_sort_keys): in ``_k1`` a partition's rank (or a
# coordinator transaction's log partition) sits above a position, each saturating at its width
SORT_KEYS = (CLUSTER_CODE, "_k1")
POSITION_BITS = 40
RANK_BITS = 22


def _with_sort_keys(spark: SparkSession, stream: DataFrame, replicas: list[ReplicaRow],
                    position: str, above: str | None = None,
                    rank_as: str | None = None) -> DataFrame:  # fmt: skip
    """``stream`` with two keys that, sorted on first, put its rows in their order with few
    comparisons: ``_c``, the cluster's rank among the dump's clusters, and ``_k1``, the row's
    partition's rank among the dump's (topic, partition)s (``above`` where it is not null)
    above ``position``, each part saturated at its width, so that the keys never decrease
    along an order by (cluster, ..., topic, partition, position); their ties fall to that
    order itself, sorted on after them.

    Why: Spark sorts by comparing a prefix of the first key and, where prefixes tie, every
    key in turn. The cross-log stream's order begins with the cluster's name and the producer
    id, equal for all of a long-lived producer's millions of rows, then the topic's name: each
    comparison compared strings. On 6 M rows of one producer the sort takes 12.8 s with these
    keys in front (making them included), 16.4 s without (benchmarks/bench_stream_sort.py). A
    cluster or partition not among the scan's replicas (none is expected) gets a hash
    (cluster) or no rank (partition): its rows still keep together, in the full order among
    themselves. ``position`` and ``above``: SQL expressions over the stream's columns (the keys
    are SQL text: replay.sql)."""
    clusters, tps = _ranked(replicas)
    cluster = sql.name(CLUSTER)
    c = sql.case(
        [(f"{cluster} = {sql.quoted(n)}", f"CAST({i} AS BIGINT)") for i, n in enumerate(clusters)],
        f"(xxhash64({cluster}) & {(1 << 62) - 1}) + {1 << 62}",
    )
    ranks = local_frame(
        spark,
        [(t, p, i) for i, (t, p) in enumerate(tps)],
        pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("_rank", pa.int64())]),
    )

    def clamp(expr: str, bits: int) -> str:
        return f"least(greatest(coalesce({expr}, 0), 0), {(1 << bits) - 1})"

    rank = f"CASE WHEN _rank IS NOT NULL THEN {clamp('_rank', RANK_BITS)} END"
    if above is not None:
        rank = f"CASE WHEN ({above}) IS NOT NULL THEN {clamp(above, RANK_BITS)} ELSE {rank} END"
    k1 = f"({rank}) * {1 << POSITION_BITS} + {clamp(position, POSITION_BITS)}"
    keyed = stream.join(F.broadcast(ranks), ["topic", "partition"], "left")
    # the exact rank as well, where the key holds it whole (crosslog_keyed's topic codes)
    whole = f"CASE WHEN _rank < {(1 << RANK_BITS) - 1} THEN _rank END"
    kept = [f"{whole} AS {sql.name(rank_as)}"] if rank_as is not None else []
    return keyed.selectExpr(*sql.names(stream.columns), f"{c} AS _c", f"{k1} AS _k1", *kept)


def _ranked(replicas: list[ReplicaRow]) -> tuple[list[str], list[tuple[str, int]]]:
    """The dump's clusters and (topic, partition)s in their order: each one's rank."""
    return sorted({r.cluster for r in replicas}), sorted({(r.topic, r.partition) for r in replicas})


def crosslog_keyed(spark: SparkSession, stream: DataFrame, replicas: list[ReplicaRow],
                   coded: bool = False) -> tuple[DataFrame, list[str]]:  # fmt: skip
    """The cross-log stream with its leading sort keys (:func:`_with_sort_keys`; a coordinator
    transaction's place is its log partition and offset in it), and the columns to sort it by
    for :data:`STREAM_ORDER`. ``coded``: its cluster, topic and outcome as the codes of
    :func:`stream_codes` (the text kept only where a value has none), the order the same."""
    coord = f"{sql.name(KIND)} = {COORD}"
    keyed = _with_sort_keys(spark, stream, replicas,
                            f"CASE WHEN {coord} THEN _p2 ELSE _p1 END",
                            f"CASE WHEN {coord} THEN _p1 END", TOPIC_CODE if coded else None)  # fmt: skip
    _c, k1 = SORT_KEYS
    if coded:
        keyed = _coded(keyed, len(_ranked(replicas)[0]))
    return keyed, [_c, "producer_id", KIND, k1, *STREAM_ORDER]


def stream_codes(replicas: list[ReplicaRow]) -> StreamCodes:
    """What :func:`crosslog_keyed`'s codes stand for."""
    clusters, tps = _ranked(replicas)
    return StreamCodes(tuple(clusters), tuple(t for t, _p in tps))


def _coded(keyed: DataFrame, clusters: int) -> DataFrame:
    """The keyed stream with its cluster (``_c`` below ``clusters``: a cluster of the dump),
    topic (``_tc``) and outcome (``_oc``) text null wherever a code stands for it. The order
    stays whole: the codes order as the text does (each a rank among the sorted values), and
    ``_c`` and ``_k1`` hold the ranks in front of the text."""
    # one selectExpr, not a column expression per column (replay.plan._stream_row)
    outcome = sql.case(
        [(f"_s0 = {sql.quoted(v)}", f"CAST({i} AS BIGINT)") for i, v in enumerate(RAW_OUTCOMES)],
        "CAST(NULL AS BIGINT)",
    )
    coded = {
        CLUSTER: f"CASE WHEN _c >= {clusters} THEN {sql.name(CLUSTER)} END",
        "topic": f"CASE WHEN {sql.name(TOPIC_CODE)} IS NULL THEN topic END",
        "_s0": f"CASE WHEN ({outcome}) IS NULL THEN _s0 END",
    }
    return keyed.selectExpr(
        *[f"{coded[c]} AS {sql.name(c)}" if c in coded else sql.name(c) for c in keyed.columns],
        f"{outcome} AS {sql.name(OUTCOME_CODE)}",
    )


# a coordinator transaction's partitions as the stream's text: "topic:partition,..." (a topic
# name holds neither separator; crosslog_stream.PARTITION_LIST)
LISTING = (
    "CASE WHEN partitions IS NOT NULL THEN concat_ws(',', transform(partitions, "
    "x -> concat(x.topic, ':', CAST(x.`partition` AS STRING)))) END"
)


def _stream_coord(ct: DataFrame, partitions: DataFrame) -> DataFrame:
    """The cross-log stream's COORD rows: the coordinators' transactions, each with where its
    log's copy ends."""
    ends = partitions.filter(F.col("topic") == TRANSACTION_STATE_TOPIC).select(
        CLUSTER,
        F.col("partition").alias("log_partition"),
        F.col("copy_end_timestamp").alias("copy_end_ts"),
    )
    coord_columns = sql.named(STREAM_FIELDS[COORD].values())
    coord_columns["partitions"] = LISTING
    coord_columns["maybe"] = "CAST(maybe AS INT)"
    coord_columns["history_from_start"] = "CAST(history_from_start AS INT)"
    return ct.join(F.broadcast(ends), [CLUSTER, "log_partition"], "left").selectExpr(
        *_stream_row(COORD, coord_columns, topic="NULL", partition="NULL",
                     p1="coalesce(log_partition, 0)", p2="coalesce(first_log_offset, 0)")
    )  # fmt: skip


# copied tables (:func:`_copies`) whose rows of a partition only one broker holds (all kept,
# whatever replicas the audit chooses: replay.replicas.held_once) the job's scan tasks write
# in the table's own form, into the output, as they replay (jobs.scan.ScanWritten): a
# long-lived producer's ten million LSO changes and four million commits written once, not
# written to the scratch area, read back and written again (docs/benchmarks.md). A stage that
# reads one (the offset timeline: leakage, a re-created topic's routing) reads the scratch
# area's rows and the written ones (Audit._with_written).
SCAN_WRITTEN = ("lso_changes", "offset_timeline")


def scan_written() -> dict[str, Copied]:
    """The :data:`SCAN_WRITTEN` tables' copies, of every replica's rows."""
    copies = _copies(None)
    return {name: copies[name] for name in SCAN_WRITTEN}


def _copies(kept: tuple[tuple[str, ...], bool] | None) -> dict[str, Copied]:
    """The tables a caller with the scratch area copies from it (jobs.copies): the decoding
    accounting, and the replayed rows of the chosen replicas; the transactions with their
    producer's transactional id (the lookup ``txn_ids``: :func:`_txn_ids`)."""
    copies = {name: Copied(name, _copied_schema(name)) for name in ("segments", "errors")}
    for name, source, out, schema in (
        ("producer_states", "replayed", "producer_state", T.PRODUCER_STATES),
        ("lso_changes", "replayed", "lso", T.LSO_CHANGES),
        ("partitions", "replayed", "partition", T.PARTITIONS),
        ("coordinator_transactions", "coordinated", "coord_txn", T.COORDINATOR_TXNS),
        ("group_generations", "grouped", "generation", T.GENERATIONS),
        ("offset_timeline", "grouped", "timeline", T.TIMELINE),
        ("replay_states", "replayed", "carried", T.REPLAY_STATES),
    ):
        columns = [CLUSTER, *schema.names]
        of = None if name == "replay_states" else kept  # every replica's state
        copies[name] = Copied(source, _copied_schema(source, columns), out, of)
    # a long-lived producer's dump is millions of them: a query's shuffle and sort of every
    # column (jobs.output.write_table) cost more than its scan
    base = _copied_schema("replayed", [CLUSTER, *T.TRANSACTIONS.names])
    ids = zip(TXN_ID_COLUMNS, (StringType(), BooleanType()), strict=True)  # as _txn_ids types them
    schema = StructType([*base.fields, *(StructField(name, kind) for name, kind in ids)])
    copies["transactions"] = Copied("replayed", schema, "transaction", kept, "txn_ids")
    return copies


class Tables(Mapping):
    """The audit's tables by name, each planned when first asked for, by the thread that asks
    (a caller writing them from several threads plans them at once; the py4j calls of planning
    are most of a small table's time). :attr:`copies`: how the rows of some tables come
    straight from the scan's tables; :attr:`lookups`: the small tables those copies join
    (:attr:`Copied.lookup`), as queries, and :attr:`written`: those already being written."""

    def __init__(
        self,
        builders: dict[str, Callable[[], DataFrame]],
        copies: Mapping[str, Copied] | None = None,
        lookups: Mapping[str, Callable[[], DataFrame]] | None = None,
        single: bool = False,
        written: Mapping[str, Callable[[], dict]] | None = None,
    ) -> None:
        self._builders = dict(builders)
        # a small dump's plan (Audit.single): each table's rows in one partition already
        self.single = single
        # the tables whose rows a caller may copy from the scratch area instead of running
        # their query (their DataFrame still gives their schema)
        self.copies = dict(copies or {})
        self.lookups = dict(lookups or {})
        # lookups the plan's own stages write in the scratch area: what waits for each one's
        # entry (jobs.output.write_table's), in place of running its query
        self.written = dict(written or {})
        self._built: dict[str, DataFrame] = {}
        self._locks = {name: threading.Lock() for name in builders}

    def __getitem__(self, name: str) -> DataFrame:
        with self._locks[name]:  # built once, whichever thread asks first
            if name not in self._built:
                self._built[name] = self._builders[name]()
            return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)

    def __repr__(self) -> str:
        return f"Tables({', '.join(self)})"


def summary_of(checks: list[dict], clusters, coverage: list[dict] | None = None,
               layout: dict | None = None) -> dict:  # fmt: skip
    """What the run's summary says beyond finding counts: the clusters found, how the layout
    was read, what the checks could and could not judge, from the checks table's rows
    (cluster, check, count), the clusters of the partitions table and the coverage table's
    rows (family, judged, reason, unit, count)."""
    from replay.coverage import shares

    counts: dict[str, dict[str, int]] = {}
    for r in checks:
        counts.setdefault(r[CLUSTER], {})[r["check"]] = int(r["count"] or 0)
    out = {"clusters": sorted(set(clusters)),
           "checks": {c: with_shares(v) for c, v in counts.items()}}  # fmt: skip
    if coverage is not None:
        out["coverage"] = shares(coverage)
    if layout is not None:
        out["dump_layout"] = layout
    return out


def _config(conf: dict | AuditConfig | None) -> AuditConfig:
    return AuditConfig.of(conf)


@contextmanager
def audit_session(
    spark: SparkSession,
    paths: list[str],
    conf: dict | AuditConfig | None = None,
    skip: dict[str, str] | None = None,
    since: Callable | None = None,
) -> Iterator[Mapping[str, DataFrame]]:
    """Replay a dump in a user's session: DataFrames by table name (findings, transactions,
    producer_states, lso_changes, partitions, coordinator_transactions, group_generations,
    offset_timeline, replay_states, checks, plus the decoded segments and errors), for the
    ``with`` block;
    what the audit cached is released when the block ends, however it ends. ``skip``: files
    left out of the run, path -> reason (see jobs.resilience); ``since``: the previous output
    to go on from (``replay._previous``)."""
    scan = _cached_scan(spark, list(paths), _config(conf), skip, since)
    try:
        yield Audit(spark, _config(conf), scan).run()
    finally:
        scan.release()


def audit(
    spark: SparkSession,
    paths: list[str],
    conf: dict | AuditConfig | None = None,
    skip: dict[str, str] | None = None,
    since: Callable | None = None,
) -> Mapping[str, DataFrame]:
    """:func:`audit_session` without the block: what the audit cached stays cached until the
    session ends or its cache is cleared."""
    config = _config(conf)
    return Audit(spark, config, _cached_scan(spark, list(paths), config, skip, since)).run()


def _cached_scan(spark, paths: list[str], config: AuditConfig, skip, since=None):
    from decoders.layout import dump_layout
    from replay.session_scan import CachedScan

    listed = dump_layout(paths)  # once: the spec's small files and the scan's
    spec = replay_spec(paths, config, listed)
    if since is not None:  # the previous output, checked against this dump's clusters
        points, previous = since(set(spec.clusters.values()))
        spec = replace(spec, points=points, previous=previous)
    return CachedScan(spark, paths, config, spec, skip or {}, listed[0])
