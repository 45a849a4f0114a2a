"""Replay one consumer group's records in `__consumer_offsets` (docs/formats.md 6).

Group metadata records give the generations (members, protocol, assignment); offset commits
give the commit timeline, where a transactional commit takes effect only at its producer's
COMMIT marker in the same partition and never after an ABORT (6.8), and a tombstone deletes the
offset (6.7). Regressions of the effective offset are judged against the generation they
happened in: a partition assigned to several members (a broadcast-style assignor) makes them
`offset_overwrite`; elsewhere `offset_regression` (info when the group was empty, a reset by an
operator; warning while members were consuming).
"""

from __future__ import annotations

import json
from typing import Any

from replay.findings import finding


def _owners(members: list[dict] | None) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for m in members or []:
        for tp in m.get("assigned_partitions") or []:
            for p in tp["partitions"] or []:
                out.setdefault((tp["topic"], p), []).append(m["member_id"])
    return out


def replay_group(
    group_id: str, events: list[dict[str, Any]], declared_broadcast: bool = False
) -> dict[str, list[dict]]:
    """events: rows with ``event`` in (metadata, commit, marker) in log order.

    ``declared_broadcast``: the configuration says the group's assignor hands every member
    every partition; its commits are judged as a broadcast group's even where the group
    metadata that would show it is gone (expired, compacted, or outside the dump)."""
    generations: list[dict] = []
    timeline: list[dict] = []
    gen = {"generation": None, "state": "Empty", "broadcast": False, "owners": {}}
    declared = declared_broadcast
    offsets: dict[tuple[str, int], int] = {}
    pending: dict[int, list[dict]] = {}
    for e in events:
        kind = e["event"]
        if kind == "metadata":
            owners = _owners(e["members"])
            shared = {tp: ms for tp, ms in owners.items() if len(ms) > 1}
            gen = {
                "generation": e["generation"],
                "state": "Dead" if e["is_tombstone"] else ("Stable" if e["members"] else "Empty"),
                "broadcast": bool(shared),
                "owners": owners,
            }
            generations.append(
                {
                    "group_id": group_id,
                    "generation": e["generation"],
                    "state": gen["state"],
                    "protocol_type": e["protocol_type"],
                    "protocol": e["protocol"],
                    "leader": e["leader"],
                    "member_count": len(e["members"] or []),
                    "members": [m["member_id"] for m in e["members"] or []],
                    "assignment": json.dumps(
                        {f"{t}-{p}": ms for (t, p), ms in sorted(owners.items())}
                    ),
                    "broadcast": gen["broadcast"],
                    "timestamp": e["record_timestamp"],
                    "log_partition": e["log_partition"],
                    "log_offset": e["log_offset"],
                }
            )
        elif kind == "commit":
            if e["is_transactional"]:
                pending.setdefault(e["producer_id"], []).append(e)
                continue
            _apply(group_id, e, e["record_timestamp"], e["log_offset"], gen, offsets, timeline)
            if declared:
                timeline[-1]["broadcast"] = True
        elif kind == "marker":
            for c in pending.pop(e["producer_id"], []):
                if e["control_type"] == "COMMIT":
                    _apply(
                        group_id, c, e["record_timestamp"], e["log_offset"], gen, offsets, timeline
                    )
                    timeline[-1]["broadcast"] |= declared
    return {
        "generations": generations,
        "timeline": timeline,
        "findings": _judge(group_id, timeline),
    }


def _apply(group_id, c, effective_ts, effective_at, gen, offsets, timeline) -> None:
    tp = (c["topic"], c["partition"])
    previous = offsets.get(tp)
    if c["is_tombstone"]:
        offsets.pop(tp, None)
        new = None
    else:
        new = offsets[tp] = c["committed_offset"]
    timeline.append(
        {
            "group_id": group_id,
            "topic": tp[0],
            "partition": tp[1],
            "committed_offset": new,
            "previous_offset": previous,
            "is_tombstone": bool(c["is_tombstone"]),
            "effective_timestamp": effective_ts,
            "commit_timestamp": c["commit_timestamp"],
            "effective_log_offset": effective_at,
            "commit_log_offset": c["log_offset"],
            "log_partition": c["log_partition"],
            "generation": gen["generation"],
            "group_state": gen["state"],
            "broadcast": gen["broadcast"] and len(gen["owners"].get(tp, [])) > 1,
            "committers": len(gen["owners"].get(tp, [])),
            "is_transactional": bool(c["is_transactional"]),
            "producer_id": c["producer_id"] if c["is_transactional"] else None,
        }
    )


def _judge(group_id: str, timeline: list[dict]) -> list[dict]:
    findings: list[dict] = []
    by_tp: dict[tuple[str, int], list[dict]] = {}
    for row in timeline:
        by_tp.setdefault((row["topic"], row["partition"]), []).append(row)
    for (topic, partition), rows in sorted(by_tp.items()):
        overwrites = []
        run = longest = 1
        for r in rows:
            prev, new = r["previous_offset"], r["committed_offset"]
            regressed = prev is not None and new is not None and new < prev
            if r["broadcast"]:
                run = run + 1 if regressed else 1
                longest = max(longest, run)
                if regressed:
                    overwrites.append(r)
                continue
            if not regressed:
                continue
            stable = r["group_state"] == "Stable"
            findings.append(
                finding(
                    "offset_regression",
                    f"group {group_id!r} moved {topic}-{partition} back from {prev} to {new} "
                    + (
                        "while members were consuming (a rewind)"
                        if stable
                        else "while it was empty (a reset)"
                    ),
                    {
                        "previous_offset": prev,
                        "committed_offset": new,
                        "effective_timestamp": r["effective_timestamp"],
                        "generation": r["generation"],
                        "group_state": r["group_state"],
                        "log_partition": r["log_partition"],
                        "commit_log_offset": r["commit_log_offset"],
                    },  # fmt: skip
                    lowered=not stable,  # an operator's reset, not a rewind
                    group_id=group_id,
                    topic=topic,
                    partition=partition,
                    first_offset=new,
                    last_offset=prev - 1,
                    record_count=prev - new,
                )
            )
        if overwrites:
            reread = sum(r["previous_offset"] - r["committed_offset"] for r in overwrites)
            findings.append(
                finding(
                    "offset_overwrite",
                    f"members of broadcast-style group {group_id!r} overwrote each other's "
                    f"commits on {topic}-{partition}: {len(overwrites)} regressions, "
                    f"{reread} offsets to re-read, at least {longest} concurrent committers",
                    {
                        "regressions": len(overwrites),
                        "offsets_reread": reread,
                        "concurrent_committers_lower_bound": longest,
                        "committers_assigned": max(r["committers"] for r in overwrites),
                        "generations": sorted({r["generation"] for r in overwrites}),
                        "examples": [
                            {
                                k: r[k]
                                for k in (
                                    "previous_offset",
                                    "committed_offset",
                                    "effective_timestamp",
                                    "commit_log_offset",
                                )
                            }
                            for r in overwrites[:5]
                        ],
                    },  # fmt: skip
                    group_id=group_id,
                    topic=topic,
                    partition=partition,
                    first_offset=min(r["committed_offset"] for r in overwrites),
                    last_offset=max(r["previous_offset"] for r in overwrites) - 1,
                    record_count=reread,
                )
            )
    return findings
