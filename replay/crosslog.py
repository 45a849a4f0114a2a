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

:class:`Alignment` aligns the two sequences per (producer id, partition) by dynamic
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

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit

from decoders.kernels import NUMBA_CACHE
from replay.spill import SpilledRows

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
    # from this time (the coordinator's clock) on, every transaction of the producer is in the
    # coordinator's log with all its partitions: the start of its first transaction whose
    # partitions are known (docs/compaction.md: the cleaner keeps only an id's latest record,
    # so everything after a surviving Prepare or whole-history Ongoing survives); None: never
    known_from_ts: int | None = None


@dataclass(frozen=True)
class Anchor:
    """Where one (producer id, partition)'s alignment starts pinned: partition entry
    ``entry_offset`` (its first offset; a marker-only entry's marker offset) *is* the
    coordinator transaction whose first record is at ``log_offset`` of `__transaction_state`
    partition ``log_partition``, as an audit of a longer history established (every cheapest
    alignment matched them). From that pair on both histories are whole, so a skip before
    anything else is an anomaly, as at a producer's start; what lies before it is not judged.

    Why: a producer under transaction version 0/1 keeps one id and epoch for life, and its
    transactions are milliseconds apart against seconds of clock tolerance: only the histories'
    starts tell which transaction is which. A slice of the dump (docs/extract.md) starts
    mid-history, where an alignment shifted by one explains an anomaly away for the price of
    two assumptions; the anchor carries what the whole history proved."""

    entry_offset: int
    log_partition: int
    log_offset: int
    # where the alignment ends pinned the same way (None: at the copies' ends, as any
    # alignment): this pair is the sequences' last, so both logs reach past everything before
    # it by order, whatever the clocks and wherever the slice's copies end (a slice keeps the
    # tail of a partition, far later than its coordinator records: an alignment shifted by one
    # would otherwise end matching it for free)
    end_entry_offset: int | None = None
    end_log_offset: int | None = None


# -- the sequences, as rows of int64 columns ---------------------------------------------------
#
# Both sequences of one (producer id, partition) are held as rows of int64 columns (null as -1:
# every value the rules compare is a non-negative offset, epoch, count or epoch-millisecond),
# in a bounded store (replay.spill): a long-lived producer's history is read a block at a time.

# a partition entry, in offset order (replay.crosslog_stream encodes the `transactions` rows)
(E_FIRST_OFFSET, E_LAST_OFFSET, E_MARKER_OFFSET, E_OUTCOME, E_RECORDS, E_EPOCH, E_MARKER_EPOCH,
 E_COORDINATOR_EPOCH, E_FIRST_TS, E_MARKER_TS, E_BOUND_TS, E_CLEANED, E_RETRY, E_PINNED,
 E_OPEN_MS) = range(15)  # fmt: skip
ENTRY_COLUMNS = 15
# a coordinator transaction listing the partition (or whose partitions are unknown), in the
# coordinator's log order: its index among the producer's transactions, then its columns
(L_INDEX, L_DATA_EPOCH, L_MARKER_EPOCH, L_START_TS, L_PREPARE_TS, L_COMPLETE_TS, L_OUTCOME,
 L_MAYBE) = range(8)  # fmt: skip
LISTED_COLUMNS = 8
# raw outcome codes of both: as written (null, COMMIT, ABORT, OPEN)
RAW_OUTCOMES = ("COMMIT", "ABORT", "OPEN")  # codes 1, 2, 3; 0 null
RAW_OPEN = 3


def outcome_code(raw: np.ndarray) -> np.ndarray:
    """:data:`OUTCOME` of raw codes: 0 none or open, 1 commit, 2 abort."""
    return np.where(raw == RAW_OPEN, 0, raw)


def entry_times(e: np.ndarray) -> np.ndarray:
    """Each entry's time as a match's window reads it: its marker's, or an open one's first
    batch's; -1 unknown."""
    return np.where(e[:, E_OUTCOME] == RAW_OPEN, e[:, E_FIRST_TS], e[:, E_MARKER_TS])


def listed_start(a: np.ndarray) -> np.ndarray:
    """A coordinator transaction's start: TransactionStartTimestampMs, else its Prepare's."""
    return np.where(a[:, L_START_TS] >= 0, a[:, L_START_TS], a[:, L_PREPARE_TS])


def listed_end(a: np.ndarray) -> np.ndarray:
    """A coordinator transaction's end: its Complete record's time, else its Prepare's."""
    return np.where(a[:, L_COMPLETE_TS] >= 0, a[:, L_COMPLETE_TS], a[:, L_PREPARE_TS])


