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

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from decoders.kernels import NUMBA_CACHE
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


def _b_entries(txns: list[dict]) -> list[dict]:
    """The partition's transactions of one producer in offset order; marker-only entries (a
    partition added with no data, or a retried marker) included, flagged ``retry`` when they
    repeat the previous marker with nothing in between."""
    out = []
    prev = None
    for t in sorted(txns, key=_position):
        e = dict(t)
        e["retry"] = bool(
            prev is not None
            and not t["record_count"]
            and t["outcome"] != "OPEN"
            and prev["outcome"] == t["outcome"]
            and prev.get("marker_epoch") == t.get("marker_epoch")
        )
        out.append(e)
        prev = e
    return out


def _position(t: dict) -> int:
    return t["first_offset"] if t["first_offset"] is not None else t["marker_offset"]


class _Costs:
    """The cost of each alignment step for one (producer, partition): the rules, in Python,
    then laid out as arrays for the dynamic programme (:func:`_align`, :func:`_programme`)."""

    def __init__(self, A, B, side: Side, coord: Coordinator, bounds: Bounds) -> None:
        self.A, self.B, self.side, self.coord, self.bounds = A, B, side, coord, bounds

    def _partition_reaches_past(self, ts: int | None) -> bool:
        e = self.side.copy_end_ts
        return ts is not None and e is not None and e > ts + self.bounds.tolerance_ms

    def _coordinator_reaches_past(self, ts: int | None) -> bool:
        e = self.coord.copy_end_ts
        return ts is not None and ts >= 0 and e is not None and e > ts + self.bounds.tolerance_ms

    def skip_a(self, k: int, i: int) -> tuple[int, str | None]:
        """A coordinator transaction listing the partition without an entry there; ``i``
        entries of the partition lie before it."""
        a = self.A[k]
        if a["maybe"]:
            return ASSUME, None
        if i == 0 and not self.side.complete_from_start:
            return ASSUME, None  # before the partition's surviving history
        if i == len(self.B):  # nothing after it in the partition: a copy taken earlier?
            if a["outcome"] is not None and self._partition_reaches_past(
                a["complete_timestamp"] or a["prepare_timestamp"]
            ):
                return ANOMALY, "missing_marker"
            return ASSUME, None
        if a["outcome"] is None:
            return ASSUME, None  # in flight: its partitions may still be written
        return ANOMALY, "missing_marker"  # markers of later transactions are there, not this

    def skip_b(self, i: int, k: int) -> tuple[int, str | None]:
        """A partition entry no coordinator transaction listing the partition explains; ``k``
        coordinator transactions lie before it."""
        b = self.B[i]
        if b["retry"]:
            return ASSUME, None  # a marker written again after a coordinator failover
        kind = "write_outside_transaction" if b["record_count"] else "orphan_marker"
        if b["in_cleaned_range"]:
            return ASSUME, None
        if k == 0 and not self.coord.complete_from_start:
            return ASSUME, None  # before the coordinator's surviving history
        if k == len(self.A):  # after everything the coordinator's copy lists here
            if b["record_count"] and b["producer_epoch"] < self.coord.latest_epoch:
                return ANOMALY, kind  # the producer moved to a newer epoch since
            ts = b["marker_timestamp"] if b["outcome"] != "OPEN" else b.get("bound_timestamp")
            if self._coordinator_reaches_past(ts):
                return ANOMALY, kind
            return ASSUME, None  # the coordinator's copy may predate its transaction
        return ANOMALY, kind

    def arrays(self) -> tuple:
        """Everything the programme needs, as numpy arrays. Skip costs depend on the position
        only through "first", "last" or "in between"; a match's cost (:func:`_match`) on
        identity (epochs), the coarse window and the outcomes."""
        A, B = self.A, self.B
        n, m = len(A), len(B)

        def skips(f, count, other):
            first = [f(x, 0)[0] for x in range(count)]
            last = [f(x, other)[0] for x in range(count)]
            mid = [f(x, 1)[0] if other > 1 else INF for x in range(count)]
            return (np.array(first, np.int64), np.array(last, np.int64), np.array(mid, np.int64))

        def opt(v) -> int:
            return -1 if v is None else int(v)

        a = np.array(
            [
                [
                    opt(x["data_epoch"]),
                    opt(x["marker_epoch"]),
                    opt(x["start_timestamp"] if x["start_timestamp"] is not None
                        else x["prepare_timestamp"]),
                    opt(x["complete_timestamp"] if x["complete_timestamp"] is not None
                        else x["prepare_timestamp"]),
                    OUTCOME[x["outcome"]],
                    int(bool(x["maybe"])),
                    int(x["complete_timestamp"] is not None),
                    int(self._partition_reaches_past(x["complete_timestamp"])),
                ]
                for x in A
            ] or np.zeros((0, 8)),
            np.int64,
        ).reshape(n, 8)  # fmt: skip
        b = np.array(
            [
                [
                    OUTCOME[x["outcome"]],
                    int(bool(x["record_count"])),
                    opt(x["producer_epoch"]),
                    opt(x["marker_epoch"]),
                    opt(x["marker_timestamp"] if x["outcome"] != "OPEN" else x["first_timestamp"]),
                ]
                for x in B
            ] or np.zeros((0, 5)),
            np.int64,
        ).reshape(m, 5)  # fmt: skip
        return (a, b, *skips(self.skip_a, n, m), *skips(self.skip_b, m, n), self.bounds.window_ms)


