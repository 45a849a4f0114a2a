"""The context plots of the findings a report shows, read from the audit's tables as windows
around them.

All plotted findings of one family are answered together: their keys (partition, group,
centre offset) go to Spark as a small broadcast table, joined with the audit's table, and a
window per finding keeps the rows nearest its centre. A plot of a partition with a million
transactions gets the few hundred rows nearest the finding; the whole table never leaves the
executors, and a report needs a handful of Spark jobs whatever the number of cards.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pyarrow as pa

from jobs.report import figures
from jobs.report.selection import dump_path
from jobs.report.source import AuditOutput, rows
from replay.sql import name

WINDOW = 300  # rows kept on each side of a finding

# what the cards of a family are keyed by: name -> Arrow type (the table of cards' keys)
KEY_TYPES = {
    "card": pa.int32(),
    "cluster": pa.string(),
    "topic": pa.string(),
    "partition": pa.int32(),
    "group_id": pa.string(),
    "centre": pa.int64(),
    "lo": pa.int64(),
    "hi": pa.int64(),
    "producer_id": pa.int64(),
    "log_partitions": pa.list_(pa.int32()),
    "path": pa.string(),
}


def _log_offsets(ev: object) -> set[int]:
    """Offsets in ``__consumer_offsets`` the evidence names (``commit_log_offset`` and the
    like, at any depth): the commits a group finding is about."""
    found: set[int] = set()
    if isinstance(ev, dict):
        for k, v in ev.items():
            if k.endswith("log_offset") and isinstance(v, int):
                found.add(v)
            else:
                found |= _log_offsets(v)
    elif isinstance(ev, list):
        for v in ev:
            found |= _log_offsets(v)
    return found


def _keys(spark, cards: list[dict]):
    """The cards' keys as a small DataFrame (every key column present, None where unused)."""
    from replay.plan import local_frame

    rows = [tuple(c.get(k) for k in KEY_TYPES) for c in cards]
    return local_frame(spark, rows, pa.schema(list(KEY_TYPES.items())))


def _beside(spark, df, columns: list[str], cards: list[dict], cond: str):
    """Rows of ``df`` (its ``columns``) beside the key of every card ``cond`` matches them to
    (``cond``, SQL, is written over the aliases ``t``, the table, and ``k``, the broadcast
    keys); the key columns come out as ``_<key>``."""
    from pyspark.sql import functions as F

    have = [c for c in columns if c in df.columns]
    keys = F.broadcast(_keys(spark, cards)).alias("k")
    # SQL text, one call into the driver's JVM each, not a column expression per term and per
    # column (replay.sql)
    return (
        df.alias("t")
        .join(keys, F.expr(cond))
        .selectExpr(
            *[f"t.{name(c)} AS {name(c)}" for c in have],
            *[f"k.{name(c)} AS {name('_' + c)}" for c in KEY_TYPES],
        )
    )


def _joined(src: AuditOutput, table: str, columns: list[str], cards: list[dict],
            on: Iterable[str]):  # fmt: skip
    """Rows of ``table`` (``columns``) beside the key of every card they belong to, joined on
    ``on`` (a card without a cluster matches every cluster); None without the table."""
    df = src.frame(table)
    if df is None or not cards:
        return None
    cond = ["true"]
    for c in on:
        if c != "cluster":
            cond.append(f"t.{name(c)} = k.{name(c)}")
        elif "cluster" in df.columns:
            cond.append("(k.cluster IS NULL OR t.cluster = k.cluster)")
    return _beside(src.spark, df, columns, cards, " AND ".join(cond))


def _windows(joined, order: str, last: bool = False) -> dict[int, list[dict]]:
    """Per card, at most ``2 * WINDOW`` rows around its centre in ``order`` (all rows when
    there are no more; the first ones without a centre, the last ones with ``last``), sorted."""
    if joined is None:
        return {}
    # as SQL expressions, one call into the driver's JVM each (a column expression object per
    # term and per ordering column was ~10 each: ~2,000 for the demo's report)
    per = "PARTITION BY _card"
    key = f"{name(order)} DESC NULLS LAST" if last else f"{name(order)} ASC NULLS FIRST"
    ties = [
        f"{name(c)} ASC NULLS FIRST" for c in joined.columns if not c.startswith("_") and c != order
    ]
    idx = f"row_number() OVER ({per} ORDER BY {', '.join([key, *ties])}) - 1"
    below = f"sum(CASE WHEN coalesce({name(order)}, 0) < _centre THEN 1 ELSE 0 END) OVER ({per})"
    lo = (
        f"CASE WHEN (count(1) OVER ({per}) <= {2 * WINDOW}) OR _centre IS NULL OR {str(last).lower()}"
        f" THEN 0 ELSE greatest(0, {below} - {WINDOW}) END"
    )  # fmt: skip
    kept = joined.selectExpr("*", f"{idx} AS __idx", f"{lo} AS __from")
    kept = kept.where(f"__idx >= __from AND __idx < __from + {2 * WINDOW}")
    return _by_card(rows(kept.drop("__idx", "__from")), order)


