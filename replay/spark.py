"""The audit as Spark plans: decode, choose replicas, replay per partition / transactional id /
group in grouped Arrow functions, cross-check with joins. Nothing but small per-run summaries
reaches the driver.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from decoders.spark import SKIP_OPTION, register, spark_type
from replay import tables as T
from replay.dumpinfo import broker_clusters, cleaner_checkpoints
from replay.findings import KINDS
from replay.grouped import (
    COORDINATOR_SCHEMA,
    CROSSLOG_SCHEMA,
    PARTITION_SCHEMA,
    coordinator_tables,
    crosslog_tables,
    partition_tables,
    with_shares,
)
from replay.groups import replay_group
from replay.leakage import judge_partition
from replay.settings import AuditConfig

INTERNAL = (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
CLUSTER = "cluster"
INTEGRITY_KINDS = ("crc_mismatch", "truncated_batch", "corrupt_bytes", "unknown_version", "index_inconsistent", "decode_failed")  # fmt: skip


def struct_type(schema: pa.Schema) -> StructType:
    return StructType([StructField(f.name, spark_type(f.type), True) for f in schema])


def _split(df: DataFrame, out: str, schema: pa.Schema) -> DataFrame:
    """One output table of a grouped function's rows, with the cluster they belong to."""
    return df.filter(F.col("out") == out).select(CLUSTER, *[f.name for f in schema])


def _ms(col: str):
    return F.unix_millis(F.col(col)).alias(col)


def _with_cluster(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(CLUSTER, pa.string()), *schema])


def _keyed(table: pa.Table, cluster: str) -> pa.Table:
    """A grouped function's result with its cluster key as the first column."""
    return table.add_column(0, CLUSTER, pa.array([cluster] * table.num_rows, pa.string()))


def _finding_cols() -> list[str]:
    return [CLUSTER, *T.FINDINGS.names]


