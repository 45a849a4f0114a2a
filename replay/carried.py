"""A partition replay's state at a point of its log, carried from one run to the next.

A broker never replays a partition from its first batch: it loads the producer state of its
latest snapshot and replays what follows (``ProducerStateManager.loadFromSnapshot``, then
``UnifiedLog.rebuildProducerState`` from the snapshot's offset). A scheduled audit that reads
only the bytes a previous run did not has to do the same, and needs more than Kafka's snapshot
holds: a snapshot keeps each producer's last batch, where the replay also keeps the last five
(to tell a resent batch from a gap, as ``ProducerStateEntry.batchMetadata`` does in memory) and
its recent sequence ranges (``replay.producer_state.RecentRanges``), the open transaction's
data so far (records, batches, first timestamp, what it pins behind the LSO), and what the
partition's rules read of the log before (its start and end, holes, the cleaner's reach, the
latest timestamps, the highest offset seen, the coverage counts).

:func:`carry` gives all of that as one JSON-safe document; :func:`resume` makes a replay that
goes on from it. Replaying a log whole, or its first part, carrying the state through JSON and
replaying the rest from it, gives the same findings, transactions, LSO changes, open
transactions, producer states and summary (``tests/test_carried_state.py``, over every
simulated scenario and production-shaped traffic, cut at random points).

What is not carried, and why:

- the rows already handed on (findings, transactions, LSO changes): the run that judged them
  published them;
- the ABORTs kept for the aborted-transaction index check (9.3) and the producer states at
  snapshot offsets: both are checked against the files of the run that reads them;
- the run's configuration: the next run's applies (a state made under another
  ``producer_id_expiration_ms`` is refused by the run, not here).

What the state holds grows with the producers the partition has seen (each with at most
:data:`replay.producer_state.RECENT_RANGES` sequence ranges), as the replay's own memory
does within a run: never with the number of batches or transactions.
"""

from __future__ import annotations

import collections
import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from decoders.layout import DumpFile, classify
from decoders.planning import ByteRange
from replay.coordinator import CoordinatorReplay, _Id
from replay.group_blocks import PENDING_COLUMNS
from replay.groups import GroupReplay, GroupsReplay, _Tp
from replay.partition import Config, PartitionReplay
from replay.producer_state import NUM_BATCHES_TO_RETAIN, Producer, RecentRanges

# the layout of a carried state: a run refuses a state of another layout
STATE_VERSION = 1

# what a partition replay reads of the log before the point it goes on from
PARTITION_FIELDS = (
    "log_start", "log_end", "last_timestamp", "data_records", "cleaned_upto", "hole_end",
    "last_marker_timestamp", "last_batch_timestamp", "first_timestamp", "overlaps",
)  # fmt: skip
# the open transaction's fields (replay.partition.PartitionReplay._data)
TXN_FIELDS = (
    "producer_epoch", "first_offset", "last_offset", "record_count", "batches",
    "first_timestamp", "records_before", "bound_timestamp",
)  # fmt: skip


def carry(replay: PartitionReplay) -> dict[str, Any]:
    """The replay's state after the last batch it was given, as plain JSON values."""
    return {
        "version": STATE_VERSION,
        "topic": replay.topic,
        "partition": replay.partition,
        **{name: getattr(replay, name) for name in PARTITION_FIELDS},
        "sequence_batches": list(replay.sequence_batches),
        "cleaned_markers": list(replay.cleaned_markers),
        "highest": list(replay.highest),
        "producers": [_producer(pid, p) for pid, p in sorted(replay.producers.items())],
    }


def carried_row(replay: PartitionReplay, broker: str | None) -> dict[str, Any]:
    """The ``replay_states`` row (replay.tables.REPLAY_STATES) of a replica's replay at its
    end: where a later run goes on from (the batch that reaches the log end: its segment,
    position and CRC, which that run finds again in its own copy of the log) and the state."""
    _reach, file, position, base_offset, crc = replay.highest
    segment = None
    if file is not None:
        kind, segment = classify(posixpath.basename(str(file).replace("\\", "/")))
        segment = segment if kind == "log" else None
    return {
        "topic": replay.topic,
        "partition": replay.partition,
        "broker": broker,
        "log_end_offset": replay.log_end,
        "last_batch_offset": base_offset,
        "last_batch_crc": crc,
        "segment_base_offset": segment,
        "segment_position": position,
        "state_version": STATE_VERSION,
        "state": state_text(carry(replay)),
        "records_state": None,
    }


