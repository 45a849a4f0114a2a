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
from collections.abc import Callable, Iterable
from typing import Any

from replay.findings import finding

BLOCK_ROWS = 65_536  # commit-timeline rows a group's replay hands on at a time


def _owners(members: list[dict] | None) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for m in members or []:
        for tp in m.get("assigned_partitions") or []:
            for p in tp["partitions"] or []:
                out.setdefault((tp["topic"], p), []).append(m["member_id"])
    return out


def replay_group(
    group_id: str, events: Iterable[dict[str, Any]], declared_broadcast: bool = False
) -> dict[str, list[dict]]:
    """events: rows with ``event`` in (metadata, commit, marker) in log order.

    ``declared_broadcast``: the configuration says the group's assignor hands every member
    every partition; its commits are judged as a broadcast group's even where the group
    metadata that would show it is gone (expired, compacted, or outside the dump)."""
    timeline: list[dict] = []
    g = GroupReplay(group_id, declared_broadcast, timeline.extend)
    for e in events:
        g.event(e)
    findings = g.finish()
    return {"generations": g.generations, "timeline": timeline, "findings": findings}


class GroupReplay:
    """One group's replay, fed its events one at a time in log order (:func:`replay_group`
    over a list). Its commit timeline leaves in blocks of :data:`BLOCK_ROWS` rows through
    ``emit`` and is judged as it goes (:class:`_Judge`), so a group with a long history (an
    exactly-once app commits its offsets with every transaction: millions of commits) is
    never held as Python rows whole."""

    def __init__(
        self,
        group_id: str,
        declared_broadcast: bool = False,
        emit: Callable[[list[dict]], None] | None = None,
    ) -> None:
        self.group_id, self.declared = group_id, declared_broadcast
        self.emit = emit or (lambda rows: None)
        self.generations: list[dict] = []
        self.block: list[dict] = []
        self.judge = _Judge(group_id)
        self.gen = {"generation": None, "state": "Empty", "broadcast": False, "owners": {}}
        self.offsets: dict[tuple[str, int], int] = {}
        self.pending: dict[int, list[dict]] = {}

    def event(self, e: dict[str, Any]) -> None:
        kind = e["event"]
        if kind == "metadata":
            owners = _owners(e["members"])
            shared = {tp: ms for tp, ms in owners.items() if len(ms) > 1}
            self.gen = gen = {
                "generation": e["generation"],
                "state": "Dead" if e["is_tombstone"] else ("Stable" if e["members"] else "Empty"),
                "broadcast": bool(shared),
                "owners": owners,
            }
            self.generations.append(
                {
                    "group_id": self.group_id,
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
                self.pending.setdefault(e["producer_id"], []).append(e)
                return
            row = _apply(
                self.group_id, e, e["record_timestamp"], e["log_offset"], self.gen, self.offsets
            )
            if self.declared:
                row["broadcast"] = True
            self._timeline(row)
        elif kind == "marker":
            for c in self.pending.pop(e["producer_id"], []):
                if e["control_type"] == "COMMIT":
                    row = _apply(
                        self.group_id, c, e["record_timestamp"], e["log_offset"], self.gen,
                        self.offsets,
                    )  # fmt: skip
                    row["broadcast"] |= self.declared
                    self._timeline(row)

    def _timeline(self, row: dict) -> None:
        self.judge.row(row)
        self.block.append(row)
        if len(self.block) >= BLOCK_ROWS:
            self.emit(self.block)
            self.block = []

    def finish(self) -> list[dict]:
        """The last timeline rows out; the group's findings."""
        if self.block:
            self.emit(self.block)
            self.block = []
        return self.judge.findings()


def _apply(group_id, c, effective_ts, effective_at, gen, offsets) -> dict:
    """The commit ``c`` takes effect: the offset it sets (a tombstone deletes it), as a row of
    the commit timeline."""
    tp = (c["topic"], c["partition"])
    previous = offsets.get(tp)
    if c["is_tombstone"]:
        offsets.pop(tp, None)
        new = None
    else:
        new = offsets[tp] = c["committed_offset"]
    return {
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


class _Tp:
    """What judging one partition's commit timeline keeps: its offset regressions (findings),
    and of the regressions in broadcast generations only the figures the overwrite finding
    gives."""

    def __init__(self) -> None:
        self.run = self.longest = 1
        self.regressions: list[dict] = []
        self.overwrites = 0
        self.reread = 0
        self.committers = 0
        self.generations: set = set()
        self.examples: list[dict] = []
        self.lowest = self.highest = None


class _Judge:
    """The commit timeline's findings, judged row by row in log order (per partition: runs of
    regressions in broadcast generations, each regression elsewhere)."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.tps: dict[tuple[str, int], _Tp] = {}

    def row(self, r: dict) -> None:
        topic, partition = tp = (r["topic"], r["partition"])
        st = self.tps.get(tp)
        if st is None:
            st = self.tps[tp] = _Tp()
        prev, new = r["previous_offset"], r["committed_offset"]
        regressed = prev is not None and new is not None and new < prev
        if r["broadcast"]:
            st.run = st.run + 1 if regressed else 1
            st.longest = max(st.longest, st.run)
            if regressed:
                st.overwrites += 1
                st.reread += prev - new
                st.committers = max(st.committers, r["committers"])
                st.generations.add(r["generation"])
                if len(st.examples) < 5:
                    st.examples.append({k: r[k] for k in (
                        "previous_offset", "committed_offset", "effective_timestamp",
                        "commit_log_offset")})  # fmt: skip
                st.lowest = new if st.lowest is None else min(st.lowest, new)
                st.highest = prev if st.highest is None else max(st.highest, prev)
            return
        if not regressed:
            return
        group_id = self.group_id
        stable = r["group_state"] == "Stable"
        st.regressions.append(
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

    def findings(self) -> list[dict]:
        findings: list[dict] = []
        for (topic, partition), st in sorted(self.tps.items()):
            findings += st.regressions
            if not st.overwrites:
                continue
            findings.append(
                finding(
                    "offset_overwrite",
                    f"members of broadcast-style group {self.group_id!r} overwrote each other's "
                    f"commits on {topic}-{partition}: {st.overwrites} regressions, "
                    f"{st.reread} offsets to re-read, at least {st.longest} concurrent committers",
                    {
                        "regressions": st.overwrites,
                        "offsets_reread": st.reread,
                        "concurrent_committers_lower_bound": st.longest,
                        "committers_assigned": st.committers,
                        "generations": sorted(st.generations),
                        "examples": st.examples,
                    },  # fmt: skip
                    group_id=self.group_id,
                    topic=topic,
                    partition=partition,
                    first_offset=st.lowest,
                    last_offset=st.highest - 1,
                    record_count=st.reread,
                )
            )
        return findings