def _by_card(got: list[dict], order: str | None) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in got:
        out.setdefault(r["_card"], []).append({k: v for k, v in r.items() if not k.startswith("_")})
    if order is not None:
        for v in out.values():
            v.sort(key=lambda r: (r[order] is not None, r[order] or 0))
    return out


def _partition_key(i: int, f: dict, **more) -> dict:
    return {"card": i, "cluster": f.get("cluster"), "topic": f["topic"],
            "partition": f["partition"], **more}  # fmt: skip


# -- transactions: the partition's transactions and its LSO --------------------------------------


def transaction_contexts(src: AuditOutput, cards: dict[int, dict]) -> dict[int, figures.Figure]:
    from pyspark.sql import functions as F

    keys = [
        _partition_key(i, f, centre=f.get("first_offset"))
        for i, f in cards.items()
        if f.get("topic") is not None and f.get("partition") is not None
    ]
    on = ("cluster", "topic", "partition")
    cols = ["producer_id", "producer_epoch", "first_offset", "last_offset", "marker_offset",
            "outcome", "record_count", "first_timestamp", "marker_timestamp"]  # fmt: skip
    joined = _joined(src, "transactions", cols, keys, on)
    if joined is not None:  # a marker whose data the cleaner removed has no bar to draw
        joined = joined.where(F.col("first_offset").isNotNull())
    txns = _windows(joined, "first_offset")
    lso = _windows(
        _joined(src, "lso_changes", ["timestamp", "log_end_offset", "lso"], keys, on),
        "log_end_offset",
    )
    ends = _joined(src, "partitions", ["last_timestamp"], keys, on)
    end = {}
    if ends is not None:
        got = rows(ends.groupBy("_card").agg(F.max("last_timestamp").alias("end")))
        end = {r["_card"]: r["end"] for r in got}
    out = {}
    for k in keys:
        i, f = k["card"], cards[k["card"]]
        if txns.get(i) or lso.get(i):
            out[i] = figures.transaction_timeline(
                txns.get(i, []), lso.get(i, []), end.get(i), f, f"{f['topic']}-{f['partition']}"
            )
    return out


# -- groups: committed offsets against transactions or generations -------------------------------

COMMIT_COLUMNS = ["committed_offset", "effective_log_offset", "commit_log_offset",
                  "log_partition", "generation", "effective_timestamp", "is_tombstone"]  # fmt: skip
GROUP_ON = ("cluster", "topic", "partition", "group_id")


def _commits(src: AuditOutput, keys: list[dict], last: bool) -> dict[int, list[dict]]:
    from pyspark.sql import functions as F

    joined = _joined(src, "offset_timeline", COMMIT_COLUMNS, keys, GROUP_ON)
    if joined is None:
        return {}
    return _windows(joined.where(F.col("effective_log_offset").isNotNull()),
                    "effective_log_offset", last=last)  # fmt: skip


def _group_keys(cards: dict[int, dict], ev_of: dict[int, dict], centre) -> list[dict]:
    return [
        _partition_key(i, f, group_id=f["group_id"], centre=centre(ev_of[i]))
        for i, f in cards.items()
        if None not in (f.get("topic"), f.get("partition"), f.get("group_id"))
    ]


def read_contexts(src: AuditOutput, cards: dict[int, dict], ev_of: dict[int, dict]):
    """Leaks and exposures: the group's last commits against the open or aborted
    transactions of the partition they passed."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = _group_keys(cards, ev_of, lambda ev: None)
    commits = _commits(src, keys, last=True)
    spans = []
    for k in keys:
        offsets = [c["committed_offset"] for c in commits.get(k["card"], [])
                   if c["committed_offset"] is not None]  # fmt: skip
        if offsets:
            spans.append({**k, "lo": min(offsets), "hi": max(offsets)})
    txns: dict[int, list[dict]] = {}
    joined = _joined(src, "transactions", ["first_offset", "last_offset", "marker_offset",
                                           "outcome"], spans, ("cluster", "topic", "partition"))  # fmt: skip
    if joined is not None:
        end = F.coalesce(F.col("marker_offset"), F.col("last_offset"))
        near = joined.where(
            (F.col("outcome") != "COMMIT") & (F.col("first_offset") <= F.col("_hi"))
            & (end >= F.col("_lo") - 1)
        )  # fmt: skip
        first = F.row_number().over(Window.partitionBy("_card").orderBy("first_offset"))
        near = near.select("*", first.alias("_n")).where(F.col("_n") <= 4 * WINDOW).drop("_n")
        txns = _by_card(rows(near), "first_offset")
    out = {}
    for k in spans:
        i, f = k["card"], cards[k["card"]]
        out[i] = figures.commits_against_transactions(
            commits[i], txns.get(i, []), sorted(_log_offsets(ev_of[i])), f["group_id"],
            f"{f['topic']}-{f['partition']}",
        )  # fmt: skip
    return out


def _owners(assignment: str | None, topic: str, partition: int) -> list[str]:
    """Members a generation's assignment gave the partition to (JSON topic-partition -> ids)."""
    try:
        doc = json.loads(assignment or "{}")
    except ValueError:
        return []
    for key in (f"{topic}-{partition}", f"{topic}:{partition}"):
        if key in doc:
            v = doc[key]
            return [str(m) for m in (v if isinstance(v, list) else [v])]
    return []


