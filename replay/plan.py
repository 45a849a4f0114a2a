"""The audit as Spark plans: decode, choose replicas, replay per partition / transactional id /
group in grouped Arrow functions (:mod:`replay.grouped`), cross-check with joins
(:mod:`replay.checks`). Nothing but small per-run summaries reaches the driver.

The plan caches the tables several outputs read; :func:`audit_session` releases them when the
caller is done with the tables (after writing them). With a scratch area, the intermediate
tables are written there in the background while the caller writes the tables that do not
read them (:class:`Tables`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from decoders.spark import SKIP_OPTION, _struct, register, spark_type, table_schema
from replay import checks
from replay import tables as T
from replay.dumpinfo import broker_clusters, cleaner_checkpoints
from replay.grouped import (
    CLUSTER,
    COORDINATOR_COLUMNS,
    COORDINATOR_SCHEMA,
    CROSSLOG_COORD,
    CROSSLOG_LEFT,
    CROSSLOG_SCHEMA,
    GROUP_EVENT_COLUMNS,
    GROUP_SCHEMA,
    INTERNAL_TOPICS,
    PARTITION_SCHEMA,
    cleaned_upto,
    coordinator_tables,
    crosslog_tables,
    group_tables,
    keyed,
    partition_tables,
    with_shares,
)
from replay.leakage import NOT_COMMITTED, judge_partition
from replay.replicas import (
    REPLAY_TABLES,
    REPLICA_BROKER,
    REPLICA_KEYS,
    SIDE_COLUMNS,
    ReplaySpec,
    chosen_replicas,
    replicated_topics,
)
from replay.settings import AuditConfig


def struct_type(schema: pa.Schema) -> StructType:
    return StructType([StructField(f.name, spark_type(f.type), True) for f in schema])


def _split(df: DataFrame, out: str, schema: pa.Schema) -> DataFrame:
    """One output table of a grouped function's rows, with the cluster they belong to."""
    return df.filter(F.col("out") == out).select(CLUSTER, *[f.name for f in schema])


def _ms(col: str) -> Column:
    return F.unix_millis(F.col(col)).alias(col)


def _millis(df: DataFrame, columns) -> list[Column]:
    """``columns`` of ``df``, timestamps as epoch milliseconds (as the grouped functions read
    them)."""
    return [
        _ms(c) if df.schema[c].dataType.typeName() == "timestamp" else F.col(c) for c in columns
    ]


def _with_cluster(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(CLUSTER, pa.string()), *schema])


def _timestamps(df: DataFrame) -> DataFrame:
    cols = [
        F.timestamp_millis(F.col(c)).alias(c) if c in T.TIMESTAMP_COLUMNS else F.col(c)
        for c in df.columns
    ]
    return df.select(*cols)


# the decoded tables the audit reads: batch headers and the accounting from a header scan, the
# internal topics' records decoded deep
DECODED_TABLES = (
    "batches", "segments", "errors", "producer_snapshots", "aborted_txns", "txn_log",
    "offset_commits", "group_metadata",
)  # fmt: skip


# the decoded tables the audit reads when the scan's tasks replayed every replica (the rest
# they read themselves, replay.replicas.REPLAY_READS)
REPLAY_SCAN_TABLES = ("batches", "segments", "errors")


@dataclass(frozen=True)
class Copied:
    """How an output table's rows come from a scratch table, kept and laid out but neither
    joined nor grouped: a caller with the scratch area copies them (jobs.copies) instead of
    running the table's query. ``out``: keep the rows of that kind (the replay tables' ``out``
    column); ``replicas``: (replica keys, whether those are the ones left out), as
    :meth:`Audit._replica_filter` gives them; ``clusters``: broker directory -> cluster, for
    a decoded table that gets its ``cluster`` column from its broker."""

    source: str
    schema: StructType  # the output's, as the table's query gives it (_copied_schema)
    out: str | None = None
    replicas: tuple[tuple[str, ...], bool] | None = None
    clusters: dict | None = None


