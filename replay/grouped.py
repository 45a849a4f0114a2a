"""The replays fed a partition's rows.

A scan task feeds a replica's pieces to :func:`replay_partition`, :func:`replay_coordinator` and
:func:`replay_groups` (:mod:`replay.replicas`); the cross-log judgement of each producer id
reads what they give (:mod:`replay.crosslog_stream`). Pure Python: no Spark
import here. Rows leave in tables holding several output tables' columns, ``out`` naming the
table of each row (:func:`replay.tables.union`), a block at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from replay import coverage as C
from replay import tables as T
from replay.carried import (
    ReplicaIds,
    carried_row,
    carry_coordinator,
    carry_groups,
    resume,
    resume_coordinator,
    resume_groups,
)
from replay.coordinator import CoordinatorReplay
from replay.crosslog import Anchor, Bounds
from replay.findings import finding
from replay.groups import GroupsReplay
from replay.partition import Config, PartitionReplay
from replay.sides import LISTED, PAIRS, TOUCHED

# each replay's kinds of rows (a row's ``out``) and the table the rows of each kind belong to
# (the pairs of replay.sides: the cross-log's alone)
PARTITION_KINDS = {
    "finding": T.FINDINGS, "transaction": T.TRANSACTIONS, "producer_state": T.PRODUCER_STATES,
    "lso": T.LSO_CHANGES, "partition": T.PARTITIONS, "count": T.CHECK_COUNTS,
    "carried": T.REPLAY_STATES, TOUCHED: PAIRS,
}  # fmt: skip
COORDINATOR_KINDS = {"finding": T.FINDINGS, "coord_txn": T.COORDINATOR_TXNS, LISTED: PAIRS}
GROUP_KINDS = {"finding": T.FINDINGS, "generation": T.GENERATIONS, "timeline": T.TIMELINE}
PARTITION_SCHEMA = T.union(*PARTITION_KINDS.values())
COORDINATOR_SCHEMA = T.union(*COORDINATOR_KINDS.values())
GROUP_SCHEMA = T.union(*GROUP_KINDS.values())

INTERNAL_TOPICS = (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)


@dataclass(frozen=True)
class Facts:
    """What the configuration tells the replay that the dump cannot (replay.config; made by
    replay.settings.AuditConfig.facts, defaults from conf/default.yaml)."""

    producer_id_expiration_ms: int
    default_transaction_timeout_ms: int
    bounds: Bounds
    topic_timeouts: dict[str, int] = field(default_factory=dict)
    # (cluster, producer id) -> (topic, partition) -> where its alignment starts pinned: what
    # the dump itself carries (a slice's alignment.json, replay.anchors), not the configuration
    anchors: dict[tuple[str, int], dict[tuple[str, int], Anchor]] = field(default_factory=dict)


# -- partitions ------------------------------------------------------------------------------------


@dataclass
class InOrder:
    """A partition's batches as consecutive pieces in offset order (a replica the scan read in
    order, :class:`replay.replicas.ReplicaReplay`), with what the replay needs before the first
    piece: the broker, the first offset (which snapshot seeds the replay) and the end of the
    cleaner's leftovers over all pieces (:func:`replay.partition.cleaner_leftovers_end`)."""

    pieces: Callable[[], Iterator[pa.Table]]
    broker: str | None
    first_offset: int | None
    leftovers_end: int