OUTCOME = {None: 0, "OPEN": 0, "COMMIT": 1, "ABORT": 2}


@njit(cache=NUMBA_CACHE, nogil=True)
def _match(a, b, k, i, window):  # pragma: no cover (compiled)
    """The cost of aligning coordinator transaction k with partition entry i."""
    de, me, lo, hi, outcome, maybe, complete, reach = (
        a[k, 0], a[k, 1], a[k, 2], a[k, 3], a[k, 4], a[k, 5], a[k, 6], a[k, 7],
    )  # fmt: skip
    b_out, b_data, b_de, b_me, ts = b[i, 0], b[i, 1], b[i, 2], b[i, 3], b[i, 4]
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
def _step(first, last, mid, x, pos, end):  # pragma: no cover (compiled)
    if pos == 0:
        return first[x]
    if pos == end:
        return last[x]
    return mid[x]


@njit(cache=NUMBA_CACHE, nogil=True)
def _programme(a, b, sa0, sa1, sa2, sb0, sb1, sb2, window, dlo, dhi):  # pragma: no cover (compiled)
    """Forward (F) and backward (G) cheapest costs, then which steps lie on a cheapest
    alignment: per entry, whether a cheap step does (free) and whether an anomaly does.

    Only the cells (k, i) with ``dlo <= k - i <= dhi`` (a band around the diagonal) are
    computed, stored by their offset in the band: memory and time grow with n times the band's
    width, not with n times m (:func:`_align` chooses a band that holds every cheapest
    alignment)."""
    n, m = a.shape[0], b.shape[0]
    W = dhi - dlo + 1
    F = np.full((n + 1, W), INF, np.int64)
    F[0, dhi] = 0  # cell (0, 0): d = 0, at offset i - k + dhi
    for k in range(n + 1):
        for i in range(max(0, k - dhi), min(m, k - dlo) + 1):
            j = i - k + dhi
            f = F[k, j]
            if f >= INF:
                continue
            if k < n and i < m:  # a match keeps k - i: the same offset in the next row
                c = _match(a, b, k, i, window)
                if f + c < F[k + 1, j]:
                    F[k + 1, j] = f + c
            if k < n and j > 0:  # skip a coordinator transaction: (k + 1, i)
                c = _step(sa0, sa1, sa2, k, i, m)
                if f + c < F[k + 1, j - 1]:
                    F[k + 1, j - 1] = f + c
            if i < m and j + 1 < W:  # skip a partition entry: (k, i + 1)
                c = _step(sb0, sb1, sb2, i, k, n)
                if f + c < F[k, j + 1]:
                    F[k, j + 1] = f + c
    G = np.full((n + 1, W), INF, np.int64)
    G[n, m - n + dhi] = 0
    for k in range(n, -1, -1):
        for i in range(min(m, k - dlo), max(0, k - dhi) - 1, -1):
            j = i - k + dhi
            g = G[k, j]
            if k < n and i < m:
                g = min(g, _match(a, b, k, i, window) + G[k + 1, j])
            if k < n and j > 0:
                g = min(g, _step(sa0, sa1, sa2, k, i, m) + G[k + 1, j - 1])
            if i < m and j + 1 < W:
                g = min(g, _step(sb0, sb1, sb2, i, k, n) + G[k, j + 1])
            G[k, j] = g
    total = F[n, m - n + dhi]
    a_free = np.zeros(n, np.bool_)
    a_bad = np.zeros(n, np.bool_)
    b_free = np.zeros(m, np.bool_)
    b_bad = np.zeros(m, np.int64)  # 1: an anomalous match, 2: an anomalous skip
    for k in range(n + 1):
        for i in range(max(0, k - dhi), min(m, k - dlo) + 1):
            j = i - k + dhi
            f = F[k, j]
            if f >= INF:
                continue
            if k < n and i < m:
                c = _match(a, b, k, i, window)
                if c < INF and f + c + G[k + 1, j] == total:
                    if c < ANOMALY:
                        b_free[i] = True
                        a_free[k] = True
                    else:
                        a_free[k] = True  # the finding is the partition entry's
                        if b_bad[i] == 0:
                            b_bad[i] = 1
            if k < n and j > 0:
                c = _step(sa0, sa1, sa2, k, i, m)
                if f + c + G[k + 1, j - 1] == total:
                    if c < ANOMALY:
                        a_free[k] = True
                    else:
                        a_bad[k] = True
            if i < m and j + 1 < W:
                c = _step(sb0, sb1, sb2, i, k, n)
                if f + c + G[k, j + 1] == total:
                    if c < ANOMALY:
                        b_free[i] = True
                    elif b_bad[i] == 0:
                        b_bad[i] = 2
    return total, a_free, a_bad, b_free, b_bad