def _copied_schema(source: str, columns: list[str] | None = None) -> StructType:
    """The Spark schema an output table has when it is copied from the scratch table
    ``source`` (:class:`Copied`): what its query gives, so either way the same. A replay
    table's ``columns`` keep the scratch area's types and comments, timestamps become Spark
    timestamps (``_timestamps``: no comment); a decoded table gets the ``cluster`` column of
    ``Audit._with_cluster`` (never null), its broker first. tests/test_copies.py compares
    them with the queries' schemas."""
    from pyspark.sql.types import StringType, TimestampType

    scratch = _struct(REPLAY_TABLES.get(source) or table_schema(source, False))
    fields = {f.name: f for f in scratch.fields}
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
    """One audit of a dump: :meth:`run` builds the plan, :meth:`release` unpersists what it
    cached."""

    def __init__(
        self,
        spark: SparkSession,
        paths: list[str],
        config: AuditConfig,
        decoded: Callable[[str], DataFrame] | None = None,
        skip: dict[str, str] | None = None,
        stash: Callable[[str, DataFrame], DataFrame] | None = None,
        replay: ReplaySpec | None = None,
        replicas: list[dict] | None = None,
    ) -> None:
        self.spark, self.paths, self.config = spark, paths, config
        # the caller's scan replayed every replica in the tasks that read them (the audit job,
        # see replay.replicas): ``decoded`` also gives the replayed rows, and ``replicas`` is
        # the scan's one row per replica
        self.replay, self.replicas = replay, replicas or []
        # where the replay's intermediate tables go when its caller has a run-scoped scratch
        # area (the audit job, see jobs.scan.Scratch.stash); else they are cached in memory
        self.stash = stash
        # the run's decoded tables when its caller decoded the dump once beforehand (the audit
        # job's one scan, see jobs.scan); else each table is read through the data source
        self.decoded = decoded
        self.skip = skip or {}  # files left out of the run (jobs.resilience): path -> reason
        self.cached: list[DataFrame] = []
        # the intermediate tables being written to the scratch area (:meth:`_later`)
        self.background: ThreadPoolExecutor | None = None
        self.pending: list[Future] = []
        # broker directory -> cluster (meta.properties, read on the driver: a few bytes each)
        self.clusters = replay.clusters if replay else broker_clusters(paths, config.cluster)
        # as a literal map in every read's projection: a join with a small DataFrame would be
        # one more broadcast, so one more Spark job, in every stage that reads a decoded table
        pairs = [F.lit(x) for kv in sorted(self.clusters.items()) for x in kv]
        self.cluster_of = F.create_map(*pairs) if pairs else None

    def read(self, table: str, deep: bool = False, topics: str | None = None) -> DataFrame:
        if self.decoded is not None:
            return self._with_cluster(self.decoded(table))
        register(self.spark)  # idempotent: a session of the CLI's jobs has not registered it
        r = self.spark.read.format("kafka-segments").option("table", table)
        r = r.option("paths", json.dumps(self.paths)).option("deep", str(deep).lower())
        if topics:
            r = r.option("topics", topics)
        if self.config.range_bytes:
            r = r.option("range_bytes", str(self.config.range_bytes))
        if self.config.window_bytes:
            r = r.option("window_bytes", str(self.config.window_bytes))
        if self.config.memory_budget_mb:
            r = r.option("memory_budget_mb", str(self.config.memory_budget_mb))
        r = r.option("verify_crc", str(self.config.verify_crc).lower())
        if self.skip:
            r = r.option(SKIP_OPTION, json.dumps(self.skip))
        return self._with_cluster(r.load())

    def _with_cluster(self, df: DataFrame) -> DataFrame:
        """``df`` with the cluster of its broker directory ("" for none), broker first (the
        column order a join on it gave, which the written tables keep)."""
        broker = F.col("broker")
        cluster = F.lit(None) if self.cluster_of is None else self.cluster_of[broker]
        cluster = F.coalesce(F.when(broker.isNotNull(), cluster), F.lit("")).alias(CLUSTER)
        return df.select(broker, *[c for c in df.columns if c not in ("broker", CLUSTER)], cluster)

    def _persist(self, df: DataFrame, name: str | None = None) -> DataFrame:
        """A table several outputs read, computed once. With a scratch area (``stash``) the
        replay's intermediate tables (``name``) are written there and read back: the stages
        after start from those files, and their plans no longer carry the lineage a cached
        DataFrame keeps for recomputation (Spark ships it in every task: ~30 MB per task on
        the every-scenario dump, half the audit's time). Else cached, to be released by
        :meth:`release`."""
        if self.stash is not None and name is not None:
            return self.stash(name, df)
        self.cached.append(df.persist())
        return df

    def _later(self, name: str, build: Callable[[], DataFrame]) -> Callable[[], DataFrame]:
        """An intermediate table several outputs read (:meth:`_persist`), planned and written
        to the scratch area on a background thread: the caller's writes of the tables that do
        not read it run meanwhile (a small dump's Spark jobs are mostly the driver's latency,
        so jobs in flight together keep the cores busy). Gives what waits for it."""
        if self.stash is None:
            df = self._persist(build(), name)
            return lambda: df
        if self.background is None:
            self.background = ThreadPoolExecutor(2, thread_name_prefix="logreplay-stash")
        future = self.background.submit(lambda: self._persist(build(), name))
        self.pending.append(future)
        return future.result

    # -- the plan ---------------------------------------------------------------------------------
    def run(self) -> Tables:
        keys = [CLUSTER, "topic", "partition", "broker"]

        def all_batches() -> DataFrame:
            # files outside partition directories (a KRaft bootstrap.checkpoint) have no topic
            return self.read("batches").filter(F.col("topic").isNotNull())

        if self.replay is not None:
            # replayed by the scan's tasks, the rows of every replica: the chosen replicas'
            # are read straight from the scratch area, filtered by a literal set (a join would
            # cost a broadcast job in every stage that reads them)
            chosen_keys = chosen_replicas(self.replicas)
            part = self._replayed_rows(chosen_keys, "replayed")
            coord = self._replayed_rows(chosen_keys, "coordinated")
            groups = self._replayed_rows(chosen_keys, "grouped")
            topics = replicated_topics(self.replicas)  # where replicas can diverge

            def diverging() -> DataFrame | None:
                return all_batches().filter(F.col("topic").isin(*topics)) if topics else None
        else:
            batches = all_batches()
            if self.decoded is None:  # else the scratch area's Parquet is read again, pruned:
                batches = self._persist(batches)  # cheaper than an in-memory copy of it
            # a row per partition replica, read by many stages: computed once (each stage
            # would aggregate every batch again)
            chosen = self._persist(self._chosen_replicas(_replica_rows(batches)), "chosen")
            part = self._persist(
                self._partition_replay(batches.join(F.broadcast(chosen), keys), chosen), "part"
            )

            def diverging() -> DataFrame | None:
                return batches

        transactions = _split(part, "transaction", T.TRANSACTIONS)
        partitions = _split(part, "partition", T.PARTITIONS)
        if self.replay is None:
            coord, groups = self._internal_replays(batches, chosen, partitions)
        coord_txns = _split(coord, "coord_txn", T.COORDINATOR_TXNS)
        timeline = _split(groups, "timeline", T.TIMELINE)
        cross = self._later("cross", lambda: self._cross_log(transactions, coord_txns, partitions))
        leaks = self._later("leaks", lambda: self._leakage(transactions, timeline, partitions))

        def findings() -> DataFrame:
            found = [
                _split(part, "finding", T.FINDINGS),
                _split(coord, "finding", T.FINDINGS),
                _split(groups, "finding", T.FINDINGS),
                _split(cross(), "finding", T.FINDINGS),
                checks.integrity(self.read("errors")),
                leaks(),
                checks.propagation(leaks(), transactions, coord_txns),
            ]
            replicated = diverging()
            if replicated is not None:
                found.append(checks.divergence(replicated))
            return reduce(DataFrame.unionByName, found)

        def counts() -> DataFrame:
            both = _split(part, "count", T.CHECK_COUNTS).unionByName(
                _split(cross(), "count", T.CHECK_COUNTS)
            )
            return both.groupBy(CLUSTER, "check").agg(F.sum("count").alias("count"))

        def stamped(build: Callable[[], DataFrame]) -> Callable[[], DataFrame]:
            return lambda: _timestamps(build())

        # the tables a caller with the scratch area copies from it (jobs.copies): the scan's
        # replayed rows of the chosen replicas, and its decoding accounting
        copies: dict[str, Copied] = {}
        if self.decoded is not None:
            for name in ("segments", "errors"):
                copies[name] = Copied(name, _copied_schema(name), clusters=self.clusters)
        if self.replay is not None:
            kept = self._replica_filter(chosen_keys)
            for name, source, out, schema in (
                ("producer_states", "replayed", "producer_state", T.PRODUCER_STATES),
                ("lso_changes", "replayed", "lso", T.LSO_CHANGES),
                ("partitions", "replayed", "partition", T.PARTITIONS),
                ("coordinator_transactions", "coordinated", "coord_txn", T.COORDINATOR_TXNS),
                ("group_generations", "grouped", "generation", T.GENERATIONS),
                ("offset_timeline", "grouped", "timeline", T.TIMELINE),
            ):
                columns = [CLUSTER, *schema.names]
                copies[name] = Copied(source, _copied_schema(source, columns), out, kept)

        # each built by the thread that asks for it (the caller's writers plan them at once),
        # the two that read the background tables last
        return Tables(
            {
                "transactions": stamped(lambda: self._with_txn_ids(transactions, coord_txns)),
                "producer_states": stamped(
                    lambda: _split(part, "producer_state", T.PRODUCER_STATES)
                ),
                "lso_changes": stamped(lambda: _split(part, "lso", T.LSO_CHANGES)),
                "partitions": stamped(lambda: partitions),
                "coordinator_transactions": stamped(lambda: coord_txns),
                "group_generations": stamped(lambda: _split(groups, "generation", T.GENERATIONS)),
                "offset_timeline": stamped(lambda: timeline),
                # the decoding accounting, for the gate's data expectations: one row per file,
                # one per rejected byte range
                "segments": lambda: self.read("segments"),
                "errors": lambda: self.read("errors"),
                "findings": stamped(findings),
                "checks": stamped(counts),
            },
            copies,
        )

    def _internal_replays(
        self, batches: DataFrame, chosen: DataFrame, partitions: DataFrame
    ) -> tuple[DataFrame, DataFrame]:
        """The coordinator's and the groups' replays of the chosen internal-topic replicas,
        from their decoded records: (coordinator rows, group rows)."""
        keys = [CLUSTER, "topic", "partition", "broker"]
        internal = F.broadcast(
            chosen.filter(F.col("topic").isin(*INTERNAL_TOPICS)).select(
                CLUSTER, "topic", F.col("partition").alias("log_partition"), "broker"
            )
        )
        txn_log = self.read("txn_log", deep=True, topics=TRANSACTION_STATE_TOPIC)
        txn_log = txn_log.withColumn("topic", F.lit(TRANSACTION_STATE_TOPIC)).join(
            internal, [CLUSTER, "topic", "log_partition", "broker"]
        )
        coord = self._persist(self._coordinator_replay(txn_log, partitions), "coord")
        commits = self.read("offset_commits", deep=True, topics=CONSUMER_OFFSETS_TOPIC)
        commits = commits.withColumn("_t", F.lit(CONSUMER_OFFSETS_TOPIC)).join(
            internal.withColumnRenamed("topic", "_t"), [CLUSTER, "_t", "log_partition", "broker"]
        )
        metadata = self.read("group_metadata", deep=True, topics=CONSUMER_OFFSETS_TOPIC)
        metadata = metadata.withColumn("topic", F.lit(CONSUMER_OFFSETS_TOPIC)).join(
            internal, [CLUSTER, "topic", "log_partition", "broker"]
        )
        replayed = batches.join(F.broadcast(chosen), keys)
        groups = self._persist(self._group_replay(commits, metadata, replayed), "groups")
        return coord, groups

    def release(self) -> None:
        """Unpersist what the plan cached (after the tables are written), once the background
        writes have ended (however they ended: the caller's error is the one it sees)."""
        if self.background is not None:
            self.background.shutdown(wait=True, cancel_futures=True)
            wait(self.pending)
            self.background, self.pending = None, []
        for df in self.cached:
            df.unpersist()
        self.cached = []

    # -- replicas -------------------------------------------------------------------------------
    def _chosen_replicas(self, replicas: DataFrame) -> DataFrame:
        """Per partition of a cluster the most complete replica: highest last offset, then most
        batches with a valid CRC, then the smallest broker name (docs/architecture.md: replay
        one, compare the others; replay.replicas.chosen_replicas on the driver). ``replicas``: a
        row per replica (cluster, topic, partition, broker, end_offset, crc_valid_batches)."""
        w = Window.partitionBy(CLUSTER, "topic", "partition").orderBy(
            F.desc("end_offset"), F.desc("crc_valid_batches"), F.asc("broker")
        )
        return (
            replicas.withColumn("_rank", F.row_number().over(w))
            .filter("_rank = 1")
            .select(CLUSTER, "topic", "partition", "broker")
        )

    def _replayed_rows(self, chosen: set[tuple], table: str) -> DataFrame:
        """The rows the scan's tasks replayed into ``table`` (replay.replicas.REPLAY_TABLES), of
        the ``chosen`` replicas only (cluster, topic, partition, broker): what the grouped
        replays give (:meth:`_partition_replay`, :meth:`_coordinator_replay`,
        :meth:`_group_replay`). Filtered by the shorter list, the chosen or the others; not
        at all where every replica is chosen (one copy of each partition)."""
        rows = self.decoded(table)
        kept = self._replica_filter(chosen)
        if kept is not None:
            listed, excluded = kept
            key = F.concat_ws(
                "\0", CLUSTER, "replica_topic", F.col("replica_partition").cast("string"),
                REPLICA_BROKER,
            )  # fmt: skip
            rows = rows.filter(~key.isin(*listed) if excluded else key.isin(*listed))
        return rows.select(CLUSTER, *[f.name for f in REPLAY_TABLES[table]][len(REPLICA_KEYS) :])

    def _replica_filter(self, chosen: set[tuple]) -> tuple[tuple[str, ...], bool] | None:
        """Which replicas' replayed rows to keep, as the shorter list: (keys "cluster\0topic\0
        partition\0broker", whether the listed ones are left out); None to keep every row (one
        replica of each partition)."""
        every = {(r[CLUSTER], r["topic"], r["partition"], r["broker"]) for r in self.replicas}
        others = every - chosen
        if not others:
            return None
        listed = tuple("\0".join(map(str, k)) for k in sorted(min(others, chosen, key=len)))
        return listed, len(others) <= len(chosen)

    # -- partitions -------------------------------------------------------------------------------
    def _partition_replay(self, batches: DataFrame, chosen: DataFrame) -> DataFrame:
        schema = _with_cluster(PARTITION_SCHEMA)
        facts = self.config.facts()
        cleaned = cleaner_checkpoints(self.paths)
        compacted = self.config.compacted_topics()

        def replay(key, bt, st):  # no hints: Spark infers its UDF type from them
            cluster, topic, partition = (k.as_py() for k in key)
            broker = bt.column("broker")[0].as_py() if bt.num_rows else None
            end = pc.max(bt.column("last_offset")).as_py() + 1 if bt.num_rows else None
            upto = cleaned_upto(cleaned, compacted, broker, topic, partition, end)
            t = partition_tables(topic, partition, bt, st.to_pylist(), facts, upto)
            return keyed(t, cluster)

        b = batches.select(
            CLUSTER, "topic", "partition", "broker", "base_offset", "last_offset", "producer_id",
            "producer_epoch", "base_sequence", "last_sequence", "record_count",
            "is_transactional", "is_control", "control_type", "coordinator_epoch",
            _ms("max_timestamp"), "magic", "crc_valid", "has_delete_horizon", "file", "position",
        )  # fmt: skip
        side = self._partition_side(chosen)
        return (
            b.groupBy(CLUSTER, "topic", "partition")
            .cogroup(side.groupBy(CLUSTER, "topic", "partition"))
            .applyInArrow(replay, struct_type(schema))
        )

    def _partition_side(self, chosen: DataFrame) -> DataFrame:
        """What a partition's replay compares the log with, for the chosen replica: producer
        snapshot entries, the `.txnindex` files that exist, and their entries."""
        keys = [CLUSTER, "topic", "partition", "broker"]
        null = F.lit(None)

        def shaped(df: DataFrame, row: str) -> DataFrame:
            have = set(df.columns)
            return df.select(
                F.lit(row).alias("_row"), CLUSTER, "topic", "partition",
                *[(F.col(c) if c in have else null).cast(spark_type(t)).alias(c)
                  for c, t in SIDE_COLUMNS.items()],
            )  # fmt: skip

        snaps = self.read("producer_snapshots").join(F.broadcast(chosen), keys)
        snaps = snaps.withColumn("timestamp", F.unix_millis("timestamp"))
        index_files = (
            self.read("segments")
            .filter(F.col("kind") == "txnindex")
            .join(F.broadcast(chosen), keys)
        )
        aborted = self.read("aborted_txns").join(F.broadcast(chosen), keys)
        return (
            shaped(snaps, "snapshot")
            .unionByName(shaped(index_files, "txnindex_file"))
            .unionByName(shaped(aborted, "aborted"))
        )

    # -- the transaction coordinator ------------------------------------------------------------
    def _coordinator_replay(self, txn_log: DataFrame, partitions: DataFrame) -> DataFrame:
        schema = _with_cluster(COORDINATOR_SCHEMA)
        # where each `__transaction_state` partition's whole history starts: one row per
        # partition of that topic, a few dozen
        complete = {
            (r[CLUSTER], r["partition"]): r["complete_from"]
            for r in partitions.filter(F.col("topic") == TRANSACTION_STATE_TOPIC)
            .select(CLUSTER, "partition", "complete_from")
            .collect()
        }

        def replay(key, t):  # no hints: Spark infers its UDF type from them
            cluster = key[0].as_py()
            whole = {p: c for (cl, p), c in complete.items() if cl == cluster}
            return keyed(coordinator_tables(t, whole), cluster)

        t = txn_log.filter(F.col("transactional_id").isNotNull()).select(
            CLUSTER, *_millis(txn_log, COORDINATOR_COLUMNS)
        )
        # per id in its partition (replay.grouped.coordinator_tables, the same replay the scan
        # runs over a whole partition)
        by = (CLUSTER, "log_partition", "transactional_id")
        return t.groupBy(*by).applyInArrow(replay, struct_type(schema))

    def _cross_log(self, pt: DataFrame, ct: DataFrame, partitions: DataFrame) -> DataFrame:
        """Every partition against the coordinator's log, per producer id, by order
        (replay.crosslog); also the hanging transactions (their timeout is the coordinator's)."""
        schema = _with_cluster(CROSSLOG_SCHEMA)
        facts = self.config.facts()

        def judge(key, left, coord):  # no hints: Spark infers its UDF type from them
            cluster, pid = key[0].as_py(), key[1].as_py()
            t = crosslog_tables(pid, left, coord, facts)
            return keyed(t, cluster)

        # only the columns the judgement reads (replay.grouped.CROSSLOG_LEFT, CROSSLOG_COORD)
        side_cols = ["complete_from", "copy_end_timestamp"]
        txn_cols = [c for c in CROSSLOG_LEFT.names if c != "_row" and c not in side_cols]
        txns = pt.select(F.lit("txn").alias("_row"), CLUSTER, "producer_id", *txn_cols)
        for c in side_cols:
            txns = txns.withColumn(c, F.lit(None).cast("long"))
        listed = ct.select(CLUSTER, "producer_id", F.explode("partitions").alias("tp")).select(
            CLUSTER, "producer_id", "tp.topic", "tp.partition"
        )
        touched = pt.select(CLUSTER, "producer_id", "topic", "partition").unionByName(listed)
        sides = touched.distinct().join(
            partitions.select(CLUSTER, "topic", "partition", *side_cols),
            [CLUSTER, "topic", "partition"],
        )
        sides = sides.select(
            F.lit("side").alias("_row"), CLUSTER, "producer_id",
            *[(F.col(c) if c in sides.columns else F.lit(None)).cast(pt.schema[c].dataType).alias(c)
              for c in txn_cols],
            *side_cols,
        )  # fmt: skip
        ends = partitions.filter(F.col("topic") == TRANSACTION_STATE_TOPIC).select(
            CLUSTER,
            F.col("partition").alias("log_partition"),
            F.col("copy_end_timestamp").alias("copy_end_ts"),
        )
        read = [c for c in CROSSLOG_COORD.names if c != "copy_end_ts"]
        coord = ct.select(CLUSTER, "producer_id", *read).join(ends, [CLUSTER, "log_partition"],
                                                              "left")  # fmt: skip
        return (
            txns.unionByName(sides)
            .groupBy(CLUSTER, "producer_id")
            .cogroup(coord.groupBy(CLUSTER, "producer_id"))
            .applyInArrow(judge, struct_type(schema))
        )

    def _with_txn_ids(self, pt: DataFrame, ct: DataFrame) -> DataFrame:
        ids = ct.groupBy(CLUSTER, "producer_id").agg(
            F.max("transactional_id").alias("transactional_id"),
            F.max(F.col("fenced").cast("int")).cast("boolean").alias("coordinator_fenced"),
        )
        return pt.join(ids, [CLUSTER, "producer_id"], "left").select(
            CLUSTER, *[f.name for f in T.TRANSACTIONS], "transactional_id", "coordinator_fenced"
        )

    # -- groups -----------------------------------------------------------------------------------
    def _group_replay(
        self, commits: DataFrame, metadata: DataFrame, batches: DataFrame
    ) -> DataFrame:
        schema = _with_cluster(GROUP_SCHEMA)
        broadcast = self.config.declared_broadcast()

        def replay(key, t):  # no hints: Spark infers its UDF type from them
            cluster, group = key[0].as_py(), key[2].as_py()
            return keyed(group_tables(group, t, group in broadcast), cluster)

        members_t = "array<struct<member_id:string,assigned_partitions:array<struct<topic:string,partitions:array<int>>>>>"
        null = F.lit(None)
        c = commits.select(
            CLUSTER, F.lit("commit").alias("event"), "group_id", "log_partition", "log_offset",
            _ms("record_timestamp"), null.cast("int").alias("generation"),
            null.cast("string").alias("protocol_type"), null.cast("string").alias("protocol"),
            null.cast("string").alias("leader"), null.cast(members_t).alias("members"),
            "is_tombstone", "topic", "partition", "committed_offset", _ms("commit_timestamp"),
            "is_transactional", "producer_id", null.cast("string").alias("control_type"),
            F.lit(1).alias("_order"),
        )  # fmt: skip
        m = metadata.select(
            CLUSTER, F.lit("metadata").alias("event"), "group_id", "log_partition", "log_offset",
            _ms("record_timestamp"), "generation", "protocol_type", "protocol", "leader",
            F.expr("transform(members, m -> named_struct('member_id', m.member_id, 'assigned_partitions', m.assigned_partitions))").cast(members_t).alias("members"),
            "is_tombstone", null.cast("string").alias("topic"), null.cast("int").alias("partition"),
            null.cast("long").alias("committed_offset"), null.cast("long").alias("commit_timestamp"),
            F.lit(False).alias("is_transactional"), null.cast("long").alias("producer_id"),
            null.cast("string").alias("control_type"), F.lit(0).alias("_order"),
        )  # fmt: skip
        txn_producers = (
            commits.filter("is_transactional")
            .select(CLUSTER, "group_id", "log_partition", "producer_id")
            .distinct()
        )
        markers = (
            batches.filter((F.col("topic") == CONSUMER_OFFSETS_TOPIC) & F.col("is_control") & (F.col("record_count") > 0))
            .select(CLUSTER, F.col("partition").alias("log_partition"), F.col("base_offset").alias("log_offset"),
                    _ms("max_timestamp"), "producer_id", "control_type")
            .join(txn_producers, [CLUSTER, "log_partition", "producer_id"])
            .select(
                CLUSTER, F.lit("marker").alias("event"), "group_id", "log_partition", "log_offset",
                F.col("max_timestamp").alias("record_timestamp"), null.cast("int").alias("generation"),
                null.cast("string").alias("protocol_type"), null.cast("string").alias("protocol"),
                null.cast("string").alias("leader"), null.cast(members_t).alias("members"),
                F.lit(False).alias("is_tombstone"), null.cast("string").alias("topic"),
                null.cast("int").alias("partition"), null.cast("long").alias("committed_offset"),
                null.cast("long").alias("commit_timestamp"), F.lit(False).alias("is_transactional"),
                "producer_id", "control_type", F.lit(2).alias("_order"),
            )
        )  # fmt: skip
        events = c.unionByName(m).unionByName(markers).filter(F.col("group_id").isNotNull())
        # per group in its partition (replay.grouped.group_partition_tables)
        events = events.select(CLUSTER, *GROUP_EVENT_COLUMNS)
        by = (CLUSTER, "log_partition", "group_id")
        return events.groupBy(*by).applyInArrow(replay, struct_type(schema))

    # -- leakage ----------------------------------------------------------------------------------
    def _leakage(self, pt: DataFrame, timeline: DataFrame, partitions: DataFrame) -> DataFrame:
        schema = _with_cluster(T.FINDINGS)
        declared = self.config.declared_isolation()
        tolerance = self.config.clock_tolerance_ms

        def judge(key, txns, commits):  # no hints: Spark infers its UDF type from them
            cluster = key[0].as_py()
            uncommitted = pc.is_in(txns.column("outcome"), pa.array(NOT_COMMITTED))
            if not commits.num_rows or not pc.any(uncommitted).as_py():
                # nothing aborted or open here (most partitions): no rows turned into Python
                return keyed(T.FINDINGS.empty_table(), cluster)
            rows = judge_partition(
                key[1].as_py(),
                key[2].as_py(),
                txns.to_pylist(),
                commits.to_pylist(),
                declared,
                tolerance,
            )
            return keyed(pa.Table.from_pylist(rows, schema=T.FINDINGS), cluster)

        ends = partitions.select(CLUSTER, "topic", "partition", "copy_end_timestamp")
        t = pt.filter(~F.col("topic").isin(*INTERNAL_TOPICS) & (F.col("record_count") > 0)).select(
            CLUSTER, "topic", "partition", "producer_id", "producer_epoch", "first_offset",
            "last_offset", "marker_offset", "outcome", "record_count", "marker_timestamp",
        ).join(ends, [CLUSTER, "topic", "partition"], "left")  # fmt: skip
        c = timeline.select(
            CLUSTER, "topic", "partition", "group_id", "committed_offset", "effective_timestamp",
            "effective_log_offset", "producer_id",
        )  # fmt: skip
        return (
            t.groupBy(CLUSTER, "topic", "partition")
            .cogroup(c.groupBy(CLUSTER, "topic", "partition"))
            .applyInArrow(judge, struct_type(schema))
        )