def replay_partition(
    topic: str,
    partition: int,
    bt: pa.Table | InOrder,
    side: list[dict],
    facts: Facts,
    cleaned_upto: int,
    flush: Callable[[pa.Table], None],
    carried: Callable[[dict], None] | None = None,
    ids: ReplicaIds | None = None,
    resumed: dict | None = None,
    flush_rows: Callable[[list[dict]], None] | None = None,
) -> dict:
    """Replay one partition's batches (a table in any order with a ``broker`` column, or
    :class:`InOrder` pieces); compare with the newest `.snapshot` and with the
    `.txnindex` files that exist. ``side``: rows of ``_row`` snapshot (producer snapshot
    entries), txnindex_file (an existing `.txnindex`, by its path) and aborted (its entries).
    The partition's ``replay_states`` row (where the replay ended, its state:
    :func:`replay.carried.carried_row`) goes to ``carried`` if given (the caller adds the state
    of the partition's records, an internal topic's), else out with the other rows; ``ids``:
    the replica's topic id and high watermark, which the row keeps. ``resumed``: a carried
    state (:func:`replay.carried.carry`) the replay goes on from over batches past its point
    (``side``: the files of those batches only).
    The rows (:data:`PARTITION_SCHEMA`) leave through ``flush`` a block at a time as the replay
    goes (a partition's transactions and LSO changes grow with its history), the rows held as
    dicts through ``flush_rows`` if given (:class:`replay.tables.RowBlocks`); returns the
    partition's summary row."""
    snaps = [s for s in side if s["_row"] == "snapshot"]
    broker, first, cleaned_upto = _first_batch(bt, cleaned_upto)
    offsets = sorted({s["snapshot_offset"] for s in snaps})
    # a log that starts mid-stream: seed producer state from the newest snapshot at or below
    # its first offset (the broker's own starting point)
    start = max((o for o in offsets if first is not None and 0 < o <= first), default=None)
    seed = [s for s in snaps if s["snapshot_offset"] == start] if start is not None else None
    cfg = Config(producer_id_expiration_ms=facts.producer_id_expiration_ms)
    rows = T.RowBlocks(PARTITION_SCHEMA, flush, flush_rows=flush_rows)
    found: list[dict] = []  # the findings of the replay: their fingerprints are carried
    emit, emit_table = _judged(rows, found)
    if resumed is not None:
        r = resume(resumed, cfg, emit, emit_table, cleaned_upto)
        offsets = [o for o in offsets if o > r.log_end]  # the run before compared the others
        # offsets no copy held before the first new batch (retention deleted them between the
        # runs): from the newest snapshot in between, as the broker loads a log
        start = None
        if first is not None and first > r.log_end:
            start = max((o for o in offsets if o <= first), default=None)
        seed = [s for s in snaps if s["snapshot_offset"] == start] if start is not None else None
    else:
        r = PartitionReplay(topic, partition, cfg, cleaned_upto, emit=emit, emit_table=emit_table)
    if isinstance(bt, InOrder):
        r.run_in_order(bt.pieces(), offsets, seed)
    else:
        r.run(bt, offsets, seed)
    findings: list[dict] = []
    counts: list[dict] = []
    for row in _snapshot_check(topic, partition, r, snaps, offsets, findings, counts):
        rows.add("producer_state", row)
    for t in r.open_transactions():
        rows.add("transaction", t)
    # the newest snapshot's comparison is the copy's (a later copy has a newer snapshot): not
    # carried to a later run, unlike what the log itself shows
    per_copy = len(findings)
    counts += _txn_index_check(topic, partition, r, side, findings)
    counts += _end_counts(topic, partition, r)
    summary = _summary(topic, partition, broker, r)
    state = carried_row(r, broker, ids, found + findings[per_copy:])
    for kind, these in (("finding", findings), ("partition", [summary]), ("count", counts),
                        ("carried", [] if carried else [state])):  # fmt: skip
        for row in these:
            rows.add(kind, row)
    rows.close()
    if carried:
        carried(state)
    return summary


def _first_batch(bt: pa.Table | InOrder, cleaned_upto: int) -> tuple[str | None, int | None, int]:
    """The replica's broker, its first batch's offset, and how far the cleaner went (pieces in
    order carry the leftovers' end of a compacted log)."""
    if isinstance(bt, InOrder):
        return bt.broker, bt.first_offset, max(cleaned_upto, bt.leftovers_end)
    broker = bt.column("broker")[0].as_py() if bt.num_rows else None
    first = pc.min(bt.column("base_offset")).as_py() if bt.num_rows else None
    return broker, first, cleaned_upto


def _end_counts(topic: str, partition: int, r: PartitionReplay) -> list[dict]:
    """What the replay judged and what the cleaner left it unable to judge (the checks' rows)."""
    judged, cleaned = r.sequence_batches
    return [count_row(topic, partition, C.SEQUENCES_JUDGED, judged),
            count_row(topic, partition, C.SEQUENCES_CLEANED, cleaned),
            count_row(topic, partition, C.MARKERS_WITHOUT_DATA, r.cleaned_markers[0]),
            count_row(topic, partition, C.MARKERS_HORIZON, r.cleaned_markers[1])]  # fmt: skip


