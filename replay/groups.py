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

import pyarrow as pa

from replay.findings import finding
from replay.group_blocks import apply_block
from replay.tables import emit_rows, slices_apart


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
    out: dict[str, list[dict]] = {"generation": [], "timeline": [], "finding": []}
    g = GroupReplay(group_id, declared_broadcast, lambda kind, row: out[kind].append(row))
    for e in events:
        g.event(e)
    g.finish()
    return {"generations": out["generation"], "timeline": out["timeline"],
            "findings": out["finding"]}  # fmt: skip


class GroupReplay:
    """One group's replay, fed its events one at a time in log order. Its rows leave through
    ``emit(kind, row)`` as they come (kind ``generation``, ``timeline`` or ``finding``) and
    its commit timeline is judged as it goes (:class:`_Judge`), so a group with a long history
    (an exactly-once app commits its offsets with every transaction: millions of commits) is
    never held: what it keeps is the group's current offsets and generation, and the
    transactional commits waiting for their producer's marker."""

    def __init__(
        self,
        group_id: str,
        declared_broadcast: bool = False,
        emit: Callable[[str, dict], None] | None = None,
    ) -> None:
        self.group_id, self.declared = group_id, declared_broadcast
        self.emit = emit or (lambda kind, row: None)
        self.judge = _Judge(group_id, self.emit)
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
            self.emit(
                "generation",
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
                },
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
        self.emit("timeline", row)

    def finish(self) -> None:
        """The findings that need the group's whole timeline (broadcast overwrites)."""
        self.judge.finish()


class GroupsReplay:
    """Every group of one `__consumer_offsets` partition, fed the partition's events in log
    order (commits, group metadata, and the partition's COMMIT/ABORT markers, ``group_id``
    null), as GroupMetadataManager.loadGroupsAndOffsets loads a partition: a marker completes
    the transactional offset commits its producer left pending in any group of the partition
    (docs/formats.md 6.8). ``broadcast``: the groups declared broadcast-style. What it keeps is
    every group's current state, never a group's history (:class:`GroupReplay`)."""

    # blocks of commits and markers applied over columns where no group metadata or
    # regression is in them (replay.group_blocks); off, every event goes through event()
    # (the tests compare both)
    fast = True

    def __init__(
        self,
        broadcast: frozenset[str] | set[str],
        emit: Callable[[str, dict], None],
        emit_table: Callable[[str, pa.Table], None] | None = None,
    ):
        self.broadcast, self.emit, self.emit_table = broadcast, emit, emit_table
        self.groups: dict[str, GroupReplay] = {}
        self.waiting: dict[int, set[str]] = {}  # producer id -> groups with pending commits

    def block(self, block: pa.RecordBatch) -> None:
        """The next events of the partition, in log order: at once where they allow it
        (:func:`replay.group_blocks.apply_block`), else again a slice at a time
        (:func:`replay.tables.slices_apart`), one by one where a slice does not allow it."""
        if (self.fast and apply_block(self, block)) or slices_apart(block, self.block):
            return
        for r in block.to_pylist():
            if r.get("members") is not None:  # a member's id and assignment is all it reads
                r["members"] = [{"member_id": m["member_id"],
                                 "assigned_partitions": m["assigned_partitions"]}
                                for m in r["members"]]  # fmt: skip
            self.event(r)

    def emit_rows(self, kind: str, table: pa.Table) -> None:
        """Rows of one kind as a table: through ``emit_table`` at once, else row by row."""
        emit_rows(self.emit, self.emit_table, kind, table)

    def new_group(self, group: str) -> GroupReplay:
        """A group's replay, at its first event."""
        return GroupReplay(group, group in self.broadcast, self.emit)

    def event(self, e: dict[str, Any]) -> None:
        if e["event"] == "marker":
            for group in sorted(self.waiting.pop(e["producer_id"], ())):
                self.groups[group].event(e)
            return
        group = e["group_id"]
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = self.new_group(group)
        if e["event"] == "commit" and e["is_transactional"]:
            self.waiting.setdefault(e["producer_id"], set()).add(group)
        g.event(e)

    def finish(self) -> None:
        for group in sorted(self.groups):
            self.groups[group].finish()


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
    """What judging one partition's commit timeline keeps: of the regressions in broadcast
    generations, only the figures the overwrite finding gives (the others are findings at once)."""

    def __init__(self) -> None:
        self.run = self.longest = 1
        self.overwrites = 0
        self.reread = 0
        self.committers = 0
        self.generations: set = set()
        self.examples: list[dict] = []
        self.lowest = self.highest = None


class _Judge:
    """The commit timeline's findings, judged row by row in log order: each regression outside
    broadcast generations at once, the runs of regressions in broadcast generations per
    partition at :meth:`finish`."""

    def __init__(self, group_id: str, emit: Callable[[str, dict], None]) -> None:
        self.group_id, self.emit = group_id, emit
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
        self.emit(
            "finding",
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
            ),
        )

    def finish(self) -> None:
        """The overwrites of each partition's commits in broadcast generations, one finding a
        partition (its figures need the whole timeline)."""
        for (topic, partition), st in sorted(self.tps.items()):
            if not st.overwrites:
                continue
            self.emit(
                "finding",
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
                        # a declared broadcast group's commits before any generation the
                        # dump shows have none: listed first
                        "generations": sorted(st.generations, key=lambda g: (g is not None, g)),
                        "examples": st.examples,
                    },  # fmt: skip
                    group_id=self.group_id,
                    topic=topic,
                    partition=partition,
                    first_offset=st.lowest,
                    last_offset=st.highest - 1,
                    record_count=st.reread,
                ),
            )
