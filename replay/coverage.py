"""What the audit could judge, and what it could not and why: the `coverage` table.

Every check family counts what it looked at in its own unit, judged or not judged with a
reason; nothing is skipped in silence (docs/layouts.md "Coverage"). The replays and the
cross-log judge emit counts (the `checks` rows: cluster, topic, partition, check, count); each
check's wording maps here to its family, whether it was judged, the reason and the unit. The
summary shows the share judged per family and its largest reasons; ``gate.min_coverage``
fails a pipeline whose audit could not look.
"""

from __future__ import annotations

from dataclasses import dataclass

# The check families, in the order the summary shows them.
FAMILIES = (
    "sequences",
    "transactions",
    "hanging",
    "leakage",
    "replicas",
    "indexes",
    "snapshots",
    "incarnations",
    "commits",
)


@dataclass(frozen=True)
class Counted:
    """What one check's count means: its family, judged or not (and why), in what unit."""

    family: str
    judged: bool
    reason: str  # "" when judged
    unit: str


# check wording (replay.grouped, replay.crosslog_stream, replay.plan) -> its meaning
SEQUENCES_JUDGED = "producer batches replayed against their producer's state"
SEQUENCES_CLEANED = "producer batches in the cleaned range (gaps bounded by the offsets removed)"
TXNS_JUDGED = "partition transactions judged against the coordinator"
TXNS_GONE_CLEANED = (
    "coordinator transactions whose data and markers the cleaner removed from the partition"
)
MARKERS_WITHOUT_DATA = "markers without data inside a cleaned range (their records removed)"
MARKERS_HORIZON = "markers with a delete horizon (a later cleaner pass removes them)"
TXNS_JUDGED_CLEANED = "partition transactions judged inside a cleaned range (what the cleaner left)"
TXNS_UNDECIDED = "partition transactions order could not decide"
TXNS_UNJUDGED = "partition transactions without coordinator history"
TXNS_OVER_BUDGET = "partition transactions beyond the alignment's budget"
HANGING_JUDGED = "open transactions judged against their timeout"
HANGING_NO_END = "open transactions the copy ends too early to judge"
LEAKAGE_JUDGED = "aborted or open transactions checked against their partition's group commits"
LEAKAGE_NO_COMMITS = "aborted or open transactions of partitions no group committed on"
REPLICAS_COMPARED = "replicas compared with another of their partition"
REPLICAS_ALONE = "replicas alone in the dump (nothing to compare with)"
TXNINDEX_JUDGED = "aborted transactions checked against a .txnindex"
TXNINDEX_ABSENT = "aborted transactions in segments without a .txnindex"
SNAPSHOTS_BEYOND = "snapshots beyond the end of the log (not compared)"
SNAPSHOTS_JUDGED = "snapshots compared with the replayed state"
SNAPSHOTS_CLEANED = "snapshots inside the cleaned range (not compared)"
INCARNATION_LIVE = "partition directories of a topic's live incarnation"
INCARNATION_STALE = "partition directories of a topic's other incarnation (audited apart)"
INCARNATION_UNDECIDED = "partition directories whose incarnation the dump cannot tell"
COMMITS_ROUTED = "group commits of a re-created topic routed to one incarnation"
COMMITS_UNDECIDED = "group commits of a re-created topic fitting no incarnation, or several"

CHECKS: dict[str, Counted] = {
    SEQUENCES_JUDGED: Counted("sequences", True, "", "batches"),
    # weakened, not skipped: a gap is judged against the offsets the cleaner removed
    SEQUENCES_CLEANED: Counted(
        "sequences", True, "cleaned range: gaps bounded by offsets", "batches"
    ),
    TXNS_JUDGED: Counted("transactions", True, "", "transactions"),
    # weakened: removed data and markers are assumed, never taken as missing
    TXNS_JUDGED_CLEANED: Counted(
        "transactions", True, "cleaned range: removed data and markers assumed", "transactions"
    ),
    # the cleaner's own leftovers (docs/compaction.md): normal, counted, never a finding
    TXNS_GONE_CLEANED: Counted(
        "transactions", True, "cleaned range: data and markers gone", "transactions"
    ),
    MARKERS_WITHOUT_DATA: Counted(
        "transactions", True, "cleaned range: marker without data", "transactions"
    ),
    MARKERS_HORIZON: Counted(
        "transactions", True, "cleaned range: marker pending removal", "transactions"
    ),
    TXNS_UNDECIDED: Counted("transactions", False, "order could not decide", "transactions"),
    TXNS_UNJUDGED: Counted("transactions", False, "no coordinator history", "transactions"),
    TXNS_OVER_BUDGET: Counted("transactions", False, "alignment beyond its budget", "transactions"),
    HANGING_JUDGED: Counted("hanging", True, "", "transactions"),
    HANGING_NO_END: Counted("hanging", False, "copy ends early", "transactions"),
    LEAKAGE_JUDGED: Counted("leakage", True, "", "transactions"),
    LEAKAGE_NO_COMMITS: Counted("leakage", False, "no group commits", "transactions"),
    REPLICAS_COMPARED: Counted("replicas", True, "", "replicas"),
    REPLICAS_ALONE: Counted("replicas", False, "replica alone", "replicas"),
    TXNINDEX_JUDGED: Counted("indexes", True, "", "transactions"),
    TXNINDEX_ABSENT: Counted("indexes", False, "file absent", "transactions"),
    SNAPSHOTS_JUDGED: Counted("snapshots", True, "", "snapshots"),
    SNAPSHOTS_BEYOND: Counted("snapshots", False, "copy ends early", "snapshots"),
    SNAPSHOTS_CLEANED: Counted("snapshots", False, "cleaned", "snapshots"),
    INCARNATION_LIVE: Counted("incarnations", True, "", "partition directories"),
    INCARNATION_STALE: Counted("incarnations", True, "", "partition directories"),
    INCARNATION_UNDECIDED: Counted(
        "incarnations", False, "incarnation undecided", "partition directories"
    ),
    COMMITS_ROUTED: Counted("commits", True, "", "commits"),
    COMMITS_UNDECIDED: Counted("commits", False, "incarnation undecided", "commits"),
}