class Tables(Mapping):
    """The audit's tables by name, each planned when first asked for, by the thread that asks
    (a caller writing them from several threads plans them at once; the py4j calls of planning
    are most of a small table's time). The ones that read an intermediate table written in
    the background (:meth:`Audit._later`) wait for it, and come last in iteration order.
    :attr:`copies`: how the rows of some tables come straight from the scratch area."""

    def __init__(
        self,
        builders: dict[str, Callable[[], DataFrame]],
        copies: Mapping[str, Copied] | None = None,
    ) -> None:
        self._builders = dict(builders)
        # the tables whose rows a caller may copy from the scratch area instead of running
        # their query (their DataFrame still gives their schema)
        self.copies = dict(copies or {})
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


def _replica_rows(batches: DataFrame) -> DataFrame:
    """A row per partition replica (see :meth:`Audit._chosen_replicas`) from its batches."""
    return batches.groupBy(CLUSTER, "topic", "partition", "broker").agg(
        F.max("last_offset").alias("end_offset"),
        F.sum(F.col("crc_valid").cast("long")).alias("crc_valid_batches"),
    )


def replay_spec(paths: list[str], conf: dict | AuditConfig | None) -> ReplaySpec:
    """What the scan's tasks need to replay the replicas they read (replay.replicas)."""
    config = _config(conf)
    return ReplaySpec(
        facts=config.facts(),
        cleaned=cleaner_checkpoints(paths),
        compacted=frozenset(config.compacted_topics()),
        clusters=broker_clusters(paths, config.cluster),
        broadcast=frozenset(config.declared_broadcast()),
    )


