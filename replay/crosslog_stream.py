"""One producer id's partitions against its coordinator's log, read as a stream in log order.

The cross-log rules (docs/cross-log.md) and the alignment's programme are in
:mod:`replay.crosslog`; this module feeds them. A Kafka Streams thread under transaction
version 0/1 keeps one producer id (and epoch) for its whole life, writing every partition it
produces to in every transaction: a week of it is millions of coordinator transactions and as
many entries in each partition. So nothing here holds a producer's history at once:

- the rows arrive sorted (:data:`STREAM_ORDER`: what each partition's copy covers, then the
  coordinator's transactions in its log order, then each partition's entries in offset order)
  a batch at a time, from Spark's sort (which spills) or from the one-process runner;
- each (producer, partition)'s two sequences go, as rows of int64 columns, to a bounded store
  (:class:`replay.spill.SpilledRows`), with the few aggregates the rules need (how early the
  coordinator's history starts, whether the partition's times are all known);
- once a partition's entries end, its alignment runs a block of rows at a time
  (:class:`replay.crosslog.Alignment`) and only findings become Python objects.

What grows with the history is on disk, not in memory; what grows in memory is the findings
list and one band row per block (a few bytes per thousand transactions)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders.brokers import unlabelled
from decoders.constants import TRANSACTION_STATE_TOPIC
from replay import coverage as C
from replay import tables as T
from replay.crosslog import (
    ANOMALY,
    E_BOUND_TS,
    E_CLEANED,
    E_COORDINATOR_EPOCH,
    E_EPOCH,
    E_FIRST_OFFSET,
    E_FIRST_TS,
    E_LAST_OFFSET,
    E_MARKER_EPOCH,
    E_MARKER_OFFSET,
    E_MARKER_TS,
    E_OPEN_MS,
    E_OUTCOME,
    E_PINNED,
    E_RECORDS,
    E_RETRY,
    ENTRY_COLUMNS,
    INF,
    L_COMPLETE_TS,
    L_DATA_EPOCH,
    L_INDEX,
    L_MARKER_EPOCH,
    L_MAYBE,
    L_OUTCOME,
    L_PREPARE_TS,
    L_START_TS,
    LISTED_COLUMNS,
    RAW_OPEN,
    RAW_OUTCOMES,
    Alignment,
    Anchor,
    BandTooWide,
    Bounds,
    Coordinator,
    Pair,
    Side,
    entry_times,
    listed_end,
    listed_start,
)
from replay.findings import finding
from replay.grouped import Facts, count_row
from replay.spill import SpilledRows
from replay.tables import int_column, runs, value_codes

CROSSLOG_SCHEMA = T.union(T.FINDINGS, T.CHECK_COUNTS)
# the columns the judgement reads, as the audit's tables give them (replay.tables)
PARTITION_TXN_COLUMNS = (
    "topic", "partition", "producer_epoch", "marker_epoch", "first_offset", "last_offset",
    "marker_offset", "outcome", "record_count", "first_timestamp", "marker_timestamp",
    "coordinator_epoch", "in_cleaned_range", "bound_timestamp",
)  # fmt: skip
COORDINATOR_TXN_COLUMNS = (
    "transactional_id", "data_epoch", "marker_epoch", "outcome", "partitions", "start_timestamp",
    "prepare_timestamp", "complete_timestamp", "maybe",
)  # fmt: skip
PARTITION_TXNS = pa.schema([f for f in T.TRANSACTIONS if f.name in PARTITION_TXN_COLUMNS])
COORDINATOR_TXNS = pa.schema([f for f in T.COORDINATOR_TXNS
                              if f.name in COORDINATOR_TXN_COLUMNS])  # fmt: skip
# what the judgement of one producer id reads: its partition transactions (``_row`` txn) and
# what each partition's copy covers (``_row`` side); its coordinator transactions with the end
# of their `__transaction_state` partition's copy
CROSSLOG_LEFT = pa.schema([
    pa.field("_row", pa.string()),
    *(f for f in T.TRANSACTIONS
      if f.name in PARTITION_TXN_COLUMNS or f.name in ("pinned_records", "open_ms")),
    pa.field("complete_from", pa.int64()), pa.field("copy_end_timestamp", pa.int64()),
])  # fmt: skip
CROSSLOG_COORD = pa.schema([
    *(f for f in T.COORDINATOR_TXNS
      if f.name in COORDINATOR_TXN_COLUMNS or f.name in ("timeout_ms", "log_partition",
                                                         "first_log_offset", "history_from_start",
                                                         "latest_epoch")),
    pa.field("copy_end_ts", pa.int64()),
])  # fmt: skip
# The stream one task judges: every row a producer's partition side (what the copy covers), a
# coordinator transaction or a partition entry, in shared columns. Each kind puts its own
# fields in the same slots (a union of the three with a column per field sent ~40 columns of
# mostly nulls per row through Arrow, and a struct of the coordinator's: the transfer took
# several times the judgement); :func:`stream_fields` names them back per kind.
SIDE, COORD, TXN = 0, 1, 2
KIND = "_kind"
INT_SLOTS = tuple(f"_i{n}" for n in range(13))
TEXT_SLOTS = ("_s0", "_s1", "_s2")
STREAM_FIELDS: dict[int, dict[str, str]] = {
    SIDE: {"_i0": "complete_from", "_i1": "copy_end_timestamp"},
    COORD: dict(zip(INT_SLOTS + TEXT_SLOTS, (
        "data_epoch", "marker_epoch", "start_timestamp", "prepare_timestamp",
        "complete_timestamp", "maybe", "timeout_ms", "history_from_start", "latest_epoch",
        "copy_end_ts", "log_partition", "first_log_offset", None, "outcome", "transactional_id",
        "partitions",
    ), strict=True)),
    TXN: dict(zip(INT_SLOTS + TEXT_SLOTS, (
        "first_offset", "last_offset", "marker_offset", "record_count", "producer_epoch",
        "marker_epoch", "coordinator_epoch", "first_timestamp", "marker_timestamp",
        "bound_timestamp", "pinned_records", "open_ms", "in_cleaned_range", "outcome", None,
        None,
    ), strict=True)),
}  # fmt: skip
for _fields in STREAM_FIELDS.values():
    for _slot in [k for k, v in _fields.items() if v is None]:
        del _fields[_slot]
# (cluster, producer id, kind, topic, partition, position): position the entry's first offset
# (a marker-only entry's marker offset), or the coordinator transaction's log partition and
# offset in it
STREAM_ORDER = (T.CLUSTER, "producer_id", KIND, "topic", "partition", "_p1", "_p2")
# a coordinator transaction's partitions in its text slot: "topic:partition,..." (a topic name
# holds only [a-zA-Z0-9._-]: neither separator)
PARTITION_LIST = pa.list_(pa.struct([("topic", pa.string()), ("partition", pa.int32())]))


# The stream's most repeated text, as the Spark plan sends it (replay.plan.crosslog_keyed): each
# row's cluster, topic and outcome as a code into a list the plan knows, the text itself only
# where a value has no code. Every row carries the cluster's name and nearly every one a topic
# and an outcome; as text they made Spark's shuffle, sort and Arrow conversion of a stream about
# a third slower (docs/benchmarks.md).
CLUSTER_CODE, TOPIC_CODE, OUTCOME_CODE = "_c", "_tc", "_oc"


@dataclass(frozen=True)
class StreamCodes:
    """What the codes stand for: the cluster of each cluster code (``_c``: a code beyond them
    is a hash, and the row keeps its text), the topic of each partition code (``_tc``), and the
    outcome of each outcome code (``_oc``)."""

    clusters: tuple[str, ...]
    topics: tuple[str, ...]
    outcomes: tuple[str, ...] = RAW_OUTCOMES

    def decoded(self, t: pa.Table) -> pa.Table:
        """``t`` with its cluster, topic and outcome as text again, and no codes."""
        c = t.column(CLUSTER_CODE).to_numpy()
        known = (c >= 0) & (c < len(self.clusters))
        if known.any():
            names = pa.array(self.clusters, pa.string()).take(pa.array(np.where(known, c, 0)))
            t = _replaced(t, T.CLUSTER, pc.if_else(pa.array(known), names, t.column(T.CLUSTER)))
        for text, code, values in (("topic", TOPIC_CODE, self.topics),
                                   ("_s0", OUTCOME_CODE, self.outcomes)):  # fmt: skip
            codes = t.column(code)
            if codes.null_count < len(codes):
                got = pa.array(values, pa.string()).take(codes)
                t = _replaced(t, text, pc.coalesce(t.column(text), got))
        return t.drop_columns([CLUSTER_CODE, TOPIC_CODE, OUTCOME_CODE])


def _replaced(t: pa.Table, name: str, column) -> pa.Table:
    return t.set_column(t.schema.get_field_index(name), name, column)


def stream_fields(piece: pa.Table, kind: int) -> pa.Table:
    """One kind's rows of the stream with their fields named back (a coordinator
    transaction's partitions as a list again)."""
    fields = STREAM_FIELDS[kind]
    keep = ["topic", "partition"] if kind != COORD else []
    t = piece.select([*keep, *fields]).rename_columns([*keep, *fields.values()])
    if kind == COORD:
        t = t.set_column(t.schema.get_field_index("partitions"), "partitions",
                         _partition_lists(t.column("partitions")))  # fmt: skip
    return t


