"""Every partition's transactions against the transaction coordinator's log, by order, not clocks.

The two sides are written by different machines: markers carry the partition leader's clock,
`__transaction_state` records the coordinator's, and clocks disagree by hundreds of
milliseconds (seconds on VMs without NTP). A Streams-style producer under transaction version
0/1 commits every 100 ms (or faster) with one producer epoch, so "the coordinator transaction
nearest in time" is not an answer. What both logs do agree on is *order* and *identity*
(docs/cross-log.md):

- the coordinator lists a partition in the Ongoing and Prepare records of every transaction that
  added it (Complete records list none), and writes one marker per listed partition between its
  Prepare and its Complete record (TransactionMarkerChannelManager); the partition appends them
  in that order, so per producer id and partition the coordinator's transactions listing it and
  the partition's markers are two sequences of the same events;
- a marker's producer epoch is the Prepare record's epoch, the data's epoch the Ongoing records'
  (equal under TV0/1 except for a fencing abort; every transaction has its own epoch under TV2);
- a coordinator failover may legally write the same marker twice (a retry, no data between).

:func:`judge_producer` aligns the two sequences per (producer id, partition) by dynamic
programming. A step that is an anomaly (outcomes that differ: split outcome; a coordinator
transaction without its marker, or a marker or open data without a coordinator transaction,
where the logs prove it should be there) costs much more than a step that rests on an
assumption the logs cannot check (history compacted away; a copy taken earlier or later than
the other one, as the copies of different brokers are). Timestamps only *bound*: a match must
fall within a coarse window (minutes), and "this log's copy extends past that event" needs a
margin larger than the clock tolerance. A finding is reported only when every cheapest
alignment makes it: where two explanations with as many anomalies and assumptions tie, the
event is counted as undecidable, never guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from decoders.kernels import NUMBA_CACHE
from replay import tables as T
from replay.findings import finding

INF = 1 << 40
# Costs of an alignment step: an anomaly, and an assumption the logs cannot check (a copy
# taken at another moment, history compacted away). Among the alignments with the fewest
# anomalies, the one resting on the fewest assumptions is preferred.
ANOMALY = 1000
ASSUME = 1


@dataclass(frozen=True)
class Bounds:
    """Clock facts of one judgement: the tolerance any two clocks may differ by, and the coarse
    window a marker may sit from its coordinator transaction (audit.clock_tolerance_ms and
    audit.order_window_ms of conf/default.yaml: minutes, far wider than any clock skew)."""

    tolerance_ms: int
    window_ms: int


@dataclass
class Side:
    """One partition's view: its history is complete from the start (log start 0, never
    cleaned, no offsets missing) and the latest time its copy is known to reach."""

    complete_from_start: bool
    copy_end_ts: int | None  # leader clock (markers) or the last batch's timestamp


@dataclass
class Coordinator:
    """The coordinator's view of one producer id."""

    complete_from_start: bool  # its first record of this producer is the producer's start
    copy_end_ts: int | None  # last record of its `__transaction_state` partition
    latest_epoch: int  # highest producer epoch recorded for this producer id


# -- the per-partition sequences -------------------------------------------------------------------

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


def _ints(t: pa.Table, name: str) -> np.ndarray:
    """An integer (or timestamp) column as int64, null as -1 (every value the rules compare
    is a non-negative offset, epoch or epoch-millisecond)."""
    c = t.column(name)
    if pa.types.is_timestamp(c.type):
        c = c.cast(pa.int64())
    return pc.fill_null(c.cast(pa.int64()), -1).to_numpy()


def _flags(t: pa.Table, name: str) -> np.ndarray:
    return pc.fill_null(t.column(name).cast(pa.bool_()), False).to_numpy(zero_copy_only=False)


def _outcomes(t: pa.Table) -> np.ndarray:
    """:data:`OUTCOME` of each row: 0 none or open, 1 commit, 2 abort."""
    return pc.fill_null(pc.add(pc.index_in(t.column("outcome"), pa.array(OUTCOMES)), 1),
                        0).to_numpy().astype(np.int64)  # fmt: skip


def _same_text(column: pa.ChunkedArray) -> np.ndarray:
    """Whether each row's value equals the previous row's (from the second row; nulls equal)."""
    now, before = column.slice(1), column.slice(0, len(column) - 1)
    equal = pc.fill_null(pc.equal(now, before), False)
    both_null = pc.and_(pc.is_null(now), pc.is_null(before))
    return np.asarray(pc.or_(equal, both_null))