def commit_contexts(src: AuditOutput, cards: dict[int, dict], ev_of: dict[int, dict]):
    """Overwrites and regressions: the commits around the ones the finding names against the
    group's generations and the members their assignments gave the partition to."""

    keys = _group_keys(cards, ev_of, lambda ev: min(_log_offsets(ev), default=None))
    commits = _commits(src, keys, last=False)
    spans = []
    for k in keys:
        mine = commits.get(k["card"])
        if mine:
            spans.append({**k, "lo": mine[0]["effective_log_offset"] - 1000,
                          "hi": mine[-1]["effective_log_offset"],
                          "log_partitions": sorted({c["log_partition"] for c in mine})})  # fmt: skip
    gens: dict[int, list[dict]] = {}
    df = src.frame("group_generations")
    if df is not None and spans:
        cond = (
            "t.group_id = k.group_id AND array_contains(k.log_partitions, t.log_partition)"
            " AND t.log_offset BETWEEN k.lo AND k.hi"
        )
        got = _beside(src.spark, df, ["generation", "state", "assignment", "log_offset"],
                      spans, cond)  # fmt: skip
        gens = _by_card(rows(got), "log_offset")
    out = {}
    for k in spans:
        i, f = k["card"], cards[k["card"]]
        mine = [{**g, "owners": _owners(g["assignment"], f["topic"], f["partition"])}
                for g in gens.get(i, [])]  # fmt: skip
        out[i] = figures.commits_and_generations(
            commits[i], mine, sorted(_log_offsets(ev_of[i])), f["group_id"],
            f"{f['topic']}-{f['partition']}",
        )  # fmt: skip
    return out


# -- idempotence: the producer's sequences in the segment the finding names ----------------------


def sequence_contexts(src: AuditOutput, cards: dict[int, dict], ev_of: dict[int, dict],
                      roots: list[str]):  # fmt: skip
    """The producer's batches in the segment file the finding names, their headers decoded
    from the dump in Spark tasks (the audit's tables keep no per-batch sequences). A dump
    that moved or cannot be read leaves the card its evidence."""

    keys = []
    for i, f in cards.items():
        rel = ev_of[i].get("file")
        if isinstance(rel, str) and f.get("producer_id") is not None:
            keys.append({"card": i, "path": dump_path(rel, roots), "producer_id": f["producer_id"],
                         "centre": f.get("first_offset")})  # fmt: skip
    if not keys:
        return {}
    cols = ["base_offset", "last_offset", "base_sequence", "last_sequence", "producer_epoch"]
    batches = _producer_batches(src.spark, keys, cols)
    cond = "t.path = k.path AND t.producer_id = k.producer_id"
    try:
        got = _windows(_beside(src.spark, batches, cols, keys, cond), "base_offset")
    except Exception:  # noqa: BLE001 - a task failed on the dump's files: no plot
        return {}
    out = {}
    for key in keys:
        i, f = key["card"], cards[key["card"]]
        if got.get(i):
            out[i] = figures.sequences(
                got[i], f, f["producer_id"], f"{f['topic']}-{f['partition']}"
            )
    return out


def _producer_batches(spark, keys: list[dict], cols: list[str]):
    """The batch headers (``cols``) of the cards' producers in the files the cards name, as a
    DataFrame (path, producer_id, cols): each file's headers decoded by a Spark task of its
    own (:func:`decoders.iter_file`, headers only). A file gone or unreadable gives no rows.
    Not through the ``kafka-segments`` data source: a session's first Python data source
    costs a Python process's start to plan (about 1.3 s, on the report's critical path)."""
    from pyspark.sql.types import StringType, StructField, StructType

    from decoders.spark import spark_schema

    files = sorted({k["path"] for k in keys})
    producers = {p: sorted({k["producer_id"] for k in keys if k["path"] == p}) for p in files}
    table = spark_schema("batches")
    schema = StructType([StructField("path", StringType())]
                        + [table[c] for c in ("producer_id", *cols)])  # fmt: skip

    def headers(parts):
        import pyarrow.compute as pc

        import decoders

        for part in parts:
            for i in part.column(0).to_pylist():
                path = files[i]
                wanted = pa.array(producers[path], pa.int64())
                try:
                    for name, got in decoders.iter_file(path, ("batches",), deep=False):
                        mine = got.filter(pc.is_in(got.column("producer_id"), wanted))
                        if name == "batches" and mine.num_rows:
                            mine = mine.select(["producer_id", *cols])
                            yield mine.add_column(0, "path", pa.array([path] * mine.num_rows))
                except OSError:  # the dump moved, or its store cannot be reached: no plot
                    continue

    n = len(files)
    return spark.range(0, n, 1, n).mapInArrow(headers, schema)