@dataclass(frozen=True)
class Pair:
    """What the costs of one (producer, partition) alignment read besides its rows: the two
    views, the clock facts, the lengths of both sequences (``n`` coordinator transactions,
    ``m`` partition entries, as aligned) and whether entries of either were left out before
    them (:func:`before_history`: a skip at the start of these is then not at the start of
    the sequences)."""

    side: Side
    coord: Coordinator
    bounds: Bounds
    n: int
    m: int
    a_before: bool = False
    b_before: bool = False
    cleaned: int = 0  # the first entries lie in the partition's cleaned range (a prefix)
    # a transaction prepared this long before the partition's copy ends without completing
    # is stuck, not in flight (its markers are written within moments of the Prepare record):
    # the producer's transaction timeout; None: never judged stuck
    stuck_ms: int | None = None
    # both logs hold an entry matched after these (an anchor's end pair): each copy reaches
    # past everything aligned here, by order
    closed: bool = False

    def reaches_past(self, end: int | None, ts: np.ndarray) -> np.ndarray:
        """Whether a copy ending at ``end`` extends past each time by more than the clock
        tolerance (an unknown time or end: no; in a closed pair, always)."""
        if self.closed:
            return np.ones(len(ts), bool)
        if end is None:
            return np.zeros(len(ts), bool)
        return (ts >= 0) & (end > ts + self.bounds.tolerance_ms)

    def known_before(self, ts: np.ndarray) -> np.ndarray:
        """Whether each time lies more than the clock tolerance after the coordinator's
        history of the producer became whole (:attr:`Coordinator.known_from_ts`)."""
        return self.reaches_past_from(self.coord.known_from_ts, ts)

    def reaches_past_from(self, start: int | None, ts: np.ndarray) -> np.ndarray:
        if start is None:
            return np.zeros(len(ts), bool)
        return (ts >= 0) & (ts > start + self.bounds.tolerance_ms)

    def _ended(self, a: np.ndarray) -> np.ndarray:
        """When each coordinator transaction's markers were due: its Complete record, or for
        one left in Prepare (no Complete in the coordinator's log) the Prepare plus
        :attr:`stuck_ms` (KAFKA-18660: a transaction-version-2 commit stuck half way); -1
        unknown."""
        complete, prepare = a[:, L_COMPLETE_TS], a[:, L_PREPARE_TS]
        stuck = -1 if self.stuck_ms is None else self.stuck_ms
        prepared = (outcome_code(a[:, L_OUTCOME]) != 0) & (prepare >= 0) & (stuck >= 0)
        return np.where(complete >= 0, complete, np.where(prepared, prepare + stuck, -1))

    def reach_end(self, a: np.ndarray) -> np.ndarray:
        """The latest time a match's window places each coordinator transaction's end at: its
        Complete record, else its Prepare, else, for one still in flight when the coordinator's
        copy was taken (its start known, no Prepare), the start plus :attr:`stuck_ms`: the
        coordinator aborts a transaction its timeout outlived
        (``TransactionCoordinator.abortTimedOutTransactions``), so its data and markers are not
        far later, and a copy of the coordinator ending inside a long-lived producer's
        transaction does not match it with every later entry of a partition copied after it;
        -1 unknown."""
        end = listed_end(a)
        if self.stuck_ms is None:
            return end
        start = a[:, L_START_TS]
        flight = (end < 0) & (start >= 0) & (outcome_code(a[:, L_OUTCOME]) == 0)
        return np.where(flight, start + self.stuck_ms, end)

    def skip_a(self, a: np.ndarray) -> Skips:
        """A coordinator transaction listing the partition without an entry there, with no
        entry of the partition before it (first), all of them (last), or some (in between)."""
        maybe, decided = a[:, L_MAYBE] > 0, a[:, L_OUTCOME] != 0
        complete = a[:, L_COMPLETE_TS]
        size = len(a)

        def at(first: bool, last: bool) -> np.ndarray:
            cost = np.full(size, ANOMALY, np.int64)  # markers of later transactions are there
            if first and not self.side.complete_from_start:
                return np.full(size, ASSUME, np.int64)  # before the partition's surviving history
            if last:  # nothing after it in the partition: a copy taken earlier?
                ended = np.where(complete >= 0, complete, listed_end(a))
                reached = decided & self.reaches_past(self.side.copy_end_ts, ended)
                cost = np.where(reached, ANOMALY, ASSUME)
            else:
                cost = np.where(decided, cost, ASSUME)  # in flight: it may still be written
            return np.where(maybe, ASSUME, cost).astype(np.int64)

        return _by_position(at, not self.b_before, self.m, size)

    def skip_b(self, e: np.ndarray) -> Skips:
        """A partition entry no coordinator transaction listing the partition explains, with
        no coordinator transaction before it (first), all of them (last), or some."""
        size = len(e)
        excused = (e[:, E_RETRY] > 0) | (e[:, E_CLEANED] > 0)  # a marker written again; history the cleaner left  # fmt: skip
        records, epoch = e[:, E_RECORDS], e[:, E_EPOCH]
        is_open = e[:, E_OUTCOME] == RAW_OPEN

        # inside the coordinator's known history: written (by a bound of the partition leader's
        # and the coordinator's clocks) after the first transaction whose partitions are known
        known = self.known_before(entry_times(e))

        def at(first: bool, last: bool) -> np.ndarray:
            if last:  # after everything the coordinator's copy lists here
                newer = (records > 0) & (epoch >= 0) & (epoch < self.coord.latest_epoch)
                ts = np.where(is_open, e[:, E_BOUND_TS], e[:, E_MARKER_TS])
                reached = newer | self.reaches_past(self.coord.copy_end_ts, ts)
                cost = np.where(reached, ANOMALY, ASSUME)  # its copy may predate it
            else:
                cost = np.full(size, ANOMALY, np.int64)
            if first and not self.coord.complete_from_start:  # before the coordinator's history?
                cost = np.where(known, cost, ASSUME)
            return np.where(excused, ASSUME, cost).astype(np.int64)

        return _by_position(at, not self.a_before, self.n, size)

    def steps(self, a: np.ndarray, b: np.ndarray, k0: int, i0: int) -> Steps:
        """What the programme reads of coordinator transactions ``a`` (from the ``k0``-th) and
        partition entries ``b`` (from the ``i0``-th), as numpy arrays; a match's cost
        (:func:`_match`) rests on identity (epochs), the coarse window and the outcomes."""
        complete = a[:, L_COMPLETE_TS]
        a_steps = np.stack([
            a[:, L_DATA_EPOCH], a[:, L_MARKER_EPOCH], listed_start(a), self.reach_end(a),
            outcome_code(a[:, L_OUTCOME]), a[:, L_MAYBE], (complete >= 0).astype(np.int64),
            self.reaches_past(self.side.copy_end_ts, self._ended(a)).astype(np.int64),
        ], axis=1) if len(a) else np.zeros((0, A_COLUMNS), np.int64)  # fmt: skip
        b_steps = np.stack([
            outcome_code(b[:, E_OUTCOME]), (b[:, E_RECORDS] > 0).astype(np.int64), b[:, E_EPOCH],
            b[:, E_MARKER_EPOCH], entry_times(b),
        ], axis=1) if len(b) else np.zeros((0, B_COLUMNS), np.int64)  # fmt: skip
        return Steps(a_steps.astype(np.int64), b_steps.astype(np.int64), self.skip_a(a),
                     self.skip_b(b), self.bounds.window_ms, self.n, self.m, k0, i0,
                     self.cleaned)  # fmt: skip


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
    """What the alignment's programme reads (:meth:`Pair.steps`), one record for the compiled
    kernels: a block of the coordinator's transactions ``a`` (columns ``A_*``, from the
    ``k0``-th) and of the partition's entries ``b`` (columns ``B_*``, from the ``i0``-th),
    their skip costs, the coarse window of a match, and the lengths of the whole sequences."""

    a: np.ndarray
    b: np.ndarray
    skip_a: Skips
    skip_b: Skips
    window: int
    n: int
    m: int
    k0: int
    i0: int
    cleaned: int  # entries before this one lie in the partition's cleaned range


