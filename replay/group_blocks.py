"""A `__consumer_offsets` partition's commits and markers applied a block at a time, over
columns.

:class:`replay.groups.GroupsReplay` is the reference: an event at a time, every group at once
(GroupMetadataManager.loadGroupsAndOffsets, docs/formats.md 6.8). A block without group
metadata records (so every group's generation holds throughout) whose commits never move an
offset back (so no regression is judged) is applied here with the same state, rows and order:
each commit takes effect at its own record, or, a transactional one, at its producer's next
marker in the partition (COMMIT; an ABORT drops it), the commits a marker completes in the
order of their groups' names and then of the log; the offset before each is the one the same
group and partition had last. An exactly-once app commits its offsets with every transaction:
millions of commits and markers, none of which becomes a Python object here. Any other block
goes through the reference replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay import tables as T

if TYPE_CHECKING:
    from replay.groups import GroupsReplay

# the columns of a commit the replay keeps while it waits for its marker (GroupReplay.pending)
PENDING_COLUMNS = (
    "group_id", "log_partition", "log_offset", "record_timestamp", "is_tombstone", "topic",
    "partition", "committed_offset", "commit_timestamp", "is_transactional", "producer_id",
)  # fmt: skip
NEVER = np.iinfo(np.int64).max


def _with_held(replay: GroupsReplay, block: pa.RecordBatch) -> tuple[list, pa.Table]:
    """The commits the replay holds from before (group, producer id, commit), and the block's
    events with them as rows after its own."""
    held = [(g, p, c) for g, group in sorted(replay.groups.items())
            for p, waiting in group.pending.items() for c in waiting]  # fmt: skip
    events = block.select(list(PENDING_COLUMNS))
    if not held:
        return held, pa.Table.from_batches([events])
    carried = pa.Table.from_pylist([{k: c.get(k) for k in PENDING_COLUMNS} for _, _, c in held],
                                   schema=events.schema)  # fmt: skip
    return held, pa.concat_tables([pa.Table.from_batches([events]), carried])


def _markers_applied(rows, n: int, epid, etxn, pid, markers, committed, at):
    """Each transactional commit (of ``rows``, held ones from ``n`` on) takes effect at its
    producer's next marker (held ones: the first), which ``at`` is given; returns whether it
    is dropped (the marker aborts) and whether it still waits after the block's end."""
    drop = np.zeros(len(rows), bool)
    waiting = np.zeros(len(rows), bool)
    for p in np.unique(epid[rows[etxn[rows]]]).tolist():
        mine = np.flatnonzero(etxn[rows] & (epid[rows] == p))
        theirs = markers[pid[markers] == p]
        start = np.where(rows[mine] >= n, -1, rows[mine])
        nxt = np.searchsorted(theirs, start, "right")
        has = nxt < len(theirs)
        waiting[mine[~has]] = True
        where = (
            theirs[np.minimum(nxt, len(theirs) - 1)]
            if len(theirs)
            else np.zeros(len(mine), np.int64)
        )
        at[mine[has]] = where[has]
        drop[mine[has]] = ~committed[where[has]]
    return drop, waiting


def _offsets_before(replay: GroupsReplay, new, new_known, by, firsts, group_codes: tuple,
                    topic_codes: tuple, parts):  # fmt: skip
    """The offset before each applied commit (``by``: their order by group and partition;
    ``firsts``: the first of each): the same group and partition's last, or the one the replay
    holds; and whether it is known. ``group_codes``, ``topic_codes``: (names, each commit's
    code)."""
    (groups, gcode), (topics, tcode) = group_codes, topic_codes
    before = np.empty(len(new), np.int64)
    before_known = np.empty(len(new), bool)
    before[by[1:]] = new[by[:-1]]
    before_known[by[1:]] = new_known[by[:-1]]
    for i in np.flatnonzero(firsts).tolist():
        g = replay.groups.get(groups[gcode[i]])
        held_offset = g.offsets.get((topics[tcode[i]], int(parts[i]))) if g else None
        before[i] = -1 if held_offset is None else held_offset
        before_known[i] = held_offset is not None
    return before, before_known