def state_text(state: dict[str, Any]) -> str:
    """A carried state as the ``replay_states`` table holds it: compact JSON."""
    return json.dumps(state, separators=(",", ":"))


def resume(
    state: dict[str, Any],
    config: Config | None = None,
    emit: Callable[[str, dict], None] | None = None,
    emit_table: Callable[[str, pa.Table], None] | None = None,
    cleaned_upto: int = 0,
) -> PartitionReplay:
    """A replay of ``state``'s partition that goes on from it: give it the batches after the
    state's log end (:meth:`PartitionReplay.run_in_order`); ``cleaned_upto``: where the
    cleaner's leftovers among them end (:func:`replay.partition.cleaner_leftovers_end`), if
    above the state's."""
    _check_version(state)
    replay = PartitionReplay(state["topic"], state["partition"], config, 0, emit, emit_table)
    for name in PARTITION_FIELDS:
        setattr(replay, name, state[name])
    replay.cleaned_upto = max(state["cleaned_upto"], cleaned_upto)
    replay.sequence_batches = list(state["sequence_batches"])
    replay.cleaned_markers = list(state["cleaned_markers"])
    replay.highest = tuple(state["highest"])
    replay.producers = {e["producer_id"]: _producer_of(e) for e in state["producers"]}
    return replay


# -- the coordinator: `__transaction_state`, every transactional id of a partition -----------------

# what the coordinator's replay reads again of a record it keeps (the last one of an id, each
# producer id's first): where it lies (whole or cleaned history) and how a producer id started
RECORD_FIELDS = (
    "transactional_id", "producer_id", "producer_epoch", "state", "previous_producer_id",
    "log_partition", "log_offset",
)  # fmt: skip


def carry_coordinator(replay: CoordinatorReplay) -> dict[str, Any]:
    """A `__transaction_state` partition's replay state after its last record, as plain JSON
    values: per transactional id its state, last record, the transaction in flight and each
    producer id's first record; where the partition's whole history starts, and each
    producer's highest epoch so far (what a later run's transactions report as latest)."""
    return {
        "version": STATE_VERSION,
        "complete_from": sorted([p, o] for p, o in replay.complete_from.items()),
        "latest_epoch": sorted([t, p, e] for (t, p), e in replay.latest_epoch.items()),
        "ids": [_transactional_id(tid, s) for tid, s in sorted(replay.ids.items())],
    }


def resume_coordinator(
    state: dict[str, Any],
    latest_epoch: dict[tuple[str, int], int],
    emit: Callable[[str, dict], None],
    emit_table: Callable[[str, pa.Table], None] | None = None,
) -> CoordinatorReplay:
    """A coordinator replay that goes on from ``state`` over the records after it;
    ``latest_epoch``: the highest epochs of those records (:func:`replay.grouped.
    txn_latest_epochs`), merged with the carried ones. Its history starts where the carried
    one did: a later copy's compaction below the point changes nothing already judged."""
    _check_version(state)
    latest = {(t, p): e for t, p, e in state["latest_epoch"]}
    for key, epoch in latest_epoch.items():
        latest[key] = max(latest.get(key, -1), epoch)
    replay = CoordinatorReplay({p: o for p, o in state["complete_from"]}, latest, emit,
                               emit_table)  # fmt: skip
    for e in state["ids"]:
        s = replay.ids[e["transactional_id"]] = _Id()
        s.state, s.previous = e["state"], e["previous"]
        s.first_of = {pid: r for pid, r in e["first_of"]}
        s.current = None if e["current"] is None else {
            **e["current"], "partitions": {(t, p) for t, p in e["current"]["partitions"]},
        }  # fmt: skip
    return replay


