"""The report's header and overview plots: aggregates of the audit's tables, computed by
pyarrow group-bys over the columns they need (a few hundred rows at most reach the page)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from jobs.report import figures
from jobs.report.source import AuditOutput, as_millis

TOP = 40  # bars at most in a per-partition or per-group plot


def _sum_by(t: pa.Table, keys: list[str], col: str, agg: str = "sum") -> list[dict]:
    if t.num_rows == 0:
        return []
    return t.group_by(keys).aggregate([(col, agg)]).to_pylist()


def inputs(src: AuditOutput) -> dict:
    """Brokers, topics, partitions, bytes, records and time span of the audited dump."""
    seg = src.read("segments", ["broker", "topic", "partition", "kind", "size", "bytes_valid",
                                "bytes_padding", "bytes_corrupt", "records"])  # fmt: skip
    parts = as_millis(src.read("partitions", ["topic", "partition", "data_records",
                                              "last_timestamp"]))  # fmt: skip
    starts = []
    for table, col in (("transactions", "first_timestamp"), ("lso_changes", "timestamp"),
                       ("group_generations", "timestamp")):  # fmt: skip
        t = as_millis(src.read(table, [col]))
        if t.num_rows and col in t.column_names:
            starts.append(pc.min(t.column(col)).as_py())
    ends = parts.column("last_timestamp") if "last_timestamp" in parts.column_names else None
    logs = seg.filter(pc.field("kind") == "log") if seg.num_rows else seg

    def total(t: pa.Table, col: str) -> int:
        return int(pc.sum(t.column(col)).as_py() or 0) if t.num_rows else 0

    errors = src.read("errors", ["kind"])
    return {
        "brokers": len(pc.unique(seg.column("broker"))) if seg.num_rows else 0,
        "topics": len(pc.unique(parts.column("topic"))) if parts.num_rows else 0,
        "partitions": parts.num_rows,
        "files": seg.num_rows,
        "bytes": total(seg, "size"),
        "log_bytes": total(logs, "size"),
        "records": total(parts, "data_records"),
        "first_timestamp": min((s for s in starts if s is not None), default=None),
        "last_timestamp": pc.max(ends).as_py() if ends is not None and len(ends) else None,
        "bytes_valid": total(seg, "bytes_valid"),
        "bytes_padding": total(seg, "bytes_padding"),
        "bytes_corrupt": total(seg, "bytes_corrupt"),
        "errors": {r["kind"]: r["count_all"] for r in _count(errors, ["kind"])},
    }


def _count(t: pa.Table, keys: list[str]) -> list[dict]:
    if t.num_rows == 0:
        return []
    return t.group_by(keys).aggregate([([], "count_all")]).to_pylist()


def plots(src: AuditOutput) -> list[figures.Figure]:
    out = []
    # bytes and records per topic
    seg = src.read("segments", ["topic", "kind", "size"])
    seg = seg.filter(pc.field("kind") == "log") if seg.num_rows else seg
    size = {r["topic"]: r["size_sum"] for r in _sum_by(seg, ["topic"], "size") if r["topic"]}
    parts = src.read("partitions", ["topic", "data_records"])
    recs = {r["topic"]: r["data_records_sum"] for r in _sum_by(parts, ["topic"], "data_records")}
    topics = sorted(set(size) | set(recs), key=lambda t: -(size.get(t) or 0))[:TOP]
    if topics:
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
        out.append(fig)
    # transactions per outcome over time
    tx = as_millis(src.read("transactions", ["outcome", "first_timestamp"]))
    tx = tx.filter(pc.is_valid(tx.column("first_timestamp"))) if tx.num_rows else tx
    if tx.num_rows:
        lo = pc.min(tx.column("first_timestamp")).as_py()
        hi = pc.max(tx.column("first_timestamp")).as_py()
        # coarse buckets (>= 1 s, about 60 over the span): each partition's leader clock only
        # places a transaction in its bucket, no order between partitions is claimed
        width = max(1000, (hi - lo) // 60 + 1)
        bucket = pc.multiply(pc.divide(tx.column("first_timestamp"), width), width)
        counted = _count(tx.append_column("bucket", bucket), ["bucket", "outcome"])
        series = {}
        for outcome, colour in figures.OUTCOME_COLOURS.items():
            rows = sorted((r for r in counted if r["outcome"] == outcome),
                          key=lambda r: r["bucket"])  # fmt: skip
            if rows:
                series[outcome.lower()] = {"x": [r["bucket"] for r in rows],
                                           "y": [r["count_all"] for r in rows], "color": colour}  # fmt: skip
        out.append(
            figures.bars(
                f"transactions per outcome ({width // 1000} s buckets of their first batch)",
                "first batch timestamp (each partition's leader clock, bucketed)",
                "transactions",
                series,
                stacked=True,
                date_x=True,
            )
        )
    # consumer-group rebalances: each group's generations on its own log's time
    gens = as_millis(src.read("group_generations", ["group_id", "generation", "timestamp"]))
    if gens.num_rows:
        per = _count(gens, ["group_id"])
        busiest = [r["group_id"] for r in sorted(per, key=lambda r: -r["count_all"])[:12]]
        series = {}
        for g in sorted(busiest):
            rows = sorted(gens.filter(pc.field("group_id") == g).to_pylist(),
                          key=lambda r: (r["timestamp"] or 0))  # fmt: skip
            series[g] = {"x": [r["timestamp"] for r in rows], "y": [r["generation"] for r in rows]}
        out.append(
            figures.lines(
                "consumer-group generations (rebalances)",
                "group record timestamp (each group's coordinator log)",
                "generation",
                series,
                date_x=True,
            )
        )
    # producers per partition
    ps = src.read("producer_states", ["topic", "partition", "producer_id"])
    if ps.num_rows:
        per = sorted(_count(ps, ["topic", "partition"]),
                     key=lambda r: (-r["count_all"], r["topic"], r["partition"]))[:TOP]  # fmt: skip
        out.append(
            figures.bars(
                f"producers per partition (top {len(per)})",
                "partition",
                "producer ids with state",
                {
                    "producers": {
                        "x": [f"{r['topic']}-{r['partition']}" for r in per],
                        "y": [r["count_all"] for r in per],
                    }
                },  # fmt: skip
            )
        )
    return out