def _still_waiting(replay: GroupsReplay, events: pa.Table, held: list, still, n: int,
                   groups: list, gcode, epid) -> None:  # fmt: skip
    """The commits that still wait for their producer's marker after the block (``still``:
    their rows, held ones from ``n`` on, in the order they wait in) become the replay's."""
    for g in replay.groups.values():
        g.pending.clear()
    replay.waiting.clear()
    if not len(still):
        return
    block_rows = still[still < n]
    fresh = iter(events.take(pa.array(block_rows)).to_pylist()) if len(block_rows) else iter(())
    for r in still.tolist():
        c = held[r - n][2] if r >= n else next(fresh)
        name = groups[gcode[r]]
        _group(replay, name).pending.setdefault(int(epid[r]), []).append(c)
        replay.waiting.setdefault(int(epid[r]), set()).add(name)


def apply_block(replay: GroupsReplay, block: pa.RecordBatch) -> bool:
    """Apply ``block`` (events in log order) as :meth:`GroupsReplay.event` would one by one;
    False, changing nothing, where it holds group metadata or a commit moves an offset back."""
    kinds, kind = T.value_codes(block.column("event"))
    if "metadata" in kinds:
        return False
    block = _complete(block)
    n = block.num_rows
    names = np.array(kinds + [None], dtype=object)[kind]
    commit, marker = names == "commit", names == "marker"
    txn = commit & pc.fill_null(block.column("is_transactional"), False).to_numpy(
        zero_copy_only=False
    )
    pid = T.int_column(block, "producer_id")
    # the commits the replay holds from before, as rows after the block's
    held, events = _with_held(replay, block)
    m = len(held)
    rows = np.concatenate([np.flatnonzero(commit), n + np.arange(m)])
    groups, gcode = _codes(events.column("group_id"))
    rank = np.argsort(np.argsort(np.array(groups, dtype=object)))  # group names' order
    epid = np.concatenate([pid, [p for _, p, _ in held]]).astype(np.int64)
    etxn = np.concatenate([txn, np.ones(m, bool)])
    # where each commit takes effect: its own record, or its producer's next marker (held ones:
    # the first), dropped after an ABORT, still waiting after the block's end
    at = np.where(etxn[rows], NEVER, np.minimum(rows, n))
    outcome = pc.fill_null(pc.equal(block.column("control_type"), "COMMIT"), False)
    committed = outcome.to_numpy(zero_copy_only=False)
    drop, waiting = _markers_applied(
        rows, n, epid, etxn, pid, np.flatnonzero(marker), committed, at
    )
    applied = ~waiting & ~drop
    # the order they take effect in: by record, then group name, then log order (held first)
    sub = np.where(rows >= n, rows - n - m, rows)
    order = np.lexsort((sub, rank[gcode[rows]], at))
    order = order[applied[order]]
    app = rows[order]
    # the offset before each: the same group and partition's last, or the one the replay holds
    topics, tcode = _codes(events.column("topic"))
    part = T.int_column(events, "partition")
    tomb = pc.fill_null(events.column("is_tombstone"), False).to_numpy(zero_copy_only=False)
    value = T.int_column(events, "committed_offset")
    new = np.where(tomb[app], -1, value[app])
    new_known = (
        ~tomb[app]
        & pc.is_valid(events.column("committed_offset")).to_numpy(zero_copy_only=False)[app]
    )
    key = np.stack([gcode[app], tcode[app], part[app]])
    by = np.lexsort(key[::-1])
    firsts = np.ones(len(app), bool)
    if len(app):
        firsts[by[1:]] = (np.diff(key[:, by], axis=1) != 0).any(axis=0)
    before, before_known = _offsets_before(replay, new, new_known, by, firsts,
                                           (groups, gcode[app]), (topics, tcode[app]), part[app])  # fmt: skip
    if (before_known & new_known & (new < before)).any():
        return False  # a regression: judged by the reference replay
    _emit(replay, events, app, groups, gcode, topics, tcode, part, at[order], block,
          before, before_known, n)  # fmt: skip
    # the state after the block: offsets, the commits still waiting, the runs of broadcast rows
    last = np.ones(len(app), bool)
    if len(app):
        last[by[:-1]] = (np.diff(key[:, by], axis=1) != 0).any(axis=0)
    for i in np.flatnonzero(last).tolist():
        g = _group(replay, groups[gcode[app[i]]])
        tp = (topics[tcode[app[i]]], int(part[app[i]]))
        if tomb[app[i]]:
            g.offsets.pop(tp, None)
        else:
            g.offsets[tp] = int(value[app[i]])
    _still_waiting(replay, events, held, rows[waiting][np.argsort(sub[waiting], kind="stable")],
                   n, groups, gcode, epid)  # fmt: skip
    return True


