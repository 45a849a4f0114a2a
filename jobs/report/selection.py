"""Which findings a report shows, in which order, and how their evidence is shown.

A report is read by people who never held the dump, so it is capped (a fixed number of cards
per kind, the rest counted) and, unless asked, carries no payload bytes: evidence values under
payload-like keys are replaced by their length and a hash, enough to match two of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from typing import Any

from jobs.report.source import AuditOutput, rows
from replay.findings import KINDS, SEVERITIES, VOCABULARY
from replay.tables import GONE, HISTORY, STILL_PRESENT

PAYLOAD_KEYS = {"key", "value", "keys", "values", "headers", "header_values", "payload"}
COLUMNS = ["cluster", "kind", "severity", "topic", "partition", "producer_id", "producer_epoch",
           "transactional_id", "group_id", "first_offset", "last_offset", "record_count",
           "message", "evidence", "remediation", "fingerprint"]  # fmt: skip


def family(kind: str) -> str | None:
    """The context plot a finding of this kind gets, if any (the vocabulary's, replay.findings)."""
    known = VOCABULARY.get(kind)
    return known.family if known else None


def rank(severity: str | None) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


def kinds_worst_first(counts: dict[str, dict[str, int]]) -> list[str]:
    """Kinds by their worst severity, then by how many findings they have."""

    def key(kind: str):
        worst = max((rank(s) for s in counts[kind]), default=-1)
        return (-worst, -sum(counts[kind].values()), kind)

    return sorted(counts, key=key)


def counts_by_kind(source: AuditOutput) -> dict[str, dict[str, int]]:
    """Findings per kind and severity, aggregated by Spark over the table."""
    df = source.frame("findings", ["kind", "severity"])
    out: dict[str, dict[str, int]] = {}
    for r in rows(df.groupBy("kind", "severity").count()) if df is not None else []:
        out.setdefault(r["kind"], {})[r["severity"]] = r["count"]
    return out


def shown(source: AuditOutput, cap: int) -> dict[str, list[dict]]:
    """The first ``cap`` findings of each kind: worst severity first, then by place in the
    log (a window per kind, ranked by Spark); only the rows shown reach the driver."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    df = source.frame("findings", COLUMNS)
    if df is None:
        return {}
    worst_first = F.array_position(
        F.array(*[F.lit(s) for s in SEVERITIES[::-1]]), F.col("severity")
    )
    order = [worst_first] + [F.col(c).asc_nulls_last() for c in
                             ("topic", "partition", "first_offset", "group_id", "message", "evidence")]  # fmt: skip
    history = source.frame(HISTORY, ["fingerprint", "status", "first_seen"])
    if history is not None and "fingerprint" in df.columns:  # --since: new findings first
        seen = history.filter(F.col("status") != GONE).dropDuplicates(["fingerprint"])
        df = df.join(seen, "fingerprint", "left")
        order = [(F.col("status") == STILL_PRESENT).asc_nulls_first(), *order]
    ranked = df.withColumn("_n", F.row_number().over(Window.partitionBy("kind").orderBy(*order)))
    picked: dict[str, list[dict]] = {}
    for r in sorted(rows(ranked.where(F.col("_n") <= cap)), key=lambda r: r["_n"]):
        picked.setdefault(r["kind"], []).append({k: v for k, v in r.items() if k != "_n"})
    return picked


def redact(value: Any, include_payloads: bool, key: str | None = None) -> Any:
    """Evidence for the report: payload-like values become 'N bytes, sha256 …'."""
    if isinstance(value, dict):
        return {k: redact(v, include_payloads, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, include_payloads, key) for v in value]
    if key in PAYLOAD_KEYS and value is not None and not include_payloads:
        raw = value if isinstance(value, bytes) else str(value).encode()
        return f"{len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()[:16]}"
    return value


def evidence(row: dict, include_payloads: bool) -> dict:
    try:
        doc = json.loads(row.get("evidence") or "{}")
    except ValueError:
        return {"evidence": "(not JSON)"}
    return redact(doc, include_payloads) if isinstance(doc, dict) else {"evidence": doc}


def dump_command(row: dict, ev: dict, roots: list[str], segment_of) -> str | None:
    """The `logreplay dump` command that shows the raw batches behind a finding: the segment
    file named by its evidence, else the segment of its partition holding its first offset."""
    rel = ev.get("file") if isinstance(ev.get("file"), str) else None
    if rel is None and row.get("topic") is not None and row.get("partition") is not None:
        rel = segment_of(row["topic"], row["partition"], row.get("first_offset"))
    if rel is None:
        return None
    return f"logreplay dump {shlex.quote(dump_path(rel, roots))} --deep"


def dump_path(rel: str, roots: list[str]) -> str:
    """A file the evidence names (relative to the audited dump's root, or to the common
    directory of its roots: decoders.layout.common_display_root) as a path or URI to open."""
    from decoders.layout import common_display_root

    base = common_display_root(roots) if roots else None
    return rel if os.path.isabs(rel) or "://" in rel or base is None else f"{base}/{rel}"


def known_kinds() -> list[str]:
    return list(KINDS)