def _summary(topic: str, partition: int, broker: str | None, r: PartitionReplay) -> dict:
    """The partition's summary row (the ``partition`` kind of PARTITION_SCHEMA)."""
    return {
        "topic": topic, "partition": partition, "broker": broker,
        "log_start_offset": r.log_start, "log_end_offset": r.log_end, "lso": r.lso(),
        "cleaned_upto": r.cleaned_upto, "data_records": r.data_records,
        "first_timestamp": r.first_timestamp,
        "last_timestamp": r.last_timestamp, "complete_from": r.complete_from(),
        "copy_end_timestamp": r.copy_end_timestamp(),
    }  # fmt: skip


def _judged(rows: T.RowBlocks, judged: list[dict]):
    """(emit, emit_table) of a replay into ``rows``, its findings also kept in ``judged``."""

    def emit(kind: str, row: dict) -> None:
        if kind == "finding":
            judged.append(row)
        rows.add(kind, row)

    def emit_table(kind: str, t: pa.Table) -> None:
        if kind == "finding":
            judged.extend(t.to_pylist())
        rows.add_table(kind, t)

    return emit, emit_table


def cleaned_upto(
    cleaned: dict[str, int],
    compacted: set[str],
    broker: str,
    topic: str,
    partition: int,
    log_end: int | None,
) -> int:
    """Offsets below this show the log cleaner's leftovers: the broker's cleaner checkpoint
    (replay.dumpinfo), else, for a topic declared compacted, the whole log (the cleaner may
    have been anywhere). ``log_end``: the replica's last offset + 1, None for no batches."""
    upto = cleaned.get(f"{broker}|{topic}|{partition}", 0)
    if not upto and topic in compacted and log_end is not None:
        upto = log_end
    return upto


def _snapshot_check(topic, partition, r, snaps, offsets, findings, counts) -> list[dict]:
    """The replayed producer state against the newest `.snapshot`, where one exists. A
    snapshot beyond the end of the surviving log (a crash cut the log short; the broker itself
    would delete it on recovery, ProducerStateManager.truncateAndReload) describes a state the
    log never reached here: not compared, counted."""
    newest = offsets[-1] if offsets else None
    if newest is not None and newest > r.log_end:
        counts.append(count_row(topic, partition, C.SNAPSHOTS_BEYOND, 1))
        newest = max((o for o in offsets if o <= r.log_end), default=None)
    if newest is not None and newest < r.cleaned_upto:
        # taken before the cleaner removed batches it describes (LogCleaner keeps only each
        # key's latest record): the log no longer shows that state
        counts.append(count_row(topic, partition, C.SNAPSHOTS_CLEANED, 1))
        newest = None
    at_newest = r.snapshot_states.get(newest, {}) if newest is not None else {}
    snap_rows = {s["producer_id"]: s for s in snaps if s["snapshot_offset"] == newest}
    if newest is not None:
        counts.append(count_row(topic, partition, C.SNAPSHOTS_JUDGED, 1))
    states = []
    for pid, s in sorted(r.states().items()):
        row = {"topic": topic, "partition": partition, "producer_id": pid, **s,
               "snapshot_offset": newest, "snapshot_matches": None, "snapshot_diff": None}  # fmt: skip
        theirs, ours = snap_rows.get(pid), at_newest.get(pid)
        if ours is not None and ours["last_offset"] in (-1, None) and topic in INTERNAL_TOPICS:
            # a producer whose data the log no longer shows, only its markers: the internal
            # topics are always compacted (their records go once a later one replaces them)
            ours = None
        if theirs is not None and ours is not None:
            fields = ("producer_epoch", "last_sequence", "last_offset", "coordinator_epoch",
                      "current_txn_first_offset")  # fmt: skip
            diff = {
                f: {"snapshot": theirs[f], "replay": ours[f]}
                for f in fields
                if theirs[f] != ours[f]
            }
            row["snapshot_matches"] = not diff
            row["snapshot_diff"] = json.dumps(diff) if diff else None
            if diff:
                findings.append(
                    finding(
                        "index_inconsistent",
                        f"snapshot {newest} of {topic}-{partition} disagrees with the log for "
                        f"producer {pid}",
                        {"snapshot_offset": newest, "diff": diff},
                        topic=topic, partition=partition, producer_id=pid,
                    )
                )  # fmt: skip
        states.append(row)
    return states