def _partition_lists(text: pa.ChunkedArray) -> pa.Array:
    """ "topic:partition,..." (null: unknown, empty: none) as lists of (topic, partition)."""
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    lists = pc.split_pattern(
        pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text), ","
    )
    flat = pc.list_flatten(lists)
    pairs = pc.split_pattern(flat, ":", max_splits=1)
    items = pa.StructArray.from_arrays(
        [pc.list_element(pairs, 0), pc.cast(pc.list_element(pairs, 1), pa.int32())],
        names=["topic", "partition"],
    )
    out = pa.ListArray.from_arrays(lists.offsets, items, mask=pc.is_null(text))
    return out.cast(PARTITION_LIST)


ENTRY_FIELDS = {
    E_FIRST_OFFSET: "first_offset", E_LAST_OFFSET: "last_offset",
    E_MARKER_OFFSET: "marker_offset", E_RECORDS: "record_count", E_EPOCH: "producer_epoch",
    E_MARKER_EPOCH: "marker_epoch", E_COORDINATOR_EPOCH: "coordinator_epoch",
    E_FIRST_TS: "first_timestamp", E_MARKER_TS: "marker_timestamp",
    E_BOUND_TS: "bound_timestamp", E_PINNED: "pinned_records", E_OPEN_MS: "open_ms",
}  # fmt: skip
LISTED_FIELDS = {
    L_DATA_EPOCH: "data_epoch", L_MARKER_EPOCH: "marker_epoch",
    L_START_TS: "start_timestamp", L_PREPARE_TS: "prepare_timestamp",
    L_COMPLETE_TS: "complete_timestamp",
}  # fmt: skip


def _raw_outcomes(t: pa.Table) -> np.ndarray:
    """Outcome codes as written: 0 null, 1 COMMIT, 2 ABORT, 3 OPEN."""
    codes = pc.add(pc.index_in(t.column("outcome"), pa.array(RAW_OUTCOMES)), 1)
    return pc.fill_null(codes, 0).to_numpy().astype(np.int64)


def _holds(seqs: _Sequences, q: int, p: int, index: int, position: int) -> bool:
    """Whether coordinator transaction ``q`` of the partition's is the producer's ``index``-th
    and entry ``p`` lies at ``position``: an anchor's pair."""
    a, b = seqs.listed.rows(q, q + 1), seqs.entries.rows(p, p + 1)
    return bool(len(a) and len(b) and a[0, L_INDEX] == index and _positions(b)[0] == position)


def _positions(e: np.ndarray) -> np.ndarray:
    """Each entry's place in its partition: its first offset (a marker-only one's marker)."""
    return np.where(e[:, E_FIRST_OFFSET] >= 0, e[:, E_FIRST_OFFSET], e[:, E_MARKER_OFFSET])


def _value(v: int) -> int | None:
    return None if v < 0 else int(v)


def _outcome_text(code: int) -> str | None:
    return RAW_OUTCOMES[code - 1] if code > 0 else None


class _Sequences:
    """One partition's two sequences for this producer, and what the rules ask of them whole
    (kept as they arrive: nothing is read twice to know them)."""

    def __init__(self, side: Side) -> None:
        self.side = side
        self.listed = SpilledRows(LISTED_COLUMNS)
        self.entries = SpilledRows(ENTRY_COLUMNS)
        self.listing = 0  # coordinator transactions listing it (partitions known)
        self.known_lo: int | None = None  # earliest start of those with a known start
        self.known_any, self.all_known_or_maybe = False, True
        self.min_ts: int | None = None  # entries' earliest known time
        self.max_ts: int | None = None  # ... and latest
        self.all_ts = True  # ... and whether every entry's is known
        self.with_data = 0  # entries with records
        self.cleaned_with_data = 0  # ... of them in the partition's cleaned range
        self.cleaned = 0  # entries in the partition's cleaned range: the first ones
        self.last: np.ndarray | None = None  # the last entry (a retry repeats it)

    def add_listed(self, rows: np.ndarray) -> None:
        lo = listed_start(rows)
        known = lo >= 0
        maybe = rows[:, L_MAYBE] > 0
        self.listing += int((~maybe).sum())
        if known.any():
            self.known_any = True
            low = int(lo[known].min())
            self.known_lo = low if self.known_lo is None else min(self.known_lo, low)
        self.all_known_or_maybe &= bool((known | maybe).all())
        self.listed.append(rows)

    def add_entries(self, rows: np.ndarray) -> None:
        # a marker written again after a coordinator failover: no data, not open, the same
        # outcome and marker epoch as the entry before it (with nothing in between)
        before = np.concatenate([self.last[None, :], rows[:-1]]) if self.last is not None else rows[:-1]  # fmt: skip
        same = np.zeros(len(rows), bool)
        if len(before):
            tail = slice(len(rows) - len(before), len(rows))
            same[tail] = (before[:, E_OUTCOME] == rows[tail, E_OUTCOME]) & (
                before[:, E_MARKER_EPOCH] == rows[tail, E_MARKER_EPOCH]
            )
        rows[:, E_RETRY] = (
            (rows[:, E_RECORDS] <= 0) & (rows[:, E_OUTCOME] != RAW_OPEN) & same
        ).astype(np.int64)
        self.last = rows[-1].copy()
        ts = entry_times(rows)
        self.all_ts &= bool((ts >= 0).all())
        if (ts >= 0).any():
            low, high = int(ts[ts >= 0].min()), int(ts[ts >= 0].max())
            self.min_ts = low if self.min_ts is None else min(self.min_ts, low)
            self.max_ts = high if self.max_ts is None else max(self.max_ts, high)
        self.with_data += int((rows[:, E_RECORDS] > 0).sum())
        self.cleaned_with_data += int(((rows[:, E_RECORDS] > 0) & (rows[:, E_CLEANED] > 0)).sum())
        self.cleaned += int((rows[:, E_CLEANED] > 0).sum())
        self.entries.append(rows)

    def close(self) -> None:
        self.listed.close()
        self.entries.close()


