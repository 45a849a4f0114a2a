"""The audit's checks written as Spark SQL: integrity (the decoders' errors), replica
divergence and the propagation of aborted data. Each makes its findings through
:func:`findings_frame` from a rule of :mod:`replay.rules` (the one-process audit applies the
same rules to rows).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType

from decoders.spark import spark_type
from replay import tables as T
from replay.findings import INTEGRITY_KINDS, integrity_severity, severity_of
from replay.grouped import INTERNAL_TOPICS
from replay.rules import CLEANED_IDENTITY, DIVERGENCE, INTEGRITY, PROPAGATION, RowRule
from replay.sql import case, name, names, quoted
from replay.tables import CLUSTER


def findings_frame(df: DataFrame, rule: RowRule) -> DataFrame:
    """The findings rows of a Spark-side check, one per row of ``df``: the one place their
    columns are laid out (the findings schema, replay.tables), the severity from the vocabulary."""
    if rule.kind is not None:
        kind, severity = quoted(rule.kind), quoted(severity_of(rule.kind))
    else:  # the row's own kind: a decoding problem
        kind = "kind"
        severity = case([(f"kind = {quoted(k)}", quoted(integrity_severity(k)))
                         for k in INTEGRITY_KINDS], quoted(integrity_severity("corrupt_bytes")))  # fmt: skip
    types = {f.name: f.dataType for f in df.schema.fields}  # analysed once
    args = [_text(types, a) for a in rule.args]
    cols = {
        "kind": kind,
        "severity": severity,
        "message": f"format_string({', '.join([quoted(rule.template), *args])})",
        "evidence": f"to_json(struct({', '.join(names(rule.evidence))}))",
    }
    # one list of SQL expressions (replay.sql: a column expression each was ~10 calls into
    # the driver's JVM, for every check's ~25 columns)
    out = [name(CLUSTER)]
    for f in T.FINDINGS:
        if f.name in cols:
            out.append(f"{cols[f.name]} AS {name(f.name)}")
        else:
            value = name(f.name) if f.name in types else "NULL"
            out.append(f"CAST({value} AS {spark_type(f.type).simpleString()}) AS {name(f.name)}")
    return df.selectExpr(*out)


def _text(types: dict, column: str) -> str:
    """A message argument: a list joined with ", " (as RowRule.message joins it)."""
    return f"array_join({name(column)}, ', ')" if isinstance(types[column], ArrayType) else name(column)  # fmt: skip


def integrity(errors: DataFrame) -> DataFrame:
    """Every decoding problem of the errors table, at its log offset."""
    return findings_frame(errors.withColumn("first_offset", F.col("offset")), INTEGRITY)


def divergence(batches: DataFrame | None, cleaned: DataFrame | None = None,
               carried: DataFrame | None = None) -> DataFrame | None:  # fmt: skip
    """Replicas of one cluster disagreeing at the same offsets: batches starting at one
    offset whose CRC, extent or validity differ between brokers. One finding per partition,
    also with ``carried`` (the divergence findings a previous run published about the bytes
    before its points, replay.previous): one run of disagreement across the point is one
    finding, as over the whole log.

    A numeric pass first keeps the offsets where two brokers' batches differ (min != max of a
    broker hash, of the CRC, of the last offset: plain hash aggregation, no sets of strings,
    which over every batch of a dump cost more than the rest of the findings); the exact
    comparison runs on those offsets' batches only (none, in a dump whose replicas agree)."""
    keys = [CLUSTER, "topic", "partition", "base_offset"]
    earlier = None
    if carried is not None:
        brokers = F.from_json(F.get_json_object("evidence", "$.brokers"), "array<string>")
        earlier = carried.select(
            CLUSTER, "topic", "partition", "first_offset", "last_offset", "record_count",
            F.get_json_object("evidence", "$.batches").cast("long").alias("_n"),
            brokers.alias("broker_set"),
        )  # fmt: skip
    if batches is None:
        return None if earlier is None else _divergence_findings(earlier)
    if cleaned is not None:  # (cluster, topic, partition, cleaned_upto): see CLEANED_IDENTITY
        batches = batches.join(F.broadcast(cleaned), keys[:3], "left")
        inside = F.col("base_offset") < F.coalesce(F.col("cleaned_upto"), F.lit(-1))
        identity = F.xxhash64(*[F.col(c) for c in CLEANED_IDENTITY])
        batches = batches.withColumn(
            "crc", F.when(inside, identity).otherwise(F.col("crc").cast("long"))
        )
    both = F.col("crc").isNotNull() & F.col("last_offset").isNotNull()
    broker, crc, last = (
        F.xxhash64("broker"),
        F.when(both, F.col("crc")),
        F.when(both, F.col("last_offset")),
    )
    suspects = (
        batches.groupBy(*keys)
        .agg(
            F.min(broker).alias("_b0"), F.max(broker).alias("_b1"),
            F.min(crc).alias("_c0"), F.max(crc).alias("_c1"),
            F.min(last).alias("_l0"), F.max(last).alias("_l1"),
        )
        .filter("_b0 != _b1 AND (_c0 != _c1 OR _l0 != _l1)")
        .select(*keys)
    )  # fmt: skip
    per_offset = (
        batches.join(suspects, keys, "left_semi")
        .groupBy(*keys)
        .agg(
            F.countDistinct("broker").alias("brokers"),
            F.countDistinct("crc", "last_offset").alias("variants"),
            F.max("last_offset").alias("last_offset"),
            F.max("record_count").alias("record_count"),
            F.sort_array(F.collect_set("broker")).alias("broker_set"),
        )
        .filter("brokers > 1 AND variants > 1")
    )
    rows = per_offset.select(
        CLUSTER, "topic", "partition", F.col("base_offset").alias("first_offset"),
        "last_offset", "record_count", F.lit(1).cast("long").alias("_n"), "broker_set",
    )  # fmt: skip
    return _divergence_findings(rows if earlier is None else rows.unionByName(earlier))