def _txn_index_check(topic, partition, r: PartitionReplay, side, findings) -> list[dict]:
    """The aborted-transaction index recomputed from the log (every ABORT that closed data,
    docs/formats.md 10.4) against the `.txnindex` of the segment holding the marker
    (LogSegment.updateTxnIndex), only where that file exists: an absent file proves nothing
    and is counted instead. Outside cleaned ranges."""
    existing = {s["file"] for s in side if s["_row"] == "txnindex_file"}
    entries = [s for s in side if s["_row"] == "aborted"]
    ours = {}
    unchecked = 0
    for pid, first, marker, marker_file in r.aborted:
        index_file = _txnindex_of(marker_file)
        if index_file in existing:
            ours[(pid, first, marker)] = index_file
        else:
            unchecked += 1
    theirs = {}
    for e in entries:
        if e["first_offset"] is not None and e["first_offset"] >= r.cleaned_upto:
            theirs[(e["producer_id"], e["first_offset"], e["last_offset"])] = e
    for key in sorted(set(ours) - set(theirs)):
        pid, first, last = key
        findings.append(
            finding(
                "index_inconsistent",
                f"the ABORT of producer {pid} at {first}..{last} in {topic}-{partition} is "
                f"missing from {ours[key]}",
                {"file": ours[key], "first_offset": first, "last_offset": last},
                topic=topic, partition=partition, producer_id=pid,
                first_offset=first, last_offset=last,
            )
        )  # fmt: skip
    for key in sorted(set(theirs) - set(ours)):
        pid, first, last = key
        e = theirs[key]
        findings.append(
            finding(
                "index_inconsistent",
                f"{e['file']} has an aborted transaction of producer {pid} at {first}..{last} "
                f"that the log does not show",
                {"file": e["file"], "last_stable_offset": e.get("last_stable_offset")},
                topic=topic, partition=partition, producer_id=pid,
                first_offset=first, last_offset=last,
            )
        )  # fmt: skip
    return [
        count_row(topic, partition, C.TXNINDEX_JUDGED, len(ours)),
        count_row(topic, partition, C.TXNINDEX_ABSENT, unchecked),
    ]


def _txnindex_of(log_file: str | None) -> str | None:
    if not log_file or not log_file.endswith(".log"):
        return None
    return log_file[: -len(".log")] + ".txnindex"


JUDGED, UNDECIDED, UNJUDGED = C.TXNS_JUDGED, C.TXNS_UNDECIDED, C.TXNS_UNJUDGED


def with_shares(checks: dict[str, int]) -> dict[str, int | float]:
    """A cluster's check counts plus the share of partition transactions the cross-log checks
    could judge (the rest: undecidable by order, or without coordinator history)."""
    out: dict[str, int | float] = dict(checks)
    judged = checks.get(JUDGED, 0) + checks.get(C.TXNS_JUDGED_CLEANED, 0)
    seen = judged + sum(checks.get(k, 0) for k in (UNDECIDED, UNJUDGED))
    if seen:
        out["share of partition transactions judged against the coordinator"] = round(
            judged / seen, 4
        )
    return out


def count_row(topic, partition, what: str, n: int) -> dict:
    return {"topic": topic, "partition": partition, "check": what, "count": n}


# -- the transaction coordinator ------------------------------------------------------------------

# a transactional id's records in log order
TXN_LOG_ORDER = [("log_partition", "ascending"), ("log_offset", "ascending")]
# the `txn_log` columns the coordinator's replay reads (timestamps as epoch milliseconds)
COORDINATOR_COLUMNS = (
    "transactional_id", "producer_id", "producer_epoch", "timeout_ms", "state", "partitions",
    "last_update_timestamp", "start_timestamp", "client_transaction_version", "is_tombstone",
    "log_partition", "log_offset", "previous_producer_id",
)  # fmt: skip