def _transactional_id(tid: str, s: _Id) -> dict[str, Any]:
    current = None
    if s.current is not None:
        current = {**s.current, "partitions": sorted([t, p] for t, p in s.current["partitions"])}
    return {
        "transactional_id": tid,
        "state": s.state,
        "previous": _record(s.previous),
        "first_of": [[pid, _record(r)] for pid, r in sorted(s.first_of.items())],
        "current": current,
    }


def _record(r: dict | None) -> dict | None:
    return None if r is None else {k: r.get(k) for k in RECORD_FIELDS}


# -- the groups: every group of a `__consumer_offsets` partition ------------------------------------

# what judging a partition's commit timeline keeps (replay.groups._Tp)
TIMELINE_FIELDS = ("run", "longest", "overwrites", "reread", "committers", "examples", "lowest",
                   "highest")  # fmt: skip


def carry_groups(replay: GroupsReplay) -> dict[str, Any]:
    """A `__consumer_offsets` partition's replay state after its last event, as plain JSON
    values: per group its generation (state, broadcast or not, who is assigned what), its
    committed offsets, the transactional commits waiting for their producer's marker and what
    judging each partition's commit timeline keeps (the run of overwrites in broadcast
    generations)."""
    return {
        "version": STATE_VERSION,
        "groups": [_group(g) for _, g in sorted(replay.groups.items())],
    }


def resume_groups(
    state: dict[str, Any],
    broadcast: frozenset[str] | set[str],
    emit: Callable[[str, dict], None],
    emit_table: Callable[[str, pa.Table], None] | None = None,
) -> GroupsReplay:
    """A groups replay that goes on from ``state`` over the events after it; ``broadcast``:
    the groups the (next run's) configuration declares broadcast-style."""
    _check_version(state)
    replay = GroupsReplay(broadcast, emit, emit_table)
    for e in state["groups"]:
        g = replay.groups[e["group_id"]] = replay.new_group(e["group_id"])
        gen = e["generation"]
        g.gen = {**gen, "owners": {(t, p): ms for t, p, ms in gen["owners"]}}
        g.offsets = {(t, p): o for t, p, o in e["offsets"]}
        g.pending = {pid: list(commits) for pid, commits in e["pending"]}
        for pid in g.pending:
            replay.waiting.setdefault(pid, set()).add(g.group_id)
        for t, p, fields in e["timelines"]:
            st = g.judge.tps[(t, p)] = _Tp()
            for name in TIMELINE_FIELDS:
                setattr(st, name, fields[name])
            st.generations = set(fields["generations"])
    return replay


def _group(g: GroupReplay) -> dict[str, Any]:
    gen = g.gen
    return {
        "group_id": g.group_id,
        "generation": {
            **{k: v for k, v in gen.items() if k != "owners"},
            "owners": sorted([t, p, ms] for (t, p), ms in gen["owners"].items()),
        },
        "offsets": sorted([t, p, o] for (t, p), o in g.offsets.items()),
        "pending": [
            [pid, [{k: c.get(k) for k in PENDING_COLUMNS} for c in commits]]
            for pid, commits in sorted(g.pending.items())
        ],  # fmt: skip
        "timelines": [
            [
                t,
                p,
                {
                    **{name: getattr(st, name) for name in TIMELINE_FIELDS},
                    "generations": sorted(st.generations, key=lambda x: (x is not None, x)),
                },
            ]
            for (t, p), st in sorted(g.judge.tps.items())
        ],  # fmt: skip
    }


def _check_version(state: dict[str, Any]) -> None:
    if state.get("version") != STATE_VERSION:
        raise ValueError(
            f"a carried state of layout {state.get('version')!r}, not {STATE_VERSION}: "
            "replay the partition from its log start"
        )


# -- partitions: the producers' state ---------------------------------------------------------------


def _producer(pid: int, p: Producer) -> dict[str, Any]:
    return {
        "producer_id": pid,
        "epoch": p.epoch,
        "batches": [list(b) for b in p.batches],
        "recent": [[first, last, offset] for (first, last), offset in p.recent.ranges.items()],
        "recent_highest": p.recent.highest,
        "coordinator_epoch": p.coordinator_epoch,
        "txn": None if p.txn is None else {k: p.txn.get(k) for k in TXN_FIELDS},
        "last_timestamp": p.last_timestamp,
        "sequences_known": p.sequences_known,
    }