def replica_counts(replicas) -> list[dict]:
    """The "replicas" family from the replicas the scan replayed (objects with cluster, topic,
    partition and broker): a partition held by two brokers or more (a -future copy counts)
    has each replica compared; one held once has nothing to compare with."""
    held: dict[tuple, int] = {}
    for r in replicas:
        key = (r.cluster, r.topic, r.partition)
        held[key] = held.get(key, 0) + 1
    return [
        {"cluster": c, "topic": t, "partition": p, "count": n,
         "check": REPLICAS_COMPARED if n > 1 else REPLICAS_ALONE}
        for (c, t, p), n in sorted(held.items())
    ]  # fmt: skip


def partition_bytes(replicas) -> dict[tuple[str, str, int], int]:
    """(cluster, topic, partition) -> its largest replica's segment bytes, from the replicas
    the scan replayed (their reports: no pass over the segments table)."""
    out: dict[tuple[str, str, int], int] = {}
    for r in replicas:
        key = (r.cluster, r.topic, r.partition)
        out[key] = max(out.get(key, 0), r.log_bytes)
    return out


def leakage_counts(exposed: list[dict], committed: set[tuple]) -> list[dict]:
    """The "leakage" family: each partition's aborted or open transactions with data
    (``exposed``: rows with cluster, topic, partition, count) judged against its groups'
    commits, or not where no group committed on it (``committed``: (cluster, topic,
    partition) with a commit)."""
    return [
        {**r, "check": LEAKAGE_JUDGED if (r["cluster"], r["topic"], r["partition"]) in committed
         else LEAKAGE_NO_COMMITS}
        for r in exposed
    ]  # fmt: skip


def counted(check: str) -> Counted:
    """A check's meaning; a wording not listed is a family of its own, judged (so a new
    count is shown, never lost)."""
    return CHECKS.get(check) or Counted("other", True, "", check)


def coverage_rows(checks: list[dict]) -> list[dict]:
    """The coverage rows of a run's check counts (rows with cluster, topic, partition, check,
    count): one per (cluster, family, topic, partition, judged, reason)."""
    out: dict[tuple, dict] = {}
    for r in checks:
        c = counted(r["check"])
        key = (r.get("cluster") or "", c.family, r.get("topic"), r.get("partition"), c.judged, c.reason)  # fmt: skip
        row = out.setdefault(key, {
            "cluster": key[0], "family": c.family, "topic": key[2], "partition": key[3],
            "judged": c.judged, "reason": c.reason or None, "unit": c.unit, "count": 0,
        })  # fmt: skip
        row["count"] += int(r.get("count") or 0)
    kept = [r for r in out.values() if r["count"] > 0]  # a zero count says nothing
    return sorted(kept, key=lambda r: (r["cluster"], FAMILY_ORDER.get(r["family"], 99), str(r["topic"]), r["partition"] or -1, not r["judged"], r["reason"] or ""))  # fmt: skip


FAMILY_ORDER = {f: i for i, f in enumerate(FAMILIES)}


def shares(rows: list[dict]) -> dict[str, dict]:
    """Per family over all clusters: the units seen, the share judged, the reasons not
    (largest first) and those judged by a weaker rule (``weakened``: a cleaned range), what the
    summary, the console and the gate read."""
    fams: dict[str, dict] = {}
    for r in rows:
        f = fams.setdefault(r["family"], {"unit": r["unit"], "seen": 0, "judged": 0, "reasons": {}, "weakened": {}})  # fmt: skip
        n = int(r["count"] or 0)
        f["seen"] += n
        if r["judged"]:
            f["judged"] += n
            if r["reason"]:  # judged by a weaker rule, and why
                f["weakened"][r["reason"]] = f["weakened"].get(r["reason"], 0) + n
        else:
            f["reasons"][r["reason"]] = f["reasons"].get(r["reason"], 0) + n
    for f in fams.values():
        f["share"] = round(f["judged"] / f["seen"], 4) if f["seen"] else None
        f["reasons"] = dict(sorted(f["reasons"].items(), key=lambda kv: -kv[1]))
    return dict(sorted(fams.items(), key=lambda kv: FAMILY_ORDER.get(kv[0], 99)))


def below(shares_: dict[str, dict], required: dict[str, float]) -> list[str]:
    """The gate's words for every family judged less than ``required`` (gate.min_coverage):
    its share, what it counts and its largest reasons. A family with nothing to judge passes."""
    out = []
    for family, need in required.items():
        f = shares_.get(family)
        if not f or f["share"] is None or f["share"] >= need:
            continue
        why = ", ".join(f"{r}: {n} {f['unit']}" for r, n in list(f["reasons"].items())[:3])
        out.append(
            f"coverage of {family} is {f['share']:.0%} ({f['judged']} of {f['seen']} "
            f"{f['unit']} judged), below the required {need:.0%}; not judged: {why}"
        )
    return out