def replay_coordinator(
    pieces: Iterable[pa.Table],
    complete_from: dict[int, int],
    latest_epoch: dict[tuple[str, int], int],
    flush: Callable[[pa.Table], None],
    resumed: dict | None = None,
    judged: list[dict] | None = None,
) -> dict:
    """A `__transaction_state` partition's records as consecutive pieces in log order, every
    transactional id at once (:class:`replay.coordinator.CoordinatorReplay`); ``latest_epoch``
    from :func:`txn_latest_epochs` over all of them. A block at a time: over columns where its
    records keep to the usual course, else as Python rows; the rows
    (:data:`COORDINATOR_SCHEMA`) leave through ``flush`` a block at a time: an id that commits
    every 100 ms writes ~2.6 M records a day. Returns the state it ended with, before the
    transactions still open are handed on (:func:`replay.carried.carry_coordinator`).
    ``resumed``: a carried state to go on from (its history's start is the carried one);
    ``judged``: gets the findings judged before that end (not those of what is still open)."""
    rows = T.RowBlocks(COORDINATOR_SCHEMA, flush)
    seen: list[dict] = []
    emit, emit_table = _judged(rows, seen)
    if resumed is not None:
        replay = resume_coordinator(resumed, latest_epoch, emit, emit_table, complete_from)
    else:
        replay = CoordinatorReplay(complete_from, latest_epoch, emit, emit_table)
    for block in txn_log_blocks(pieces):
        replay.block(block)
    state = carry_coordinator(replay)
    if judged is not None:
        judged += seen
    replay.finish()
    rows.close()
    return state


def txn_log_blocks(pieces: Iterable[pa.Table]) -> Iterator[pa.RecordBatch]:
    """`__transaction_state` records in log order as the coordinator's replay takes them: of a
    transactional id, timestamps filled with -1, a block at a time
    (:func:`replay.tables.column_blocks`)."""

    def cleaned() -> Iterator[pa.Table]:
        for piece in pieces:
            tid = piece.column("transactional_id")
            if tid.null_count:  # a copy of the whole piece: only where one lacks its id
                piece = piece.filter(pc.is_valid(tid))
            for c in ("start_timestamp", "last_update_timestamp"):  # none: -1
                i = piece.schema.get_field_index(c)
                if piece.column(i).null_count:
                    piece = piece.set_column(i, c, pc.fill_null(piece.column(i), -1))
            yield piece

    return T.column_blocks(cleaned())


def txn_latest_epochs(t: pa.Table | pa.RecordBatch) -> dict[tuple[str, int], int]:
    """(transactional id, producer id) -> the highest epoch of its records (none: 0), over
    Arrow columns (:func:`replay.coordinator.latest_epochs` over rows)."""
    t = pa.table({
        "tid": t.column("transactional_id"),
        "pid": t.column("producer_id"),
        "epoch": pc.fill_null(t.column("producer_epoch").cast(pa.int64()), 0),
    })  # fmt: skip
    t = t.filter(pc.and_(pc.is_valid(t.column("tid")), pc.greater_equal(t.column("pid"), 0)))
    if not t.num_rows:
        return {}
    best = t.group_by(["tid", "pid"], use_threads=False).aggregate([("epoch", "max")])
    return {
        (tid, pid): epoch
        for tid, pid, epoch in zip(
            *(best.column(c).to_pylist() for c in ("tid", "pid", "epoch_max")), strict=True
        )  # fmt: skip
    }


# -- groups -----------------------------------------------------------------------------------------

# a `__consumer_offsets` partition's events as its groups' replay reads them (replay.groups):
# commits (``_order`` 1), group metadata (0) and COMMIT/ABORT markers (2); timestamps as epoch
# milliseconds, members reduced to their id and assignment
GROUP_EVENT_COLUMNS = (
    "event", "group_id", "log_partition", "log_offset", "record_timestamp", "generation",
    "protocol_type", "protocol", "leader", "members", "is_tombstone", "topic", "partition",
    "committed_offset", "commit_timestamp", "is_transactional", "producer_id", "control_type",
    "_order",
)  # fmt: skip
COMMIT_COLUMNS = (
    "group_id", "log_partition", "log_offset", "record_timestamp", "is_tombstone", "topic",
    "partition", "committed_offset", "commit_timestamp", "is_transactional", "producer_id",
)  # fmt: skip
METADATA_COLUMNS = (
    "group_id", "log_partition", "log_offset", "record_timestamp", "generation",
    "protocol_type", "protocol", "leader", "members", "is_tombstone",
)  # fmt: skip
MARKER_COLUMNS = ("base_offset", "max_timestamp", "producer_id", "control_type")
# events in log order: by `__consumer_offsets` partition and offset, ``_order`` (metadata 0,
# commit 1, marker 2) only as a tie-break
LOG_ORDER = [("log_partition", "ascending"), ("log_offset", "ascending"), ("_order", "ascending")]