class Marks(NamedTuple):
    """Which steps lie on a cheapest alignment, filled row by row (:func:`_mark_row`), for the
    coordinator transactions from the ``a0``-th and the partition entries from the ``b0``-th."""

    a_free: np.ndarray  # a coordinator transaction on a cheap step
    a_bad: np.ndarray  # ... on an anomalous skip
    b_free: np.ndarray  # a partition entry on a cheap step
    b_first: np.ndarray  # its first anomaly: 3 * row (+ 0 a match, + 2 a skip)
    a0: int
    b0: int
    a_matched: np.ndarray  # a coordinator transaction matched on a cheapest alignment
    a_cleaned: np.ndarray  # ... skipped cheaply just before an entry in the cleaned range
    # the coordinator transaction every cheapest alignment matches the entry with (NO_MATCH:
    # none does; SEVERAL: they differ, or one skips it)
    b_match: np.ndarray
    # whether a cheapest alignment skips a coordinator transaction after the partition's last
    # entry ([0]), or an entry after the last coordinator transaction ([1]), for less than a
    # skip inside the other sequence costs: where that other sequence was cut short (the
    # stream's _after_history), the whole alignment could differ
    cheaper_end: np.ndarray


NO_MATCH, SEVERAL = -1, -2


class Marked(NamedTuple):
    """One block of either sequence as :meth:`Alignment.marked` gives it once final: ``which``
    (``"a"`` coordinator transactions, ``"b"`` partition entries), the index of its first,
    ``free`` and ``bad`` per row, and for entries ``match``: the coordinator transaction (its
    index in the pair's sequence) every cheapest alignment matches it with, else NO_MATCH or
    SEVERAL (None for coordinator transactions)."""

    which: str
    start: int
    free: np.ndarray
    bad: np.ndarray
    match: np.ndarray | None = None


def merged_matches(now: np.ndarray, earlier: np.ndarray) -> np.ndarray:
    """Two markings of the same entries (rows of different blocks) as one: a match both agree
    on (or only one makes), else SEVERAL."""
    agree = (earlier == NO_MATCH) | (earlier == now)
    return np.where(now == NO_MATCH, earlier, np.where(agree, now, SEVERAL))


