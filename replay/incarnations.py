"""Which incarnation of a re-created topic a group's commit is about.

`__consumer_offsets` names partitions by topic name. Where the dump holds several incarnations
of one name in one cluster (decoders.brokers labels the others `<topic>~<id>`), a commit is
about the incarnation whose time it falls in: between its first batch and the end of its copy,
widened by the clock tolerance (the commit is stamped by the group coordinator's clock, the
batches by clients' or the leader's: timestamps only as bounds, docs/cross-log.md). A commit
that fits one incarnation is judged with it (the aborted-read checks, replay.leakage); one that
fits none or several is left out, counted as not judged. Deletion also removes a partition's
committed offsets (GroupMetadataManager.cleanupGroupMetadata writes tombstones), so the commits
of one era never carry over to the next.
"""

from __future__ import annotations

from collections import defaultdict

from decoders.brokers import unlabelled as base_name
from replay import coverage as C
from replay.tables import CLUSTER

Window = tuple[str, int | None, int | None]  # topic label, from, to (ms; None: unbounded)


def commit_windows(partitions: list[dict], tolerance_ms: int) -> dict[tuple, list[Window]]:
    """(cluster, topic name, partition) -> each incarnation's label and time window, for the
    names the dump holds several incarnations of (the `partitions` table's rows)."""
    by: dict[tuple, list[dict]] = defaultdict(list)
    for p in partitions:
        by[(p[CLUSTER], base_name(p["topic"]), p["partition"])].append(p)
    out = {}
    for key, ps in by.items():
        if len(ps) > 1:
            out[key] = [
                (p["topic"],
                 None if p["first_timestamp"] is None else p["first_timestamp"] - tolerance_ms,
                 None if p["copy_end_timestamp"] is None else p["copy_end_timestamp"] + tolerance_ms)
                for p in ps
            ]  # fmt: skip
    return out


def fits(ts: int | None, lo: int | None, hi: int | None) -> bool:
    if ts is None:
        return lo is None and hi is None
    return (lo is None or ts >= lo) and (hi is None or ts <= hi)


def routed_commits(
    commits: list[dict], windows: dict[tuple, list[Window]]
) -> tuple[list[dict], list[dict]]:
    """The commits (offset_timeline rows) with the topic of the incarnation each fits, those
    fitting none or several left out; and the counts (the coverage's "commits" family)."""
    kept = []
    counts: dict[tuple, int] = defaultdict(int)
    for c in commits:
        options = windows.get((c[CLUSTER], c["topic"], c["partition"]))
        if options is None:
            kept.append(c)
            continue
        fit = [label for label, lo, hi in options if fits(c["effective_timestamp"], lo, hi)]
        if len(fit) == 1:
            kept.append({**c, "topic": fit[0]})
        check = C.COMMITS_ROUTED if len(fit) == 1 else C.COMMITS_UNDECIDED
        counts[(c[CLUSTER], c["topic"], c["partition"], check)] += 1
    rows = [{CLUSTER: k[0], "topic": k[1], "partition": k[2], "check": k[3], "count": n}
            for k, n in sorted(counts.items())]  # fmt: skip
    return kept, rows