class _Entries:
    """One producer's entries in one partition in offset order, as arrays (marker-only
    entries included: a partition added with no data, or a retried marker, flagged ``retry``
    when it repeats the previous marker with nothing in between)."""

    def __init__(self, t: pa.Table) -> None:
        self.t = t
        self.outcome = _outcomes(t)
        self.records = _ints(t, "record_count")
        self.epoch = _ints(t, "producer_epoch")
        self.marker_epoch = _ints(t, "marker_epoch")
        opened = np.asarray(pc.fill_null(pc.equal(t.column("outcome"), "OPEN"), False))
        self.open = opened
        self.marker_ts = _ints(t, "marker_timestamp")
        self.first_ts = _ints(t, "first_timestamp")
        self.bound_ts = _ints(t, "bound_timestamp")
        self.cleaned = _flags(t, "in_cleaned_range")
        self.retry = np.zeros(t.num_rows, bool)
        if t.num_rows > 1:
            # the previous entry's outcome and marker epoch (None equal to None, as in rows)
            same = self.outcome[1:] == self.outcome[:-1]
            same &= _same_text(t.column("outcome"))
            same &= self.marker_epoch[1:] == self.marker_epoch[:-1]
            self.retry[1:] = (self.records[1:] <= 0) & ~opened[1:] & same

    def __len__(self) -> int:
        return self.t.num_rows

    @property
    def ts(self) -> np.ndarray:
        """Each entry's time as a match's window reads it: its marker's, or an open one's
        first batch's; -1 unknown."""
        return np.where(self.open, self.first_ts, self.marker_ts)

    def after(self, p: int) -> _Entries:
        """The entries from the ``p``-th on (their retry flags as in the whole sequence)."""
        if not p:
            return self
        out = object.__new__(_Entries)
        for name, value in vars(self).items():
            setattr(out, name, value.slice(p) if name == "t" else value[p:])
        return out


class _Listed:
    """The coordinator's transactions of one producer (in its log order) as arrays, and which
    partitions each lists."""

    def __init__(self, t: pa.Table) -> None:
        self.t = t
        self.outcome = _outcomes(t)
        self.data_epoch = _ints(t, "data_epoch")
        self.marker_epoch = _ints(t, "marker_epoch")
        start, prepare = _ints(t, "start_timestamp"), _ints(t, "prepare_timestamp")
        complete = _ints(t, "complete_timestamp")
        self.start = np.where(start >= 0, start, prepare)
        self.end = np.where(complete >= 0, complete, prepare)
        self.complete = complete
        self.maybe = _flags(t, "maybe")
        self.decided = t.column("outcome").is_valid().to_numpy(zero_copy_only=False)
        # partition -> the transactions listing it, in order
        listed = t.column("partitions")
        if isinstance(listed, pa.ChunkedArray):
            listed = listed.combine_chunks()
        flat = pc.list_flatten(listed)
        owners = pc.list_parent_indices(listed).to_numpy()
        self.listing: dict[tuple[str, int], np.ndarray] = {}
        if len(flat):
            topics, codes = _topic_codes(flat.field("topic"))
            parts = pc.fill_null(flat.field("partition").cast(pa.int64()), -1).to_numpy()
            order = np.lexsort((owners, parts, codes))
            codes, parts, owners = codes[order], parts[order], owners[order]
            cuts = np.flatnonzero((codes[1:] != codes[:-1]) | (parts[1:] != parts[:-1])) + 1
            for run in np.split(np.arange(len(order)), cuts):
                a = int(run[0])
                self.listing[(topics[codes[a]], int(parts[a]))] = np.unique(owners[run])
        self.maybes = np.flatnonzero(self.maybe)

    def of(self, tp: tuple[str, int]) -> np.ndarray:
        """The transactions listing ``tp``, and those whose partitions are unknown, in order."""
        return np.union1d(self.listing.get(tp, np.zeros(0, np.int64)), self.maybes)