@njit(cache=NUMBA_CACHE, nogil=True)
def _match(s, k, i):  # pragma: no cover (compiled)
    """The cost of aligning coordinator transaction k with partition entry i."""
    a, b = s.a, s.b
    x, y = k - s.k0, i - s.i0
    de, me, lo, hi = a[x, A_DATA_EPOCH], a[x, A_MARKER_EPOCH], a[x, A_START], a[x, A_END]
    outcome, maybe, complete, reach = a[x, A_OUTCOME], a[x, A_MAYBE], a[x, A_COMPLETE], a[x, A_REACHED]  # fmt: skip
    b_out, b_data, b_de, b_me, ts = (
        b[y, B_OUTCOME], b[y, B_HAS_DATA], b[y, B_EPOCH], b[y, B_MARKER_EPOCH], b[y, B_TS],
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
        if outcome == 0:
            return 0  # still in flight when the coordinator's copy was taken
        if reach == 1:  # the partition's copy reaches past its completion, or far past a
            return ANOMALY  # Prepare never completed (Pair._ended): a missing marker
        if complete == 0:
            return 0  # prepared, its markers being written when the copies were taken
        return ASSUME  # the partition's copy may predate the marker
    if outcome == 0:
        return ASSUME  # decided after the coordinator's copy
    return 0 if outcome == b_out else ANOMALY  # split outcome


@njit(cache=NUMBA_CACHE, nogil=True)
def _skip(costs, x, pos, end):  # pragma: no cover (compiled)
    """Skipping entry ``x`` (of the block) of one sequence at position ``pos`` of the other
    (of ``end``)."""
    if pos == 0:
        return costs.first[x]
    if pos == end:
        return costs.last[x]
    return costs.mid[x]


@njit(cache=NUMBA_CACHE, nogil=True)
def _skip_a(costs, x, i, m, cleaned):  # pragma: no cover (compiled)
    """Skipping coordinator transaction ``x`` (of the block) before partition entry ``i``:
    inside the partition's cleaned range (entry ``i`` is in it: ``i < cleaned``) a transaction
    whose data and markers the cleaner removed leaves nothing there, which is normal
    (docs/compaction.md): an assumption where it would otherwise be an anomaly. Scalars and
    the costs, not the whole :class:`Steps`: this runs for every cell."""
    c = _skip(costs, x, i, m)
    if c >= ANOMALY and c < INF and i < cleaned:
        return ASSUME
    return c


@njit(cache=NUMBA_CACHE, nogil=True)
def _forward_row(s, dlo, dhi, k, f_row, f_next):  # pragma: no cover (compiled)
    """Row ``k`` of the forward costs F (band offsets j = i - k + dhi): its skips of a
    partition entry relaxed within it (so the row is final as it is read, in increasing i), its
    matches and coordinator skips pushed into row ``k + 1``."""
    n, m = s.n, s.m
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
            c = _skip_a(s.skip_a, k - s.k0, i, m, s.cleaned)
            if f + c < f_next[j - 1]:
                f_next[j - 1] = f + c
        if i < m and j + 1 < W:  # skip a partition entry: (k, i + 1)
            c = _skip(s.skip_b, i - s.i0, k, n)
            if f + c < f_row[j + 1]:
                f_row[j + 1] = f + c


@njit(cache=NUMBA_CACHE, nogil=True)
def _backward_row(s, dlo, dhi, k, g_row, g_next):  # pragma: no cover (compiled)
    """Row ``k`` of the backward costs G from row ``k + 1`` (and itself, in decreasing i)."""
    n, m = s.n, s.m
    W = dhi - dlo + 1
    for i in range(min(m, k - dlo), max(0, k - dhi) - 1, -1):
        j = i - k + dhi
        g = g_row[j]
        if k < n and i < m:
            g = min(g, _match(s, k, i) + g_next[j])
        if k < n and j > 0:
            g = min(g, _skip_a(s.skip_a, k - s.k0, i, m, s.cleaned) + g_next[j - 1])
        if i < m and j + 1 < W:
            g = min(g, _skip(s.skip_b, i - s.i0, k, n) + g_row[j + 1])
        g_row[j] = g


@njit(cache=NUMBA_CACHE, nogil=True)
def _mark_row(s, dlo, dhi, k, total, f_row, g_row, g_next, marks):  # pragma: no cover
    """The steps leaving row ``k`` that lie on a cheapest alignment (F + step + G = total),
    into ``marks`` (:class:`Marks`: an entry's first anomaly in the order row, then match
    before skip)."""
    n, m = s.n, s.m
    W = dhi - dlo + 1
    for i in range(max(0, k - dhi), min(m, k - dlo) + 1):
        j = i - k + dhi
        f = f_row[j]
        if f >= INF:
            continue
        x, y = k - marks.a0, i - marks.b0
        if k < n and i < m:
            c = _match(s, k, i)
            if c < INF and f + c + g_next[j] == total:
                marks.a_free[x] = True  # a match frees the coordinator's side; an anomaly is B's
                marks.a_matched[x] = True
                was = marks.b_match[y]
                if was == NO_MATCH:
                    marks.b_match[y] = k
                elif was != k:
                    marks.b_match[y] = SEVERAL
                if c < ANOMALY:
                    marks.b_free[y] = True
                elif 3 * k < marks.b_first[y]:
                    marks.b_first[y] = 3 * k
        if k < n and j > 0:
            c = _skip_a(s.skip_a, k - s.k0, i, m, s.cleaned)
            if c < INF and f + c + g_next[j - 1] == total:
                if i == m and c < s.skip_a.mid[k - s.k0]:
                    marks.cheaper_end[0] = True  # after the entries' end
                if c < ANOMALY:
                    marks.a_free[x] = True
                    # its data and markers gone from the cleaned range (the next entry is in it)
                    if i < s.cleaned:
                        marks.a_cleaned[x] = True
                else:
                    marks.a_bad[x] = True
        if i < m and j + 1 < W:
            c = _skip(s.skip_b, i - s.i0, k, n)
            if c < INF and f + c + g_row[j + 1] == total:
                if k == n and c < s.skip_b.mid[i - s.i0]:
                    marks.cheaper_end[1] = True  # after the coordinator's end
                marks.b_match[y] = SEVERAL  # a cheapest alignment leaves it unmatched
                if c < ANOMALY:
                    marks.b_free[y] = True
                elif 3 * k + 2 < marks.b_first[y]:
                    marks.b_first[y] = 3 * k + 2


@njit(cache=NUMBA_CACHE, nogil=True)
def _forward_rows(s, dlo, dhi, r0, r1, row, nxt, ends, out):  # pragma: no cover (compiled)
    """Rows ``r0`` to ``r1 - 1`` of F from ``row`` (row ``r0`` with what row ``r0 - 1``
    pushed into it); returns row ``r1`` as far as they push into it (row ``n`` final).
    ``ends`` (:meth:`Alignment._ends`): the band's start cell (row, offset) and what reaching
    it costs, put in as its row is reached; its end cell (row, offset), whose F goes into
    ``out[0]`` once final, if these rows hold it."""
    for k in range(r0, r1):
        if k == ends[0]:
            row[ends[1]] = min(row[ends[1]], ends[2])
        _forward_row(s, dlo, dhi, k, row, nxt)
        if k == ends[3]:
            out[0] = row[ends[4]]
        if k < s.n:
            row, nxt = nxt, row
            nxt[:] = INF
    return row.copy()


@njit(cache=NUMBA_CACHE, nogil=True)
def _backward_rows(s, dlo, dhi, r0, r1, first, total, g_next, marks, ends):  # pragma: no cover
    """Rows ``r1 - 1`` down to ``r0``: F again from ``first`` (what the forward pass held at
    row ``r0``; the band's start cell put in as :func:`_forward_rows` does), G from ``g_next``
    (row ``r1``'s) and, at the band's end cell, what the rest after it costs (``ends[5]``),
    and the steps on a cheapest alignment into ``marks``; returns row ``r0``'s G."""
    W = dhi - dlo + 1
    f_block = np.full((r1 - r0, W), INF, np.int64)
    f_block[0, :] = first
    if r0 <= ends[0] < r1:  # rows only lower a cell: the start's cost stays put until then
        f_block[ends[0] - r0, ends[1]] = min(f_block[ends[0] - r0, ends[1]], ends[2])
    for t in range(r1 - r0 - 1):  # the block's rows again, from its first
        _forward_row(s, dlo, dhi, r0 + t, f_block[t], f_block[t + 1])
    scratch = np.full(W, INF, np.int64)  # the last row's own skips (its pushes are not kept)
    _forward_row(s, dlo, dhi, r1 - 1, f_block[r1 - r0 - 1], scratch)
    g_row = np.full(W, INF, np.int64)
    g_next = g_next.copy()
    for k in range(r1 - 1, r0 - 1, -1):
        g_row[:] = INF
        if k == ends[3]:
            g_row[ends[4]] = ends[5]
        _backward_row(s, dlo, dhi, k, g_row, g_next)
        _mark_row(s, dlo, dhi, k, total, f_block[k - r0], g_row, g_next, marks)
        g_row, g_next = g_next, g_row
    return g_next


# the first and last rows of each sequence whose times place their shared history
# (Alignment._shared): past the order window's transactions the cut before and after the
# other log's history (replay.crosslog_stream) leaves out
SHARED_ROWS = 1 << 16
BAND = 0  # the first band's half-width around the diagonal (cells), widened as needed
# the band's rows the forward pass keeps (one per block, replay.spill: on the executor's local
# disk past a MB) may take at most this much: a band as wide as a long history (a history of
# anomalies, or alignments shifted along a week's history that tie: Alignment._shift_width)
# would otherwise fill the disk and fail the task; its partition is then counted as beyond
# the alignment's budget (not judged)
MAX_KEPT_BYTES = 4 << 30


def _need(skips: int | None, offset: int) -> int:
    """The half-width a count of skips reaching ``skips`` needs (:meth:`Alignment._shift_width`:
    that many plus ``offset``); INF where no count exceeds the total."""
    return INF if skips is None else skips + offset


def _at_end(costs: Skips, others: int) -> np.ndarray:
    """Skip costs at position ``others`` of the other sequence: after all of them (:func:`_skip`
    at its end), ``first`` where that is position 0."""
    return costs.first if others == 0 else costs.last


class BandTooWide(Exception):
    """An alignment whose band would keep more than its budget of rows."""


# the forward costs a block of rows holds again on the way back, and the most rows a block has
# (a block also reads its rows of both sequences: ~0.4 KB a row)
BLOCK_BYTES, BLOCK_ROWS = 4 << 20, 8_192


class SkipFloors:
    """The least each entry of either sequence can cost to skip, wherever it falls (first,
    last or in between; a coordinator transaction inside the cleaned range at an assumption:
    :func:`_skip_a`), kept as a count per cost: a path skips each entry at most once, so a path
    making ``s`` skips costs at least the sum of the ``s`` smallest (:meth:`skips_above`).
    ``last=False``: the least a skip costs before the other sequence's end (first or in
    between), for paths that have not reached it (:attr:`Alignment.end`); ``first=False``:
    after the other sequence's start, for paths from where they left it
    (:attr:`Alignment.start`)."""

    def __init__(self, n: int, m: int, last: bool = True, first: bool = True) -> None:
        self.entries = n + m
        self.last, self.first = last, first
        self.counts: dict[int, int] = {}
        self.b_seen = 0  # the partition entries counted (blocks overlap in them)

    def add(self, s: Steps) -> None:
        """The floors of block ``s``'s coordinator transactions (each block has its own rows)
        and of its partition entries not counted yet."""
        if s.a.shape[0]:
            costs = list(s.skip_a)
            if s.cleaned > 0:  # inside the cleaned range an anomalous skip is an assumption
                costs = [np.where((c >= ANOMALY) & (c < INF), ASSUME, c) for c in costs]
            self._count(self._least(Skips(*costs), slice(None)))
        new = s.i0 + s.b.shape[0] - max(s.i0, self.b_seen)
        if new > 0:
            self._count(self._least(s.skip_b, slice(s.b.shape[0] - new, s.b.shape[0])))
            self.b_seen = s.i0 + s.b.shape[0]

    def _least(self, costs: Skips, at: slice) -> np.ndarray:
        least = costs.mid[at]
        if self.first:
            least = np.minimum(least, costs.first[at])
        return np.minimum(least, costs.last[at]) if self.last else least

    def _count(self, least: np.ndarray) -> None:
        values, counts = np.unique(least, return_counts=True)
        for v, c in zip(values.tolist(), counts.tolist(), strict=True):
            self.counts[v] = self.counts.get(v, 0) + c

    def skips_above(self, total: int) -> int | None:
        """The fewest skips every path making them costs more than ``total`` (None: skipping
        every entry costs no more). Entries not counted count as free, never as dear."""
        unseen = self.entries - sum(self.counts.values())
        floors = ([(0, unseen)] if unseen > 0 else []) + sorted(self.counts.items())
        skips = cost = 0
        for value, count in floors:
            if value > 0 and cost + value * count > total:
                return skips + (total - cost) // value + 1
            skips += count
            cost += value * count
        return None


class Alignment:
    """The cheapest alignments of one (producer, partition), a block of rows at a time.

    ``steps_of(k0, k1, i0, i1)`` gives the :class:`Steps` of the coordinator transactions
    [k0, k1) and the partition entries [i0, i1) (:meth:`Pair.steps` of their rows);
    :meth:`marked` yields, block by block from the end, which of them lie on a cheapest
    alignment only by an anomaly (``bad``) or also by a cheap step (``free``).

    Only the cells (k, i) with ``dlo <= k - i <= dhi`` (a band around the diagonal) are
    computed, by their offset in the band. Why a band suffices: a path through cell (k, i)
    makes at least |k - i| skips to get there and |(n - m) - (k - i)| after it, each of a
    different entry. With D = n - m, a cell outside the band
    min(0, D) - g <= k - i <= max(0, D) + g therefore lies only on paths making at least
    |D| + 2(g + 1) skips, which cost at least the sum of that many of the entries' least skip
    costs (:class:`SkipFloors`). When that exceeds the band's cheapest total (which no cheaper
    path outside it can undercut), every cheapest path lies inside, and on those cells the
    band's forward and backward costs are the whole table's. Otherwise the band is widened to
    what the total requires and the forward pass runs again. The band starts one cell wide:
    a healthy history's total is 0. A history with one anomaly (a split outcome: 1,000) needs
    only as many more cells as it has entries whose skip is an assumption, not 1,000: skipping
    around an anomalous match costs more anomalies.

    Copies taken at different moments: one sequence goes on |D| rows past the other's end (a
    partition copied minutes before the coordinator's log: the minutes' transactions), and a
    band holding both ends would be |D| cells wide along the whole history. Past the other
    sequence's end the only step left is to skip, so while |D| > h the band is first tried as
    -h <= k - i <= h, its **end** cell where it meets the other sequence's end (the
    partition's last entry on row m + h, or the coordinator's last transaction at entry
    n + h): from there every path skips the rest at its cost after the end (summed). A path
    through any other cell outside the band has made h + 1 skips more of one sequence than of
    the other before reaching either end, so it costs at least the sum of h + 1 of the least
    skip costs before an end (``SkipFloors(last=False)``). The mirror image holds where one
    history starts |D| rows before the other (a compacted `__transaction_state`, a partition's
    retention): the band D - h <= k - i <= D + h around the ends' diagonal, its **start** cell
    where it leaves the other sequence's start, what lies before it skipped as a sum, and a
    path through another cell outside it makes h + 1 skips more of one sequence after leaving
    either start (``SkipFloors(first=False)``). Where one history lies inside the other (a
    compacted `__transaction_state` copied minutes before the partitions), the shared history
    lies on neither diagonal: the band is first kept around the diagonals where the
    sequences' times place its start and end (:meth:`_shared`), what lies before and after
    skipped as sums, and holds every cheapest alignment where the skips a path outside it
    makes on each side cost more than its total (:meth:`_shift_width`). Each is kept no wider
    than |D|; past that the band holds both ends as above.

    Memory does not grow with the history: the forward pass keeps one row of the band per
    block of rows (in a bounded store), and the way back computes a block's forward rows again
    from it, then its backward rows and marks: two passes of F and one of G, with a block of
    rows and of the sequences held at once. A Streams app committing every 100 ms has
    ~860,000 transactions a day in every partition it writes; the whole table would be
    quadratic in them, and even the sequences whole grow with the producer's life."""

    def __init__(self, n: int, m: int, steps_of: Callable[[int, int, int, int], Steps],
                 half_width: int = BAND, block_rows: int | None = None,
                 max_kept_bytes: int | None = None, tolerance: int = 0) -> None:  # fmt: skip
        """``block_rows``: rows of a block (else as many as :data:`BLOCK_BYTES` of band
        rows hold, at most :data:`BLOCK_ROWS`). Raises :class:`BandTooWide` where the band
        the sequences need would keep more than ``max_kept_bytes`` of rows (else
        :data:`MAX_KEPT_BYTES`). ``tolerance``: the clock tolerance (ms), for where the band
        is first placed (:meth:`_shared`)."""
        budget = MAX_KEPT_BYTES if max_kept_bytes is None else max_kept_bytes
        self.n, self.m, self.steps_of, self.block_rows = n, m, steps_of, block_rows
        self.tolerance = tolerance
        # coordinator transactions whose data and markers the cleaner removed from the
        # partition: on no cheapest alignment but by a cheap skip inside the cleaned range
        # (counted by :meth:`marked`)
        self.cleaned_gone = 0
        # Marks.cheaper_end, of every block (set by :meth:`marked`)
        self.cheaper_end = np.zeros(2, np.bool_)
        D = n - m
        h = half_width
        # while |D| > h, a band of 2h + 1 cells around where the sequences' times place their
        # shared history, where that is neither the starts' nor the ends' diagonal (what lies
        # before it and after it skipped as sums: "shift"), then around the starts' diagonal
        # (what lies past the shorter sequence's end skipped as a sum: "tail"), then around
        # the ends' ("head"), each while narrower than the |D| + 1 cells of one holding both
        # ("both")
        modes = ["tail", "head"]
        shared = self._shared(D) if abs(D) > h else None
        if shared is not None:
            modes.insert(0, "shift")
        while True:
            mode = "both" if abs(D) <= h else modes[0]
            g = h - abs(D)
            if mode == "shift":
                self.dlo, self.dhi = max(shared[0] - h, -m), min(shared[1] + h, n)
            elif mode == "tail":
                self.dlo, self.dhi = max(-h, -m), min(h, n)
            elif mode == "head":
                self.dlo, self.dhi = max(D - h, -m), min(D + h, n)
            else:
                self.dlo, self.dhi = max(min(0, D) - g, -m), min(max(0, D) + g, n)
            whole = self.dlo == -m and self.dhi == n
            width = self.dhi - self.dlo + 1
            if -(-(n + 1) // self._block_size(width)) * width * 8 > budget:
                raise BandTooWide(f"{width} cells wide over {n + 1} rows")
            self.total, self.kept, floors = self._forward(mode)
            if mode == "shift":
                wider = self._shift_width(floors, shared, h)
                if whole or wider is None:
                    break
                h = wider
                if shared[1] - shared[0] + 2 * h >= abs(D):  # as wide as both ends' band
                    modes.pop(0)
                    h = half_width
                self.kept.close()
                continue
            need = floors[0].skips_above(self.total) if self.total < INF else None
            reach = abs(D) + 2 * (g + 1) if mode == "both" else h + 1
            if whole or (need is not None and reach >= need):
                break
            if mode != "both":  # h + 1 >= need, if narrower than both ends' band
                h = abs(D) if self.total >= INF or need is None else max(h + 1, need - 1)
                if h >= abs(D):
                    modes.pop(0)
                    h = half_width if modes else abs(D)
            elif self.total >= INF:
                h = 2 * h + 1
            elif need is None:
                h = max(n, m)  # skipping every entry costs no more: the whole table
            else:
                h = abs(D) + max(g + 1, -(-(need - abs(D)) // 2) - 1)  # |D| + 2(g + 1) >= need
            self.kept.close()

    def _shared(self, D: int) -> tuple[int, int] | None:
        """The diagonals (k - i) on which the sequences' times place the start and the end of
        their shared history, lower first: the coordinator transactions that end before the
        partition's first entry less the entries before the first transaction's start, and
        likewise at the ends (counted among the |D| + 1 first and last of each, at most
        :data:`SHARED_ROWS`). None where the starts' or the ends' diagonal is as near as the
        rows within the clock tolerance of the other sequence's first or last time (the other
        bands are tried first there), or a time is unknown. Only where the band is placed:
        whether it holds every cheapest alignment rests on the skips' costs
        (:meth:`_shift_width`), never on the clocks."""
        n, m, tol = self.n, self.m, self.tolerance
        rows = min(abs(D) + 1, SHARED_ROWS)
        if not n or not m:
            return None
        first = self.steps_of(0, min(n, rows), 0, min(m, rows))
        last = self.steps_of(max(0, n - rows), n, max(0, m - rows), m)
        a_start, b_first = first.a[0, A_START], first.b[0, B_TS]
        a_end, b_last = last.a[-1, A_END], last.b[-1, B_TS]
        if min(a_start, b_first, a_end, b_last) < 0:
            return None

        def place(ours: np.ndarray, theirs: np.ndarray, at_a: int, at_b: int, later: bool):
            """Rows of ours before (or ``later``: after) the other's time, less theirs; and the
            rows of both within the clock tolerance of it."""
            known_a, known_b = ours >= 0, theirs >= 0
            if later:
                apart = int((known_b & (theirs > at_a)).sum() - (known_a & (ours > at_b)).sum())
            else:
                apart = int((known_a & (ours < at_b)).sum() - (known_b & (theirs < at_a)).sum())
            near = (known_a & (abs(ours - at_b) <= tol)).sum() + (
                known_b & (abs(theirs - at_a) <= tol)
            ).sum()
            return apart, int(near)

        start, near_start = place(first.a[:, A_END], first.b[:, B_TS], a_start, b_first, False)
        end, near_end = place(last.a[:, A_START], last.b[:, B_TS], a_end, b_last, True)
        end += D
        for diagonal in (0, D):  # the starts' (tail) or the ends' (head)
            if abs(start - diagonal) <= near_start and abs(end - diagonal) <= near_end:
                return None
        return min(start, end), max(start, end)

    def _shift_width(self, floors: tuple[SkipFloors, SkipFloors], shared: tuple[int, int],
                     h: int) -> int | None:  # fmt: skip
        """None if the band around ``shared`` (half-width ``h``) holds every cheapest
        alignment, else the half-width it needs at least.

        A path through a cell x = (k, i) above the band (k - i > dhi) has made dhi + 1 skips
        of coordinator transactions more than of entries before x, none after the partition's
        end (such a cell on column m lies past the band's end, where every path of the band
        goes on), and makes dhi - D + 1 skips of entries more than of transactions after it,
        none before the coordinator's start (on row 0 it would lie before the band's start).
        Below the band (k - i < dlo) likewise: 1 - dlo skips of entries before x, before the
        coordinator's end, and D - dlo + 1 of transactions after it, after the partition's
        start. Each count costs at least the sum of as many of the least skip costs there
        (``floors``: before an end, :class:`SkipFloors` ``last=False``; after a start,
        ``first=False``): where one of its counts on each side reaches what exceeds the
        band's total, no path outside it is as cheap; or no cell lies there (the band reaches
        the table's edge)."""
        n, m = self.n, self.m
        D, lo, hi = n - m, *shared
        if self.total >= INF:
            return 2 * h + 1
        before, after = (f.skips_above(self.total) for f in floors)
        # the half-width each side needs: one of its counts, or no cell left there
        above = min(_need(before, -1 - hi), _need(after, D - 1 - hi), n - hi)
        below = min(_need(before, lo - 1), _need(after, lo - D - 1), lo + m)
        return None if max(above, below) <= h else max(above, below)

    @property
    def start(self) -> tuple[int, int]:
        """The band's start cell, as (row, offset in the band): the pair of both sequences'
        starts, else where the band leaves the partition's start (column 0: the coordinator's
        transactions before it skipped) or the coordinator's (row 0: the partition's)."""
        if self.dlo > 0:
            return self.dlo, self.dhi - self.dlo
        if self.dhi < 0:
            return 0, 0
        return 0, self.dhi

    @property
    def end(self) -> tuple[int, int]:
        """The band's end cell, as (row, offset in the band): the pair of both sequences' ends,
        else where the band meets the partition's end (column m: the coordinator goes on) or
        the coordinator's (row n: the partition goes on)."""
        n, m, dlo, dhi = self.n, self.m, self.dlo, self.dhi
        if n - m > dhi:
            return m + dhi, 0
        if n - m < dlo:
            return n, dhi - dlo
        return n, m - n + dhi

    def _ends(self) -> np.ndarray:
        """The kernels' view of :attr:`start` (with what reaching it costs) and :attr:`end`
        (with what the rest after it costs)."""
        return np.array([*self.start, min(self.before, INF), *self.end, min(self.after, INF)],
                        np.int64)  # fmt: skip

    def _block_size(self, width: int) -> int:
        return self.block_rows or int(min(BLOCK_ROWS, max(1, BLOCK_BYTES // (8 * width))))

    def _blocks(self) -> list[tuple[int, int]]:
        size = self._block_size(self.dhi - self.dlo + 1)
        return [(r0, min(r0 + size, self.n + 1)) for r0 in range(0, self.n + 1, size)]

    def _block(self, r0: int, r1: int) -> Steps:
        """The steps rows [r0, r1) read in the current band."""
        i0 = min(self.m, max(0, r0 - self.dhi))
        i1 = min(self.m, r1 - 1 - self.dlo + 1)
        return self.steps_of(r0, min(r1, self.n), i0, max(i0, i1))

    def _a_skipped(self, s: Steps, after: bool) -> tuple[int, np.ndarray, int]:
        """The coordinator transactions of block ``s`` before the band's start (column 0:
        skipped before the partition's first entry) or, ``after``, after its end (column m:
        after its last), as (the first's index in the block, their costs as :func:`_skip_a`
        gives them, the entry they are skipped before)."""
        if not after and self.start[0] > 0:
            at, i, costs = slice(0, max(0, self.start[0] - s.k0)), 0, s.skip_a.first
        elif after and self.end[0] < self.n:
            at, i = slice(max(0, self.end[0] - s.k0), None), self.m
            costs = _at_end(s.skip_a, self.m)
        else:
            return 0, np.zeros(0, np.int64), 0
        c = costs[at]
        if i < s.cleaned:  # _skip_a: an anomaly inside the cleaned range is an assumption
            c = np.where((c >= ANOMALY) & (c < INF), ASSUME, c)
        return at.start, c, i

    def _b_skipped(self, head: bool, first: int = 0) -> Iterator[tuple[Steps, np.ndarray]]:
        """The partition entries before the band's start (``head``: row 0, skipped before the
        coordinator's first transaction) or from its end cell's (row n: after its last;
        ``first``: from the one that many after it), a block at a time: each block's steps and
        its entries' costs."""
        if head:
            k, lo, hi = 0, 0, (-self.dhi if self.dhi < 0 else 0)
        elif self.n - self.m < self.dlo:
            k, lo, hi = self.n, self.n - self.dlo + first, self.m
        else:
            return
        for i0 in range(lo, hi, BLOCK_ROWS):
            s = self.steps_of(k, k, i0, min(hi, i0 + BLOCK_ROWS))
            yield s, _at_end(s.skip_b, k)  # row 0: first; row n: last

    def _forward(self, mode: str) -> tuple[int, SpilledRows, tuple[SkipFloors, ...]]:
        """The band's cheapest total, its kept rows, and the floors of the skips a path
        outside it makes: before an end (``tail``), after a start (``head``), both of those
        (``shift``: :meth:`_shift_width`) or anywhere (``both``)."""
        width = self.dhi - self.dlo + 1
        kept = SpilledRows(width)
        row = np.full(width, INF, np.int64)
        n, m = self.n, self.m
        if mode == "shift":
            floors = (SkipFloors(n, m, last=False), SkipFloors(n, m, first=False))
        else:
            floors = (SkipFloors(n, m, last=mode != "tail", first=mode != "head"),)
        at_end = np.full(1, INF, np.int64)
        self.before = self.after = 0  # what skipping everything before the band's start costs
        for s, costs in self._b_skipped(head=True):  # and after its end: summed as they are read
            for f in floors:
                f.add(s)
            self.before += int(costs.sum())
        for r0, r1 in self._blocks():
            s = self._block(r0, r1)
            for f in floors:
                f.add(s)
            if r0 < self.start[0]:  # column 0's rows before the start
                self.before += int(self._a_skipped(s, after=False)[1].sum())
            kept.append(row[None, :])
            row = _forward_rows(s, self.dlo, self.dhi, r0, r1, row,
                                np.full(width, INF, np.int64), self._ends(), at_end)  # fmt: skip
            if self.end[0] < min(r1, self.n):  # column m's from the end cell's row
                self.after += int(self._a_skipped(s, after=True)[1].sum())
        for s, costs in self._b_skipped(head=False):
            for f in floors:
                f.add(s)
            self.after += int(costs.sum())
        return int(min(int(at_end[0]) + min(self.after, INF), INF)), kept, floors

    def marked(self) -> Iterator[Marked]:
        """Every block of either sequence once no other step can mark it, from the end
        (:class:`Marked`). ``bad`` of an entry is 1 an anomalous match, 2 an anomalous skip
        (whichever comes first on a cheapest alignment, in row order), 0 none; of a
        coordinator transaction 1 an anomalous skip."""
        if self._diagonal():
            yield from self._diagonal_marked()
            return
        n, dlo, dhi = self.n, self.dlo, self.dhi
        ends = self._ends()
        g_next = np.full(dhi - dlo + 1, INF, np.int64)
        blocks = self._blocks()
        sentinel = 3 * (n + 1)
        # past the band's end every path skips: each skip on every cheapest alignment
        for s, costs in self._b_skipped(head=False, first=1):  # the end cell's: _mark_skipped
            yield self._b_marked(s, costs, n)
        pending = (0, np.zeros(0, np.bool_), np.zeros(0, np.int64), np.zeros(0, np.int64))
        for index in range(len(blocks) - 1, -1, -1):
            r0, r1 = blocks[index]
            s = self._block(r0, r1)
            na, nb = s.a.shape[0], s.b.shape[0]
            i0, i1 = s.i0, s.i0 + nb
            marks = Marks(np.zeros(na, np.bool_), np.zeros(na, np.bool_), np.zeros(nb, np.bool_),
                          np.full(nb, sentinel, np.int64), r0, i0, np.zeros(na, np.bool_),
                          np.zeros(na, np.bool_), np.full(nb, NO_MATCH, np.int64),
                          self.cheaper_end)  # fmt: skip
            p0, p_free, p_first, p_match = pending  # entries later rows marked, not every row yet
            if len(p_free):
                at = slice(p0 - i0, p0 - i0 + len(p_free))
                marks.b_free[at] |= p_free
                np.minimum(marks.b_first[at], p_first, out=marks.b_first[at])
                p_match = p_match.copy()  # merged after this block's rows mark theirs
            first_row = self.kept.rows(index, index + 1)[0]
            g_next = _backward_rows(s, dlo, dhi, r0, r1, first_row, self.total, g_next, marks,
                                    ends)  # fmt: skip
            if len(p_free):
                marks.b_match[at] = merged_matches(marks.b_match[at], p_match)
            self._mark_skipped(s, marks, r0, r1)
            if na:
                gone = marks.a_cleaned & ~marks.a_matched & ~marks.a_bad
                self.cleaned_gone += int(gone.sum())
                yield Marked("a", r0, marks.a_free, marks.a_bad.astype(np.int64))
            # an entry i is read by rows i + dlo .. i + dhi: final once row max(0, i + dlo) was
            done = max(i0, min(i1, r0 - dlo)) if r0 > 0 else i0
            if done < i1:
                at = slice(done - i0, i1 - i0)
                first = marks.b_first[at]
                bad = np.where(first < sentinel, np.where(first % 3 == 0, 1, 2), 0)
                yield Marked("b", done, marks.b_free[at], bad, marks.b_match[at])
            pending = (i0, marks.b_free[: done - i0], marks.b_first[: done - i0],
                       marks.b_match[: done - i0])  # fmt: skip
        # before the band's start, likewise
        for s, costs in self._b_skipped(head=True):
            yield self._b_marked(s, costs, 0)
        self.kept.close()

    def _diagonal(self) -> bool:
        """Whether the one cheapest alignment is the diagonal at no cost: a healthy history
        (each coordinator transaction matched with the partition's entry in the same place)
        whose band stayed one cell wide. In a band of one cell (k, k) the only steps are
        matches (a skip leaves it), so the one path through it matches every k with k, and a
        total of 0 makes each match free (no cost is negative): :func:`_mark_row` would mark
        every transaction and entry free and matched with its own place, nothing bad, and no
        skip (nothing before the band's start or after its end: both sequences as long)."""
        return self.total == 0 and self.dlo == 0 and self.dhi == 0 and self.n == self.m

    def _diagonal_marked(self) -> Iterator[Marked]:
        """:meth:`marked` of a :meth:`_diagonal` alignment, block by block from the end as it
        gives them, without reading the sequences again or running the backward pass (a
        long-lived producer's partitions are millions of such rows: most of the judgement's
        time)."""
        for r0, r1 in reversed(self._blocks()):
            na = min(r1, self.n) - r0
            i0, i1 = min(self.m, r0), min(self.m, r1)
            if na:
                yield Marked("a", r0, np.ones(na, np.bool_), np.zeros(na, np.int64))
            if i1 > i0:
                nb = i1 - i0
                yield Marked("b", i0, np.ones(nb, np.bool_), np.zeros(nb, np.int64),
                             np.arange(i0, i1, dtype=np.int64))  # fmt: skip
        self.kept.close()

    def _b_marked(self, s: Steps, costs: np.ndarray, k: int) -> Marked:
        """Partition entries skipped on row ``k`` outside the band, by every cheapest
        alignment, as :func:`_mark_row` marks a skip."""
        free = costs < ANOMALY
        if k == self.n:
            self.cheaper_end[1] |= bool((costs < s.skip_b.mid).any())
        return Marked("b", s.i0, free, np.where(free, 0, 2),
                      np.full(len(costs), SEVERAL, np.int64))  # fmt: skip

    def _mark_skipped(self, s: Steps, marks: Marks, r0: int, r1: int) -> None:
        """The skips of block ``s`` into the band's start and out of its end (and before and
        after them), which every cheapest alignment makes (every path passes both cells), as
        :func:`_mark_row` marks a skip."""
        for after in (False, True):
            x0, costs, i = self._a_skipped(s, after)
            if not len(costs):
                continue
            at = slice(x0, x0 + len(costs))
            cheap = costs < ANOMALY
            marks.a_free[at] |= cheap
            marks.a_bad[at] |= ~cheap
            if i < s.cleaned:
                marks.a_cleaned[at] |= cheap
            if i == self.m and (costs < s.skip_a.mid[at]).any():
                marks.cheaper_end[0] = True
        if self.n - self.m < self.dlo and r0 <= self.n < r1:
            y = self.n - self.dlo - s.i0  # the end cell's entry, skipped out of the band
            c = _at_end(s.skip_b, self.n)[y]
            marks.b_match[y] = SEVERAL
            if c < ANOMALY:
                marks.b_free[y] = True
            else:
                marks.b_first[y] = min(marks.b_first[y], 3 * self.n + 2)
            if c < s.skip_b.mid[y]:
                marks.cheaper_end[1] = True

    def close(self) -> None:
        self.kept.close()