class Audit:
    def __init__(
        self,
        spark: SparkSession,
        paths: list[str],
        config: AuditConfig,
        skip: dict[str, str] | None = None,
    ) -> None:
        self.spark, self.paths, self.config = spark, paths, config
        self.skip = skip or {}  # files left out of the run (jobs.resilience): path -> reason
        register(spark)
        # broker directory -> cluster (meta.properties, read on the driver: a few bytes each)
        self.clusters = broker_clusters(paths, config.cluster)
        rows = sorted(self.clusters.items()) or [("", "")]
        self.cluster_of = spark.createDataFrame(rows, "broker string, cluster string")

    def read(self, table: str, deep: bool = False, topics: str | None = None) -> DataFrame:
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
        df = r.load().join(F.broadcast(self.cluster_of), "broker", "left")
        return df.withColumn(CLUSTER, F.coalesce(F.col(CLUSTER), F.lit("")))

    # -- the plan ---------------------------------------------------------------------------------
    def run(self) -> dict[str, DataFrame]:
        # files outside partition directories (a KRaft bootstrap.checkpoint) have no topic
        batches = self.read("batches").filter(F.col("topic").isNotNull()).persist()
        self.cached = [batches]
        chosen = self._chosen_replicas(batches)
        keys = [CLUSTER, "topic", "partition", "broker"]
        replayed = batches.join(F.broadcast(chosen), keys)
        part = self._partition_replay(replayed, chosen).persist()
        transactions = _split(part, "transaction", T.TRANSACTIONS)
        partitions = _split(part, "partition", T.PARTITIONS)

        internal = F.broadcast(
            chosen.filter(F.col("topic").isin(*INTERNAL)).select(
                CLUSTER, "topic", F.col("partition").alias("log_partition"), "broker"
            )
        )
        txn_log = self.read("txn_log", deep=True, topics=TRANSACTION_STATE_TOPIC)
        txn_log = txn_log.withColumn("topic", F.lit(TRANSACTION_STATE_TOPIC)).join(
            internal, [CLUSTER, "topic", "log_partition", "broker"]
        )
        coord = self._coordinator_replay(txn_log, partitions).persist()
        coord_txns = _split(coord, "coord_txn", T.COORDINATOR_TXNS)

        commits = self.read("offset_commits", deep=True, topics=CONSUMER_OFFSETS_TOPIC)
        commits = commits.withColumn("_t", F.lit(CONSUMER_OFFSETS_TOPIC)).join(
            internal.withColumnRenamed("topic", "_t"), [CLUSTER, "_t", "log_partition", "broker"]
        )
        metadata = self.read("group_metadata", deep=True, topics=CONSUMER_OFFSETS_TOPIC)
        metadata = metadata.withColumn("topic", F.lit(CONSUMER_OFFSETS_TOPIC)).join(
            internal, [CLUSTER, "topic", "log_partition", "broker"]
        )
        groups = self._group_replay(commits, metadata, replayed).persist()
        timeline = _split(groups, "timeline", T.TIMELINE)
        cross = self._cross_log(transactions, coord_txns, partitions).persist()
        self.cached += [part, coord, groups, cross]

        findings = [
            _split(part, "finding", T.FINDINGS),
            _split(coord, "finding", T.FINDINGS),
            _split(groups, "finding", T.FINDINGS),
            _split(cross, "finding", T.FINDINGS),
            self._integrity(),
            self._divergence(batches),
        ]
        leaks = self._leakage(transactions, timeline, partitions).persist()
        self.cached.append(leaks)
        findings += [leaks, self._propagation(leaks, transactions, coord_txns)]
        all_findings = findings[0]
        for f in findings[1:]:
            all_findings = all_findings.unionByName(f)
        checks = _split(part, "count", T.CHECK_COUNTS).unionByName(
            _split(cross, "count", T.CHECK_COUNTS)
        )
        checks = checks.groupBy(CLUSTER, "check").agg(F.sum("count").alias("count"))
        out = {
            "findings": all_findings,
            "transactions": self._with_txn_ids(transactions, coord_txns),
            "producer_states": _split(part, "producer_state", T.PRODUCER_STATES),
            "lso_changes": _split(part, "lso", T.LSO_CHANGES),
            "partitions": partitions,
            "coordinator_transactions": coord_txns,
            "group_generations": _split(groups, "generation", T.GENERATIONS),
            "offset_timeline": timeline,
            "checks": checks,
        }
        out = {name: _timestamps(df) for name, df in out.items()}
        # the decoding accounting, for the gate's data expectations: one row per file, one
        # per rejected byte range
        out["segments"] = self.read("segments")
        out["errors"] = self.read("errors")
        return out

    def release(self) -> None:
        """Unpersist what the plan cached (after the tables are written)."""
        for df in getattr(self, "cached", []):
            df.unpersist()
        self.cached = []

    # -- replicas -------------------------------------------------------------------------------
    def _chosen_replicas(self, batches: DataFrame) -> DataFrame:
        """Per partition of a cluster the most complete replica: highest last offset, then most
        batches with a valid CRC, then the smallest broker name (docs/architecture.md: replay one, compare
        the others)."""
        per = batches.groupBy(CLUSTER, "topic", "partition", "broker").agg(
            F.max("last_offset").alias("_end"),
            F.sum(F.col("crc_valid").cast("long")).alias("_ok"),
        )
        w = Window.partitionBy(CLUSTER, "topic", "partition").orderBy(
            F.desc("_end"), F.desc("_ok"), F.asc("broker")
        )
        return (
            per.withColumn("_rank", F.row_number().over(w))
            .filter("_rank = 1")
            .select(CLUSTER, "topic", "partition", "broker")
        )

    def _divergence(self, batches: DataFrame) -> DataFrame:
        """Replicas of one cluster disagreeing at the same offsets: batches starting at one
        offset whose CRC, extent or validity differ between brokers."""
        per_offset = (
            batches.groupBy(CLUSTER, "topic", "partition", "base_offset")
            .agg(
                F.countDistinct("broker").alias("brokers"),
                F.countDistinct("crc", "last_offset").alias("variants"),
                F.max("last_offset").alias("last_offset"),
                F.max("record_count").alias("record_count"),
                F.sort_array(F.collect_set("broker")).alias("broker_set"),
            )
            .filter("brokers > 1 AND variants > 1")
        )
        agg = per_offset.groupBy(CLUSTER, "topic", "partition").agg(
            F.min("base_offset").alias("first_offset"),
            F.max("last_offset").alias("last_offset"),
            F.sum("record_count").alias("record_count"),
            F.count("*").alias("batches"),
            F.array_distinct(F.flatten(F.collect_list("broker_set"))).alias("brokers"),
        )
        return _findings(
            agg,
            "replica_divergence",
            message=F.format_string(
                "replicas of %s-%d disagree on %d batches between offsets %d and %d",
                "topic",
                "partition",
                "batches",
                "first_offset",
                "last_offset",
            ),  # fmt: skip
            evidence=F.to_json(F.struct("brokers", "batches", "first_offset", "last_offset")),
        )

    # -- integrity --------------------------------------------------------------------------------
    def _integrity(self) -> DataFrame:
        errors = self.read("errors").withColumn("first_offset", F.col("offset"))
        sev = F.lit(KINDS["corrupt_bytes"])
        for kind in INTEGRITY_KINDS:
            sev = F.when(F.col("kind") == kind, KINDS[kind]).otherwise(sev)
        return _findings(
            errors,
            F.col("kind"),
            severity=sev,
            message=F.format_string(
                "%s at byte %d of %s: %s", "kind", "position", "file", "reason"
            ),
            evidence=F.to_json(
                F.struct("broker", "file", "position", "length", "reason", "offset")
            ),
        )

    # -- partitions -------------------------------------------------------------------------------
    def _partition_replay(self, batches: DataFrame, chosen: DataFrame) -> DataFrame:
        schema = _with_cluster(PARTITION_SCHEMA)
        facts = self.config.facts()
        cleaned = cleaner_checkpoints(self.paths)
        compacted = self.config.compacted_topics()

        def replay(key, bt, st):  # no hints: Spark infers its UDF type from them
            cluster, topic, partition = (k.as_py() for k in key)
            broker = bt.column("broker")[0].as_py() if bt.num_rows else None
            upto = cleaned.get(f"{broker}|{topic}|{partition}", 0)
            if not upto and topic in compacted and bt.num_rows:
                # declared compacted, no cleaner checkpoint: the cleaner may have been anywhere
                upto = pa.compute.max(bt.column("last_offset")).as_py() + 1
            t = partition_tables(topic, partition, bt, st.to_pylist(), facts, upto)
            return _keyed(t, cluster)

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
        cols = {
            "snapshot_offset": "long", "producer_id": "long", "producer_epoch": "int",
            "last_sequence": "int", "last_offset": "long", "offset_delta": "int",
            "coordinator_epoch": "int", "current_txn_first_offset": "long", "timestamp": "long",
            "file": "string", "first_offset": "long", "last_stable_offset": "long",
        }  # fmt: skip

        def shaped(df: DataFrame, row: str) -> DataFrame:
            have = set(df.columns)
            return df.select(
                F.lit(row).alias("_row"), CLUSTER, "topic", "partition",
                *[(F.col(c) if c in have else null).cast(t).alias(c) for c, t in cols.items()],
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
            return _keyed(coordinator_tables(t.to_pylist(), whole), cluster)

        t = txn_log.filter(F.col("transactional_id").isNotNull()).select(
            CLUSTER, "transactional_id", "producer_id", "producer_epoch", "timeout_ms", "state",
            "partitions", _ms("last_update_timestamp"), _ms("start_timestamp"),
            "client_transaction_version", "is_tombstone", "log_partition", "log_offset",
        )  # fmt: skip
        t = t.withColumn("start_timestamp", F.coalesce("start_timestamp", F.lit(-1)))
        t = t.withColumn("last_update_timestamp", F.coalesce("last_update_timestamp", F.lit(-1)))
        return t.groupBy(CLUSTER, "transactional_id").applyInArrow(replay, struct_type(schema))

    def _cross_log(self, pt: DataFrame, ct: DataFrame, partitions: DataFrame) -> DataFrame:
        """Every partition against the coordinator's log, per producer id, by order
        (replay.crosslog); also the hanging transactions (their timeout is the coordinator's)."""
        schema = _with_cluster(CROSSLOG_SCHEMA)
        facts = self.config.facts()

        def judge(key, left, coord):  # no hints: Spark infers its UDF type from them
            cluster, pid = key[0].as_py(), key[1].as_py()
            t = crosslog_tables(pid, left.to_pylist(), coord.to_pylist(), facts)
            return _keyed(t, cluster)

        txn_cols = [f.name for f in T.TRANSACTIONS]
        side_cols = ["complete_from", "copy_end_timestamp"]
        txns = pt.select(F.lit("txn").alias("_row"), CLUSTER, *txn_cols)
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
            F.lit("side").alias("_row"), CLUSTER,
            *[(F.col(c) if c in sides.columns else F.lit(None)).cast(pt.schema[c].dataType).alias(c)
              for c in txn_cols],
            *side_cols,
        )  # fmt: skip
        ends = partitions.filter(F.col("topic") == TRANSACTION_STATE_TOPIC).select(
            CLUSTER,
            F.col("partition").alias("log_partition"),
            F.col("copy_end_timestamp").alias("copy_end_ts"),
        )
        coord = ct.join(ends, [CLUSTER, "log_partition"], "left")
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
        schema = _with_cluster(T.union(T.FINDINGS, T.GENERATIONS, T.TIMELINE))
        inner = T.union(T.FINDINGS, T.GENERATIONS, T.TIMELINE)
        broadcast = self.config.declared_broadcast()

        def replay(key, t):  # no hints: Spark infers its UDF type from them
            rows = sorted(
                t.to_pylist(), key=lambda r: (r["log_partition"], r["log_offset"], r["_order"])
            )
            cluster, group = key[0].as_py(), key[1].as_py()
            res = replay_group(group, rows, declared_broadcast=group in broadcast)
            return _keyed(pa.concat_tables([
                T.rows_table(inner, "generation", res["generations"]),
                T.rows_table(inner, "timeline", res["timeline"]),
                T.rows_table(inner, "finding", res["findings"]),
            ]), cluster)  # fmt: skip

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
        return events.groupBy(CLUSTER, "group_id").applyInArrow(replay, struct_type(schema))

    # -- leakage ----------------------------------------------------------------------------------
    def _leakage(self, pt: DataFrame, timeline: DataFrame, partitions: DataFrame) -> DataFrame:
        schema = _with_cluster(T.FINDINGS)
        declared = self.config.declared_isolation()
        tolerance = self.config.clock_tolerance_ms

        def judge(key, txns, commits):  # no hints: Spark infers its UDF type from them
            cluster = key[0].as_py()
            rows = judge_partition(
                key[1].as_py(),
                key[2].as_py(),
                txns.to_pylist(),
                commits.to_pylist(),
                declared,
                tolerance,
            )
            return _keyed(pa.Table.from_pylist(rows, schema=T.FINDINGS), cluster)

        ends = partitions.select(CLUSTER, "topic", "partition", "copy_end_timestamp")
        t = pt.filter(~F.col("topic").isin(*INTERNAL) & (F.col("record_count") > 0)).select(
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

    def _propagation(self, leaks: DataFrame, pt: DataFrame, ct: DataFrame) -> DataFrame:
        """A leaking group whose commits are transactional fed a consume-transform-produce step:
        its producer's committed output transactions carried the aborted input on."""
        leak = (
            leaks.filter("kind = 'aborted_read_leak'")
            .withColumn(
                "step_pid", F.get_json_object("evidence", "$.commit_producer_ids[0]").cast("long")
            )
            .filter(F.col("step_pid").isNotNull())
        )
        out = (
            pt.filter("outcome = 'COMMIT' AND record_count > 0")
            .filter(~F.col("topic").isin(*INTERNAL))
            .groupBy(CLUSTER, "producer_id")
            .agg(
                F.sort_array(F.collect_set(F.format_string("%s-%d", "topic", "partition"))).alias("outputs"),
                F.count("*").alias("committed_transactions"),
                F.sum("record_count").alias("output_records"),
            )
        )  # fmt: skip
        ids = ct.groupBy(CLUSTER, "producer_id").agg(F.max("transactional_id").alias("tid"))
        joined = (
            leak.alias("l")
            .join(
                out.alias("o"),
                (F.col("l.step_pid") == F.col("o.producer_id"))
                & (F.col(f"l.{CLUSTER}") == F.col(f"o.{CLUSTER}")),
            )
            .join(
                ids.alias("i"),
                (F.col("l.step_pid") == F.col("i.producer_id"))
                & (F.col(f"l.{CLUSTER}") == F.col(f"i.{CLUSTER}")),
                "left",
            )
            .select(
                F.col(f"l.{CLUSTER}").alias(CLUSTER),
                F.col("l.topic").alias("topic"),
                F.col("l.partition").alias("partition"),
                F.col("l.step_pid").alias("producer_id"),
                F.col("i.tid").alias("transactional_id"),
                F.col("l.group_id").alias("group_id"),
                F.col("l.first_offset").alias("first_offset"),
                F.col("l.last_offset").alias("last_offset"),
                F.col("l.record_count").alias("record_count"),
                F.col("o.outputs").alias("output_partitions"),
                F.col("o.committed_transactions").alias("committed_transactions"),
                F.col("o.output_records").alias("output_records"),
                F.col("l.evidence").alias("leak"),
            )
        )
        return _findings(
            joined,
            "aborted_data_propagated",
            message=F.format_string(
                "group %s fed %d aborted records of %s-%d to transactional producer %d, which committed them on into %s",
                "group_id",
                "record_count",
                "topic",
                "partition",
                "producer_id",
                F.array_join("output_partitions", ", "),
            ),  # fmt: skip
            evidence=F.to_json(
                F.struct("output_partitions", "committed_transactions", "output_records", "leak")
            ),
        )


def _findings(df: DataFrame, kind, *, message, evidence, severity=None) -> DataFrame:
    """The findings rows of a Spark-side check: the one place their columns are laid out.
    ``kind``: a finding kind (its severity from the vocabulary) or a column of kinds."""
    if isinstance(kind, str):
        severity = F.lit(KINDS[kind]) if severity is None else severity
        kind = F.lit(kind)
    have = set(df.columns)
    cols = {"kind": kind, "severity": severity, "message": message, "evidence": evidence}
    out = [F.col(CLUSTER)]
    for f in T.FINDINGS:
        if f.name in cols:
            out.append(cols[f.name].alias(f.name))
        elif f.name in have:
            out.append(F.col(f.name).cast(spark_type(f.type)).alias(f.name))
        else:
            out.append(F.lit(None).cast(spark_type(f.type)).alias(f.name))
    return df.select(*out)


def audit_summary(tables: dict[str, DataFrame]) -> dict:
    """What the run's summary says beyond finding counts: the clusters found and what the
    checks could and could not judge (a few rows reach the driver)."""
    checks: dict[str, dict[str, int]] = {}
    for r in tables["checks"].collect():
        checks.setdefault(r[CLUSTER], {})[r["check"]] = int(r["count"] or 0)
    clusters = sorted(r[CLUSTER] for r in tables["partitions"].select(CLUSTER).distinct().collect())
    return {"clusters": clusters, "checks": {c: with_shares(v) for c, v in checks.items()}}


def _timestamps(df: DataFrame) -> DataFrame:
    cols = [
        F.timestamp_millis(F.col(c)).alias(c) if c in T.TIMESTAMP_COLUMNS else F.col(c)
        for c in df.columns
    ]
    return df.select(*cols)


def audit(
    spark: SparkSession,
    paths: list[str],
    conf: dict | AuditConfig | None = None,
    skip: dict[str, str] | None = None,
) -> dict[str, DataFrame]:
    """Replay a dump; DataFrames by table name (findings, transactions, producer_states,
    lso_changes, partitions, coordinator_transactions, group_generations, offset_timeline,
    plus the decoded segments and errors)."""
    config = conf if isinstance(conf, AuditConfig) else AuditConfig.from_conf(conf)
    return Audit(spark, list(paths), config, skip).run()