# what a block of one kind of event lacks is null (replay.grouped.replay_groups takes them)
EVENT_TYPES = {
    "group_id": pa.string(), "log_partition": pa.int32(), "log_offset": pa.int64(),
    "record_timestamp": pa.int64(), "is_tombstone": pa.bool_(), "topic": pa.string(),
    "partition": pa.int32(), "committed_offset": pa.int64(), "commit_timestamp": pa.int64(),
    "is_transactional": pa.bool_(), "producer_id": pa.int64(), "control_type": pa.string(),
}  # fmt: skip


def _complete(block: pa.RecordBatch) -> pa.RecordBatch:
    """``block`` with every column the block replay reads (null where it has none)."""
    names = block.schema.names
    missing = [name for name in EVENT_TYPES if name not in names]
    if not missing:
        return block
    columns = list(block.columns) + [pa.nulls(block.num_rows, EVENT_TYPES[m]) for m in missing]
    return pa.RecordBatch.from_arrays(columns, names=names + missing)


def _codes(column: pa.ChunkedArray) -> tuple[list, np.ndarray]:
    """A column's distinct values and each row's index among them (-1: null)."""
    encoded = pc.dictionary_encode(column.combine_chunks(), null_encoding="mask")
    return encoded.dictionary.to_pylist(), pc.fill_null(encoded.indices, -1).to_numpy(
        zero_copy_only=False
    )


def _group(replay: GroupsReplay, name: str):
    g = replay.groups.get(name)
    if g is None:
        g = replay.groups[name] = replay.new_group(name)
    return g


def _emit(replay, events, app, groups, gcode, topics, tcode, part, at, block, before,
          before_known, n) -> None:  # fmt: skip
    """The timeline rows of the commits that took effect, in order (GroupReplay._timeline),
    and what judging them changes: a broadcast row starts its partition's run again."""
    if not len(app):
        return
    is_txn = pc.fill_null(events.column("is_transactional"), False).to_numpy(zero_copy_only=False)
    # each distinct group and partition once: its generation, members and declared isolation
    firsts, which = T.distinct_rows(gcode[app], tcode[app], part[app])
    combos = np.stack([gcode[app], tcode[app], part[app]])[:, firsts]
    gens, owners, declared, tps = [], [], [], []
    for c, t, p in combos.T.tolist():
        g = replay.groups.get(groups[c])
        gen = g.gen if g is not None else {"generation": None, "state": "Empty", "broadcast": False}
        tp = (topics[t], p)
        gens.append(gen)
        tps.append(tp)
        owners.append(len(gen.get("owners", {}).get(tp, [])))
        declared.append(groups[c] in replay.broadcast)
    owners = np.array(owners, np.int32)
    shared = np.array([bool(g["broadcast"]) for g in gens], bool) & (owners > 1)
    broadcast = (shared | np.array(declared, bool))[which]
    mark = np.where(is_txn[app], at, app)  # the record where it took effect
    effective_ts = block.column("record_timestamp").cast(pa.int64()).take(pa.array(mark))
    tomb = pc.fill_null(events.column("is_tombstone"), False).take(pa.array(app))
    table = pa.table({
        "group_id": events.column("group_id").take(pa.array(app)),
        "topic": events.column("topic").take(pa.array(app)),
        "partition": events.column("partition").take(pa.array(app)),
        "committed_offset": pc.if_else(tomb, pa.scalar(None, pa.int64()),
                                       events.column("committed_offset").take(pa.array(app)).cast(pa.int64())),
        "previous_offset": pa.array(before, pa.int64(), mask=~before_known),
        "is_tombstone": tomb,
        "effective_timestamp": effective_ts,
        "commit_timestamp": events.column("commit_timestamp").take(pa.array(app)),
        "effective_log_offset": block.column("log_offset").take(pa.array(mark)),
        "commit_log_offset": events.column("log_offset").take(pa.array(app)),
        "log_partition": events.column("log_partition").take(pa.array(app)),
        "generation": pa.array([g["generation"] for g in gens], pa.int32()).take(pa.array(which)),
        "group_state": pa.array([g["state"] for g in gens], pa.string()).take(pa.array(which)),
        "broadcast": broadcast,
        "committers": pa.array(owners[which], pa.int32()),
        "is_transactional": is_txn[app],
        "producer_id": pa.array(T.int_column(events, "producer_id")[app], pa.int64(), mask=~is_txn[app]),
    })  # fmt: skip
    replay.emit_rows("timeline", table)
    for i in np.unique(which[broadcast]).tolist():
        g = replay.groups.get(groups[combos[0, i]])
        st = g.judge.tps.get(tps[i]) if g is not None else None
        if st is not None:
            st.run = 1