class _Costs:
    """The cost of each alignment step for one (producer, partition), over arrays: the
    coordinator's transactions ``A`` (indices ``ks`` of :class:`_Listed`) against the
    partition's entries ``B`` (:class:`_Entries`), laid out for the dynamic programme
    (:func:`_align`, :func:`_programme`). A skip's cost depends on its position only through
    "first", "last" or "in between"."""

    def __init__(self, listed: _Listed, ks: np.ndarray, B: _Entries, side: Side,
                 coord: Coordinator, bounds: Bounds, before: tuple[int, int] = (0, 0)
                 ) -> None:  # fmt: skip
        self.listed, self.ks, self.B = listed, ks, B
        self.side, self.coord, self.bounds = side, coord, bounds
        # (partition entries, coordinator transactions) left out before these
        # (:func:`_before_history`): a skip at the start of these is not at the start of the
        # sequences
        self.b_before, self.a_before = before

    def _reaches_past(self, end: int | None, ts: np.ndarray) -> np.ndarray:
        """Whether a copy ending at ``end`` extends past each time by more than the clock
        tolerance (an unknown time or end: no)."""
        if end is None:
            return np.zeros(len(ts), bool)
        return (ts >= 0) & (end > ts + self.bounds.tolerance_ms)

    def _partition_reaches_past(self, ts: np.ndarray) -> np.ndarray:
        return self._reaches_past(self.side.copy_end_ts, ts)

    def _coordinator_reaches_past(self, ts: np.ndarray) -> np.ndarray:
        return self._reaches_past(self.coord.copy_end_ts, ts)

    def skip_a(self) -> Skips:
        """A coordinator transaction listing the partition without an entry there, with no
        entry of the partition before it (first), all of them (last), or some (in between)."""
        L, ks, m = self.listed, self.ks, len(self.B)
        maybe, decided = L.maybe[ks], L.decided[ks]
        n = len(ks)

        def at(first: bool, last: bool) -> np.ndarray:
            cost = np.full(n, ANOMALY, np.int64)  # markers of later transactions are there
            if first and not self.side.complete_from_start:
                return np.full(n, ASSUME, np.int64)  # before the partition's surviving history
            if last:  # nothing after it in the partition: a copy taken earlier?
                ended = np.where(L.complete[ks] >= 0, L.complete[ks], L.end[ks])
                reached = decided & self._partition_reaches_past(ended)
                cost = np.where(reached, ANOMALY, ASSUME)
            else:
                cost = np.where(decided, cost, ASSUME)  # in flight: it may still be written
            return np.where(maybe, ASSUME, cost).astype(np.int64)

        return _by_position(at, not self.b_before, m, n)  # no partition entry left out before

    def skip_b(self) -> Skips:
        """A partition entry no coordinator transaction listing the partition explains, with
        no coordinator transaction before it (first), all of them (last), or some."""
        B, n = self.B, len(self.ks)
        m = len(B)
        excused = B.retry | B.cleaned  # a marker written again; history the cleaner left

        def at(first: bool, last: bool) -> np.ndarray:
            if first and not self.coord.complete_from_start:
                cost = np.full(m, ASSUME, np.int64)  # before the coordinator's history
            elif last:  # after everything the coordinator's copy lists here
                newer = (B.records > 0) & (B.epoch >= 0) & (B.epoch < self.coord.latest_epoch)
                ts = np.where(B.open, B.bound_ts, B.marker_ts)
                reached = newer | self._coordinator_reaches_past(ts)
                cost = np.where(reached, ANOMALY, ASSUME)  # its copy may predate it
            else:
                cost = np.full(m, ANOMALY, np.int64)
            return np.where(excused, ASSUME, cost).astype(np.int64)

        return _by_position(at, not self.a_before, n, m)  # no coordinator one left out before

    def steps(self) -> Steps:
        """Everything the programme needs, as numpy arrays; a match's cost (:func:`_match`)
        rests on identity (epochs), the coarse window and the outcomes."""
        L, ks, B = self.listed, self.ks, self.B
        a = np.stack([
            L.data_epoch[ks], L.marker_epoch[ks], L.start[ks], L.end[ks], L.outcome[ks],
            L.maybe[ks].astype(np.int64), (L.complete[ks] >= 0).astype(np.int64),
            self._partition_reaches_past(L.complete[ks]).astype(np.int64),
        ], axis=1) if len(ks) else np.zeros((0, A_COLUMNS), np.int64)  # fmt: skip
        b = np.stack([
            B.outcome, (B.records > 0).astype(np.int64), B.epoch, B.marker_epoch, B.ts,
        ], axis=1) if len(B) else np.zeros((0, B_COLUMNS), np.int64)  # fmt: skip
        return Steps(a.astype(np.int64), b.astype(np.int64), self.skip_a(), self.skip_b(),
                     self.bounds.window_ms)  # fmt: skip


def _by_position(at: Callable[[bool, bool], np.ndarray], start: bool, others: int,
                 size: int) -> Skips:  # fmt: skip
    """A skip's costs with no entry of the other sequence before it (first: ``at(first=True,
    ...)`` unless ``start`` is false, as when entries were left out before), all of the
    ``others`` before it (last), or some (in between; INF where there is no such place)."""
    first = at(start, others == 0)
    last = at(start and others == 0, True)
    mid = at(False, False) if others > 1 else np.full(size, INF, np.int64)
    return Skips(first, last, mid)


