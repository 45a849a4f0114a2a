"""Aborted-read leakage in one partition: which groups' committed offsets passed over records
of aborted (or still open) transactions, and which of them provably read uncommitted.

docs/formats.md 10.7: a read_committed consumer is bounded by the LSO, so a commit beyond the
first offset of a transaction that was still open at commit time proves the group read
uncommitted; so does a declared isolation level. The commit is stamped by the group
coordinator's clock and the marker by the partition leader's: the commit must precede the
marker (or, with no marker in the copy, the end of the partition's copy) by more than the clock
tolerance (docs/cross-log.md).
A group that passed aborted records without such proof is only exposed (info).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replay.findings import finding

# the outcomes of transactions whose records a read_committed consumer never returns
NOT_COMMITTED = ("ABORT", "OPEN")


def judge_partition(
    topic: str,
    partition: int,
    transactions: list[dict[str, Any]],
    commits: list[dict[str, Any]],
    declared: dict[str, str],
    skew_ms: int,
) -> list[dict]:
    """transactions: this partition's rows (COMMIT, ABORT, OPEN); commits: effective commit
    timeline rows of every group on this partition; declared: group -> isolation level."""
    bad = [t for t in transactions if t["outcome"] in NOT_COMMITTED]
    if not bad or not commits:
        return []
    by_group: dict[str, list[dict]] = {}
    for c in commits:
        if c["committed_offset"] is not None:
            by_group.setdefault(c["group_id"], []).append(c)
    out = []
    for group, cs in sorted(by_group.items()):
        top = max(c["committed_offset"] for c in cs)
        passed = [t for t in bad if t["first_offset"] < top]
        if not passed:
            continue
        proof = _proof(transactions, cs, skew_ms)
        isolation = declared.get(group)
        if isolation == "read_committed":
            continue  # declared read_committed: it skipped them
        out.append(_group_finding(topic, partition, group, cs, top, passed, proof, isolation))
    return out


# The fields of a passed-over transaction the finding's evidence shows.
_EVIDENCE_FIELDS = (
    "producer_id", "producer_epoch", "first_offset", "last_offset", "marker_offset", "outcome",
    "record_count", "marker_timestamp",
)  # fmt: skip


def _group_finding(
    topic: str, partition: int, group: str, cs: list[dict], top: int, passed: list[dict],
    proof: dict | None, isolation: str | None,
) -> dict:  # fmt: skip
    """The finding of a group whose commits (``cs``, up to ``top``) passed over aborted or open
    transactions: a leak when proved (a commit past the LSO, or read_uncommitted declared),
    else only an exposure, since a read_committed consumer would have skipped them."""
    leaked = sum(t["record_count"] for t in passed)
    producers = sorted({t["producer_id"] for t in passed})
    where = {
        "topic": topic,
        "partition": partition,
        "group_id": group,
        "producer_id": producers[0],
        "first_offset": min(t["first_offset"] for t in passed),
        "last_offset": max(t["last_offset"] for t in passed),
        "record_count": leaked,
    }
    evidence = {
        "max_committed_offset": top,
        "transactions": [{k: t[k] for k in _EVIDENCE_FIELDS} for t in passed[:20]],
        "producers": producers,
        "declared_isolation": isolation,
        "commit_producer_ids": sorted(
            {c["producer_id"] for c in cs if c["producer_id"] is not None}
        ),
    }
    if proof is None and isolation != "read_uncommitted":
        return finding(
            "aborted_read_exposure",
            f"group {group!r} committed past {leaked} records of aborted or open "
            f"transactions in {topic}-{partition}; they leaked if it read uncommitted",
            evidence,
            **where,
        )
    evidence["proof"] = proof or {"declared": "read_uncommitted"}
    return finding(
        "aborted_read_leak",
        f"group {group!r} read uncommitted and consumed {leaked} records of aborted or "
        f"open transactions in {topic}-{partition}",
        evidence,
        **where,
    )


def _proof(transactions: list[dict], commits: list[dict], skew_ms: int) -> dict | None:
    """A commit beyond a transaction's first offset, made before its marker: past the LSO.
    The first such commit in time, with the first such transaction in the partition's order.
    Which commits have one is found over arrays (the latest "marker less tolerance" among the
    transactions starting below each offset), not by comparing every commit with every
    transaction: a partition holds millions of both over a long history."""
    bounds = []  # (first offset, marker timestamp less the tolerance) of each transaction
    for t in transactions:
        marker_ts = _marker_or_copy_end(t)
        if marker_ts is not None:
            bounds.append((t["first_offset"], marker_ts - skew_ms))
    if not bounds:
        return None
    bounds.sort()
    firsts = np.array([b[0] for b in bounds], np.int64)
    latest = np.maximum.accumulate(np.array([b[1] for b in bounds], np.int64))
    for c in sorted(commits, key=lambda c: c["effective_timestamp"]):
        below = int(np.searchsorted(firsts, c["committed_offset"], side="left"))
        if not below or latest[below - 1] <= c["effective_timestamp"]:
            continue
        for t in transactions:
            marker_ts = _marker_or_copy_end(t)
            if (
                marker_ts is not None
                and c["committed_offset"] > t["first_offset"]
                and c["effective_timestamp"] < marker_ts - skew_ms
            ):
                return {
                    "commit_offset": c["committed_offset"],
                    "commit_timestamp": c["effective_timestamp"],
                    "commit_log_offset": c["effective_log_offset"],
                    "open_transaction_first_offset": t["first_offset"],
                    "open_transaction_producer_id": t["producer_id"],
                    "marker_timestamp": t["marker_timestamp"],
                }
    return None


def _marker_or_copy_end(t: dict) -> int | None:
    """When the transaction stopped being open: its marker, or with no marker in this copy the
    copy's end (if one comes, it comes after); None: unknown."""
    marker_ts = t["marker_timestamp"]
    return t.get("copy_end_timestamp") if marker_ts is None else marker_ts