BLOCK_ROWS = 8_192  # rows read at once when a prefix is scanned (~1 MB of entries)
PIECE_ROWS = 8_192  # input rows turned into columns at once


def _pieces(t: pa.Table) -> Iterator[pa.Table]:
    for start in range(0, t.num_rows, PIECE_ROWS):
        yield t.slice(start, PIECE_ROWS)


def _prefix(store: SpilledRows, hold: callable) -> int:
    """How many of the first rows of ``store`` satisfy ``hold`` (row blocks -> bools)."""
    size = len(store)
    for start in range(0, size, BLOCK_ROWS):
        ok = hold(store.rows(start, start + BLOCK_ROWS))
        if not ok.all():
            return start + int(np.argmin(ok))
    return size


def _last_end(store: SpilledRows, start: int, stop: int, pair: Pair) -> int | None:
    """The latest end a match's window gives coordinator transactions [start, stop) of
    ``store`` (:meth:`replay.crosslog.Pair.reach_end`); None if any one's is unknown."""
    last = None
    for s in range(start, stop, BLOCK_ROWS):
        end = pair.reach_end(store.rows(s, min(s + BLOCK_ROWS, stop)))
        if not len(end):
            continue
        if (end < 0).any():
            return None
        last = int(end.max()) if last is None else max(last, int(end.max()))
    return last


def _suffix(store: SpilledRows, hold: callable) -> int:
    """How many of the last rows of ``store`` satisfy ``hold``."""
    size = end = len(store)
    while end > 0:
        start = max(0, end - BLOCK_ROWS)
        ok = hold(store.rows(start, end))
        if not ok.all():
            return size - (end - int(np.argmin(ok[::-1])))
        end = start
    return size