OUTCOMES = ("COMMIT", "ABORT")  # OUTCOME codes 1 and 2
OUTCOME = {None: 0, "OPEN": 0, "COMMIT": 1, "ABORT": 2}

# the columns of the programme's arrays: a coordinator transaction (a row of ``Steps.a``)...
A_DATA_EPOCH, A_MARKER_EPOCH, A_START, A_END, A_OUTCOME, A_MAYBE, A_COMPLETE, A_REACHED = range(8)
A_COLUMNS = 8
# ... and a partition entry (a row of ``Steps.b``)
B_OUTCOME, B_HAS_DATA, B_EPOCH, B_MARKER_EPOCH, B_TS = range(5)
B_COLUMNS = 5


class Skips(NamedTuple):
    """A skip's cost per entry where it falls: with no entry of the other sequence before it,
    after all of them, or in between (:func:`_by_position`)."""

    first: np.ndarray
    last: np.ndarray
    mid: np.ndarray


class Steps(NamedTuple):
    """What the alignment's programme reads (:meth:`_Costs.steps`), one record for the
    compiled kernels: the coordinator's transactions ``a`` (columns ``A_*``) and the
    partition's entries ``b`` (columns ``B_*``), each sequence's skip costs, and the coarse
    window of a match."""

    a: np.ndarray
    b: np.ndarray
    skip_a: Skips
    skip_b: Skips
    window: int


class Marks(NamedTuple):
    """Which steps lie on a cheapest alignment, filled row by row (:func:`_mark_row`)."""

    a_free: np.ndarray  # a coordinator transaction on a cheap step
    a_bad: np.ndarray  # ... on an anomalous skip
    b_free: np.ndarray  # a partition entry on a cheap step
    b_first: np.ndarray  # its first anomaly: 3 * row (+ 0 a match, + 2 a skip)


@njit(cache=NUMBA_CACHE, nogil=True)
def _match(s, k, i):  # pragma: no cover (compiled)
    """The cost of aligning coordinator transaction k with partition entry i."""
    a, b = s.a, s.b
    de, me, lo, hi = a[k, A_DATA_EPOCH], a[k, A_MARKER_EPOCH], a[k, A_START], a[k, A_END]
    outcome, maybe, complete, reach = a[k, A_OUTCOME], a[k, A_MAYBE], a[k, A_COMPLETE], a[k, A_REACHED]  # fmt: skip
    b_out, b_data, b_de, b_me, ts = (
        b[i, B_OUTCOME], b[i, B_HAS_DATA], b[i, B_EPOCH], b[i, B_MARKER_EPOCH], b[i, B_TS],
    )  # fmt: skip
    window = s.window
    if b_data == 1 and de >= 0 and b_de != de:
        return INF  # identity: the data's epoch is the transaction's
    if b_out != 0 and me >= 0 and b_me != me:
        return INF  # the marker's epoch is the Prepare record's
    if ts >= 0 and ((lo >= 0 and ts < lo - window) or (hi >= 0 and ts > hi + window)):
        return INF  # outside the coarse window
    if maybe == 1:
        return ASSUME  # its partitions are unknown: it may have listed this one
    if b_out == 0:  # open data
        if outcome == 0 or complete == 0:
            return 0  # still in flight when the coordinator's copy was taken
        if reach == 1:
            return ANOMALY  # missing marker: the partition's copy reaches past completion
        return ASSUME  # the partition's copy may predate the marker
    if outcome == 0:
        return ASSUME  # decided after the coordinator's copy
    return 0 if outcome == b_out else ANOMALY  # split outcome


@njit(cache=NUMBA_CACHE, nogil=True)
def _skip(costs, x, pos, end):  # pragma: no cover (compiled)
    """Skipping entry ``x`` of one sequence at position ``pos`` of the other (of ``end``)."""
    if pos == 0:
        return costs.first[x]
    if pos == end:
        return costs.last[x]
    return costs.mid[x]