BAND = 8  # the first band's half-width around the diagonal (cells), widened as needed


def _align(arrays: tuple, half_width: int = BAND) -> tuple:
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
    a, b, *_skips, _window = arrays
    n, m = a.shape[0], b.shape[0]
    D = n - m
    if any(s.size and int(s.min()) < ASSUME for s in _skips):
        half_width = max(n, m)  # a free skip would void the bound: the whole table
    h = half_width
    while True:
        dlo, dhi = max(min(0, D) - h, -m), min(max(0, D) + h, n)
        out = _programme(*arrays, dlo, dhi)
        total = int(out[0])
        if (dlo == -m and dhi == n) or (total < INF and abs(D) + 2 * (h + 1) > total):
            return out
        h = (total - abs(D)) // 2 + 1 if total < INF else 2 * h + 1


# -- one producer ------------------------------------------------------------------------------


def judge_producer(
    producer_id: int,
    partition_txns: list[dict[str, Any]],
    coordinator_txns: list[dict[str, Any]],
    sides: dict[tuple[str, int], Side],
    coordinator: Coordinator | None,
    bounds: Bounds,
) -> tuple[list[dict], dict[str, int]]:
    """partition_txns: this producer's rows of the `transactions` table in every partition
    (COMMIT, ABORT, OPEN and marker-only rows with ``bound_timestamp`` for OPEN ones);
    coordinator_txns: its coordinator transactions in log order, with ``maybe`` (partitions
    unknown: history compacted); sides: what each partition's copy covers.

    Returns the findings and counts: ``judged`` (partition transactions aligned with the
    coordinator's), ``undecidable`` (either explanation fits), ``unjudged`` (no coordinator
    history for this producer)."""
    stats = {"judged": 0, "undecidable": 0, "unjudged": 0}
    data = [t for t in partition_txns if t["outcome"] != "OPEN" or t["record_count"]]
    if coordinator is None or not coordinator_txns:
        stats["unjudged"] = sum(1 for t in data if t["record_count"])
        return [], stats
    tid = next((a["transactional_id"] for a in coordinator_txns if a["transactional_id"]), None)
    by_partition: dict[tuple[str, int], list[dict]] = {}
    for t in data:
        by_partition.setdefault((t["topic"], t["partition"]), []).append(t)
    listing: dict[tuple[str, int], list[int]] = {}
    for k, a in enumerate(coordinator_txns):
        for tp in a["partitions"] or []:
            listing.setdefault((tp["topic"], tp["partition"]), []).append(k)
    maybes = [k for k, a in enumerate(coordinator_txns) if a["maybe"]]
    findings: list[dict] = []
    for tp in sorted(set(by_partition) | set(listing)):
        side = sides.get(tp)
        if side is None:
            continue  # the partition is not in the dump: cannot tell
        ks = sorted(set(listing.get(tp, [])) | set(maybes))
        A = [coordinator_txns[k] for k in ks]
        B = _b_entries(by_partition.get(tp, []))
        costs = _Costs(A, B, side, coordinator, bounds)
        total, a_free, a_bad, b_free, b_bad = _align(costs.arrays())
        if total >= INF:
            stats["undecidable"] += len(B)
            continue
        stats["judged"] += sum(1 for b in B if b["record_count"])
        stats["undecidable"] += int((b_free & (b_bad > 0)).sum() + (a_free & a_bad).sum())
        for i in np.flatnonzero((b_bad > 0) & ~b_free):
            b = B[i]
            if b_bad[i] == 1:
                kind = "missing_marker" if b["outcome"] == "OPEN" else "split_outcome"
            else:
                kind = "write_outside_transaction" if b["record_count"] else "orphan_marker"
            findings.append(_b_finding(kind, b, tp, producer_id, tid, A, bounds))
        for k in np.flatnonzero(a_bad & ~a_free):
            findings.append(_a_finding("missing_marker", A[k], tp, producer_id, tid))
    return findings, stats


def _b_finding(kind, b, tp, pid, tid, A, bounds) -> dict:
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
    evidence["coordinator_transactions_listing_partition"] = sum(1 for a in A if not a["maybe"])
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