def _producer_of(e: dict[str, Any]) -> Producer:
    recent = RecentRanges()
    recent.ranges = collections.OrderedDict(((f, last), o) for f, last, o in e["recent"])
    recent.highest = e["recent_highest"]
    return Producer(
        epoch=e["epoch"],
        batches=collections.deque((tuple(b) for b in e["batches"]), maxlen=NUM_BATCHES_TO_RETAIN),
        recent=recent,
        coordinator_epoch=e["coordinator_epoch"],
        txn=None if e["txn"] is None else dict(e["txn"]),
        last_timestamp=e["last_timestamp"],
        sequences_known=e["sequences_known"],
    )


@dataclass
class Resumed:
    """Where a replica's replay goes on in a later copy of its log, from a ``replay_states``
    row: the byte ranges to read (the batches after the carried point, in offset order),
    whether the carried state holds there (``carried``; else the replica is replayed from its
    log start) and, when the log changed below or at the point, what happened (``reason``)."""

    ranges: list[ByteRange] = field(default_factory=list)
    carried: bool = True
    reason: str | None = None
    change: str | None = None  # retention, rewritten or truncated (:data:`CHANGES`)


# how a log changed below or at a previous run's point (what :func:`resume_from` tells apart)
CHANGES = ("retention", "rewritten", "truncated", "state_layout")


def resume_from(row: dict[str, Any], logs: list[DumpFile]) -> Resumed:
    """Find a ``replay_states`` row's point in a later copy of the replica's log (``logs``: its
    `.log` segments), the way a broker finds a snapshot's offset in its log: the same batch at
    the same place (segment, byte position, base offset, stored CRC) and the rest read from
    after it. A log changes between two copies as logs do (docs/incremental.md):

    - segments rolled after the point: read in full;
    - retention deleted the segment of the point: the log goes on from the first batch at or
      after the carried log end; offsets between the two that no copy read are a hole, as in
      any copy whose log misses offsets (the replay's own rule);
    - the cleaner rewrote the segment (the batch at the point changed, the log still reaches
      past it): headers read to the first batch at or after the carried log end;
    - the log ends below the carried log end (truncated: an unclean election, a restore): the
      carried state does not hold; the replica is replayed from its log start.

    Only batch headers are read to find the point, never a deep decode of older bytes."""
    segments = sorted((f for f in logs if f.kind == "log"), key=lambda f: f.info.base_offset)
    end = row["log_end_offset"]
    at = next((f for f in segments if f.info.base_offset == row["segment_base_offset"]), None)
    if at is not None and row["segment_position"] is not None:
        first = _first_batch(at, row["segment_position"])
        if first is not None and (first["base_offset"], first["crc"]) == (
            row["last_batch_offset"],
            row["last_batch_crc"],
        ):
            later = [f for f in segments if f.info.base_offset > at.info.base_offset]
            start = row["segment_position"] + first["size"]
            return Resumed([ByteRange(at, start, at.size), *_whole(later)])
    # the point is gone: the first batch at or after the carried log end, if the log reaches it
    for i, f in enumerate(segments):
        nxt = segments[i + 1].info.base_offset if i + 1 < len(segments) else None
        if nxt is not None and nxt <= end:
            continue  # every offset of this segment lies below the carried end
        found = _first_from(f, end)
        if found is None:
            continue
        position, base = found
        why = "the segment of the carried point is gone (retention)" if at is None else (
            "the batch at the carried point changed (the log cleaner rewrote its segment)"
        )  # fmt: skip
        if base > end:
            why += f"; offsets {end}..{base - 1} were gone before a run read them"
        change = "retention" if at is None else "rewritten"
        return Resumed([ByteRange(f, position, f.size), *_whole(segments[i + 1 :])], True, why,
                       change)  # fmt: skip
    if _log_end(segments) >= end:
        return Resumed([], True, None)  # nothing after the carried point yet
    return Resumed(_whole(segments), False,
                   f"the log ends below the carried log end {end} (truncated): replayed from its start",
                   "truncated")  # fmt: skip