class ProducerJudge:
    """The cross-log judgement of one producer id, fed in stream order (:data:`STREAM_ORDER`):
    :meth:`sides`, then :meth:`coordinator` (any number of pieces), then :meth:`entries` (any
    number of pieces, each partition's contiguous), then :meth:`finish`.

    ``coordinator_view`` and ``side_views`` give the views outright (the pure tests), else
    they come from the rows. ``facts``, when given, also judges hanging transactions (their
    timeout is the coordinator's). ``anchors`` pin where partitions' alignments start
    (:class:`replay.crosslog.Anchor`); ``matching``: partitions whose entries' matched
    coordinator transactions are kept (:attr:`matches`, for a slice's anchor)."""

    def __init__(self, producer_id: int, bounds: Bounds, facts: Facts | None = None,
                 coordinator_view: Coordinator | None = None,
                 side_views: dict[tuple[str, int], Side] | None = None,
                 anchors: dict[tuple[str, int], Anchor] | None = None,
                 matching: set[tuple[str, int]] | None = None) -> None:  # fmt: skip
        self.pid, self.bounds, self.facts = producer_id, bounds, facts
        self.anchors = anchors or {}
        # the producer-wide index of each anchor's coordinator transactions, by partition
        self.anchor_index: dict[tuple[str, int], int] = {}
        self.anchor_end_index: dict[tuple[str, int], int] = {}
        self.matching = matching or set()
        # per partition: (entry position, log partition, log offset) rows of its entries
        # every cheapest alignment matched, and the coordinator transactions' places by index
        self.matches: dict[tuple[str, int], list[np.ndarray]] = {}
        self._places: list[np.ndarray] = []
        self.view = coordinator_view
        self.sequences: dict[tuple[str, int], _Sequences] = {
            tp: _Sequences(side) for tp, side in (side_views or {}).items()
        }
        self.with_entries: set[tuple[str, int]] = set()
        self.listed: set[tuple[str, int]] = set()
        self.coordinator_rows = 0
        self.tid: str | None = None
        self.timeout_ms: int | None = None
        self.history_from_start: bool | None = None
        self.copy_end_ts: int | None = None
        self.latest_epoch: int | None = None
        self.known_from_ts: int | None = None  # see Coordinator.known_from_ts
        self.current: tuple[str, int] | None = None
        self.found: list[tuple[tuple[str, int], list[dict]]] = []
        self.hanging: list[dict] = []
        self.stats = {"judged": 0, "undecidable": 0, "unjudged": 0}
        # the same by partition, and the open transactions judged (or not) as hanging: the
        # coverage's "transactions" and "hanging" families
        self.counts: dict[tuple[str, int], dict[str, int]] = {}
        # a listed partition -> the incarnations of its topic in the dump (decoders.brokers:
        # a re-created topic's other ones are labelled `<topic>~<id>`)
        self.incarnations: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for tp in self.sequences:
            self._incarnation(tp)

    def _count(self, tp: tuple[str, int], what: str, n: int) -> None:
        if n:
            c = self.counts.setdefault(tp, {})
            c[what] = c.get(what, 0) + n
            total = "judged" if what == "judged_cleaned" else what  # stats: entries only
            if total in self.stats:
                self.stats[total] += n

    def _incarnation(self, tp: tuple[str, int]) -> None:
        """Route the coordinator's listings of a topic name to every incarnation of it; where
        there are several, none reaches back to the name's start (the coordinator's
        transactions of the other incarnations' time lie before, or after, its history)."""
        base = (unlabelled(tp[0]), tp[1])
        members = self.incarnations.setdefault(base, [])
        if tp not in members:
            members.append(tp)
        if len(members) > 1:
            for m in members:
                seqs = self.sequences[m]
                seqs.side = Side(complete_from_start=False, copy_end_ts=seqs.side.copy_end_ts)

    # -- input ---------------------------------------------------------------------------------
    def sides(self, t: pa.Table) -> None:
        for r in t.select(["topic", "partition", "complete_from", "copy_end_timestamp"]).to_pylist():  # fmt: skip
            side = Side(complete_from_start=r["complete_from"] == 0,
                        copy_end_ts=r["copy_end_timestamp"])  # fmt: skip
            tp = (r["topic"], r["partition"])
            if tp not in self.sequences:
                self.sequences[tp] = _Sequences(side)
                self._incarnation(tp)

    def coordinator(self, t: pa.Table) -> None:
        """Coordinator transactions of this producer, in the coordinator's log order."""
        for piece in _pieces(t):
            self._coordinator(piece)

    def _coordinator(self, t: pa.Table) -> None:
        if self.tid is None:
            self.tid = next((v for v in t.column("transactional_id").to_pylist() if v), None)
        if self.history_from_start is None and "history_from_start" in t.column_names:
            self.history_from_start = bool(t.column("history_from_start")[0].as_py())
        for name, attr in (("copy_end_ts", "copy_end_ts"), ("latest_epoch", "latest_epoch"),
                           ("timeout_ms", "timeout_ms")):  # fmt: skip
            if name in t.column_names:
                top = pc.max(t.column(name)).as_py()
                if top is not None:
                    now = getattr(self, attr)
                    setattr(self, attr, top if now is None else max(now, top))
        rows = np.zeros((t.num_rows, LISTED_COLUMNS), np.int64)
        rows[:, L_INDEX] = np.arange(self.coordinator_rows, self.coordinator_rows + t.num_rows)
        for col, name in LISTED_FIELDS.items():
            rows[:, col] = int_column(t, name)
        rows[:, L_OUTCOME] = _raw_outcomes(t)
        rows[:, L_MAYBE] = np.maximum(int_column(t, "maybe"), 0)
        known = rows[(rows[:, L_MAYBE] == 0) & (rows[:, L_START_TS] >= 0), L_START_TS]
        if len(known) and self.known_from_ts is None:  # log order: the first such one
            self.known_from_ts = int(known[0])
        if (self.anchors or self.matching) and "first_log_offset" in t.column_names:
            places = np.stack([int_column(t, "log_partition"),
                               int_column(t, "first_log_offset")], axis=1)  # fmt: skip
            if self.matching:
                self._places.append(places)
            for tp, a in self.anchors.items():
                for found, offset in ((self.anchor_index, a.log_offset),
                                      (self.anchor_end_index, a.end_log_offset)):  # fmt: skip
                    at = np.flatnonzero((places[:, 0] == a.log_partition) & (places[:, 1] == offset))  # fmt: skip
                    if offset is not None and len(at):
                        found[tp] = int(rows[at[0], L_INDEX])
        self.coordinator_rows += t.num_rows
        self._list(t.column("partitions"), rows)

    def _list(self, partitions: pa.ChunkedArray, rows: np.ndarray) -> None:
        """Each partition's coordinator transactions: those listing it, and those whose
        partitions are unknown (maybe), in order."""
        if isinstance(partitions, pa.ChunkedArray):
            partitions = partitions.combine_chunks()
        maybe = np.flatnonzero(rows[:, L_MAYBE] > 0)
        owners_of: dict[tuple[str, int], np.ndarray] = {}
        flat = pc.list_flatten(partitions)
        if len(flat):
            owners = pc.list_parent_indices(partitions).to_numpy()
            topics, codes = value_codes(flat.field("topic"))
            parts = pc.fill_null(flat.field("partition").cast(pa.int64()), -1).to_numpy()
            order = np.lexsort((owners, parts, codes))
            codes, parts, owners = codes[order], parts[order], owners[order]
            for a, b in runs(codes, parts):
                for tp in self.incarnations.get((topics[codes[a]], int(parts[a])), ()):
                    run = owners[a:b]  # sorted (the lexsort's last key): each owner once
                    owners_of[tp] = run[np.concatenate(([True], run[1:] != run[:-1]))]
                    self.listed.add(tp)
        targets = self.sequences if len(maybe) else owners_of
        for tp in targets:
            chosen = owners_of.get(tp, np.zeros(0, np.int64))
            if len(maybe):
                chosen = np.union1d(chosen, maybe)
            if len(chosen):
                self.sequences[tp].add_listed(rows[chosen.astype(np.int64)])

    def entries(self, t: pa.Table) -> None:
        """Partition entries of this producer, sorted by partition and offset."""
        for piece in _pieces(t):
            self._entries(piece)

    def _entries(self, t: pa.Table) -> None:
        if self.facts is not None:
            self._hanging(t)
        records = int_column(t, "record_count")
        if not self._judging:
            topics, codes = value_codes(t.column("topic"))
            parts = int_column(t, "partition")
            for a, b in runs(codes, parts):
                tp = (topics[codes[a]], int(parts[a]))
                self._count(tp, "unjudged", int((records[a:b] > 0).sum()))
            return
        outcomes = _raw_outcomes(t)
        keep = (outcomes != RAW_OPEN) | (records > 0)  # open without data: none
        if not keep.any():
            return
        # the rows as numpy, then the kept ones (filtering the Arrow piece first copied every
        # column of it once more: a long-lived producer's stream is millions of entries)
        rows = np.zeros((t.num_rows, ENTRY_COLUMNS), np.int64)
        for col, name in ENTRY_FIELDS.items():
            rows[:, col] = int_column(t, name)
        rows[:, E_OUTCOME] = outcomes
        rows[:, E_CLEANED] = np.maximum(int_column(t, "in_cleaned_range"), 0)
        topics, codes = value_codes(t.column("topic"))
        parts = int_column(t, "partition")
        if not keep.all():
            rows, codes, parts = rows[keep], codes[keep], parts[keep]
        for a, b in runs(codes, parts):
            tp = (topics[codes[a]], int(parts[a]))
            if tp != self.current:
                self._close_current()
                self.current = tp
            seqs = self.sequences.get(tp)
            if seqs is not None:  # a partition not in the dump: cannot tell
                self.with_entries.add(tp)
                seqs.add_entries(rows[a:b])

    @property
    def _judging(self) -> bool:
        return self.coordinator_rows > 0 and (self.view is not None or self.history_from_start is not None)  # fmt: skip

    def _coordinator_view(self) -> Coordinator:
        if self.view is not None:
            return self.view
        return Coordinator(complete_from_start=bool(self.history_from_start),
                           copy_end_ts=self.copy_end_ts, latest_epoch=self.latest_epoch,
                           known_from_ts=self.known_from_ts)  # fmt: skip

    def _close_current(self) -> None:
        if self.current is not None and self.current in self.sequences:
            self._judge(self.current)
        self.current = None

    # -- judgement -----------------------------------------------------------------------------
    def finish(self) -> tuple[list[dict], dict[str, int]]:
        """The findings (split_outcome, missing_marker, write_outside_transaction,
        orphan_marker by partition, then hanging_transaction) and the counts: ``judged``
        (partition transactions aligned with the coordinator's), ``undecidable`` (either
        explanation fits), ``unjudged`` (no coordinator history for this producer)."""
        self._close_current()
        if self._judging:
            for tp in sorted(self.listed - self.with_entries):
                self._judge(tp)
        for seqs in self.sequences.values():
            seqs.close()
        findings = [f for _, found in sorted(self.found, key=lambda x: x[0]) for f in found]
        return findings + self.hanging, self.stats

    def _before_history(self, seqs: _Sequences, coord: Coordinator) -> tuple[int, int]:
        """How many of the partition's first entries, and of the coordinator's first
        transactions listing it, lie before anything the other log's surviving history could
        align them with.

        `__transaction_state` is compacted: below the cleaner's point only each transactional
        id's latest record survives, so the coordinator's history of a producer usually starts
        long after its partitions' (a week of markers against a few hours of records). A
        partition entry older than the order window before every coordinator transaction
        listing the partition whose start is known can match none of them (nor could it be
        judged by one whose partitions are unknown), and the coordinator's history does not
        reach back to the producer's start: such entries lie before it, cannot be judged and
        are counted as without coordinator history. Likewise a coordinator transaction that
        ended more than the window before every entry of a partition whose surviving history
        does not reach back to its start (retention, cleaning). Left in, they would widen the
        alignment's band by the history before the other log's start."""
        window = self.bounds.window_ms
        if not len(seqs.listed) or not len(seqs.entries):
            return 0, 0
        p = q = 0
        if not coord.complete_from_start and seqs.known_any and seqs.all_known_or_maybe:
            cut = seqs.known_lo - window
            if coord.known_from_ts is not None:  # inside the known history: judged
                cut = min(cut, coord.known_from_ts + self.bounds.tolerance_ms + 1)
            p = _prefix(seqs.entries, lambda e: (entry_times(e) >= 0) & (entry_times(e) < cut))
        if not seqs.side.complete_from_start and seqs.all_ts and seqs.min_ts is not None:
            first = seqs.min_ts
            q = _prefix(seqs.listed,
                        lambda a: (listed_end(a) >= 0) & (listed_end(a) + window < first))  # fmt: skip
        return p, q

    def _after_history(self, seqs: _Sequences, pair: Pair, p: int, q: int) -> Pair:
        """``pair`` without the last coordinator transactions listing the partition that lie
        after everything of its copy, or else the last entries that lie after everything the
        coordinator lists there: the end's counterpart of :meth:`_before_history`.

        Copies are taken at different moments. A partition copied an hour before the
        coordinator's `__transaction_state` lacks the last hour of a Streams thread's
        transactions there (36,000, committing every 100 ms), and the alignment's band is as
        wide as that difference along the whole history: the cost grew as the producer's life
        times the distance between the copies (a day's history an hour apart: ~10^10 cells,
        and the band's kept rows tens of GB on disk). Left out only where the alignment of the
        rest is the same without them: each matches nothing (:func:`replay.crosslog._match`'s
        window: a transaction starting more than the order window after every entry's time,
        an entry more than the window after every listed transaction's end) and each is
        skipped after the other sequence's end at no anomaly (that copy may predate it). The
        alignment of the rest is then the whole one's unless a cheapest alignment of the rest
        skips one of the other sequence's rows after its new end for less than a skip inside
        it costs (where the cut ones followed): the alignment tells (``cheaper_end``) and
        :meth:`_judge` aligns the whole sequences again. The cut ones count as the whole
        alignment judges them: skipped, no finding."""
        window = self.bounds.window_ms
        n_end, m_end = q + pair.n, p + pair.m
        if pair.n < 2 or pair.m < 2:
            return pair
        if seqs.all_ts and seqs.max_ts is not None:

            def after_entries(a: np.ndarray) -> np.ndarray:
                lo = listed_start(a)
                return (lo >= 0) & (lo - window > seqs.max_ts) & (pair.skip_a(a).last < ANOMALY)

            cut = n_end - _suffix(seqs.listed, after_entries)
            if q < cut < n_end:
                return replace(pair, n=cut - q)
        # an entry is cut only past every listed end, the last one's too: that first (one row,
        # not a pass over a long-lived producer's million)
        last = pair.reach_end(seqs.listed.rows(n_end - 1, n_end))
        beyond = seqs.max_ts is not None and last[0] >= 0 and seqs.max_ts - window > last[0]
        last_end = _last_end(seqs.listed, q, n_end, pair) if beyond else None
        if last_end is not None:

            def after_listed(e: np.ndarray) -> np.ndarray:
                ts = entry_times(e)
                return (ts >= 0) & (ts - window > last_end) & (pair.skip_b(e).last < ANOMALY)

            cut = m_end - _suffix(seqs.entries, after_listed)
            if p < cut < m_end:
                return replace(pair, m=cut - p)
        return pair

    def _anchored(self, tp: tuple[str, int], seqs: _Sequences
                  ) -> tuple[int, int, int, int, bool] | None:  # fmt: skip
        """Where the partition's anchor starts both sequences and ends them: entries and
        coordinator transactions before its pair, up to its end pair included, and whether
        that end pair holds (else the sequences' ends); None if the logs lack its pair."""
        anchor, index = self.anchors.get(tp), self.anchor_index.get(tp)
        if anchor is None or index is None:
            return None
        q = _prefix(seqs.listed, lambda a: a[:, L_INDEX] < index)
        p = _prefix(seqs.entries, lambda e: _positions(e) < anchor.entry_offset)
        if not _holds(seqs, q, p, index, anchor.entry_offset):
            return None
        n_end, m_end, closed = len(seqs.listed), len(seqs.entries), False
        end = self.anchor_end_index.get(tp)
        if end is not None and anchor.end_entry_offset is not None:
            q_end = _prefix(seqs.listed, lambda a: a[:, L_INDEX] < end)
            p_end = _prefix(seqs.entries, lambda e: _positions(e) < anchor.end_entry_offset)
            if q_end > q and p_end > p and _holds(seqs, q_end, p_end, end, anchor.end_entry_offset):
                marker = seqs.entries.rows(p_end, p_end + 1)[0, E_MARKER_OFFSET]
                if marker >= 0:  # its marker too: the partition reaches past its span
                    n_end, m_end, closed = q_end + 1, p_end + 1, True
        return p, q, m_end, n_end, closed

    def _judge(self, tp: tuple[str, int]) -> None:
        """Align one partition's entries with the coordinator's transactions listing it."""
        seqs = self.sequences[tp]
        coord = self._coordinator_view()
        side = seqs.side
        anchored = self._anchored(tp, seqs)
        m_end, n_end, closed = len(seqs.entries), len(seqs.listed), False
        if anchored is not None:  # both histories whole from the anchor's pair on
            p, q, m_end, n_end, closed = anchored
            side = Side(complete_from_start=True, copy_end_ts=side.copy_end_ts)
            coord = replace(coord, complete_from_start=True)
        else:
            p, q = self._before_history(seqs, coord)
        early = early_cleaned = 0  # entries left out of the alignment (before it, or after)
        for lo, hi in ((0, p), (m_end, len(seqs.entries))):
            for s in range(lo, hi, BLOCK_ROWS):
                block = seqs.entries.rows(s, min(s + BLOCK_ROWS, hi))
                data = block[:, E_RECORDS] > 0
                early += int(data.sum())
                early_cleaned += int((data & (block[:, E_CLEANED] > 0)).sum())
        self._count(tp, "unjudged", early)
        n, m = n_end - q, m_end - p
        stuck = None if self.timeout_ms is None else self.timeout_ms + self.bounds.tolerance_ms
        pair = Pair(side, coord, self.bounds, n, m, a_before=q > 0 and anchored is None,
                    b_before=p > 0 and anchored is None, cleaned=max(0, seqs.cleaned - p),
                    stuck_ms=stuck, closed=closed)  # fmt: skip
        whole = pair
        if anchored is None and tp not in self.matching:
            pair = self._after_history(seqs, pair, p, q)
        try:
            result = self._aligned(tp, seqs, pair, p, q)
            if pair is not whole and result is not None and result[3][int(pair.n < whole.n)]:
                result = self._aligned(tp, seqs, whole, p, q)  # the cut could matter: whole
        except BandTooWide:  # counted, not judged (crosslog.MAX_KEPT_BYTES)
            self._count(tp, "over_budget", seqs.with_data - early)
            return
        if result is None:  # no alignment is finite
            self._count(tp, "undecidable", whole.m)
            return
        found, undecidable, cleaned_gone, _ = result
        cleaned = seqs.cleaned_with_data - early_cleaned
        self._count(tp, "judged", seqs.with_data - early - cleaned)
        self._count(tp, "judged_cleaned", cleaned)  # by what the cleaner left of them
        self._count(tp, "undecidable", undecidable)
        # listed, nothing of them left in the cleaned range: normal (docs/compaction.md)
        self._count(tp, "listed_cleaned", cleaned_gone)
        if found:
            self.found.append((tp, found))

    def _aligned(self, tp: tuple[str, int], seqs: _Sequences, pair: Pair, p: int, q: int
                 ) -> tuple[list[dict], int, int, np.ndarray] | None:  # fmt: skip
        """The alignment of the partition's entries from the ``p``-th and the coordinator's
        transactions from the ``q``-th (``pair``'s lengths of each): its findings in order, the
        entries either explanation fits, the listed transactions the cleaner removed, and
        whether a cheapest alignment skips a row of either sequence after the other's end for
        less than inside it (:attr:`replay.crosslog.Marks.cheaper_end`); None if no alignment
        is finite."""

        def steps_of(k0: int, k1: int, i0: int, i1: int):
            a = seqs.listed.rows(q + k0, q + k1)
            b = seqs.entries.rows(p + i0, p + i1)
            return pair.steps(a, b, k0, i0)

        alignment = Alignment(pair.n, pair.m, steps_of, tolerance=pair.bounds.tolerance_ms)
        if alignment.total >= INF:
            alignment.close()
            return None
        bad_b: list[tuple[int, dict]] = []
        bad_a: list[tuple[int, dict]] = []
        undecidable = 0
        for which, start, free, bad, match in alignment.marked():
            if which == "b" and tp in self.matching:
                self._matched(tp, seqs, p + start, q, match)
            undecidable += int((free & (bad > 0)).sum())
            for x in np.flatnonzero((bad > 0) & ~free).tolist():
                at = start + x
                if which == "b":
                    rows = seqs.entries.rows(max(p, p + at - 1), p + at + 1)
                    previous = rows[0] if len(rows) == 2 else None  # its entry before, if any
                    finding_ = self._b_finding(int(bad[x]), rows[-1], tp, seqs, previous)
                    bad_b.append((at, finding_))
                else:
                    row = seqs.listed.rows(q + at, q + at + 1)[0]
                    bad_a.append((at, self._a_finding(row, tp)))
        found = [f for _, f in sorted(bad_b, key=lambda x: x[0])]
        found += [f for _, f in sorted(bad_a, key=lambda x: x[0])]
        return found, undecidable, alignment.cleaned_gone, alignment.cheaper_end

    def _matched(self, tp, seqs: _Sequences, at: int, q: int, match: np.ndarray) -> None:
        """Keep the entries from ``at`` that every cheapest alignment matched, with their
        coordinator transactions' places."""
        hit = np.flatnonzero(match >= 0)
        if not len(hit):
            return
        entries = seqs.entries.rows(at, at + len(match))[hit]
        k = match[hit]
        listed = seqs.listed.rows(q + int(k.min()), q + int(k.max()) + 1)
        if len(self._places) != 1:
            self._places = [np.concatenate(self._places)]
        places = self._places[0][listed[k - k.min(), L_INDEX]]
        self.matches.setdefault(tp, []).append(
            np.column_stack([_positions(entries), places]).astype(np.int64)
        )

    # -- findings ------------------------------------------------------------------------------
    def _b_finding(self, bad: int, row: np.ndarray, tp: tuple[str, int], seqs: _Sequences,
                   previous: np.ndarray | None = None) -> dict:  # fmt: skip
        """The finding of entry ``row``; ``previous``: this producer's entry before it in the
        partition, whose marker a late write follows (docs/known-bugs.md, KAFKA-12671)."""
        b = {name: _value(row[col]) for col, name in ENTRY_FIELDS.items()}
        b["outcome"] = _outcome_text(int(row[E_OUTCOME]))
        if bad == 1:
            kind = "missing_marker" if row[E_OUTCOME] == RAW_OPEN else "split_outcome"
        else:
            kind = "write_outside_transaction" if b["record_count"] else "orphan_marker"
        ev: dict = {}  # what the entry alone does not say
        if previous is not None and previous[E_MARKER_OFFSET] >= 0:
            ev["previous_marker_offset"] = int(previous[E_MARKER_OFFSET])
            ev["previous_marker_epoch"] = _value(previous[E_MARKER_EPOCH])
            ev["previous_outcome"] = _outcome_text(int(previous[E_OUTCOME]))
        if kind == "missing_marker":
            prepared = _left_in_prepare(seqs, int(row[E_EPOCH]))
            if prepared is not None:  # the coordinator's log ends at its Prepare record
                ev["coordinator_state"] = "Prepare"
                ev["prepare_timestamp"] = prepared
        return entry_finding(kind, b, tp, self.pid, self.tid, seqs.listing, self.bounds, ev)

    def _a_finding(self, row: np.ndarray, tp: tuple[str, int]) -> dict:
        a = {name: _value(row[col]) for col, name in LISTED_FIELDS.items()}
        a["outcome"] = _outcome_text(int(row[L_OUTCOME]))
        return listed_finding("missing_marker", a, tp, self.pid, self.tid)

    def _hanging(self, t: pa.Table) -> None:
        """An open transaction older than the transaction timeout (plus the clock tolerance:
        its age compares different clients' clocks) that holds later records behind the LSO
        (10.6). Open data where the cleaner has been is one too, lowered to info: the
        cleaner keeps a marker while any data of its transaction remains (``LogCleaner``'s
        ``CleanedTransactionMetadata``) and never cleans past the LSO, so its marker was removed
        before its data (KAFKA-8351), or the copy took the data's segment before a cleaning pass
        and the marker's after it."""
        facts = self.facts
        opened = pc.fill_null(pc.equal(t.column("outcome"), "OPEN"), False)
        pinning = pc.and_(opened, pc.greater(pc.fill_null(t.column("pinned_records"), 0), 0))
        candidates = t.filter(pinning)
        for r in candidates.to_pylist():
            timeout = (
                self.timeout_ms
                if self.timeout_ms is not None
                else facts.topic_timeouts.get(r["topic"], facts.default_transaction_timeout_ms)
            )
            tp = (r["topic"], r["partition"])
            if (r["open_ms"] or 0) <= timeout + facts.bounds.tolerance_ms:
                self._count(tp, "open_young", 1)  # the copy ends before it could hang
                continue
            self._count(tp, "open_judged", 1)
            self.hanging.append(hanging_finding(r, self.pid, self.tid, timeout, facts))