@njit(cache=NUMBA_CACHE, nogil=True)
def _forward_row(s, dlo, dhi, k, f_row, f_next):  # pragma: no cover (compiled)
    """Row ``k`` of the forward costs F (band offsets j = i - k + dhi): its skips of a
    partition entry relaxed within it (so the row is final as it is read, in increasing i), its
    matches and coordinator skips pushed into row ``k + 1``."""
    n, m = s.a.shape[0], s.b.shape[0]
    W = dhi - dlo + 1
    for i in range(max(0, k - dhi), min(m, k - dlo) + 1):
        j = i - k + dhi
        f = f_row[j]
        if f >= INF:
            continue
        if k < n and i < m:  # a match keeps k - i: the same offset in the next row
            c = _match(s, k, i)
            if f + c < f_next[j]:
                f_next[j] = f + c
        if k < n and j > 0:  # skip a coordinator transaction: (k + 1, i)
            c = _skip(s.skip_a, k, i, m)
            if f + c < f_next[j - 1]:
                f_next[j - 1] = f + c
        if i < m and j + 1 < W:  # skip a partition entry: (k, i + 1)
            c = _skip(s.skip_b, i, k, n)
            if f + c < f_row[j + 1]:
                f_row[j + 1] = f + c


@njit(cache=NUMBA_CACHE, nogil=True)
def _backward_row(s, dlo, dhi, k, g_row, g_next):  # pragma: no cover (compiled)
    """Row ``k`` of the backward costs G from row ``k + 1`` (and itself, in decreasing i)."""
    n, m = s.a.shape[0], s.b.shape[0]
    W = dhi - dlo + 1
    for i in range(min(m, k - dlo), max(0, k - dhi) - 1, -1):
        j = i - k + dhi
        g = g_row[j]
        if k < n and i < m:
            g = min(g, _match(s, k, i) + g_next[j])
        if k < n and j > 0:
            g = min(g, _skip(s.skip_a, k, i, m) + g_next[j - 1])
        if i < m and j + 1 < W:
            g = min(g, _skip(s.skip_b, i, k, n) + g_row[j + 1])
        g_row[j] = g


@njit(cache=NUMBA_CACHE, nogil=True)
def _mark_row(s, dlo, dhi, k, total, f_row, g_row, g_next, marks):  # pragma: no cover
    """The steps leaving row ``k`` that lie on a cheapest alignment (F + step + G = total),
    into ``marks`` (:class:`Marks`: an entry's first anomaly in the order row, then match
    before skip)."""
    n, m = s.a.shape[0], s.b.shape[0]
    W = dhi - dlo + 1
    for i in range(max(0, k - dhi), min(m, k - dlo) + 1):
        j = i - k + dhi
        f = f_row[j]
        if f >= INF:
            continue
        if k < n and i < m:
            c = _match(s, k, i)
            if c < INF and f + c + g_next[j] == total:
                marks.a_free[k] = True  # a match frees the coordinator's side; an anomaly is B's
                if c < ANOMALY:
                    marks.b_free[i] = True
                elif 3 * k < marks.b_first[i]:
                    marks.b_first[i] = 3 * k
        if k < n and j > 0:
            c = _skip(s.skip_a, k, i, m)
            if f + c + g_next[j - 1] == total:
                if c < ANOMALY:
                    marks.a_free[k] = True
                else:
                    marks.a_bad[k] = True
        if i < m and j + 1 < W:
            c = _skip(s.skip_b, i, k, n)
            if f + c + g_row[j + 1] == total:
                if c < ANOMALY:
                    marks.b_free[i] = True
                elif 3 * k + 2 < marks.b_first[i]:
                    marks.b_first[i] = 3 * k + 2


