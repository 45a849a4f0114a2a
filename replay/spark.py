"""The audit as Spark plans: decode, choose replicas, replay per partition / transactional id /
group in grouped Arrow functions, cross-check with joins. Nothing but small per-run summaries
reaches the driver.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from decoders.spark import register, spark_type
from replay import tables as T
from replay.coordinator import replay_transactional_id
from replay.findings import finding
from replay.groups import replay_group
from replay.leakage import judge_partition
from replay.partition import Config, PartitionReplay

INTERNAL = (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
FAR = 1 << 62
INTEGRITY_KINDS = ("crc_mismatch", "truncated_batch", "corrupt_bytes", "unknown_version", "index_inconsistent")  # fmt: skip


@dataclass
class AuditConfig:
    """The settings the replay uses, taken from a validated configuration (replay.config)."""

    clock_skew_ms: int = 1000
    producer_id_expiration_ms: int = 86_400_000
    default_transaction_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    groups: dict[str, dict] = field(default_factory=dict)  # group -> {isolation, assignor}
    topics: dict[str, dict] = field(default_factory=dict)  # topic -> {cleanup_policy, ...}
    range_bytes: int | None = None
    window_bytes: int | None = None
    verify_crc: bool = True

    @classmethod
    def from_conf(cls, conf: dict | None) -> AuditConfig:
        conf = conf or {}
        decode = conf.get("decode") or {}
        return cls(
            **(conf.get("audit") or {}),
            groups=conf.get("groups") or {},
            topics=conf.get("topics") or {},
            range_bytes=decode.get("range_bytes"),
            window_bytes=decode.get("window_bytes"),
            verify_crc=decode.get("verify_crc", True),
        )

    def declared_isolation(self) -> dict[str, str]:
        return {g: v["isolation"] for g, v in self.groups.items() if v and v.get("isolation")}

    def declared_broadcast(self) -> set[str]:
        return {g for g, v in self.groups.items() if v and v.get("assignor") == "broadcast"}

    def compacted_topics(self) -> set[str]:
        return {
            t for t, v in self.topics.items() if "compact" in (v or {}).get("cleanup_policy", "")
        }

    def topic_timeouts(self) -> dict[str, int]:
        return {
            t: v["transaction_timeout_ms"]
            for t, v in self.topics.items()
            if v and v.get("transaction_timeout_ms")
        }


def struct_type(schema: pa.Schema) -> StructType:
    return StructType([StructField(f.name, spark_type(f.type), True) for f in schema])


def _split(df: DataFrame, out: str, schema: pa.Schema) -> DataFrame:
    return df.filter(F.col("out") == out).select(*[f.name for f in schema])


def _topic_timeout(config: AuditConfig):
    """The transaction timeout declared for the topic in conf (topics.<t>), else null."""
    timeouts = config.topic_timeouts()
    if not timeouts:
        return F.lit(None).cast("long")
    pairs = [x for t, ms in sorted(timeouts.items()) for x in (F.lit(t), F.lit(ms).cast("long"))]
    return F.element_at(F.create_map(*pairs), F.col("topic"))


def _ms(col: str):
    return F.unix_millis(F.col(col)).alias(col)


class Audit:
    def __init__(self, spark: SparkSession, paths: list[str], config: AuditConfig) -> None:
        self.spark, self.paths, self.config = spark, paths, config
        register(spark)

    def read(self, table: str, deep: bool = False, topics: str | None = None) -> DataFrame:
        r = self.spark.read.format("kafka-segments").option("table", table)
        r = r.option("paths", json.dumps(self.paths)).option("deep", str(deep).lower())
        if topics:
            r = r.option("topics", topics)
        if self.config.range_bytes:
            r = r.option("range_bytes", str(self.config.range_bytes))
        if self.config.window_bytes:
            r = r.option("window_bytes", str(self.config.window_bytes))
        r = r.option("verify_crc", str(self.config.verify_crc).lower())
        return r.load()

    # -- the plan ---------------------------------------------------------------------------------
    def cleaner_checkpoints(self) -> dict[str, int]:
        """`cleaner-offset-checkpoint` of every log dir: how far the cleaner has been, per
        replica (10.8). A few short text files, read on the driver."""
        import decoders
        from decoders.checkpoints import offset_checkpoint
        from decoders.errors import DecodeError

        out = {}
        for f in decoders.discover(self.paths):
            if not f.path.endswith("cleaner-offset-checkpoint"):
                continue
            src = f.open()
            try:
                parsed = offset_checkpoint(src.read_at(0, min(src.size, 1 << 20)))
            except DecodeError:
                continue  # reported as corrupt_bytes by the errors table
            finally:
                src.close()
            for e in parsed["entries"]:
                out[f"{f.info.broker}|{e['topic']}|{e['partition']}"] = e["offset"]
        return out

    def run(self) -> dict[str, DataFrame]:
        # files outside partition directories (a KRaft bootstrap.checkpoint) have no topic
        batches = self.read("batches").filter(F.col("topic").isNotNull()).persist()
        chosen = self._chosen_replicas(batches)
        replayed = batches.join(F.broadcast(chosen), ["topic", "partition", "broker"])
        snapshots = self.read("producer_snapshots").join(
            F.broadcast(chosen), ["topic", "partition", "broker"]
        )
        part = self._partition_replay(replayed, snapshots).persist()
        transactions = _split(part, "transaction", T.TRANSACTIONS)
        partitions = _split(part, "partition", T.PARTITIONS)

        internal = F.broadcast(
            chosen.filter(F.col("topic").isin(*INTERNAL)).select(
                "topic", F.col("partition").alias("log_partition"), "broker"
            )
        )
        txn_log = self.read("txn_log", deep=True, topics=TRANSACTION_STATE_TOPIC)
        txn_log = txn_log.withColumn("topic", F.lit(TRANSACTION_STATE_TOPIC)).join(
            internal, ["topic", "log_partition", "broker"]
        )
        coord = self._coordinator_replay(txn_log).persist()
        coord_txns = _split(coord, "coord_txn", T.COORDINATOR_TXNS)

        commits = self.read("offset_commits", deep=True, topics=CONSUMER_OFFSETS_TOPIC)
        commits = commits.withColumn("_t", F.lit(CONSUMER_OFFSETS_TOPIC)).join(
            internal.withColumnRenamed("topic", "_t"), ["_t", "log_partition", "broker"]
        )
        metadata = self.read("group_metadata", deep=True, topics=CONSUMER_OFFSETS_TOPIC)
        metadata = metadata.withColumn("topic", F.lit(CONSUMER_OFFSETS_TOPIC)).join(
            internal, ["topic", "log_partition", "broker"]
        )
        groups = self._group_replay(commits, metadata, replayed).persist()
        timeline = _split(groups, "timeline", T.TIMELINE)

        findings = [
            _split(part, "finding", T.FINDINGS),
            _split(coord, "finding", T.FINDINGS),
            _split(groups, "finding", T.FINDINGS),
            self._integrity(),
            self._divergence(batches),
        ]
        findings += self._cross_check(transactions, coord_txns, partitions)
        aborted_index = self.read("aborted_txns").join(
            F.broadcast(chosen), ["topic", "partition", "broker"]
        )
        findings.append(self._txn_index_check(transactions, aborted_index, partitions))
        leaks = self._leakage(transactions, timeline).persist()
        findings += [leaks, self._propagation(leaks, transactions, coord_txns)]
        all_findings = findings[0]
        for f in findings[1:]:
            all_findings = all_findings.unionByName(f)
        out = {
            "findings": all_findings,
            "transactions": self._with_txn_ids(transactions, coord_txns),
            "producer_states": _split(part, "producer_state", T.PRODUCER_STATES),
            "lso_changes": _split(part, "lso", T.LSO_CHANGES),
            "partitions": partitions,
            "coordinator_transactions": coord_txns,
            "group_generations": _split(groups, "generation", T.GENERATIONS),
            "offset_timeline": timeline,
        }
        out = {name: _timestamps(df) for name, df in out.items()}
        # the decoding accounting, for the gate's data expectations: one row per file, one
        # per rejected byte range
        out["segments"] = self.read("segments")
        out["errors"] = self.read("errors")
        return out

    # -- replicas -------------------------------------------------------------------------------
    def _chosen_replicas(self, batches: DataFrame) -> DataFrame:
        """Per partition the most complete replica: highest last offset, then most batches with
        a valid CRC, then the smallest broker name (DESIGN.md: replay one, compare the others)."""
        per = batches.groupBy("topic", "partition", "broker").agg(
            F.max("last_offset").alias("_end"),
            F.sum(F.col("crc_valid").cast("long")).alias("_ok"),
        )
        w = Window.partitionBy("topic", "partition").orderBy(
            F.desc("_end"), F.desc("_ok"), F.asc("broker")
        )
        return (
            per.withColumn("_rank", F.row_number().over(w))
            .filter("_rank = 1")
            .select("topic", "partition", "broker")
        )

    def _divergence(self, batches: DataFrame) -> DataFrame:
        """Replicas disagreeing at the same offsets: batches starting at one offset whose CRC,
        extent or validity differ between brokers (a valid batch of other content included)."""
        per_offset = (
            batches.groupBy("topic", "partition", "base_offset")
            .agg(
                F.countDistinct("broker").alias("brokers"),
                F.countDistinct("crc", "last_offset").alias("variants"),
                F.max("last_offset").alias("last_offset"),
                F.max("record_count").alias("record_count"),
                F.sort_array(F.collect_set("broker")).alias("broker_set"),
            )
            .filter("brokers > 1 AND variants > 1")
        )
        agg = per_offset.groupBy("topic", "partition").agg(
            F.min("base_offset").alias("first_offset"),
            F.max("last_offset").alias("last_offset"),
            F.sum("record_count").alias("record_count"),
            F.count("*").alias("batches"),
            F.array_distinct(F.flatten(F.collect_list("broker_set"))).alias("brokers"),
        )
        return agg.select(
            F.lit("replica_divergence").alias("kind"),
            F.lit("error").alias("severity"),
            "topic",
            "partition",
            F.lit(None).cast("long").alias("producer_id"),
            F.lit(None).cast("int").alias("producer_epoch"),
            F.lit(None).cast("string").alias("transactional_id"),
            F.lit(None).cast("string").alias("group_id"),
            "first_offset",
            "last_offset",
            "record_count",
            F.format_string(
                "replicas of %s-%d disagree on %d batches between offsets %d and %d",
                "topic",
                "partition",
                "batches",
                "first_offset",
                "last_offset",
            ).alias("message"),  # fmt: skip
            F.to_json(F.struct("brokers", "batches", "first_offset", "last_offset")).alias(
                "evidence"
            ),
        )

    # -- integrity --------------------------------------------------------------------------------
    def _integrity(self) -> DataFrame:
        errors = self.read("errors")
        sev = F.when(F.col("kind") == "truncated_batch", "warning").when(
            F.col("kind").isin("unknown_version", "index_inconsistent"), "warning"
        )
        return errors.select(
            "kind",
            sev.otherwise("error").alias("severity"),
            "topic",
            "partition",
            F.lit(None).cast("long").alias("producer_id"),
            F.lit(None).cast("int").alias("producer_epoch"),
            F.lit(None).cast("string").alias("transactional_id"),
            F.lit(None).cast("string").alias("group_id"),
            F.col("offset").alias("first_offset"),
            F.lit(None).cast("long").alias("last_offset"),
            F.lit(None).cast("long").alias("record_count"),
            F.format_string("%s at byte %d of %s: %s", "kind", "position", "file", "reason").alias(
                "message"
            ),
            F.to_json(F.struct("broker", "file", "position", "length", "reason", "offset")).alias(
                "evidence"
            ),
        )

    # -- partitions -------------------------------------------------------------------------------
    def _partition_replay(self, batches: DataFrame, snapshots: DataFrame) -> DataFrame:
        schema = T.union(T.FINDINGS, T.TRANSACTIONS, T.PRODUCER_STATES, T.LSO_CHANGES, T.PARTITIONS)
        cfg = Config(producer_id_expiration_ms=self.config.producer_id_expiration_ms)
        cleaned = self.cleaner_checkpoints()
        compacted = self.config.compacted_topics()

        def replay(key, bt, st):  # no hints: Spark infers its UDF type from them
            topic, partition = key[0].as_py(), key[1].as_py()
            broker = bt.column("broker")[0].as_py() if bt.num_rows else None
            upto = cleaned.get(f"{broker}|{topic}|{partition}", 0)
            if not upto and topic in compacted and bt.num_rows:
                # declared compacted, no cleaner checkpoint: the cleaner may have been anywhere
                upto = pa.compute.max(bt.column("last_offset")).as_py() + 1
            return replay_partition_tables(topic, partition, bt, st, cfg, schema, upto)

        b = batches.select(
            "topic", "partition", "broker", "base_offset", "last_offset", "producer_id",
            "producer_epoch", "base_sequence", "last_sequence", "record_count",
            "is_transactional", "is_control", "control_type", "coordinator_epoch",
            _ms("max_timestamp"), "magic", "crc_valid", "has_delete_horizon", "file", "position",
        )  # fmt: skip
        s = snapshots.select(
            "topic", "partition", "snapshot_offset", "producer_id", "producer_epoch",
            "last_sequence", "last_offset", "offset_delta", "coordinator_epoch",
            "current_txn_first_offset", _ms("timestamp"),
        )  # fmt: skip
        return (
            b.groupBy("topic", "partition")
            .cogroup(s.groupBy("topic", "partition"))
            .applyInArrow(replay, struct_type(schema))
        )

    # -- the transaction coordinator ------------------------------------------------------------
    def _coordinator_replay(self, txn_log: DataFrame) -> DataFrame:
        schema = T.union(T.FINDINGS, T.COORDINATOR_TXNS)

        def replay(key, t):  # no hints: Spark infers its UDF type from them
            rows = sorted(t.to_pylist(), key=lambda r: (r["log_partition"], r["log_offset"]))
            txns, findings = replay_transactional_id(rows)
            return pa.concat_tables(
                [T.rows_table(schema, "coord_txn", txns), T.rows_table(schema, "finding", findings)]
            )

        t = txn_log.filter(F.col("transactional_id").isNotNull()).select(
            "transactional_id", "producer_id", "producer_epoch", "timeout_ms", "state",
            "partitions", _ms("last_update_timestamp"), _ms("start_timestamp"),
            "client_transaction_version", "is_tombstone", "log_partition", "log_offset",
        )  # fmt: skip
        t = t.withColumn("start_timestamp", F.coalesce("start_timestamp", F.lit(-1)))
        t = t.withColumn("last_update_timestamp", F.coalesce("last_update_timestamp", F.lit(-1)))
        return t.groupBy("transactional_id").applyInArrow(replay, struct_type(schema))

    def _cross_check(self, pt: DataFrame, ct: DataFrame, partitions: DataFrame) -> list[DataFrame]:
        """The partitions against the coordinator's log (8.5): every listed partition got the
        marker of the outcome the coordinator decided; data only in partitions it added."""
        skew = self.config.clock_skew_ms
        cx = ct.select(
            "transactional_id", "producer_id", "data_epoch", "marker_epoch", "outcome",
            "start_timestamp", "prepare_timestamp", "complete_timestamp", "timeout_ms",
            F.explode("partitions").alias("tp"),
        ).select("*", F.col("tp.topic").alias("topic"), F.col("tp.partition").alias("partition")).drop("tp")  # fmt: skip
        # where the cleaner has been, data and markers of different transactions may be gone
        # on either side: the coordinator cross-check judges only uncleaned ranges (10.8)
        pt = pt.filter(~F.col("in_cleaned_range"))
        # `__transaction_state` is compacted too: before its oldest surviving transaction of a
        # producer the coordinator's history is gone, so partition transactions that ended
        # before then are not judged against it (data timestamps are the client's CreateTime
        # and may precede the coordinator's start; the marker's is the coordinator's)
        covered = ct.groupBy("producer_id").agg(F.min("start_timestamp").alias("_since"))
        pt = (
            pt.join(covered, "producer_id", "left")
            .filter(
                F.col("_since").isNull()
                | (F.coalesce("marker_timestamp", "first_timestamp") >= F.col("_since"))
            )
            .drop("_since")
        )
        p = pt.alias("p")
        c = cx.alias("c")
        marker_match = (
            (F.col("p.producer_id") == F.col("c.producer_id"))
            & (F.col("p.topic") == F.col("c.topic"))
            & (F.col("p.partition") == F.col("c.partition"))
            & (F.col("p.marker_epoch") == F.col("c.marker_epoch"))
            & (F.col("p.marker_timestamp") >= F.col("c.prepare_timestamp") - skew)
            & (F.col("p.marker_timestamp") <= F.coalesce(F.col("c.complete_timestamp"), F.lit(FAR)) + skew)
        )  # fmt: skip
        # each marker belongs to the coordinator transaction whose Prepare..Complete window is
        # nearest its timestamp (TV1 reuses one epoch for many transactions)
        dist = F.greatest(F.col("c.prepare_timestamp") - F.col("p.marker_timestamp"), F.lit(0)) + F.greatest(
            F.col("p.marker_timestamp") - F.coalesce(F.col("c.complete_timestamp"), F.lit(FAR)), F.lit(0)
        )  # fmt: skip
        pairs = p.join(c, marker_match).select(
            F.col("p.topic").alias("topic"), F.col("p.partition").alias("partition"),
            F.col("p.producer_id").alias("producer_id"), F.col("p.producer_epoch").alias("producer_epoch"),
            F.col("p.first_offset").alias("first_offset"), F.col("p.marker_offset").alias("marker_offset"),
            F.col("p.outcome").alias("marker"), F.col("p.record_count").alias("record_count"),
            F.col("p.marker_timestamp").alias("marker_timestamp"),
            F.col("c.transactional_id").alias("transactional_id"), F.col("c.outcome").alias("coordinator_outcome"),
            F.col("c.prepare_timestamp").alias("prepare_timestamp"),
            dist.alias("_dist"),
            F.abs(F.col("p.marker_timestamp") - F.col("c.prepare_timestamp")).alias("_near"),
        )  # fmt: skip
        best = Window.partitionBy("topic", "partition", "producer_id", "first_offset").orderBy(
            "_dist", "_near"
        )
        assigned = pairs.withColumn("_r", F.row_number().over(best)).filter("_r = 1").drop("_r")
        split = assigned.filter(
            F.col("coordinator_outcome").isNotNull() & (F.col("marker") != F.col("coordinator_outcome"))
        ).select(
            F.lit("split_outcome").alias("kind"),
            F.lit("critical").alias("severity"),
            "topic", "partition", "producer_id", "producer_epoch", "transactional_id",
            F.lit(None).cast("string").alias("group_id"),
            "first_offset",
            F.col("marker_offset").alias("last_offset"),
            "record_count",
            F.format_string(
                "transaction of %s (producer %d, epoch %d) has a %s marker in %s-%d but the coordinator decided %s",
                "transactional_id", "producer_id", "producer_epoch", "marker", "topic", "partition",
                "coordinator_outcome",
            ).alias("message"),
            F.to_json(F.struct("marker_offset", "marker", "coordinator_outcome", "prepare_timestamp",
                               "marker_timestamp")).alias("evidence"),
        )  # fmt: skip
        present = partitions.select("topic", "partition", "cleaned_upto").alias("x")
        completed = c.filter(F.col("c.complete_timestamp").isNotNull()).join(
            present, (F.col("c.topic") == F.col("x.topic")) & (F.col("c.partition") == F.col("x.partition"))
        )  # fmt: skip
        got = assigned.select(
            F.col("transactional_id").alias("_tid"), F.col("prepare_timestamp").alias("_prep"),
            F.col("topic").alias("_topic"), F.col("partition").alias("_part"),
        )  # fmt: skip
        unmarked = completed.join(
            got,
            (F.col("c.transactional_id") == F.col("_tid"))
            & (F.col("c.prepare_timestamp") == F.col("_prep"))
            & (F.col("c.topic") == F.col("_topic"))
            & (F.col("c.partition") == F.col("_part")),
            "left_anti",
        )
        open_data = pt.filter("outcome = 'OPEN'").alias("o")
        missing = (
            unmarked.join(
                open_data,
                (F.col("o.producer_id") == F.col("c.producer_id"))
                & (F.col("o.topic") == F.col("c.topic"))
                & (F.col("o.partition") == F.col("c.partition"))
                & (F.col("o.producer_epoch") == F.col("c.data_epoch")),
                "left",
            )
            .filter((F.col("x.cleaned_upto") == 0) | F.col("o.first_offset").isNotNull())
            .select(
                F.lit("missing_marker").alias("kind"),
                F.when(F.col("o.first_offset").isNotNull(), "error").otherwise("warning").alias("severity"),
                F.col("c.topic").alias("topic"),
                F.col("c.partition").alias("partition"),
                F.col("c.producer_id").alias("producer_id"),
                F.col("c.data_epoch").alias("producer_epoch"),
                F.col("c.transactional_id").alias("transactional_id"),
                F.lit(None).cast("string").alias("group_id"),
                F.col("o.first_offset").alias("first_offset"),
                F.col("o.last_offset").alias("last_offset"),
                F.col("o.record_count").alias("record_count"),
                F.format_string(
                    "the coordinator completed %s's transaction (%s, producer %d) but %s-%d has no marker for it",
                    "c.transactional_id", "c.outcome", "c.producer_id", "c.topic", "c.partition",
                ).alias("message"),
                F.to_json(F.struct(
                    F.col("c.outcome").alias("coordinator_outcome"), F.col("c.marker_epoch").alias("marker_epoch"),
                    F.col("c.prepare_timestamp").alias("prepare_timestamp"),
                    F.col("c.complete_timestamp").alias("complete_timestamp"),
                    F.col("o.first_offset").alias("open_data_first_offset"),
                )).alias("evidence"),
            )
        )  # fmt: skip
        known = ct.select("producer_id").distinct()
        inside = (
            (F.col("p.producer_id") == F.col("c.producer_id"))
            & (F.col("p.topic") == F.col("c.topic"))
            & (F.col("p.partition") == F.col("c.partition"))
            & (F.col("p.producer_epoch") == F.col("c.data_epoch"))
            & (F.col("p.first_timestamp") >= F.col("c.start_timestamp") - skew)
            & (F.col("p.first_timestamp") <= F.coalesce(F.col("c.prepare_timestamp"), F.lit(FAR)) + skew)
        )  # fmt: skip
        ids = ct.groupBy("producer_id").agg(F.max("transactional_id").alias("tid")).alias("i")
        outside = (
            p.join(known, "producer_id", "left_semi")
            .alias("p")
            .join(c, inside, "left_anti")
            .join(ids, F.col("p.producer_id") == F.col("i.producer_id"), "left")
            .select(
                F.lit("write_outside_transaction").alias("kind"),
                F.lit("error").alias("severity"),
                F.col("p.topic").alias("topic"),
                F.col("p.partition").alias("partition"),
                F.col("p.producer_id").alias("producer_id"),
                F.col("p.producer_epoch").alias("producer_epoch"),
                F.col("i.tid").alias("transactional_id"),
                F.lit(None).cast("string").alias("group_id"),
                F.col("p.first_offset").alias("first_offset"),
                F.col("p.last_offset").alias("last_offset"),
                F.col("p.record_count").alias("record_count"),
                F.format_string(
                    "producer %d (epoch %d) wrote transactional data to %s-%d outside any transaction the coordinator added that partition to",
                    "p.producer_id", "p.producer_epoch", "p.topic", "p.partition",
                ).alias("message"),
                F.to_json(F.struct(
                    F.col("p.first_offset").alias("first_offset"), F.col("p.first_timestamp").alias("first_timestamp"),
                    F.col("p.outcome").alias("outcome"),
                )).alias("evidence"),
            )
        )  # fmt: skip
        timeouts = ct.groupBy("producer_id").agg(F.max("timeout_ms").alias("timeout_ms"))
        hanging = (
            pt.filter("outcome = 'OPEN' AND NOT in_cleaned_range AND pinned_records > 0")
            .join(timeouts, "producer_id", "left")
            .join(ids.select(F.col("producer_id"), F.col("tid")), "producer_id", "left")
            .withColumn("timeout", F.coalesce("timeout_ms", _topic_timeout(self.config), F.lit(self.config.default_transaction_timeout_ms)))
            .filter(F.col("open_ms") > F.col("timeout"))
            .select(
                F.lit("hanging_transaction").alias("kind"),
                F.lit("error").alias("severity"),
                "topic", "partition", "producer_id", "producer_epoch",
                F.col("tid").alias("transactional_id"),
                F.lit(None).cast("string").alias("group_id"),
                "first_offset", "last_offset", "record_count",
                F.format_string(
                    "transaction of producer %d open since offset %d for %d ms (timeout %d ms) pins %d later records behind the LSO of %s-%d",
                    "producer_id", "first_offset", "open_ms", "timeout", "pinned_records", "topic", "partition",
                ).alias("message"),
                F.to_json(F.struct("first_offset", "first_timestamp", "open_ms", "timeout", "pinned_records")).alias("evidence"),
            )
        )  # fmt: skip
        return [split, missing, outside, hanging]

    def _txn_index_check(self, pt: DataFrame, index: DataFrame, partitions: DataFrame) -> DataFrame:
        """The aborted-transaction index recomputed from the log (every ABORT that closed an
        open transaction, 10.4) against the `.txnindex` files, outside cleaned ranges."""
        ours = pt.filter("outcome = 'ABORT' AND NOT in_cleaned_range").select(
            "topic", "partition", "producer_id", "first_offset",
            F.col("marker_offset").alias("last_offset"), F.lit(True).alias("_ours"),
        )  # fmt: skip
        cleaned = partitions.select("topic", "partition", "cleaned_upto")
        theirs = (
            index.join(cleaned, ["topic", "partition"])
            .filter(F.col("first_offset") >= F.col("cleaned_upto"))
            .select("topic", "partition", "producer_id", "first_offset", "last_offset",
                    "last_stable_offset", "file", F.lit(True).alias("_theirs"))
        )  # fmt: skip
        diff = ours.join(
            theirs,
            ["topic", "partition", "producer_id", "first_offset", "last_offset"],
            "full_outer",
        ).filter(F.col("_ours").isNull() | F.col("_theirs").isNull())
        return diff.select(
            F.lit("index_inconsistent").alias("kind"),
            F.lit("warning").alias("severity"),
            "topic", "partition", "producer_id",
            F.lit(None).cast("int").alias("producer_epoch"),
            F.lit(None).cast("string").alias("transactional_id"),
            F.lit(None).cast("string").alias("group_id"),
            "first_offset", "last_offset",
            F.lit(None).cast("long").alias("record_count"),
            F.when(F.col("_ours").isNull(), F.format_string(
                "%s has an aborted transaction of producer %d at %d..%d that the log does not show",
                "file", "producer_id", "first_offset", "last_offset",
            )).otherwise(F.format_string(
                "the ABORT of producer %d at %d..%d in %s-%d is missing from the .txnindex",
                "producer_id", "first_offset", "last_offset", "topic", "partition",
            )).alias("message"),
            F.to_json(F.struct("file", "last_stable_offset", "_ours", "_theirs")).alias("evidence"),
        )  # fmt: skip

    def _with_txn_ids(self, pt: DataFrame, ct: DataFrame) -> DataFrame:
        ids = ct.groupBy("producer_id").agg(
            F.max("transactional_id").alias("transactional_id"),
            F.max(F.col("fenced").cast("int")).cast("boolean").alias("coordinator_fenced"),
        )
        return pt.join(ids, "producer_id", "left").select(
            *[f.name for f in T.TRANSACTIONS], "transactional_id", "coordinator_fenced"
        )

    # -- groups -----------------------------------------------------------------------------------
    def _group_replay(
        self, commits: DataFrame, metadata: DataFrame, batches: DataFrame
    ) -> DataFrame:
        schema = T.union(T.FINDINGS, T.GENERATIONS, T.TIMELINE)
        broadcast = self.config.declared_broadcast()

        def replay(key, t):  # no hints: Spark infers its UDF type from them
            rows = sorted(
                t.to_pylist(), key=lambda r: (r["log_partition"], r["log_offset"], r["_order"])
            )
            group = key[0].as_py()
            res = replay_group(group, rows, declared_broadcast=group in broadcast)
            return pa.concat_tables([
                T.rows_table(schema, "generation", res["generations"]),
                T.rows_table(schema, "timeline", res["timeline"]),
                T.rows_table(schema, "finding", res["findings"]),
            ])  # fmt: skip

        members_t = "array<struct<member_id:string,assigned_partitions:array<struct<topic:string,partitions:array<int>>>>>"
        null = F.lit(None)
        c = commits.select(
            F.lit("commit").alias("event"), "group_id", "log_partition", "log_offset",
            _ms("record_timestamp"), null.cast("int").alias("generation"),
            null.cast("string").alias("protocol_type"), null.cast("string").alias("protocol"),
            null.cast("string").alias("leader"), null.cast(members_t).alias("members"),
            "is_tombstone", "topic", "partition", "committed_offset", _ms("commit_timestamp"),
            "is_transactional", "producer_id", null.cast("string").alias("control_type"),
            F.lit(1).alias("_order"),
        )  # fmt: skip
        m = metadata.select(
            F.lit("metadata").alias("event"), "group_id", "log_partition", "log_offset",
            _ms("record_timestamp"), "generation", "protocol_type", "protocol", "leader",
            F.expr("transform(members, m -> named_struct('member_id', m.member_id, 'assigned_partitions', m.assigned_partitions))").cast(members_t).alias("members"),
            "is_tombstone", null.cast("string").alias("topic"), null.cast("int").alias("partition"),
            null.cast("long").alias("committed_offset"), null.cast("long").alias("commit_timestamp"),
            F.lit(False).alias("is_transactional"), null.cast("long").alias("producer_id"),
            null.cast("string").alias("control_type"), F.lit(0).alias("_order"),
        )  # fmt: skip
        txn_producers = (
            commits.filter("is_transactional")
            .select("group_id", "log_partition", "producer_id")
            .distinct()
        )
        markers = (
            batches.filter((F.col("topic") == CONSUMER_OFFSETS_TOPIC) & F.col("is_control") & (F.col("record_count") > 0))
            .select(F.col("partition").alias("log_partition"), F.col("base_offset").alias("log_offset"),
                    _ms("max_timestamp"), "producer_id", "control_type")
            .join(txn_producers, ["log_partition", "producer_id"])
            .select(
                F.lit("marker").alias("event"), "group_id", "log_partition", "log_offset",
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
        return events.groupBy("group_id").applyInArrow(replay, struct_type(schema))

    # -- leakage ----------------------------------------------------------------------------------
    def _leakage(self, pt: DataFrame, timeline: DataFrame) -> DataFrame:
        schema = T.FINDINGS
        declared = self.config.declared_isolation()
        skew = self.config.clock_skew_ms

        def judge(key, txns, commits):  # no hints: Spark infers its UDF type from them
            rows = judge_partition(
                key[0].as_py(),
                key[1].as_py(),
                txns.to_pylist(),
                commits.to_pylist(),
                declared,
                skew,
            )
            return pa.Table.from_pylist(rows, schema=schema)

        t = pt.filter(~F.col("topic").isin(*INTERNAL)).select(
            "topic", "partition", "producer_id", "producer_epoch", "first_offset", "last_offset",
            "marker_offset", "outcome", "record_count", "marker_timestamp",
        )  # fmt: skip
        c = timeline.select(
            "topic", "partition", "group_id", "committed_offset", "effective_timestamp",
            "effective_log_offset", "producer_id",
        )  # fmt: skip
        return (
            t.groupBy("topic", "partition")
            .cogroup(c.groupBy("topic", "partition"))
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
            pt.filter("outcome = 'COMMIT'")
            .filter(~F.col("topic").isin(*INTERNAL))
            .groupBy("producer_id")
            .agg(
                F.sort_array(F.collect_set(F.format_string("%s-%d", "topic", "partition"))).alias("outputs"),
                F.count("*").alias("committed_transactions"),
                F.sum("record_count").alias("output_records"),
            )
        )  # fmt: skip
        ids = ct.groupBy("producer_id").agg(F.max("transactional_id").alias("tid"))
        return (
            leak.alias("l")
            .join(out.alias("o"), F.col("l.step_pid") == F.col("o.producer_id"))
            .join(ids.alias("i"), F.col("l.step_pid") == F.col("i.producer_id"), "left")
            .select(
                F.lit("aborted_data_propagated").alias("kind"),
                F.lit("critical").alias("severity"),
                F.col("l.topic").alias("topic"),
                F.col("l.partition").alias("partition"),
                F.col("l.step_pid").alias("producer_id"),
                F.lit(None).cast("int").alias("producer_epoch"),
                F.col("i.tid").alias("transactional_id"),
                F.col("l.group_id").alias("group_id"),
                F.col("l.first_offset").alias("first_offset"),
                F.col("l.last_offset").alias("last_offset"),
                F.col("l.record_count").alias("record_count"),
                F.format_string(
                    "group %s fed %d aborted records of %s-%d to transactional producer %d, which committed them on into %s",
                    "l.group_id", "l.record_count", "l.topic", "l.partition", "l.step_pid",
                    F.array_join("o.outputs", ", "),
                ).alias("message"),
                F.to_json(F.struct(
                    F.col("o.outputs").alias("output_partitions"),
                    F.col("o.committed_transactions").alias("committed_transactions"),
                    F.col("o.output_records").alias("output_records"),
                    F.col("l.evidence").alias("leak"),
                )).alias("evidence"),
            )
        )  # fmt: skip


def replay_partition_tables(topic, partition, bt: pa.Table, st: pa.Table, cfg: Config,
                            schema: pa.Schema, cleaned_upto: int = 0) -> pa.Table:  # fmt: skip
    """The per-partition function: replay, then compare with the newest `.snapshot`."""
    broker = bt.column("broker")[0].as_py() if bt.num_rows else None
    snaps = st.to_pylist()
    offsets = sorted({s["snapshot_offset"] for s in snaps})
    # a log that starts mid-stream: seed producer state from the newest snapshot at or below
    # its first offset (the broker's own starting point)
    first = pa.compute.min(bt.column("base_offset")).as_py() if bt.num_rows else None
    start = max((o for o in offsets if first is not None and 0 < o <= first), default=None)
    seed = [s for s in snaps if s["snapshot_offset"] == start] if start is not None else None
    r = PartitionReplay(topic, partition, cfg, cleaned_upto).run(bt, offsets, seed)
    newest = offsets[-1] if offsets else None
    at_newest = r.snapshot_states.get(newest, {}) if newest is not None else {}
    snap_rows = {s["producer_id"]: s for s in snaps if s["snapshot_offset"] == newest}
    states, findings = [], list(r.findings)
    for pid, s in sorted(r.states().items()):
        row = {"topic": topic, "partition": partition, "producer_id": pid, **s,
               "snapshot_offset": newest, "snapshot_matches": None, "snapshot_diff": None}  # fmt: skip
        theirs, ours = snap_rows.get(pid), at_newest.get(pid)
        if theirs is not None and ours is not None:
            fields = ("producer_epoch", "last_sequence", "last_offset", "coordinator_epoch",
                      "current_txn_first_offset")  # fmt: skip
            diff = {
                f: {"snapshot": theirs[f], "replay": ours[f]}
                for f in fields
                if theirs[f] != ours[f]
            }
            row["snapshot_matches"] = not diff
            row["snapshot_diff"] = json.dumps(diff) if diff else None
            if diff:
                findings.append(
                    finding(
                        "index_inconsistent",
                        f"snapshot {newest} of {topic}-{partition} disagrees with the log for producer {pid}",
                        {"snapshot_offset": newest, "diff": diff},
                        topic=topic, partition=partition, producer_id=pid,
                    )
                )  # fmt: skip
        states.append(row)
    summary = {
        "topic": topic, "partition": partition, "broker": broker,
        "log_start_offset": r.log_start, "log_end_offset": r.log_end, "lso": r.lso(),
        "cleaned_upto": r.cleaned_upto, "data_records": r.data_records,
        "last_timestamp": r.last_timestamp,
    }  # fmt: skip
    lso = [{"topic": topic, "partition": partition, "timestamp": ts, "log_end_offset": end, "lso": v}
           for ts, end, v in r.lso_changes]  # fmt: skip
    return pa.concat_tables([
        T.rows_table(schema, "finding", findings),
        T.rows_table(schema, "transaction", r.transactions + r.open_transactions()),
        T.rows_table(schema, "producer_state", states),
        T.rows_table(schema, "lso", lso),
        T.rows_table(schema, "partition", [summary]),
    ])  # fmt: skip


def _timestamps(df: DataFrame) -> DataFrame:
    cols = [
        F.timestamp_millis(F.col(c)).alias(c) if c in T.TIMESTAMP_COLUMNS else F.col(c)
        for c in df.columns
    ]
    return df.select(*cols)


def audit(
    spark: SparkSession, paths: list[str], conf: dict | AuditConfig | None = None
) -> dict[str, DataFrame]:
    """Replay a dump; DataFrames by table name (findings, transactions, producer_states,
    lso_changes, partitions, coordinator_transactions, group_generations, offset_timeline,
    plus the decoded segments and errors)."""
    config = conf if isinstance(conf, AuditConfig) else AuditConfig.from_conf(conf)
    return Audit(spark, list(paths), config).run()
