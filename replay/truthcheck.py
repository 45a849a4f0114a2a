"""Compare an audit's findings with a simulated dump's truth.json (tests, demo, benchmarks)."""

from __future__ import annotations

from replay.findings import at_least

MATCH_KEYS = ("kind", "topic", "partition", "producer_id", "group_id", "record_count")


def matches(anomaly: dict, f: dict) -> bool:
    return all(anomaly.get(k) is None or anomaly[k] == f.get(k) for k in MATCH_KEYS)


def compare(truth: dict, findings: list[dict]) -> dict:
    """found / missed anomalies, and unexpected findings of severity warning or above in the
    areas truth declares clean (or anywhere, for a clean scenario)."""
    found, missed = [], []
    for a in truth["anomalies"]:
        (found if any(matches(a, f) for f in findings) else missed).append(a)
    clean_parts = {(c["topic"], c["partition"]) for c in truth["clean"] if "topic" in c}
    clean_groups = {c["group_id"] for c in truth["clean"] if "group_id" in c}
    explained = [f for f in findings if any(matches(a, f) for a in truth["anomalies"])]
    unexpected = [
        f
        for f in findings
        if at_least(f["severity"], "warning")
        and f not in explained
        and (
            not truth["anomalies"]
            or (f.get("topic"), f.get("partition")) in clean_parts
            or f.get("group_id") in clean_groups
        )
    ]
    return {"found": found, "missed": missed, "unexpected": unexpected}