@njit(cache=NUMBA_CACHE, nogil=True)
def _programme(s, dlo, dhi, every=0):  # pragma: no cover (compiled)
    """Forward (F) and backward (G) cheapest costs of aligning ``s`` (:class:`Steps`), then
    which steps lie on a cheapest alignment: per entry, whether a cheap step does (free) and
    whether an anomaly does (``b_bad``: 1 an anomalous match, 2 an anomalous skip, whichever
    comes first).

    Only the cells (k, i) with ``dlo <= k - i <= dhi`` (a band around the diagonal) are
    computed, by their offset in the band (:func:`_align` chooses a band that holds every
    cheapest alignment). Memory does not grow with n times the band either: F is computed
    row by row keeping every ``every``-th row (about sqrt(n + 1) by default), and rebuilt a
    block of rows at a time from those while G is computed backwards and the steps are
    marked: two passes of F and one of G, in (n / every + every) rows of the band."""
    n, m = s.a.shape[0], s.b.shape[0]
    W = dhi - dlo + 1
    if every <= 0:
        every = max(1, int(np.sqrt(n + 1)))
    blocks = n // every + 1
    kept = np.full((blocks, W), INF, np.int64)
    row = np.full(W, INF, np.int64)
    nxt = np.full(W, INF, np.int64)
    row[dhi] = 0  # cell (0, 0): d = 0, at offset i - k + dhi
    for k in range(n + 1):
        _forward_row(s, dlo, dhi, k, row, nxt)
        if k % every == 0:
            kept[k // every, :] = row
        if k < n:
            row, nxt = nxt, row
            nxt[:] = INF
    total = row[m - n + dhi]
    marks = Marks(np.zeros(n, np.bool_), np.zeros(n, np.bool_), np.zeros(m, np.bool_),
                  np.full(m, 3 * (n + 1), np.int64))  # fmt: skip
    f_block = np.full((every, W), INF, np.int64)
    scratch = np.full(W, INF, np.int64)
    g_row = np.full(W, INF, np.int64)
    g_next = np.full(W, INF, np.int64)
    for block in range(blocks - 1, -1, -1):
        r0 = block * every
        r1 = min(r0 + every, n + 1)
        f_block[0, :] = kept[block]
        for t in range(r1 - r0 - 1):  # the block's rows again, from its first
            f_block[t + 1, :] = INF
            _forward_row(s, dlo, dhi, r0 + t, f_block[t], f_block[t + 1])
        scratch[:] = INF  # the last row's own skips (its pushes into the next are not kept)
        _forward_row(s, dlo, dhi, r1 - 1, f_block[r1 - r0 - 1], scratch)
        for k in range(r1 - 1, r0 - 1, -1):
            g_row[:] = INF
            if k == n:
                g_row[m - n + dhi] = 0
            _backward_row(s, dlo, dhi, k, g_row, g_next)
            _mark_row(s, dlo, dhi, k, total, f_block[k - r0], g_row, g_next, marks)
            g_row, g_next = g_next, g_row
    b_bad = np.zeros(m, np.int64)
    for i in range(m):
        if marks.b_first[i] < 3 * (n + 1):
            b_bad[i] = 1 if marks.b_first[i] % 3 == 0 else 2
    return total, marks.a_free, marks.a_bad, marks.b_free, b_bad


BAND = 8  # the first band's half-width around the diagonal (cells), widened as needed


def _align(steps: Steps, half_width: int = BAND) -> tuple:
    """:func:`_programme` over a band of cells wide enough to hold every cheapest alignment,
    with the same results as over the whole (n+1) x (m+1) table.

    Why a band suffices: every skip costs at least ASSUME (1), and a path through cell (k, i)
    makes at least |k - i| skips to get there and |(n - m) - (k - i)| after it. With
    D = n - m, a cell outside the band min(0, D) - h <= k - i <= max(0, D) + h therefore lies
    only on paths costing at least |D| + 2(h + 1). When that exceeds the band's cheapest total
    (which no cheaper path outside it can undercut), every cheapest path lies inside, and on
    those cells the band's forward and backward costs are the whole table's. Otherwise the
    band is widened to what the total requires and the programme runs again. A Streams app
    committing every 100 ms has tens of thousands of transactions per partition in a day:
    the whole table would be quadratic in them (gigabytes per producer and partition)."""
    n, m = steps.a.shape[0], steps.b.shape[0]
    D = n - m
    if any(c.size and int(c.min()) < ASSUME for c in (*steps.skip_a, *steps.skip_b)):
        half_width = max(n, m)  # a free skip would void the bound: the whole table
    h = half_width
    while True:
        dlo, dhi = max(min(0, D) - h, -m), min(max(0, D) + h, n)
        out = _programme(steps, dlo, dhi)
        total = int(out[0])
        if (dlo == -m and dhi == n) or (total < INF and abs(D) + 2 * (h + 1) > total):
            return out
        h = (total - abs(D)) // 2 + 1 if total < INF else 2 * h + 1


# -- one producer ------------------------------------------------------------------------------


def judge_producer(
    producer_id: int,
    partition_txns: pa.Table | list[dict[str, Any]],
    coordinator_txns: pa.Table | list[dict[str, Any]],
    sides: dict[tuple[str, int], Side],
    coordinator: Coordinator | None,
    bounds: Bounds,
) -> tuple[list[dict], dict[str, int]]:
    """partition_txns: this producer's rows of the `transactions` table in every partition
    (COMMIT, ABORT, OPEN and marker-only rows with ``bound_timestamp`` for OPEN ones);
    coordinator_txns: its coordinator transactions in log order, with ``maybe`` (partitions
    unknown: history compacted); sides: what each partition's copy covers. Arrow tables (of
    :data:`PARTITION_TXN_COLUMNS` and :data:`COORDINATOR_TXN_COLUMNS` at least), or rows.

    The sequences are read as arrays: a Streams app under TV0/1 keeps one producer id for its
    whole life, and its transactions in every partition it writes are one call; only the rows
    of findings become Python objects.

    Returns the findings and counts: ``judged`` (partition transactions aligned with the
    coordinator's), ``undecidable`` (either explanation fits), ``unjudged`` (no coordinator
    history for this producer)."""
    ptx = columns_of(partition_txns, PARTITION_TXNS)
    ctx = columns_of(coordinator_txns, COORDINATOR_TXNS)
    stats = {"judged": 0, "undecidable": 0, "unjudged": 0}
    records = pc.fill_null(ptx.column("record_count"), 0)
    is_open = pc.fill_null(pc.equal(ptx.column("outcome"), "OPEN"), False)
    data = ptx.filter(pc.or_(pc.invert(is_open), pc.greater(records, 0)))
    if coordinator is None or not ctx.num_rows:
        stats["unjudged"] = int(pc.sum(pc.greater(records, 0).cast(pa.int64())).as_py() or 0)
        return [], stats
    tid = next((v for v in ctx.column("transactional_id").to_pylist() if v), None)
    # the partition's entries in offset order (a marker-only entry at its marker), grouped
    position = pc.coalesce(data.column("first_offset"), data.column("marker_offset"))
    data = data.append_column("_position", position)
    data = data.take(pc.sort_indices(data, [("topic", "ascending"), ("partition", "ascending"),
                                            ("_position", "ascending")]))  # fmt: skip
    slices = _slices(data)
    listed = _Listed(ctx)
    findings: list[dict] = []
    for tp in sorted(set(slices) | set(listed.listing)):
        side = sides.get(tp)
        if side is None:
            continue  # the partition is not in the dump: cannot tell
        ks = listed.of(tp)
        a0, a1 = slices.get(tp, (0, 0))
        B = _Entries(data.slice(a0, a1 - a0))
        listing = int((~listed.maybe[ks]).sum())
        p, q = _before_history(listed, ks, B, side, coordinator, bounds)
        stats["unjudged"] += int((B.records[:p] > 0).sum())
        ks, B = ks[q:], B.after(p)
        costs = _Costs(listed, ks, B, side, coordinator, bounds, (p, q))
        total, a_free, a_bad, b_free, b_bad = _align(costs.steps())
        if total >= INF:
            stats["undecidable"] += len(B)
            continue
        stats["judged"] += int((B.records > 0).sum())
        stats["undecidable"] += int((b_free & (b_bad > 0)).sum() + (a_free & a_bad).sum())
        bad_b = np.flatnonzero((b_bad > 0) & ~b_free)
        bad_a = np.flatnonzero(a_bad & ~a_free)
        if not len(bad_b) and not len(bad_a):
            continue
        for i in bad_b.tolist():
            b = B.t.slice(i, 1).to_pylist()[0]
            if b_bad[i] == 1:
                kind = "missing_marker" if b["outcome"] == "OPEN" else "split_outcome"
            else:
                kind = "write_outside_transaction" if b["record_count"] else "orphan_marker"
            findings.append(_b_finding(kind, b, tp, producer_id, tid, listing, bounds))
        for k in bad_a.tolist():
            a = ctx.slice(int(ks[k]), 1).to_pylist()[0]
            findings.append(_a_finding("missing_marker", a, tp, producer_id, tid))
    return findings, stats


def _before_history(listed: _Listed, ks: np.ndarray, B: _Entries, side: Side,
                    coord: Coordinator, bounds: Bounds) -> tuple[int, int]:  # fmt: skip
    """How many of the partition's first entries, and of the coordinator's first transactions
    listing it, lie before anything the other log's surviving history could align them with.

    `__transaction_state` is compacted: below the cleaner's point only each transactional
    id's latest record survives, so the coordinator's history of a producer usually starts
    long after its partitions' (a week of markers against a few hours of records). A
    partition entry older than the order window before every coordinator transaction listing
    the partition whose start is known can match none of them (nor could it be judged by one
    whose partitions are unknown), and the coordinator's
    history does not reach back to the producer's start: such entries lie before it, cannot
    be judged and are counted as without coordinator history. Likewise a coordinator
    transaction that ended more than the window before every entry of a partition whose
    surviving history does not reach back to its start (retention, cleaning). Left in, they
    made the alignment's band as wide as the history before the other log's start: its cells
    grew with the product of the two logs' lengths."""
    window = bounds.window_ms
    n, m = len(ks), len(B)
    if not n or not m:
        return 0, 0
    p = q = 0
    ts = B.ts
    lo = listed.start[ks]
    known = lo >= 0  # unknown only where the partitions are too (maybe): they judge nothing
    if not coord.complete_from_start and known.any() and (known | listed.maybe[ks]).all():
        early = (ts >= 0) & (ts < lo[known].min() - window)
        p = m if early.all() else int(np.argmin(early))
    if not side.complete_from_start and (ts >= 0).all():
        hi = listed.end[ks]
        ended = (hi >= 0) & (hi + window < ts.min())
        q = n if ended.all() else int(np.argmin(ended))
    return p, q


PARTITION_TXNS = pa.schema([f for f in T.TRANSACTIONS if f.name in PARTITION_TXN_COLUMNS])
COORDINATOR_TXNS = pa.schema([f for f in T.COORDINATOR_TXNS
                              if f.name in COORDINATOR_TXN_COLUMNS])  # fmt: skip


def columns_of(rows: pa.Table | list[dict], schema: pa.Schema) -> pa.Table:
    """``schema``'s columns of a table, or of rows (timestamps as epoch milliseconds): the
    judgement's inputs either way."""
    if isinstance(rows, pa.Table):
        return rows.select(schema.names)
    return pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows],
                                schema=schema)  # fmt: skip