def _left_in_prepare(seqs: _Sequences, epoch: int) -> int | None:
    """The Prepare time of a coordinator transaction listing the partition, with data epoch
    ``epoch``, whose log ends at its Prepare record (no Complete); None if there is none.
    Read a block at a time: only for a finding."""
    for s in range(0, len(seqs.listed), BLOCK_ROWS):
        a = seqs.listed.rows(s, min(s + BLOCK_ROWS, len(seqs.listed)))
        hit = (a[:, L_DATA_EPOCH] == epoch) & (a[:, L_COMPLETE_TS] < 0) & (a[:, L_PREPARE_TS] >= 0)
        if hit.any():
            return int(a[np.flatnonzero(hit)[0], L_PREPARE_TS])
    return None


def entry_finding(kind: str, b: dict, tp, pid, tid, listing: int, bounds: Bounds,
                  extra: dict | None = None) -> dict:  # fmt: skip
    """A partition entry that no cheapest alignment explains without an anomaly; ``extra``:
    evidence from beyond the entry (its producer's entry before it, the coordinator)."""
    topic, partition = tp
    evidence = {
        k: b.get(k)
        for k in (
            "first_offset", "last_offset", "marker_offset", "outcome", "producer_epoch",
            "marker_epoch", "coordinator_epoch", "first_timestamp", "marker_timestamp",
            "record_count",
        )
    }  # fmt: skip
    evidence["clock_tolerance_ms"] = bounds.tolerance_ms
    evidence["coordinator_transactions_listing_partition"] = listing
    if b.get("outcome") == "OPEN" and b.get("first_offset") is not None:
        evidence["open_transaction"] = open_transaction_key(tp[0], tp[1], pid, b["first_offset"])
    where = {
        "topic": topic,
        "partition": partition,
        "producer_id": pid,
        "producer_epoch": b["producer_epoch"],
        "transactional_id": tid,
        "first_offset": b["first_offset"] if b["record_count"] else b["marker_offset"],
        "last_offset": b["marker_offset"] if b["marker_offset"] is not None else b["last_offset"],
        "record_count": b["record_count"],
    }
    if kind == "missing_marker":
        evidence["reason"] = "the partition's copy extends past the coordinator's completion"
    evidence.update(extra or {})
    return finding(kind, _ENTRY_MESSAGES[kind](b, tp, pid, tid), evidence, **where)