def _divergence_findings(rows: DataFrame) -> DataFrame:
    """One finding per partition of its diverging batches' rows (``_n`` batches each)."""
    agg = rows.groupBy(CLUSTER, "topic", "partition").agg(
        F.min("first_offset").alias("first_offset"),
        F.max("last_offset").alias("last_offset"),
        F.sum("record_count").alias("record_count"),
        F.sum("_n").alias("batches"),
        F.sort_array(F.array_distinct(F.flatten(F.collect_list("broker_set")))).alias("brokers"),
    )
    return findings_frame(agg, DIVERGENCE)


def propagation(leaks: DataFrame, pt: DataFrame, ct: DataFrame) -> DataFrame:
    """A leaking group whose commits are transactional fed a consume-transform-produce step:
    its producer's committed output transactions carried the aborted input on."""
    leak = (
        leaks.filter("kind = 'aborted_read_leak'")
        .withColumn(
            "step_pid", F.get_json_object("evidence", "$.commit_producer_ids[0]").cast("long")
        )
        .filter(F.col("step_pid").isNotNull())
    )
    # the step producers only (a few; none where nothing leaked: with adaptive execution an
    # empty side ends the join before the partitions' transactions are read)
    steps = F.broadcast(leak.select(CLUSTER, F.col("step_pid").alias("producer_id")).distinct())
    out = (
        pt.join(steps, [CLUSTER, "producer_id"], "left_semi")
        .filter("outcome = 'COMMIT' AND record_count > 0")
        .filter(~F.col("topic").isin(*INTERNAL_TOPICS))
        .groupBy(CLUSTER, "producer_id")
        .agg(
            F.sort_array(F.collect_set(F.format_string("%s-%d", "topic", "partition"))).alias("outputs"),
            F.count("*").alias("committed_transactions"),
            F.sum("record_count").alias("output_records"),
        )
    )  # fmt: skip
    ids = (
        ct.join(steps, [CLUSTER, "producer_id"], "left_semi")
        .groupBy(CLUSTER, "producer_id")
        .agg(F.max("transactional_id").alias("tid"))
    )
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
            *[F.col(f"l.{c}").alias(c) for c in (CLUSTER, "topic", "partition", "group_id")],
            *[F.col(f"l.{c}").alias(c) for c in ("first_offset", "last_offset", "record_count")],
            F.col("l.step_pid").alias("producer_id"),
            F.col("i.tid").alias("transactional_id"),
            F.col("o.outputs").alias("output_partitions"),
            F.col("o.committed_transactions").alias("committed_transactions"),
            F.col("o.output_records").alias("output_records"),
            F.col("l.evidence").alias("leak"),
        )
    )
    return findings_frame(joined, PROPAGATION)


def remediations(findings: DataFrame, target) -> DataFrame:
    """The findings with their ``remediation`` and ``fingerprint`` (replay.remediation, a target from the
    configuration), computed in the tasks that hold them, an Arrow batch at a time."""
    from replay.remediation import filled

    schema = findings.schema

    def fill(batches):
        for b in batches:
            out = filled(b.to_pylist(), target)
            yield pa.RecordBatch.from_pylist(out, schema=b.schema)

    return findings.mapInArrow(fill, schema)