def summary_of(checks: list[dict], clusters) -> dict:
    """What the run's summary says beyond finding counts: the clusters found and what the
    checks could and could not judge, from the checks table's rows (cluster, check, count)
    and the clusters of the partitions table (each at least once; a few rows)."""
    counts: dict[str, dict[str, int]] = {}
    for r in checks:
        counts.setdefault(r[CLUSTER], {})[r["check"]] = int(r["count"] or 0)
    return {"clusters": sorted(set(clusters)),
            "checks": {c: with_shares(v) for c, v in counts.items()}}  # fmt: skip


def _config(conf: dict | AuditConfig | None) -> AuditConfig:
    return conf if isinstance(conf, AuditConfig) else AuditConfig.from_conf(conf)


def audit(
    spark: SparkSession,
    paths: list[str],
    conf: dict | AuditConfig | None = None,
    skip: dict[str, str] | None = None,
) -> Mapping[str, DataFrame]:
    """Replay a dump; DataFrames by table name (findings, transactions, producer_states,
    lso_changes, partitions, coordinator_transactions, group_generations, offset_timeline,
    plus the decoded segments and errors). What the plan caches stays cached until the session
    ends or its cache is cleared; :func:`audit_session` releases it. ``skip``: files left out
    of the run, path -> reason (see jobs.resilience)."""
    return Audit(spark, list(paths), _config(conf), skip=skip).run()


@contextmanager
def audit_session(
    spark: SparkSession,
    paths: list[str],
    conf: dict | AuditConfig | None = None,
    decoded: Callable[[str], DataFrame] | None = None,
    skip: dict[str, str] | None = None,
    stash: Callable[[str, DataFrame], DataFrame] | None = None,
    replay: ReplaySpec | None = None,
    replicas: list[dict] | None = None,
) -> Iterator[Mapping[str, DataFrame]]:
    """The audit's tables for the ``with`` block; what the plan cached is unpersisted when the
    block ends, however it ends. ``decoded``: the decoded tables by name (the ones of
    :data:`DECODED_TABLES`), when the caller decoded the dump once beforehand; ``stash``:
    writes an intermediate table to the caller's scratch area and reads it back; ``replay``:
    the spec the caller's scan replayed every replica with (:func:`replay_spec`), whose rows
    ``decoded`` then gives too, and ``replicas`` the scan's one row per replica
    (jobs.scan.Scanned)."""
    a = Audit(spark, list(paths), _config(conf), decoded, skip, stash, replay, replicas)
    try:
        yield a.run()
    finally:
        a.release()