# what each kind of finding about a partition entry says, from the entry (``b``)
_ENTRY_MESSAGES = {
    "split_outcome": lambda b, tp, pid, tid: (
        f"a transaction of {tid} (producer {pid}, epoch {b['producer_epoch']}) has a "
        f"{b['outcome']} marker in {tp[0]}-{tp[1]} at offset {b['marker_offset']}, but "
        f"the coordinator decided otherwise for the transaction it aligns with by order"
    ),
    "missing_marker": lambda b, tp, pid, tid: (
        f"the coordinator completed {tid}'s transaction (producer {pid}) listing "
        f"{tp[0]}-{tp[1]}, whose data from offset {b['first_offset']} never got a marker"
    ),
    "write_outside_transaction": lambda b, tp, pid, tid: (
        f"producer {pid} (epoch {b['producer_epoch']}) wrote {b['record_count']} "
        f"transactional records to {tp[0]}-{tp[1]} at {b['first_offset']}.."
        f"{b['last_offset']} outside any transaction the coordinator added that partition to"
    ),
    "orphan_marker": lambda b, tp, pid, tid: (
        f"{b['outcome']} marker of producer {pid} at {tp[0]}-{tp[1]} offset "
        f"{b['marker_offset']} matches no transaction of the coordinator and no open data"
    ),
}


