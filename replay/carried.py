"""The replays' state at a point of a log, carried from one run to the next.

A broker never replays a partition from its first batch: it loads the producer state of its
latest snapshot and replays what follows (``ProducerStateManager.loadFromSnapshot``, then
``UnifiedLog.rebuildProducerState`` from the snapshot's offset), and a coordinator loads its
partition's transactions and groups once (``TransactionStateManager``,
``GroupMetadataManager``). A scheduled audit that reads only the bytes a previous run did not
has to do the same (docs/incremental.md), and needs more than Kafka's snapshot holds:

- a partition's replay (:func:`carry`, :func:`resume`): per producer the last five batches (to
  tell a resent batch from a gap, as ``ProducerStateEntry.batchMetadata`` does in memory), its
  recent sequence ranges (``replay.producer_state.RecentRanges``) and the open transaction's
  data so far (records, batches, first timestamp, what it pins behind the LSO); of the
  partition, what its rules read of the log before (its start and end, holes, the cleaner's
  reach, the latest timestamps, the highest offset seen, the coverage counts);
- a `__transaction_state` partition's (:func:`carry_coordinator`): every transactional id's
  state, last record, transaction in flight and producers' first records;
- a `__consumer_offsets` partition's (:func:`carry_groups`): every group's generation,
  offsets, commits waiting for their marker and what judging its commit timeline keeps.

Each is one JSON-safe document; replaying a log whole, or its first part, carrying the state
through JSON and replaying the rest from it, gives the same rows (``tests/test_carried_state.py``,
over every simulated scenario, production-shaped traffic and random histories, cut at random
points). Where a previous run's replay ended is found again in a later copy by
:mod:`replay.points`.

What is not carried, and why:

- the rows already handed on (findings, transactions, LSO changes): the run that judged them
  published them;
- the ABORTs kept for the aborted-transaction index check (9.3) and the producer states at
  snapshot offsets: both are checked against the files of the run that reads them;
- the run's configuration: the next run's applies (a previous output made under another
  verdict configuration is refused by the run: jobs.history).

What a state holds grows with producers, transactional ids and groups, as the replays' own
memory does within a run: never with the number of batches, records or transactions.
"""

from __future__ import annotations

import collections
import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from decoders.layout import classify
from replay.coordinator import CoordinatorReplay, _Id
from replay.group_blocks import PENDING_COLUMNS
from replay.groups import GroupReplay, GroupsReplay, _Tp
from replay.partition import Config, PartitionReplay
from replay.producer_state import NUM_BATCHES_TO_RETAIN, Producer, RecentRanges

# the layout of a carried state: a run refuses a state of another layout (2: the findings the
# replays judged, by fingerprint, beside the state)
STATE_VERSION = 2

# what a partition replay reads of the log before the point it goes on from
PARTITION_FIELDS = (
    "log_start", "log_end", "last_timestamp", "data_records", "cleaned_upto", "hole_end",
    "last_marker_timestamp", "last_batch_timestamp", "first_timestamp", "first_segment",
    "overlaps",
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


@dataclass(frozen=True)
class ReplicaIds:
    """What a ``replay_states`` row keeps of its replica beyond the replay: the topic id of
    its partition.metadata (a topic deleted and created again under its name has another) and
    its high watermark at its broker's last replication-offset-checkpoint (offsets below it
    were committed: a later copy whose log ends below it lost committed records)."""

    topic_id: str | None = None
    high_watermark: int | None = None
    cluster: str = ""  # a finding's fingerprint names its cluster
    # the fingerprints of the findings the replays judged before the point it went on from
    findings: tuple[str, ...] = ()
    # its batches with a valid CRC so far, carried too: the audit keeps, of a partition's
    # replicas, the one with the most (replay.replicas.chosen_replicas) as over the whole log
    crc_valid_batches: int = 0


def carried_row(replay: PartitionReplay, broker: str | None, ids: ReplicaIds | None = None,
                judged: list[dict] = ()) -> dict[str, Any]:  # fmt: skip
    """The ``replay_states`` row (replay.tables.REPLAY_STATES) of a replica's replay at its
    end: where a later run goes on from (the batch that reaches the log end: its segment,
    position and CRC, which that run finds again in its own copy of the log), the state, and
    the fingerprints of the findings its replay judged (``judged``) and those carried to it: a
    later run hands those on again (replay.previous)."""
    _reach, file, position, base_offset, crc = replay.highest
    segment = None
    if file is not None:  # the segment's base offset, from its name (the path is the run's)
        kind, segment = classify(posixpath.basename(str(file)))
        segment = segment if kind == "log" else None
    ids = ids or ReplicaIds()
    return {
        "topic": replay.topic,
        "partition": replay.partition,
        "broker": broker,
        "topic_id": ids.topic_id,
        "high_watermark": ids.high_watermark,
        "log_end_offset": replay.log_end,
        "last_batch_offset": base_offset,
        "last_batch_crc": crc,
        "segment_base_offset": segment,
        "segment_position": position,
        "state_version": STATE_VERSION,
        "state": state_text({**carry(replay), "crc_valid_batches": ids.crc_valid_batches}),
        "records_state": None,
        "findings": judged_prints(ids.findings, judged, ids.cluster),
    }


def judged_prints(before, judged: list[dict], cluster: str) -> str:
    """The fingerprints of findings judged before a point and of those judged since (rows of
    the replay, before the audit adds their cluster), as ``replay_states.findings`` keeps them."""
    from replay.remediation import fingerprint

    prints = set(before) | {fingerprint({**f, "cluster": cluster}) for f in judged}
    return _COMPACT.encode(sorted(prints))


# json.dumps with any option builds its encoder each call: one per partition's two texts
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def state_text(state: dict[str, Any]) -> str:
    """A carried state as the ``replay_states`` table holds it: compact JSON."""
    return _COMPACT.encode(state)


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
    complete_from: dict[int, int] | None = None,
) -> CoordinatorReplay:
    """A coordinator replay that goes on from ``state`` over the records after it;
    ``latest_epoch``: the highest epochs of those records (:func:`replay.grouped.
    txn_latest_epochs`), merged with the carried ones. Its history starts where the carried
    one did (a later copy's compaction below the point changes nothing already judged), or
    later: ``complete_from``, where this copy's history is whole from, when the cleaner's
    reach or a hole now passes the point (the cleaner rewrote segments past the previous
    copy's end and removed records after the carried ones: a transition from a carried record
    to the next survivor is then not judged, as across any cleaned range)."""
    _check_version(state)
    latest = {(t, p): e for t, p, e in state["latest_epoch"]}
    for key, epoch in latest_epoch.items():
        latest[key] = max(latest.get(key, -1), epoch)
    whole = {p: o for p, o in state["complete_from"]}
    raised = False
    for p, o in (complete_from or {}).items():
        raised = raised or o > whole.get(p, 0)
        whole[p] = max(whole.get(p, 0), o)
    replay = CoordinatorReplay(whole, latest, emit, emit_table)
    for e in state["ids"]:
        s = replay.ids[e["transactional_id"]] = _Id()
        s.state, s.previous = e["state"], e["previous"]
        s.first_of = {pid: r for pid, r in e["first_of"]}
        s.current = None if e["current"] is None else {
            **e["current"], "partitions": {(t, p) for t, p in e["current"]["partitions"]},
        }  # fmt: skip
    if raised:
        replay.cleaned_past()
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
