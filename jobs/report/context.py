"""The context of one finding, read from the audit's tables as a window around it.

Each reader fetches one partition's (or one group's) rows, filtered by pyarrow at the scan,
and keeps a bounded window around the finding's offsets: a plot of a partition with a million
transactions shows the few hundred nearest the finding.
"""

from __future__ import annotations

import functools
import json

import pyarrow.compute as pc

from jobs.report import figures
from jobs.report.source import AuditOutput, millis_rows

WINDOW = 300  # rows kept on each side of a finding


def _near(rows: list[dict], key: str, centre: int | None) -> list[dict]:
    """At most 2 * WINDOW rows around ``centre`` (rows sorted by ``key``)."""
    if len(rows) <= 2 * WINDOW or centre is None:
        return rows[: 2 * WINDOW] if centre is None else rows
    at = next((i for i, r in enumerate(rows) if (r[key] or 0) >= centre), len(rows))
    lo = max(0, at - WINDOW)
    return rows[lo : lo + 2 * WINDOW]


def _partition(f: dict):
    where = (pc.field("topic") == f["topic"]) & (pc.field("partition") == f["partition"])
    if f.get("cluster") is not None:
        where = where & (pc.field("cluster") == f["cluster"])
    return where


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


def transaction_context(src: AuditOutput, f: dict) -> figures.Figure | None:
    if f.get("topic") is None or f.get("partition") is None:
        return None
    where = _partition(f)
    cols = ["producer_id", "producer_epoch", "first_offset", "last_offset", "marker_offset",
            "outcome", "record_count", "first_timestamp", "marker_timestamp"]  # fmt: skip
    txns = sorted(millis_rows(src.read("transactions", cols, where)),
                  key=lambda r: r["first_offset"])  # fmt: skip
    txns = _near(txns, "first_offset", f.get("first_offset"))
    lso = sorted(
        millis_rows(src.read("lso_changes", ["timestamp", "log_end_offset", "lso"], where)),
        key=lambda r: r["log_end_offset"],
    )
    lso = _near(lso, "log_end_offset", f.get("first_offset"))
    ends = millis_rows(src.read("partitions", ["last_timestamp"], where))
    end = max((r["last_timestamp"] for r in ends if r["last_timestamp"] is not None), default=None)
    if not txns and not lso:
        return None
    return figures.transaction_timeline(txns, lso, end, f, f"{f['topic']}-{f['partition']}")


def _commits(src: AuditOutput, f: dict) -> list[dict]:
    where = _partition(f) & (pc.field("group_id") == f["group_id"])
    cols = ["committed_offset", "effective_log_offset", "commit_log_offset", "log_partition",
            "generation", "effective_timestamp", "is_tombstone"]  # fmt: skip
    rows = [r for r in millis_rows(src.read("offset_timeline", cols, where))
            if r["effective_log_offset"] is not None]  # fmt: skip
    return sorted(rows, key=lambda r: r["effective_log_offset"])


def read_context(src: AuditOutput, f: dict, ev: dict) -> figures.Figure | None:
    if None in (f.get("topic"), f.get("partition"), f.get("group_id")):
        return None
    commits = _commits(src, f)
    if not commits:
        return None
    commits = commits[-2 * WINDOW :] if len(commits) > 2 * WINDOW else commits
    lo = min(c["committed_offset"] for c in commits if c["committed_offset"] is not None)
    hi = max(c["committed_offset"] for c in commits if c["committed_offset"] is not None)
    where = _partition(f) & (pc.field("outcome") != "COMMIT") & (pc.field("first_offset") <= hi)
    cols = ["first_offset", "last_offset", "marker_offset", "outcome"]
    txns = [t for t in src.rows("transactions", cols, where)
            if (t["marker_offset"] or t["last_offset"]) >= lo - 1][: 4 * WINDOW]  # fmt: skip
    return figures.commits_against_transactions(
        commits, txns, sorted(_log_offsets(ev)), f["group_id"], f"{f['topic']}-{f['partition']}"
    )


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


def commit_context(src: AuditOutput, f: dict, ev: dict) -> figures.Figure | None:
    if None in (f.get("topic"), f.get("partition"), f.get("group_id")):
        return None
    commits = _commits(src, f)
    if not commits:
        return None
    marks = sorted(_log_offsets(ev))
    centre = min(marks) if marks else None
    commits = _near(commits, "effective_log_offset", centre)
    lo, hi = commits[0]["effective_log_offset"], commits[-1]["effective_log_offset"]
    log_partitions = {c["log_partition"] for c in commits}
    where = (pc.field("group_id") == f["group_id"]) & pc.field("log_partition").isin(
        list(log_partitions)
    )
    cols = ["generation", "state", "assignment", "log_offset"]
    gens = [
        {**g, "owners": _owners(g["assignment"], f["topic"], f["partition"])}
        for g in src.rows("group_generations", cols, where)
        if g["log_offset"] is not None and lo - 1000 <= g["log_offset"] <= hi
    ]
    gens.sort(key=lambda g: g["log_offset"])
    return figures.commits_and_generations(
        commits, gens, marks, f["group_id"], f"{f['topic']}-{f['partition']}"
    )


@functools.lru_cache(maxsize=8)
def _batches(path: str):
    """Batch headers of one segment file (several findings often share it)."""
    import decoders

    cols = ["producer_id", "producer_epoch", "base_offset", "last_offset", "base_sequence",
            "last_sequence"]  # fmt: skip
    try:
        return decoders.read_dump([path], tables=["batches"])["batches"].select(cols)
    except Exception:
        return None


def sequence_context(f: dict, ev: dict, roots: list[str]) -> figures.Figure | None:
    """The producer's batches in the segment file the finding names, decoded from the dump
    (batch headers only; the audit's tables keep no per-batch sequences)."""
    rel = ev.get("file")
    if not isinstance(rel, str) or f.get("producer_id") is None:
        return None
    path = rel if rel.startswith("/") or "://" in rel or not roots else f"{roots[0]}/{rel}"
    t = _batches(path)
    if t is None:  # the dump moved or is unreadable: the card keeps its evidence
        return None
    t = t.filter(pc.field("producer_id") == f["producer_id"])
    cols = ["base_offset", "last_offset", "base_sequence", "last_sequence", "producer_epoch"]
    rows = sorted(t.select(cols).to_pylist(), key=lambda r: r["base_offset"])
    rows = _near(rows, "base_offset", f.get("first_offset"))
    if not rows:
        return None
    return figures.sequences(rows, f, f["producer_id"], f"{f['topic']}-{f['partition']}")