def listed_finding(kind: str, a: dict, tp, pid, tid) -> dict:
    """A coordinator transaction listing a partition that has no marker for it."""
    topic, partition = tp
    evidence = {
        k: a.get(k)
        for k in (
            "outcome", "data_epoch", "marker_epoch", "start_timestamp", "prepare_timestamp",
            "complete_timestamp",
        )
    }  # fmt: skip
    return finding(
        kind,
        f"the coordinator completed {tid}'s transaction ({a['outcome']}, producer {pid}) "
        f"listing {topic}-{partition}, but the partition has no marker for it although later "
        f"ones are there",
        evidence,
        lowered=True,  # the partition may have been added and sent no data
        topic=topic,
        partition=partition,
        producer_id=pid,
        producer_epoch=a["data_epoch"],
        transactional_id=tid,
    )


def open_transaction_key(topic: str, partition: int, pid: int, first_offset: int) -> str:
    """The evidence key shared by a hanging transaction and what left it open (a missing
    marker, a write outside any transaction): the report shows them as cause and effect."""
    return f"{topic}-{partition}:{pid}@{first_offset}"


def hanging_finding(t: dict, pid: int, tid: str | None, timeout: int, facts: Facts) -> dict:
    return finding(
        "hanging_transaction",
        f"transaction of producer {pid} open since offset {t['first_offset']} for "
        f"{t['open_ms']} ms (timeout {timeout} ms) pins {t['pinned_records']} later "
        f"records behind the LSO of {t['topic']}-{t['partition']}",
        {
            "first_offset": t["first_offset"],
            "first_timestamp": t["first_timestamp"],
            "open_ms": t["open_ms"],
            "timeout": timeout,
            "pinned_records": t["pinned_records"],
            "clock_tolerance_ms": facts.bounds.tolerance_ms,
            "open_transaction": open_transaction_key(
                t["topic"], t["partition"], pid, t["first_offset"]
            ),
            **({"in_cleaned_range": True} if t.get("in_cleaned_range") else {}),
        },
        lowered=bool(t.get("in_cleaned_range")),
        topic=t["topic"],
        partition=t["partition"],
        producer_id=pid,
        producer_epoch=t["producer_epoch"],
        transactional_id=tid,
        first_offset=t["first_offset"],
        last_offset=t["last_offset"],
        record_count=t["record_count"],
    )


# -- entry points ------------------------------------------------------------------------------


def columns_of(rows: pa.Table | list[dict], schema: pa.Schema) -> pa.Table:
    """``schema``'s columns of a table, or of rows (timestamps as epoch milliseconds)."""
    if isinstance(rows, pa.Table):
        return rows.select([n for n in schema.names if n in rows.column_names])
    return pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows],
                                schema=schema)  # fmt: skip


def _entry_order(t: pa.Table) -> pa.Table:
    """Entries by partition and offset (a marker-only entry at its marker)."""
    position = pc.coalesce(t.column("first_offset"), t.column("marker_offset"))
    keys = pa.table({"t": t.column("topic"), "p": t.column("partition"), "o": position})
    return t.take(pc.sort_indices(keys, [("t", "ascending"), ("p", "ascending"),
                                         ("o", "ascending")]))  # fmt: skip


