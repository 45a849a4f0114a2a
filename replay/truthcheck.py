"""Compare an audit's findings with a simulated dump's truth.json (tests, demo, benchmarks).

Strict on purpose: an anomaly is found only by a finding of its kind and severity at its place
(topic, partition, producer, group) with its offsets and record count, wherever truth gives
them; and every finding of severity warning or above, anywhere in the dump, must be explained
by an anomaly (not only in the areas truth declares clean).
"""

from __future__ import annotations

from replay.findings import at_least

MATCH_KEYS = (
    "kind",
    "severity",
    "topic",
    "partition",
    "producer_id",
    "group_id",
    "first_offset",
    "last_offset",
    "record_count",
)


def matches(anomaly: dict, f: dict) -> bool:
    return all(anomaly.get(k) is None or anomaly[k] == f.get(k) for k in MATCH_KEYS)


def compare(truth: dict, findings: list[dict]) -> dict:
    """found / missed anomalies, and unexpected findings of severity warning or above."""
    found, missed = [], []
    for a in truth["anomalies"]:
        (found if any(matches(a, f) for f in findings) else missed).append(a)
    unexpected = [
        f
        for f in findings
        if at_least(f["severity"], "warning") and not any(matches(a, f) for a in truth["anomalies"])
    ]
    return {"found": found, "missed": missed, "unexpected": unexpected}