# the columns of a replay_states row that say where a replay ended (its point)
POINT_COLUMNS = (
    "cluster", "topic", "partition", "broker", "log_end_offset", "last_batch_offset",
    "last_batch_crc", "segment_base_offset", "segment_position", "state_version",
)  # fmt: skip


def since_point(point: dict[str, Any], logs: list[DumpFile]) -> dict[str, Any]:
    """What a replica's log did since a previous run's replay ended at ``point`` (a
    ``replay_states`` row's :data:`POINT_COLUMNS`), as a scan task reports it: whether the
    carried state holds, the bytes past the point out of the log's, and how the log changed
    (:func:`resume_from`)."""
    log_bytes = sum(f.size for f in logs if f.kind == "log")
    if point.get("state_version") != STATE_VERSION:
        return {"carried": False, "reason": f"a state of layout {point.get('state_version')}",
                "change": "state_layout", "bytes_after": log_bytes, "log_bytes": log_bytes}  # fmt: skip
    found = resume_from(point, logs)
    return {
        "carried": found.carried,
        "reason": found.reason,
        "change": found.change,
        "bytes_after": sum(r.size for r in found.ranges),
        "log_bytes": log_bytes,
    }


# partitions named in a summary's list of those whose log was truncated below the point
NAMED = 20


def since_summary(replicas, points: dict) -> dict[str, Any]:
    """What the replicas a scan replayed (:class:`replay.replicas.ReplicaRow`, with ``since``)
    did since the previous run's points (``points``: :attr:`ReplaySpec.points`): how many went
    on from their point, the bytes past the points out of their logs', how many logs changed
    below their point and how, the truncated ones by name, and the points no replica of this
    copy has (a partition, broker or log dir gone, or its replica not kept)."""
    seen = {r.key for r in replicas}
    since = [r for r in replicas if r.since is not None]
    changes = dict.fromkeys(CHANGES, 0)
    for r in since:
        if r.since["change"]:
            changes[r.since["change"]] += 1
    truncated = sorted(f"{r.topic}-{r.partition} (broker {r.broker})" for r in since
                       if r.since["change"] == "truncated")  # fmt: skip
    return {
        "points": len(points),
        "went_on": sum(1 for r in since if r.since["carried"]),
        "bytes_after": sum(r.since["bytes_after"] for r in since),
        "log_bytes": sum(r.since["log_bytes"] for r in since),
        "changes": {k: v for k, v in changes.items() if v},
        "truncated": truncated[:NAMED],
        "points_without_replica": sum(1 for key in points if key not in seen),
    }


def _whole(files: list[DumpFile]) -> list[ByteRange]:
    return [ByteRange(f, 0, f.size) for f in files]


# bytes read at a time to find a point: a batch header, not a segment's worth
POINT_WINDOW = 1 << 16


def _headers(f: DumpFile, start: int = 0, stop: int | None = None):
    import decoders

    window = POINT_WINDOW if stop is not None else None
    for table, batch in decoders.iter_file(f, ["batches"], deep=False, start=start, stop=stop,
                                           window_bytes=window):  # fmt: skip
        if table == "batches":
            yield from batch.select(["base_offset", "last_offset", "crc", "size", "position",
                                     "crc_valid"]).to_pylist()  # fmt: skip


def _first_batch(f: DumpFile, position: int) -> dict | None:
    """The batch whose entry starts at ``position`` of ``f``, if one does."""
    if position >= f.size:
        return None
    first = next(_headers(f, position, position + 1), None)
    return first if first is not None and first["position"] == position else None


def _first_from(f: DumpFile, offset: int) -> tuple[int, int] | None:
    """(position, base offset) of the first CRC-valid batch of ``f`` starting at ``offset``
    or later: a batch that starts below it was judged by the run that carried the state."""
    for b in _headers(f):
        if b["crc_valid"] is not False and b["base_offset"] >= offset:
            return b["position"], b["base_offset"]
    return None


def _log_end(segments: list[DumpFile]) -> int:
    """One past the last offset of the last segment holding a batch (-1: none)."""
    for f in reversed(segments):
        last = -1
        for b in _headers(f):
            last = max(last, b["last_offset"])
        if last >= 0:
            return last + 1
    return -1