def judge_producer(
    producer_id: int,
    partition_txns: pa.Table | list[dict],
    coordinator_txns: pa.Table | list[dict],
    sides: dict[tuple[str, int], Side],
    coordinator: Coordinator | None,
    bounds: Bounds,
    timeout_ms: int | None = None,
) -> tuple[list[dict], dict[str, int]]:
    """One producer's judgement with the views given outright: its rows of the `transactions`
    table in every partition (any order), its coordinator transactions in log order (with
    ``maybe``), what each partition's copy covers and the coordinator's, and the producer's
    transaction timeout. Arrow tables (of :data:`PARTITION_TXNS` and :data:`COORDINATOR_TXNS`
    at least), or rows."""
    judge = ProducerJudge(producer_id, bounds, coordinator_view=coordinator, side_views=sides)
    judge.timeout_ms = timeout_ms
    if coordinator is not None:
        judge.coordinator(columns_of(coordinator_txns, COORDINATOR_TXNS))
    elif len(coordinator_txns):  # the view from the rows, as the scan's stream gives them
        judge.coordinator(columns_of(coordinator_txns, CROSSLOG_COORD))
    judge.entries(_entry_order(columns_of(partition_txns, PARTITION_TXNS)))
    return judge.finish()


def crosslog_tables(producer_id: int, left: pa.Table | list[dict], coord: pa.Table | list[dict],
                    facts: Facts, cluster: str | None = None) -> pa.Table:  # fmt: skip
    """One producer id (of ``cluster``) from whole tables (:data:`CROSSLOG_LEFT`,
    :data:`CROSSLOG_COORD`, or rows), as the stream judges it: findings and counts
    (:data:`CROSSLOG_SCHEMA`)."""
    judge = ProducerJudge(producer_id, facts.bounds, facts,
                          anchors=facts.anchors.get((cluster, producer_id)))  # fmt: skip
    return _results(_fed(judge, left, coord))


def matched_entries(producer_id: int, left: pa.Table | list[dict], coord: pa.Table | list[dict],
                    facts: Facts, tps: set[tuple[str, int]]
                    ) -> dict[tuple[str, int], np.ndarray]:  # fmt: skip
    """Per partition of ``tps``, the entries every cheapest alignment matches with one
    coordinator transaction, as rows (entry position, its log partition, its first record's
    offset) in offset order: the pairs a slice can pin its alignment at (:class:`Anchor`)."""
    judge = _fed(ProducerJudge(producer_id, facts.bounds, facts, matching=set(tps)), left, coord)
    judge.finish()
    out = {}
    for tp in tps:
        found = judge.matches.get(tp)
        rows = np.concatenate(found) if found else np.zeros((0, 3), np.int64)
        out[tp] = rows[np.argsort(rows[:, 0], kind="stable")]
    return out


def producer_inputs(txns: list[dict], coord: list[dict], partitions: list[dict]
                    ) -> tuple[list[dict], list[dict]]:  # fmt: skip
    """One producer's rows of the audit's tables (its ``transactions`` and
    ``coordinator_transactions`` rows, and the ``partitions`` rows of its cluster) as
    :func:`crosslog_tables` reads them: (left, coord)."""
    ends = {p["partition"]: p["copy_end_timestamp"] for p in partitions
            if p["topic"] == TRANSACTION_STATE_TOPIC}  # fmt: skip
    sides = {(p["topic"], p["partition"]): p for p in partitions}
    coord = [{**a, "copy_end_ts": ends.get(a["log_partition"])} for a in coord]
    touched = {(x["topic"], x["partition"]) for x in txns} | {
        (tp["topic"], tp["partition"]) for a in coord for tp in a["partitions"] or []
    }
    left = [{**x, "_row": "txn"} for x in txns] + [
        {"_row": "side", "topic": tp[0], "partition": tp[1],
         "complete_from": sides[tp]["complete_from"],
         "copy_end_timestamp": sides[tp]["copy_end_timestamp"]}
        for tp in sorted(touched) if tp in sides
    ]  # fmt: skip
    return left, coord


def _fed(judge: ProducerJudge, left: pa.Table | list[dict],
         coord: pa.Table | list[dict]) -> ProducerJudge:  # fmt: skip
    left = columns_of(left, CROSSLOG_LEFT)
    coord = columns_of(coord, CROSSLOG_COORD)
    is_txn = pc.fill_null(pc.equal(left.column("_row"), "txn"), False)
    by = [pc.fill_null(coord.column(c), 0) for c in ("log_partition", "first_log_offset")]
    coord = coord.take(pc.sort_indices(pa.table({"p": by[0], "o": by[1]}),
                                       [("p", "ascending"), ("o", "ascending")]))  # fmt: skip
    judge.sides(left.filter(pc.invert(is_txn)))
    judge.coordinator(coord)
    judge.entries(_entry_order(left.filter(is_txn)))
    return judge


COUNTED = {"judged": C.TXNS_JUDGED, "judged_cleaned": C.TXNS_JUDGED_CLEANED,
           "listed_cleaned": C.TXNS_GONE_CLEANED,
           "undecidable": C.TXNS_UNDECIDED,
           "unjudged": C.TXNS_UNJUDGED, "over_budget": C.TXNS_OVER_BUDGET,
           "open_judged": C.HANGING_JUDGED,
           "open_young": C.HANGING_NO_END}  # fmt: skip


def _results(judge: ProducerJudge) -> pa.Table:
    findings, _ = judge.finish()
    counts = [
        count_row(tp[0], tp[1], COUNTED[what], n)
        for tp, by in sorted(judge.counts.items())
        for what, n in by.items()
    ]
    return pa.concat_tables([
        T.rows_table(CROSSLOG_SCHEMA, "finding", findings),
        T.rows_table(CROSSLOG_SCHEMA, "count", counts),
    ])  # fmt: skip


OUT_ROWS = 8_192  # findings and counts yielded at once


def judge_stream(batches: Iterator[pa.RecordBatch], facts: Facts,
                 codes: StreamCodes | None = None) -> Iterator[pa.Table]:  # fmt: skip
    """Every producer id of a stream sorted by :data:`STREAM_ORDER` (rows in
    :data:`STREAM_FIELDS`' slots, as Spark's sort gives a task its partition, a batch at a
    time; with ``codes``, its text as :class:`StreamCodes` sends it): findings and counts of
    each, with the cluster first (:data:`CROSSLOG_SCHEMA`)."""
    judge: ProducerJudge | None = None
    key = None
    out: list[pa.Table] = []
    held = 0

    def done() -> pa.Table:
        return T.with_cluster(_results(judge), key[0], first=True)

    for batch in batches:
        t = pa.Table.from_batches([batch])
        if not t.num_rows:
            continue
        if codes is not None:
            t = codes.decoded(t)
        clusters, cluster_codes = value_codes(t.column(T.CLUSTER))
        pids, kinds = int_column(t, "producer_id"), int_column(t, KIND)
        for a, b in runs(cluster_codes, pids, kinds):
            now = (clusters[cluster_codes[a]], int(pids[a]))
            if now != key:
                if judge is not None:
                    out.append(done())
                    held += out[-1].num_rows
                key = now
                judge = ProducerJudge(now[1], facts.bounds, facts, anchors=facts.anchors.get(now))
            piece = t.slice(a, b - a)
            kind = int(kinds[a])
            if kind == SIDE:
                judge.sides(stream_fields(piece, SIDE))
            elif kind == COORD:
                judge.coordinator(stream_fields(piece, COORD))
            else:
                judge.entries(stream_fields(piece, TXN))
        if held >= OUT_ROWS:
            yield pa.concat_tables(out)
            out, held = [], 0
    if judge is not None:
        out.append(done())
    if out:
        yield pa.concat_tables(out)