def replay_groups(
    pieces: Iterable[pa.Table],
    broadcast: frozenset[str] | set[str],
    flush: Callable[[pa.Table], None],
    resumed: dict | None = None,
    judged: list[dict] | None = None,
) -> dict:
    """A `__consumer_offsets` partition's events (:data:`GROUP_EVENT_COLUMNS`, or the columns
    of one kind of event) as consecutive pieces in log order, every group at once
    (:class:`replay.groups.GroupsReplay`), a block at a time: over columns where the block
    allows it, else as Python rows; the rows (:data:`GROUP_SCHEMA`) leave through ``flush`` a
    block at a time: an exactly-once app's group commits with every transaction. Returns the
    state it ended with (:func:`replay.carried.carry_groups`). ``resumed``, ``judged``: as
    :func:`replay_coordinator`'s (a broadcast generation's overwrites are judged at the end:
    not before it)."""
    rows = T.RowBlocks(GROUP_SCHEMA, flush)
    seen: list[dict] = []
    emit, emit_table = _judged(rows, seen)
    if resumed is not None:
        replay = resume_groups(resumed, broadcast, emit, emit_table)
    else:
        replay = GroupsReplay(broadcast, emit, emit_table)
    for block in T.column_blocks(pieces):
        replay.block(block)
    state = carry_groups(replay)
    if judged is not None:
        judged += seen
    replay.finish()
    rows.close()
    return state


def _events(t: pa.Table, event: str, order: int) -> pa.Table:
    n = t.num_rows
    return t.append_column("event", pa.array([event] * n, pa.string())).append_column(
        "_order", pa.array([order] * n, pa.int32())
    )


def commit_events(commits: pa.Table) -> pa.Table:
    """Offset commit records (:data:`COMMIT_COLUMNS`) as events (a record without a group, a
    key the decoder could not read, is none)."""
    return _events(commits.filter(pc.is_valid(commits.column("group_id"))), "commit", 1)


def metadata_events(metadata: pa.Table) -> pa.Table:
    """Group metadata records (:data:`METADATA_COLUMNS`) as events."""
    return _events(metadata.filter(pc.is_valid(metadata.column("group_id"))), "metadata", 0)


def marker_events(partition: int, markers: pa.Table) -> pa.Table:
    """A `__consumer_offsets` partition's control batches holding a marker
    (:data:`MARKER_COLUMNS`) as events: each completes the transactional commits its producer
    left pending in any group of the partition."""
    n = markers.num_rows
    return pa.table({
        "event": pa.array(["marker"] * n, pa.string()),
        "group_id": pa.nulls(n, pa.string()),
        "log_partition": pa.array([partition] * n, pa.int32()),
        "log_offset": markers.column("base_offset").cast(pa.int64()),
        "record_timestamp": markers.column("max_timestamp").cast(pa.int64()),
        "is_tombstone": pa.array([False] * n),
        "is_transactional": pa.array([False] * n),
        "producer_id": markers.column("producer_id").cast(pa.int64()),
        "control_type": markers.column("control_type").cast(pa.string()),
        "_order": pa.array([2] * n, pa.int32()),
    })  # fmt: skip


def merged_in_order(streams: list[Iterator[pa.Table]], key: str = "log_offset",
                    order: list[tuple[str, str]] = LOG_ORDER) -> Iterator[pa.Table]:  # fmt: skip
    """Tables from several streams, each in increasing ``key`` (non-null) order, as one stream
    sorted by ``order``, a piece at a time: each step hands on every row at or below the
    smallest last key of the streams' current pieces (no stream can bring a smaller one after
    it), so what is held is one piece per stream."""
    its: list[Iterator[pa.Table] | None] = [iter(s) for s in streams]
    heads: list[pa.Table | None] = [None] * len(its)
    while True:
        for i, it in enumerate(its):
            while it is not None and (heads[i] is None or not heads[i].num_rows):
                heads[i] = next(it, None)
                if heads[i] is None:
                    its[i] = it = None
        live = [i for i, h in enumerate(heads) if h is not None and h.num_rows]
        if not live:
            return
        frontier = min(heads[i].column(key)[-1].as_py() for i in live)
        taken = []
        for i in live:
            h = heads[i]
            n = int(np.searchsorted(h.column(key).to_numpy(), frontier, side="right"))
            if n:
                taken.append(h.slice(0, n))
                heads[i] = h.slice(n)
        block = pa.concat_tables(taken, promote_options="permissive")
        yield block.take(pc.sort_indices(block, order))