def _slices(t: pa.Table) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> the rows [start, stop) of ``t``, sorted by them."""
    if not t.num_rows:
        return {}
    topics, indices = _topic_codes(t.column("topic"))
    parts = _ints(t, "partition")
    cuts = np.flatnonzero((indices[1:] != indices[:-1]) | (parts[1:] != parts[:-1])) + 1
    starts = np.concatenate(([0], cuts)).tolist()
    stops = np.concatenate((cuts, [t.num_rows])).tolist()
    return {(topics[indices[a]], int(parts[a])): (a, b)
            for a, b in zip(starts, stops, strict=True)}  # fmt: skip


def _topic_codes(column: pa.Array | pa.ChunkedArray) -> tuple[list[str], np.ndarray]:
    """A string column as (its distinct values, each row's index among them)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column)
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)


def _b_finding(kind, b, tp, pid, tid, listing: int, bounds) -> dict:
    topic, partition = tp
    evidence = {
        k: b.get(k)
        for k in (
            "first_offset",
            "last_offset",
            "marker_offset",
            "outcome",
            "producer_epoch",
            "marker_epoch",
            "coordinator_epoch",
            "first_timestamp",
            "marker_timestamp",
            "record_count",
        )  # fmt: skip
    }
    evidence["clock_tolerance_ms"] = bounds.tolerance_ms
    evidence["coordinator_transactions_listing_partition"] = listing
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
    if kind == "split_outcome":
        msg = (
            f"a transaction of {tid} (producer {pid}, epoch {b['producer_epoch']}) has a "
            f"{b['outcome']} marker in {topic}-{partition} at offset {b['marker_offset']}, but "
            f"the coordinator decided otherwise for the transaction it aligns with by order"
        )
        return finding(kind, msg, evidence, **where)
    if kind == "missing_marker":
        evidence["reason"] = "the partition's copy extends past the coordinator's completion"
        msg = (
            f"the coordinator completed {tid}'s transaction (producer {pid}) listing "
            f"{topic}-{partition}, whose data from offset {b['first_offset']} never got a marker"
        )
        return finding(kind, msg, evidence, **where)
    if kind == "write_outside_transaction":
        msg = (
            f"producer {pid} (epoch {b['producer_epoch']}) wrote {b['record_count']} "
            f"transactional records to {topic}-{partition} at {b['first_offset']}.."
            f"{b['last_offset']} outside any transaction the coordinator added that partition to"
        )
        return finding(kind, msg, evidence, **where)
    msg = (
        f"{b['outcome']} marker of producer {pid} at {topic}-{partition} offset "
        f"{b['marker_offset']} matches no transaction of the coordinator and no open data"
    )
    return finding("orphan_marker", msg, evidence, **where)


def _a_finding(kind, a, tp, pid, tid) -> dict:
    topic, partition = tp
    evidence = {
        k: a.get(k)
        for k in (
            "outcome",
            "data_epoch",
            "marker_epoch",
            "start_timestamp",
            "prepare_timestamp",
            "complete_timestamp",
        )  # fmt: skip
    }
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
