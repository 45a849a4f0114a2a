"""The cross-log judgement (replay.crosslog) on hand-built sequences: transactions 10 ms apart
under one epoch (TV0/1), clocks 2 s apart, copies taken at different moments, compacted
coordinator history, retried markers, TV2 epochs. Pure Python: no Spark."""

from __future__ import annotations

import os
import random

import pytest

from replay.crosslog import Alignment, Bounds, Coordinator, Side
from replay.crosslog_stream import ProducerJudge, judge_producer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PID, TID = 4000, "app-1-thread-0"
X = ("out", 0)
SKEW = 2_000  # the partition leader's clock runs this far ahead of the coordinator's


def coord_txn(k: int, outcome="COMMIT", *, start=0, step=10, epoch=0, bump=0, parts=(X,), **kw):
    t0 = start + k * step
    return {
        "transactional_id": TID,
        "producer_id": PID,
        "data_epoch": epoch,
        "marker_epoch": epoch + bump,
        "outcome": outcome,
        "partitions": [{"topic": t, "partition": p} for t, p in parts],
        "start_timestamp": t0,
        "prepare_timestamp": t0 + 6,
        "complete_timestamp": t0 + 8,
        "timeout_ms": 10_000,
        "maybe": False,
        "log_partition": 3,
        "first_log_offset": k * 3,
        "history_from_start": True,
        "latest_epoch": epoch + bump,
        **kw,
    }


def part_txn(k: int, outcome="COMMIT", *, start=0, step=10, epoch=0, bump=0, records=2, tp=X,
             skew=SKEW, offset=None):  # fmt: skip
    first = k * (records + 1) if offset is None else offset
    t0 = start + k * step + skew
    return {
        "topic": tp[0],
        "partition": tp[1],
        "producer_id": PID,
        "producer_epoch": epoch,
        "marker_epoch": None if outcome == "OPEN" else epoch + bump,
        "first_offset": first if records else None,
        "last_offset": first + records - 1 if records else None,
        "marker_offset": None if outcome == "OPEN" else first + records,
        "outcome": outcome,
        "record_count": records,
        "first_timestamp": t0 + 2 if records else None,
        "marker_timestamp": None if outcome == "OPEN" else t0 + 7,
        "coordinator_epoch": 0,
        "in_cleaned_range": False,
        "pinned_records": 0,
        "open_ms": 0,
        "bound_timestamp": None,
    }


def judge(ptx, ctx, *, side=None, coordinator=None, sides=None, timeout_ms=None):
    side = side or Side(complete_from_start=True, copy_end_ts=None)
    end = max(a["complete_timestamp"] or 0 for a in ctx) if ctx else None
    coordinator = coordinator or Coordinator(True, end, max(a["latest_epoch"] for a in ctx))
    return judge_producer(PID, ptx, ctx, sides or {X: side}, coordinator, Bounds(2_000, 600_000),
                          timeout_ms)  # fmt: skip


def kinds(findings):
    return [(f["kind"], f["first_offset"], f["record_count"]) for f in findings]


N = 300  # transactions 10 ms apart: 150 of them within any 2 s of skew


def test_tv1_transactions_10ms_apart_with_2s_skew_align_by_order():
    ctx = [coord_txn(k, "ABORT" if k % 37 == 5 else "COMMIT") for k in range(N)]
    ptx = [part_txn(k, "ABORT" if k % 37 == 5 else "COMMIT") for k in range(N)]
    for skew in (-SKEW, 0, SKEW):
        ptx = [part_txn(k, "ABORT" if k % 37 == 5 else "COMMIT", skew=skew) for k in range(N)]
        findings, stats = judge(ptx, ctx)
        assert findings == [] and stats["judged"] == N and stats["undecidable"] == 0


def test_a_split_outcome_among_identical_neighbours_is_found():
    ctx = [coord_txn(k) for k in range(N)]
    ptx = [part_txn(k, "ABORT" if k == 140 else "COMMIT") for k in range(N)]
    findings, _ = judge(ptx, ctx)
    assert kinds(findings) == [("split_outcome", 140 * 3, 2)]
    assert findings[0]["last_offset"] == 140 * 3 + 2  # the marker
    assert findings[0]["severity"] == "critical" and findings[0]["transactional_id"] == TID


def test_a_missing_marker_in_the_middle_is_counted_not_guessed():
    """Under TV1 a lost marker merges two transactions' data under the next marker: which of
    the coordinator's identical transactions lost it, order cannot say."""
    ctx = [coord_txn(k) for k in range(20)]
    ptx = [part_txn(k) for k in range(20) if k != 7]
    # the partition's copy may simply end before the last marker: nothing to say
    findings, stats = judge(ptx, ctx)
    assert findings == [] and stats["undecidable"] == 0
    # it reaches far past the last completion: a marker is missing, but which one is a tie
    far = ctx[-1]["complete_timestamp"] + 60_000
    findings, stats = judge(ptx, ctx, side=Side(True, far))
    assert findings == [] and stats["undecidable"] >= 2


def test_missing_marker_proven_because_the_partition_copy_reaches_past_completion():
    ctx = [coord_txn(k) for k in range(10)]
    ptx = [part_txn(k) for k in range(9)] + [part_txn(9, "OPEN", records=3)]
    late = ctx[-1]["complete_timestamp"] + 30_000
    findings, _ = judge(ptx, ctx, side=Side(True, late))
    assert kinds(findings) == [("missing_marker", 36, 3)]
    # the same bytes from a partition copied right after the data: a copy taken earlier
    findings, _ = judge(ptx, ctx, side=Side(True, ctx[-1]["complete_timestamp"] + 1_000))
    assert findings == []


def test_write_outside_the_transaction_after_the_marker():
    """A delayed produce lands after the partition's marker; the producer never adds the
    partition again while the coordinator's log moves on for many seconds."""
    ctx = [coord_txn(k) for k in range(5)] + [
        coord_txn(k, parts=[("other", 0)]) for k in range(5, 2000)
    ]
    late = part_txn(5, "OPEN", records=2, offset=15)
    late["bound_timestamp"] = late["first_timestamp"] + 40  # another producer's marker after it
    ptx = [part_txn(k) for k in range(5)] + [late]
    sides = {X: Side(True, None), ("other", 0): Side(False, None)}
    findings, _ = judge(ptx, ctx, sides=sides)
    assert kinds(findings) == [("write_outside_transaction", 15, 2)]
    # with nothing after it in the partition the append time is unbounded: cannot tell
    late["bound_timestamp"] = None
    assert judge(ptx, ctx, sides=sides)[0] == []


def test_data_with_an_epoch_the_coordinator_has_left_behind_is_outside():
    ctx = [coord_txn(0, "ABORT", bump=1)]  # the coordinator aborted it with a bumped epoch
    ptx = [part_txn(0, "ABORT", bump=1), part_txn(1, "OPEN", records=2, offset=10)]
    findings, _ = judge(ptx, ctx)
    assert kinds(findings) == [("write_outside_transaction", 10, 2)]


def test_copies_taken_at_different_moments_are_not_findings():
    ctx = [coord_txn(k) for k in range(50)]
    # the coordinator's copy is older: the partition holds two more transactions
    ptx = [part_txn(k) for k in range(52)]
    assert judge(ptx, ctx)[0] == []
    # the partition's copy is older: its last transaction has data and no marker yet
    ptx = [part_txn(k) for k in range(49)] + [part_txn(49, "OPEN")]
    assert judge(ptx, ctx, side=Side(True, ctx[-1]["complete_timestamp"] + 500))[0] == []
    # ... or lacks the last transactions entirely
    ptx = [part_txn(k) for k in range(47)]
    assert judge(ptx, ctx, side=Side(True, ctx[-1]["complete_timestamp"] - 30))[0] == []


def test_compacted_coordinator_history_and_retention_are_not_findings():
    # the coordinator's log keeps the last 20 transactions (and one surviving Complete record)
    survivor = coord_txn(29, parts=())
    survivor.update(maybe=True, data_epoch=None, prepare_timestamp=None)
    ctx = [survivor] + [coord_txn(k) for k in range(30, 50)]
    for a in ctx:
        a["history_from_start"] = False
    # the partition's log lost its first 10 transactions to retention
    ptx = [part_txn(k) for k in range(10, 50)]
    findings, stats = judge(
        ptx, ctx, side=Side(False, None), coordinator=Coordinator(False, 500, 0)
    )
    assert findings == [] and stats["judged"] == 40


def test_a_marker_written_again_after_coordinator_failover_is_not_a_finding():
    ctx = [coord_txn(k) for k in range(10)]
    ptx = [part_txn(k, offset=k * 4) for k in range(10)]
    retry = part_txn(4, records=0, offset=4 * 4 + 3)  # the same COMMIT again, no data
    retry["marker_offset"] = 4 * 4 + 3
    findings, _ = judge(ptx + [retry], ctx)
    assert findings == []


def test_tv2_every_transaction_has_its_own_epoch():
    ctx = [coord_txn(k, epoch=k, bump=1) for k in range(30)]
    ptx = [part_txn(k, epoch=k, bump=1, skew=-SKEW) for k in range(30)]
    assert judge(ptx, ctx)[0] == []
    ptx[12] = part_txn(12, "ABORT", epoch=12, bump=1, skew=-SKEW)
    assert kinds(judge(ptx, ctx)[0]) == [("split_outcome", 36, 2)]


def test_tv2_data_in_a_partition_its_transaction_never_listed_is_outside():
    """Under TV2 each transaction has its own epoch: transactional data of epoch 10 in a
    partition the coordinator's completed transaction of epoch 10 does not list (a produce the
    coordinator never heard of, KIP-890 part 1) is outside any transaction, though no marker
    follows it."""
    ctx = [coord_txn(k, epoch=k, bump=1, parts=(X,) if k != 10 else (("other", 0),))
           for k in range(20)]  # fmt: skip
    ptx = [part_txn(k, epoch=k, bump=1, skew=-SKEW) for k in range(20) if k != 10]
    ptx.append(part_txn(10, "OPEN", epoch=10, skew=-SKEW))
    sides = {X: Side(True, None), ("other", 0): Side(False, None)}
    assert kinds(judge(ptx, ctx, sides=sides)[0]) == [("write_outside_transaction", 30, 2)]


def test_a_partition_added_without_data_takes_its_marker():
    ctx = [coord_txn(k) for k in range(6)]
    ptx = [part_txn(k, records=0 if k == 3 else 2, offset=k * 3) for k in range(6)]
    ptx[3]["marker_offset"] = 9
    assert judge(ptx, ctx)[0] == []


@pytest.mark.parametrize("missing", [True, False])
def test_no_coordinator_history_means_no_judgement(missing):
    ptx = [part_txn(k) for k in range(5)]
    findings, stats = judge_producer(
        PID, ptx, [], {X: Side(True, None)}, None, Bounds(2_000, 600_000)
    )
    assert findings == [] and stats["unjudged"] == 5


def _rec(state, offset, parts=(), epoch=0, ts=None):
    return {
        "transactional_id": TID, "producer_id": PID, "producer_epoch": epoch,
        "timeout_ms": 10_000, "state": state,
        "partitions": [{"topic": t, "partitions": [p]} for t, p in parts] if parts else None,
        "last_update_timestamp": ts if ts is not None else offset, "start_timestamp": -1,
        "client_transaction_version": 0, "is_tombstone": False, "log_partition": 3,
        "log_offset": offset,
    }  # fmt: skip


def test_coordinator_history_that_compaction_left():
    """Below the cleaned point only the latest record of each transactional id survives: a
    transaction seen only by its Complete record has partitions nobody knows (maybe); one seen
    from its Prepare record lists them all."""
    from replay.coordinator import replay_transactional_id

    rows = [
        _rec("PrepareAbort", 90, [X]),  # survivor of the cleaned range: lists its partitions
        _rec("CompleteAbort", 105),
        _rec("Ongoing", 120, [X]),
        _rec("PrepareCommit", 121, [X]),
        _rec("CompleteCommit", 122),
    ]
    txns, findings = replay_transactional_id(rows, {3: 100})
    assert findings == []
    assert [(t["outcome"], t["maybe"]) for t in txns] == [("ABORT", False), ("COMMIT", False)]
    assert txns[0]["partitions"] == [{"topic": X[0], "partition": X[1]}]
    assert not any(t["history_from_start"] for t in txns)
    # only a Complete record survived: which partitions, nobody knows
    txns, findings = replay_transactional_id([_rec("CompleteCommit", 90), *rows[2:]], {3: 100})
    assert findings == []
    assert [(t["outcome"], t["maybe"]) for t in txns] == [("COMMIT", True), ("COMMIT", False)]
    # the same records in a log the cleaner never touched: the producer's history is whole
    whole, _ = replay_transactional_id([_rec("Empty", 0)] + rows[2:], {3: 0})
    assert all(t["history_from_start"] for t in whole)


def _whole_table(s):
    """The alignment over the whole (n+1) x (m+1) table, as its rule reads (docs/cross-log.md),
    in plain Python: forward and backward cheapest costs, then the steps on a cheapest path.
    The reference crosslog.Alignment (banded, a block of rows at a time) must equal."""
    from replay.crosslog import ANOMALY, ASSUME, INF, NO_MATCH, SEVERAL, _match

    n, m = s.a.shape[0], s.b.shape[0]

    def step(costs, x, pos, end):
        return int(costs.first[x] if pos == 0 else costs.last[x] if pos == end else costs.mid[x])

    def skip_a(k, i):
        c = step(s.skip_a, k, i, m)
        if ANOMALY <= c < INF and i < s.cleaned:
            return ASSUME  # nothing left of it before an entry in the cleaned range
        return c

    def steps(k, i):
        """(what, cost, the cell it leads to) of every step leaving cell (k, i)."""
        if k < n and i < m:
            yield "match", int(_match.py_func(s, k, i)), (k + 1, i + 1)
        if k < n:
            yield "skip A", skip_a(k, i), (k + 1, i)
        if i < m:
            yield "skip B", step(s.skip_b, i, k, n), (k, i + 1)

    cells = [(k, i) for k in range(n + 1) for i in range(m + 1)]
    F = {c: INF for c in cells}
    F[0, 0] = 0
    for k, i in cells:  # every step goes down or right: a cell is final when it is reached
        for _, c, to in steps(k, i):
            F[to] = min(F[to], F[k, i] + c)
    G = {c: INF for c in cells}
    G[n, m] = 0
    for k, i in reversed(cells):
        for _, c, to in steps(k, i):
            G[k, i] = min(G[k, i], c + G[to])
    total = F[n, m]
    a_free, a_bad = [False] * n, [False] * n
    b_free, b_bad = [False] * m, [0] * m
    b_match = [NO_MATCH] * m  # the transaction every cheapest alignment matches, or SEVERAL
    a_matched, a_cleaned = [False] * n, [False] * n
    cheaper_end = [False, False]  # a cheapest skip after the other's end, cheaper than inside
    for k, i in cells:  # in this order the first anomaly of an entry sets its kind
        for what, c, to in steps(k, i):
            if F[k, i] >= INF or c >= INF or F[k, i] + c + G[to] != total:
                continue
            if what == "skip A":
                a_free[k] |= c < ANOMALY
                a_bad[k] |= c >= ANOMALY
                a_cleaned[k] |= c < ANOMALY and i < s.cleaned
                cheaper_end[0] |= i == m and c < s.skip_a.mid[k]
                continue
            if what == "match":
                a_free[k] = a_matched[k] = True
                b_match[i] = k if b_match[i] in (NO_MATCH, k) else SEVERAL
            else:
                b_match[i] = SEVERAL
                cheaper_end[1] |= k == n and c < s.skip_b.mid[i]
            if c < ANOMALY:
                b_free[i] = True
            elif b_bad[i] == 0:
                b_bad[i] = 1 if what == "match" else 2
    gone = sum(c and not (x or y) for c, x, y in zip(a_cleaned, a_matched, a_bad, strict=True))
    return total, a_free, a_bad, b_free, b_bad, b_match, cheaper_end, gone


def _random_arrays(seed, rare_assumptions: bool = False, apart: str | None = None):
    """Random sequences and skip costs; ``rare_assumptions``: longer ones whose skips are
    nearly all anomalies (a long healthy history with a fault or two, where the band's bound
    rests on the few cheap skips there are); ``apart``: such a history of which one sequence
    goes on 3-30 rows past the other's ``"end"`` (copies taken at different moments), or
    starts as many rows before the other's ``"start"`` (a compacted or retained log), or the
    shorter one lies ``"inside"`` the longer one (a compacted log copied earlier: rows of the
    longer one before and after it), most of them cheap to skip there, some not, and matches
    mostly cheap; ``"around"``: the same, every row of either cheap to skip at either end
    (alignments shifted along the whole history tie)."""
    import numpy as np

    from replay.crosslog import ANOMALY, ASSUME, INF, Skips, Steps

    rng = np.random.default_rng(seed)
    top = 80 if rare_assumptions else 30
    n, m = int(rng.integers(0, top)), int(rng.integers(0, top))
    if apart:  # the whole table in Python is the test's cost: ~50 x 50 rows
        rare_assumptions = True
        longer, short_by = int(rng.integers(30, 60)), int(rng.integers(3, 30))
        n, m = (longer, longer - short_by) if seed % 2 else (longer - short_by, longer)
    ts = np.sort(rng.integers(0, 2_000, max(n, m) + 1))
    a = np.zeros((n, 8), np.int64)
    for k in range(n):
        lo = ts[k] if k < len(ts) else 0
        a[k] = [rng.integers(-1, 2), rng.integers(-1, 2), lo, lo + rng.integers(0, 50),
                rng.integers(0, 3), rng.random() < 0.1, rng.random() < 0.9, rng.random() < 0.5]  # fmt: skip
    b = np.zeros((m, 5), np.int64)
    for i in range(m):
        b[i] = [rng.integers(0, 3), rng.random() < 0.8, rng.integers(-1, 2), rng.integers(-1, 2),
                ts[i] + rng.integers(-30, 30)]  # fmt: skip

    costs, weights = [ASSUME, ANOMALY, INF], [0.5, 0.25, 0.25]
    if rare_assumptions:
        weights = [0.02, 0.93, 0.05]

    def skips(count):
        return Skips(*(rng.choice(costs, count, p=weights).astype(np.int64) for _ in range(3)))

    skip_a, skip_b = skips(n), skips(m)
    if apart:  # one history: matches cheap but for a fault or two; skips past an end cheap
        a[:, :2], b[:, 2:4] = 0, 0
        a[:, 4], b[:, 0] = 1, 1
        b[rng.random(m) < 0.03, 0] = 2
        # the rows of the longer one before the shorter one's first: at its start, its end
        # or inside it
        lead = {"start": short_by, "end": 0}.get(apart)
        if lead is None:
            lead = int(rng.integers(1, short_by))
        b[:, 4] = ts[lead : lead + m] if m < n else ts[:m]
        if n < m:
            a[:, 2] = ts[lead : lead + n]
            a[:, 3] = a[:, 2] + rng.integers(0, 50, n)
        if apart == "inside":  # the longer one's rows cheap to skip only where they lie
            longest = skip_a if n > m else skip_b  # outside the other's, and a row or two more
            cheap = rng.random(longer) < 0.85
            row = np.arange(longer)
            longest.first[:] = np.where(cheap & (row < lead + 2), ASSUME, ANOMALY)
            longest.last[:] = np.where(cheap & (row >= lead + longer - short_by - 2), ASSUME,
                                       ANOMALY)  # fmt: skip
        else:
            for skip in (skip_a, skip_b):
                ends = {"start": [skip.first], "end": [skip.last]}.get(
                    apart, [skip.first, skip.last]
                )
                for at in ends:
                    at[:] = np.where(rng.random(len(at)) < 0.85, ASSUME, ANOMALY)
    window = int(rng.choice([20, 200, 5_000]))
    cleaned = int(rng.integers(0, m + 1)) if rng.random() < 0.5 else 0  # a cleaned prefix
    if apart == "inside":  # (inside it every coordinator skip's floor is an assumption)
        cleaned = 0
    return Steps(a, b, skip_a, skip_b, window, n, m, 0, 0, cleaned), rng


def _blocked(steps, half_width, rows):
    """crosslog.Alignment over ``steps`` held whole, ``rows`` rows a block (None: its own
    choice): what :func:`_whole_table` gives, as the whole table gives it."""
    import numpy as np

    from replay.crosslog import Alignment, Skips

    n, m = steps.a.shape[0], steps.b.shape[0]

    def steps_of(k0, k1, i0, i1):
        def cut(costs, lo, hi):
            return Skips(*(c[lo:hi] for c in costs))

        return steps._replace(a=steps.a[k0:k1], b=steps.b[i0:i1], skip_a=cut(steps.skip_a, k0, k1),
                              skip_b=cut(steps.skip_b, i0, i1), k0=k0, i0=i0)  # fmt: skip

    alignment = Alignment(n, m, steps_of, half_width, rows)
    a_free, a_bad = np.zeros(n, bool), np.zeros(n, bool)
    b_free, b_bad, b_match = np.zeros(m, bool), np.zeros(m, np.int64), np.zeros(m, np.int64)
    seen = {"a": np.zeros(n, int), "b": np.zeros(m, int)}
    for which, start, free, bad, match in alignment.marked():
        at = slice(start, start + len(free))
        seen[which][at] += 1
        if which == "a":
            a_free[at], a_bad[at] = free, bad > 0
        else:
            b_free[at], b_bad[at], b_match[at] = free, bad, match
    assert (seen["a"] == 1).all() and (seen["b"] == 1).all()  # each given once, when final
    return (alignment.total, a_free, a_bad, b_free, b_bad, b_match, alignment.cheaper_end,
            alignment.cleaned_gone)  # fmt: skip


def _same(got, want):
    import numpy as np

    assert int(got[0]) == int(want[0])
    for x, y in zip(got[1:], want[1:], strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("seed", range(40))
def test_the_banded_programme_equals_the_whole_table(seed):
    """crosslog.Alignment computes only a band of cells around the diagonal, a block of rows
    at a time from one kept row per block; on random sequences (every kind of match and skip
    cost, lengths that differ) its total and its marks equal the whole table's, whatever the
    band it starts from and however many rows a block holds."""
    steps, rng = _random_arrays(seed)
    whole = _whole_table(steps)
    _same(_blocked(steps, int(rng.integers(0, 4)), None), whole)
    for rows in (1, 2, 3, 7):
        _same(_blocked(steps, int(rng.integers(0, 4)), rows), whole)


def _healthy_arrays(seed):
    """A healthy history (a long-lived producer's): as many coordinator transactions as
    partition entries, each matching its own place (epochs, outcomes and times agree), every
    skip costing something (an assumption or an anomaly)."""
    import numpy as np

    from replay.crosslog import ANOMALY, ASSUME, Skips, Steps

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    ts = np.sort(rng.integers(0, 5_000, n))
    a = np.zeros((n, 8), np.int64)
    a[:, 2], a[:, 3] = ts, ts + rng.integers(0, 50, n)  # start, end
    a[:, 4], a[:, 6], a[:, 7] = 1, 1, 1  # committed, completed, the partition's copy past it
    b = np.zeros((n, 5), np.int64)
    b[:, 0], b[:, 1], b[:, 4] = 1, rng.random(n) < 0.9, ts + rng.integers(0, 20, n)

    def skips():
        return Skips(*(rng.choice([ASSUME, ANOMALY], n).astype(np.int64) for _ in range(3)))

    return Steps(a, b, skips(), skips(), 200, n, n, 0, 0, 0)


@pytest.mark.parametrize("seed", range(20))
def test_a_healthy_history_is_marked_along_its_diagonal_as_the_whole_table_marks_it(
    seed, monkeypatch
):
    """A healthy history's alignment (total 0 in a band of one cell) is marked without its
    backward pass (crosslog.Alignment._diagonal_marked): the whole table's marks, matches and
    cheaper ends, however many rows a block holds; and the backward pass, where it runs,
    gives the same."""
    from replay.crosslog import Alignment

    steps = _healthy_arrays(seed)
    whole = _whole_table(steps)
    assert int(whole[0]) == 0
    taken = []
    diagonal = Alignment._diagonal_marked

    def spied(self):
        taken.append(self.n)
        return diagonal(self)

    monkeypatch.setattr(Alignment, "_diagonal_marked", spied)
    for rows in (None, 1, 3, 7):
        _same(_blocked(steps, 0, rows), whole)
    assert len(taken) == 4
    monkeypatch.setattr(Alignment, "_diagonal", lambda self: False)
    for rows in (None, 1, 3):
        _same(_blocked(steps, 0, rows), whole)
    assert len(taken) == 4


# the shapes whose histories lie inside the other's: the first seeds in the inner loop, every
# seed in ./dev test (the sweep tier)
APART_CASES = [
    (seed, apart) if apart in ("end", "start") or seed < 10
    else pytest.param(seed, apart, marks=pytest.mark.sweep)
    for apart in ("end", "start", "inside", "around") for seed in range(40)
]  # fmt: skip


@pytest.mark.parametrize(("seed", "apart"), APART_CASES)
def test_a_band_that_ends_at_one_sequences_end_equals_the_whole_table(seed, apart):
    """One sequence going on past the other's end (copies taken at different moments), or
    starting before the other's start (a compacted coordinator log, a partition's retention),
    or both (a compacted log copied earlier): the band stays around one diagonal and what lies
    past its end or before its start is skipped as a sum (crosslog.Alignment.end, .start, the
    shared history's band), with anomalies there too, or falls back to a wider one where
    shifted alignments tie ("around"); still the whole table's total, marks, matches and
    cheaper ends, whatever the band it starts from and the rows a block holds."""
    steps, rng = _random_arrays(seed, apart=apart)
    whole = _whole_table(steps)
    for rows in (None, 1, 4):
        _same(_blocked(steps, int(rng.integers(0, 3)), rows), whole)


@pytest.mark.parametrize("seed", range(30))
def test_the_band_bound_by_the_skips_there_are_equals_the_whole_table(seed):
    """The same, on longer sequences whose skips are nearly all anomalies, so that the band
    stays a few cells wide around anomalous matches (crosslog.SkipFloors): still the whole
    table's total and marks."""
    steps, rng = _random_arrays(seed, rare_assumptions=True)
    whole = _whole_table(steps)
    for rows in (None, 1, 5):
        _same(_blocked(steps, int(rng.integers(0, 3)), rows), whole)


def test_a_shifted_band_is_as_wide_as_the_skips_on_each_side_need():
    """crosslog.Alignment._shift_width against the bound it rests on, stated directly: a path
    through a cell above the band (k - i > dhi) makes dhi + 1 skips before an end (if dhi >=
    0) and dhi - D + 1 after a start (if dhi >= D); below it (k - i < dlo), 1 - dlo before an
    end (if dlo <= 0) and D - dlo + 1 after a start (if dlo <= D); the band holds every
    cheapest alignment where on each side, unless no cell lies there, one of those counts
    reaches the skips whose floors exceed the band's total, or the band reaches the table's
    edge there. Its answer is None where the band does, else the least wider half-width that
    would (on random lengths, places, half-widths and counts)."""
    import numpy as np

    from replay.crosslog import Alignment

    class Floors:
        def __init__(self, need):
            self.need = need

        def skips_above(self, total):
            return self.need

    def holds(n, m, lo, hi, h, before, after):
        D, dlo, dhi = n - m, max(lo - h, -m), min(hi + h, n)

        def reaches(count, applies, need):
            return applies and need is not None and count >= need

        above = dhi >= n or reaches(dhi + 1, dhi >= 0, before) or reaches(dhi - D + 1, dhi >= D, after)  # fmt: skip
        below = dlo <= -m or reaches(1 - dlo, dlo <= 0, before) or reaches(D - dlo + 1, dlo <= D, after)  # fmt: skip
        return above and below

    rng = np.random.default_rng(7)
    for _ in range(3_000):
        n, m = (int(x) for x in rng.integers(1, 60, 2))
        lo = int(rng.integers(-m, n + 1))
        hi = min(n, lo + int(rng.integers(0, 4)))
        h = int(rng.integers(0, 8))
        before, after = (None if rng.random() < 0.15 else int(rng.integers(1, 80)) for _ in "ab")
        a = Alignment.__new__(Alignment)
        a.n, a.m, a.total = n, m, 5
        a.dlo, a.dhi = max(lo - h, -m), min(hi + h, n)
        got = a._shift_width((Floors(before), Floors(after)), (lo, hi), h)
        if holds(n, m, lo, hi, h, before, after):
            assert got is None
            continue
        # the least that holds (at the latest where the band holds the whole table)
        wider = next(w for w in range(h + 1, n + m + 1) if holds(n, m, lo, hi, w, before, after))
        assert got == wider, (n, m, lo, hi, h, before, after, got)


def test_skip_floors_count_the_cheapest_skips_first():
    """The fewest skips that cost more than a total: the cheap ones first, each entry once
    (blocks overlap in partition entries), the entries no block read as free."""
    import numpy as np

    from replay.crosslog import ANOMALY, ASSUME, INF, SkipFloors, Skips, Steps

    def costs(*values):
        v = np.array(values, np.int64)
        return Skips(v, v, v)

    def block(a_costs, b_costs, i0, cleaned=0):
        a, b = np.zeros((len(a_costs), 8), np.int64), np.zeros((len(b_costs), 5), np.int64)
        return Steps(a, b, costs(*a_costs), costs(*b_costs), 0, 0, 0, 0, i0, cleaned)

    floors = SkipFloors(4, 4)
    floors.add(block([ANOMALY, ASSUME], [ANOMALY, ANOMALY, ASSUME], 0))
    floors.add(block([ANOMALY, INF], [ASSUME, ANOMALY], 2))  # entry 2 again: counted once
    assert floors.counts == {ASSUME: 2, ANOMALY: 5, INF: 1}
    assert floors.skips_above(0) == 1
    assert floors.skips_above(2) == 3  # two assumptions, then an anomaly
    assert floors.skips_above(ANOMALY) == 3
    assert floors.skips_above(2 * ANOMALY + 2) == 5
    assert floors.skips_above(4 * ANOMALY + 2) == 7
    assert floors.skips_above(5 * ANOMALY + 2) == 8  # then the transaction no skip may pass
    assert SkipFloors(2, 2).skips_above(0) is None  # nothing read: every skip may be free
    cleaned = SkipFloors(2, 0)
    cleaned.add(block([ANOMALY, INF], [], 0, cleaned=1))  # an assumption in the cleaned range
    assert cleaned.counts == {ASSUME: 1, INF: 1}
    # before an end (the band's end) or after a start (its start): those places' costs only
    placed = Skips(np.array([ASSUME]), np.array([ANOMALY]), np.array([INF]))  # first, last, mid
    for last, first, least in ((True, True, ASSUME), (False, True, ASSUME), (True, False, ANOMALY),
                               (False, False, INF)):  # fmt: skip
        floors = SkipFloors(1, 0, last=last, first=first)
        floors.add(Steps(np.zeros((1, 8), np.int64), np.zeros((0, 5), np.int64), placed,
                         costs(), 0, 0, 0, 0, 0, 0))  # fmt: skip
        assert floors.counts == {least: 1}


def test_one_anomaly_in_a_long_history_keeps_the_band_narrow():
    """A split outcome among 20,000 transactions of one partition, both copies known to reach
    past its end (so that skipping a transaction anywhere is an anomaly): the band grows by
    the cells the cheap skips could use, not by the anomaly's cost (1,000), and the finding is
    the one there is."""
    from replay import crosslog
    from replay.crosslog import Side

    widths = []
    init = crosslog.Alignment.__init__

    def recorded(self, *args, **kwargs):
        init(self, *args, **kwargs)
        widths.append(self.dhi - self.dlo + 1)

    n = 20_000
    ctx = [coord_txn(k, step=100) for k in range(n)]
    ptx = [part_txn(k, "ABORT" if k == 12_345 else "COMMIT", step=100) for k in range(n)]
    copy_end = ptx[-1]["marker_timestamp"] + 60_000  # the copies were taken a minute later
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(crosslog.Alignment, "__init__", recorded)
        findings, stats = judge(ptx, ctx, side=Side(True, copy_end),
                                coordinator=crosslog.Coordinator(True, copy_end, 0))  # fmt: skip
    assert kinds(findings) == [("split_outcome", 12_345 * 3, 2)]
    assert stats == {"judged": n, "undecidable": 0, "unjudged": 0}
    assert widths and max(widths) <= 5, widths


def test_a_day_of_a_streams_app_aligns_in_memory_linear_in_its_transactions():
    """60,000 transactions of one producer in one partition (a Streams app committing every
    100 ms for 100 minutes), one split outcome among them: the whole alignment table would
    take 2 x 29 GB; the band holds a few MB, and the finding is still the one there is."""
    n = 60_000
    ctx = [coord_txn(k, step=100) for k in range(n)]
    ptx = [part_txn(k, "ABORT" if k == 41_234 else "COMMIT", step=100) for k in range(n)]
    findings, stats = judge(ptx, ctx)
    assert kinds(findings) == [("split_outcome", 41_234 * 3, 2)]
    assert stats == {"judged": n, "undecidable": 0, "unjudged": 0}


WEEK = 40_000  # a partition's transactions of a producer, 100 ms apart: ~67 minutes
TAIL = 1_000  # what a compacted `__transaction_state` kept of them: the last ~100 s


def _compacted(split: int | None = None):
    """A partition holding a long history of the producer, a coordinator log holding only its
    tail (the cleaner kept nothing older of this transactional id): as Arrow tables."""
    import pyarrow as pa

    from replay.crosslog_stream import COORDINATOR_TXNS, PARTITION_TXNS

    ptx = [part_txn(k, "ABORT" if k == split else "COMMIT", step=100) for k in range(WEEK)]
    ctx = [coord_txn(k, step=100, history_from_start=False) for k in range(WEEK - TAIL, WEEK)]
    return (
        pa.Table.from_pylist([{c: r.get(c) for c in PARTITION_TXNS.names} for r in ptx],
                             schema=PARTITION_TXNS),
        pa.Table.from_pylist([{c: r.get(c) for c in COORDINATOR_TXNS.names} for r in ctx],
                             schema=COORDINATOR_TXNS),
        Coordinator(False, ctx[-1]["complete_timestamp"] + 5_000, 0),
    )  # fmt: skip


def test_a_compacted_coordinator_log_judges_only_what_it_covers():
    """`__transaction_state` keeps the latest record per transactional id below the cleaner's
    point: the coordinator's history of a long-lived producer starts long after its
    partition's. The entries older than the order window before its first transaction are
    without coordinator history (not aligned, not findings); what the tail covers is judged,
    a split outcome there still found."""
    ptx, ctx, coordinator = _compacted()
    findings, stats = judge_producer(
        PID, ptx, ctx, {X: Side(True, None)}, coordinator, Bounds(2_000, 600_000)
    )
    # without coordinator history: the entries whose marker is more than the order window
    # before the tail's first transaction started
    first = ctx.column("start_timestamp")[0].as_py()
    older = sum(ts < first - 600_000 for ts in ptx.column("marker_timestamp").to_pylist())
    assert findings == [] and 30_000 < older < WEEK - TAIL
    assert stats == {"judged": WEEK - older, "undecidable": 0, "unjudged": older}
    # an ABORT marker where the coordinator committed: the finding the whole alignment gives
    # (order places it as data no coordinator transaction explains; 1 GB of table before)
    ptx, ctx, coordinator = _compacted(split=WEEK - 10)
    findings, _ = judge_producer(
        PID, ptx, ctx, {X: Side(True, None)}, coordinator, Bounds(2_000, 600_000)
    )
    assert kinds(findings) == [("write_outside_transaction", (WEEK - 10) * 3, 2)]


def test_a_partition_shorter_than_the_coordinators_history_judges_its_own():
    """The partition's retention kept less than the coordinator's log holds (its history does
    not reach back to its start): the coordinator's transactions that ended more than the
    window before the partition's first entry are not aligned; the rest is judged."""
    n = WEEK // 4
    ctx = [coord_txn(k, step=100) for k in range(n)]
    ptx = [part_txn(k, step=100) for k in range(n - TAIL, n)]
    # the coordinator's copy reaches past the partition's last marker
    later = Coordinator(True, ctx[-1]["complete_timestamp"] + 10_000, 0)
    findings, stats = judge(ptx, ctx, side=Side(False, None), coordinator=later)
    assert findings == [] and stats == {"judged": TAIL, "undecidable": 0, "unjudged": 0}
    ptx[TAIL // 2] = part_txn(n - TAIL // 2, "ABORT", step=100)
    findings, _ = judge(ptx, ctx, side=Side(False, None), coordinator=later)
    assert kinds(findings) == [("split_outcome", (n - TAIL // 2) * 3, 2)]


def test_the_alignment_of_a_compacted_history_holds_rows_not_the_table():
    """The band of the compacted case above is as wide as the window's transactions (6,000
    cells) and the programme keeps a row every ~sqrt(n) rows: its memory is a few MB where
    the two whole tables of the band took 2 x (n + 1) x width x 8 bytes (100 MB here, and
    ~1 GB before the entries older than the window were left out). Peak RSS of a process
    judging it, against one that only builds the same inputs."""
    import subprocess
    import sys

    script = (
        "import resource, sys; sys.path.insert(0, 'tests'); import test_crosslog as t\n"
        "from replay.crosslog import Side, Bounds\n"
        "from replay.crosslog_stream import judge_producer\n"
        "ptx, ctx, c = t._compacted(); base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "if sys.argv[1] == 'judge':\n"
        "    judge_producer(t.PID, ptx, ctx, {t.X: Side(True, None)}, c, Bounds(2000, 600000))\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    peaks = {}
    for what in ("build", "judge"):
        out = subprocess.run([sys.executable, "-c", script, what], capture_output=True,
                             text=True, check=True, cwd=ROOT)  # fmt: skip
        peaks[what] = int(out.stdout.split()[-1]) << 10
    assert peaks["judge"] - peaks["build"] < 60 << 20, peaks


# -- open data no coordinator transaction lists (issue 31 item 6) ------------------------------

Y = ("out", 1)


def _unlisted(at: int):
    """A TV1 producer's transactions over X, its coordinator history compacted before the
    first of them (not from the producer's start), and two of its records left open in Y, a
    partition none of its transactions lists, written at ``at`` (the coordinator's clock)."""
    ctx = [coord_txn(k, start=1_000, history_from_start=False, copy_end_ts=60_000)
           for k in range(50)]  # fmt: skip
    ptx = [part_txn(k, start=1_000, skew=0) for k in range(50)]
    stray = part_txn(0, "OPEN", start=at, skew=0, tp=Y, offset=0)
    stray["bound_timestamp"] = stray["first_timestamp"]
    return ptx + [stray], ctx


def test_open_data_inside_the_coordinators_known_history_is_a_write_outside_any_transaction():
    """Under TV0/1 every transaction has the same epoch: what proves the open records in Y
    belong to no transaction is time, used as a bound. The coordinator's history of the
    producer is whole from its first transaction whose partitions are known (compaction keeps
    an id's latest record only, so what follows survives); records written more than the
    clock tolerance after that start, with the coordinator's copy reaching past them by more
    than the tolerance, and no transaction listing Y, were written outside any transaction.
    Within the tolerance of that start they might belong to an earlier transaction the cleaner
    removed: not judged. The views come from the coordinator's rows (no view given)."""
    sides = {X: Side(True, None), Y: Side(True, None)}
    bounds = Bounds(2_000, 600_000)
    ptx, ctx = _unlisted(at=1_000 + 2_500)  # 2.5 s after the known history starts
    findings, _ = judge_producer(PID, ptx, ctx, sides, None, bounds)
    assert kinds(findings) == [("write_outside_transaction", 0, 2)]
    assert findings[0]["partition"] == 1
    ptx, ctx = _unlisted(at=1_000 + 1_500)  # within the tolerance of it: cannot tell
    findings, _ = judge_producer(PID, ptx, ctx, sides, None, bounds)
    assert findings == []
    # the coordinator's copy ends before the records (plus the tolerance): they may belong to
    # a transaction whose AddPartitionsToTxn it did not see
    ptx, ctx = _unlisted(at=1_000 + 2_500)
    for a in ctx:
        a["copy_end_ts"] = 4_000
    findings, _ = judge_producer(PID, ptx, ctx, sides, None, bounds)
    assert findings == []


def test_transactions_the_cleaner_removed_whole_are_counted_not_missing():
    """A TV2 producer's 50 transactions in the coordinator's log; in the partition the cleaner
    removed two of them whole (data, then the markers after their delete horizon). Inside the
    cleaned range that is normal: no finding, the two counted as gone with the cleaning, the
    rest aligned one to one. The same two missing where the partition was never cleaned are
    missing markers (the partition may have been added without data: a warning)."""
    from replay import crosslog_stream as cs

    ctx = [coord_txn(k, epoch=k, bump=1, history_from_start=False) for k in range(50)]
    end = ctx[-1]["complete_timestamp"] + 60_000
    for cleaned in (True, False):
        ptx = [part_txn(k, epoch=k, bump=1) for k in range(50) if k not in (20, 21)]
        for p in ptx:
            p["in_cleaned_range"] = cleaned and p["first_offset"] < 30 * 3
        judge = cs.ProducerJudge(PID, Bounds(2_000, 600_000),
                                 coordinator_view=Coordinator(False, end, 50),
                                 side_views={X: Side(False, end)})  # fmt: skip
        judge.coordinator(cs.columns_of(ctx, cs.COORDINATOR_TXNS))
        judge.entries(cs._entry_order(cs.columns_of(ptx, cs.PARTITION_TXNS)))
        findings, stats = judge.finish()
        if cleaned:
            assert findings == [] and stats["judged"] == 48
            assert judge.counts[X] == {"judged": 20, "judged_cleaned": 28, "listed_cleaned": 2}
        else:
            assert [(f["kind"], f["severity"], f["producer_epoch"]) for f in findings] == [
                ("missing_marker", "warning", 20),
                ("missing_marker", "warning", 21),
            ]


# -- anchors: a slice of a lifelong producer's history (replay.crosslog.Anchor) -----------------
def _slice_of_a_lifelong_producer(anchors, bad=60):
    """Coordinator transactions 30-89 and partition transactions 25-94 of a TV0/1 producer
    that lives for 400 (one id, one epoch), the 60th aborted in the partition but committed
    by the coordinator, and the partition's last entry far later (a slice's tail witness)."""
    from replay.crosslog_stream import crosslog_tables
    from replay.grouped import Facts

    end = coord_txn(89)["complete_timestamp"]
    ctx = [{**coord_txn(k), "history_from_start": False, "copy_end_ts": end} for k in range(30, 90)]
    ptx = [{**part_txn(k, "ABORT" if k == bad else "COMMIT"), "_row": "txn"} for k in range(25, 95)]
    tail = {**part_txn(400), "_row": "txn"}
    side = {"_row": "side", "topic": X[0], "partition": X[1], "complete_from": 75,
            "copy_end_timestamp": tail["marker_timestamp"]}  # fmt: skip
    facts = Facts(600_000, 60_000, Bounds(2_000, 600_000), anchors=anchors)
    out = crosslog_tables(PID, [*ptx, tail, side], ctx, facts, "c").to_pylist()
    return [(r["kind"], r["first_offset"]) for r in out if r["out"] == "finding"]


def test_an_anchor_pins_a_slice_where_a_shifted_alignment_explains_an_anomaly_away():
    """Mid-history both ends are free: an alignment shifted by one explains the split outcome
    away (at the start) or calls it a write outside any transaction (at the end, where the
    partition's tail lies far past the coordinator's records). Pinned at both ends by pairs
    the whole history matched, the slice says what the whole history says."""
    from replay.crosslog import Anchor

    assert _slice_of_a_lifelong_producer({}) == []
    start_only = {("c", PID): {X: Anchor(30 * 3, 3, 30 * 3)}}
    assert _slice_of_a_lifelong_producer(start_only) == [("write_outside_transaction", 180)]
    both = {("c", PID): {X: Anchor(30 * 3, 3, 30 * 3, 70 * 3, 70 * 3)}}
    assert _slice_of_a_lifelong_producer(both) == [("split_outcome", 180)]
    # the whole history says the same
    ctx = [coord_txn(k) for k in range(400)]
    ptx = [part_txn(k, "ABORT" if k == 60 else "COMMIT") for k in range(400)]
    assert kinds(judge(ptx, ctx)[0]) == [("split_outcome", 180, 2)]
    # another cluster's anchor, or a pair the logs do not hold, pins nothing
    assert _slice_of_a_lifelong_producer({("other", PID): both[("c", PID)]}) == []
    assert _slice_of_a_lifelong_producer({("c", PID): {X: Anchor(30 * 3 + 1, 3, 30 * 3)}}) == []
    assert _slice_of_a_lifelong_producer({("c", PID): {X: Anchor(30 * 3, 4, 30 * 3)}}) == []
    # an end pair the logs do not hold: pinned at the start only
    broken_end = {("c", PID): {X: Anchor(30 * 3, 3, 30 * 3, 70 * 3 + 1, 70 * 3)}}
    assert _slice_of_a_lifelong_producer(broken_end) == [("write_outside_transaction", 180)]
    # a clean slice stays clean when pinned
    assert _slice_of_a_lifelong_producer(both, bad=-1) == []


def test_matched_entries_are_those_every_cheapest_alignment_matches():
    from replay.crosslog_stream import matched_entries
    from replay.grouped import Facts

    facts = Facts(600_000, 60_000, Bounds(2_000, 600_000))
    ctx = [{**coord_txn(k), "copy_end_ts": None} for k in range(50)]
    ptx = [{**part_txn(k, "ABORT" if k == 20 else "COMMIT"), "_row": "txn"} for k in range(50)]
    side = {"_row": "side", "topic": X[0], "partition": X[1], "complete_from": 0,
            "copy_end_timestamp": None}  # fmt: skip
    pairs = matched_entries(PID, [*ptx, side], ctx, facts, {X})[X]
    # whole histories from the start: every entry is its own transaction, the split one too
    assert pairs.tolist() == [[k * 3, 3, k * 3] for k in range(50)]
    # both starts lost (a copy that begins mid-history) and identical transactions: shifts tie,
    # no entry is sure
    ctx = [{**a, "history_from_start": False} for a in ctx[10:]]
    ptx = [{**part_txn(k), "_row": "txn"} for k in range(5, 50)]
    side = {**side, "complete_from": 15}
    assert matched_entries(PID, [*ptx, side], ctx, facts, {X})[X].tolist() == []


def test_the_anchors_file_round_trips_and_ignores_what_it_cannot_read():
    from replay.anchors import anchor_row, document, parsed
    from replay.crosslog import Anchor

    a, b = Anchor(90, 3, 90), Anchor(90, 3, 90, 210, 210)
    data = document([anchor_row("c", PID, *X, a), anchor_row("c", PID + 1, *X, b),
                     {"cluster": "c", "producer_id": "x"}])  # fmt: skip
    assert parsed(data) == {("c", PID): {X: a}, ("c", PID + 1): {X: b}}
    assert parsed(b"not json") == {} and parsed(b"[]") == {}


APART = 100_000  # transactions 100 s apart: the order window (600 s) spans six of them


def _copies_apart(seed: int):
    """One producer's history in a partition and in the coordinator's log, one copy taken
    long (tens of windows) before the other ends, with faults, open data, a marker written
    again, a transaction of unknown partitions and one still in flight here and there, and
    sometimes a partition copy reaching far past its last entry (other producers' batches)
    or the producer pausing for an hour."""
    rng = random.Random(seed)
    n = rng.randint(20, 90)
    paused = rng.randrange(n) if rng.random() < 0.3 else n

    def at(k: int) -> int:
        return 36 * APART if k >= paused else 0

    outcomes = ["COMMIT"] * 6 + ["ABORT"]
    ctx = [coord_txn(k, rng.choice(outcomes), step=APART, start=at(k)) for k in range(n)]
    if rng.random() < 0.3:  # its partitions unknown (a compacted Ongoing record)
        ctx[rng.randrange(n)].update(maybe=True, partitions=[])
    if rng.random() < 0.3:  # still in flight when the coordinator's copy was taken
        ctx[-1].update(outcome=None, prepare_timestamp=None, complete_timestamp=None)
    ptx = []
    for k in range(n):
        outcome = ctx[k]["outcome"] or "OPEN"
        roll = rng.random()
        if roll < 0.04:
            continue  # a marker (and its data) missing
        if roll < 0.08:
            outcome = "ABORT" if outcome == "COMMIT" else "COMMIT"  # a split outcome
        skew = rng.choice([0, SKEW, -SKEW])
        ptx.append(part_txn(k, outcome, step=APART, start=at(k), skew=skew, offset=10 * k))
        if rng.random() < 0.03 and outcome != "OPEN":  # its marker written again
            again = part_txn(k, outcome, step=APART, start=at(k), records=0, offset=10 * k)
            again.update(marker_offset=10 * k + 3, first_offset=None)
            ptx.append(again)
        if rng.random() < 0.03:  # data outside any transaction (or a later epoch's)
            epoch = rng.choice([0, 7])
            ptx.append(part_txn(k, "OPEN", step=APART, start=at(k), skew=skew, epoch=epoch,
                                offset=10 * k + 5))  # fmt: skip
    cut = rng.randint(1, n // 3)  # transactions the earlier copy lacks: ~3 to 30 windows
    if rng.random() < 0.5:  # the partition copied first
        ptx = [t for t in ptx if max(t["first_offset"] or 0, t["marker_offset"] or 0) < (n - cut) * 10]  # fmt: skip
    else:
        ctx = ctx[: n - cut]
        if rng.random() < 0.5:  # copied inside a transaction: an Ongoing record
            ctx[-1] = {**ctx[-1], "outcome": None, "prepare_timestamp": None,
                       "complete_timestamp": None}  # fmt: skip
    ends = [t["marker_timestamp"] or t["first_timestamp"] for t in ptx] or [0]
    side = Side(True, max(ends) + rng.choice([0, 50, 30_000, 40 * APART]))
    stamps = [t["complete_timestamp"] or t["start_timestamp"] for t in ctx]
    coordinator = Coordinator(True, max(stamps) + rng.choice([0, 50, 30_000]), 0)
    return ptx, ctx, side, coordinator, rng.choice([None, 10_000])


@pytest.mark.parametrize("seed", range(120))
def test_what_lies_after_the_other_copy_is_judged_as_the_whole_alignment_judges_it(
    seed, monkeypatch
):
    """The last transactions of one log that lie after everything of the other's copy are
    left out of the alignment (ProducerJudge._after_history): the findings and counts are
    those of the alignment of both sequences whole, which is quadratic in what they leave out."""
    ptx, ctx, side, coordinator, timeout = _copies_apart(seed)
    if not ptx or not ctx:
        return
    got = judge(ptx, ctx, side=side, coordinator=coordinator, timeout_ms=timeout)
    monkeypatch.setattr(ProducerJudge, "_after_history", lambda self, seqs, pair, p, q: pair)
    assert got == judge(ptx, ctx, side=side, coordinator=coordinator, timeout_ms=timeout)


def _judged_in_bands(*args, **kw):
    """``judge(*args, **kw)``, and the width of each band its alignments computed."""
    widths = []
    real = Alignment.__init__

    def recorded(self, *a, **k):
        real(self, *a, **k)
        widths.append(self.dhi - self.dlo + 1)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Alignment, "__init__", recorded)
        return judge(*args, **kw), widths


def test_copies_hours_apart_align_in_a_band_as_wide_as_the_window():
    """A partition copied 40 windows before the coordinator's log (a long-lived producer, a
    copy an hour older): the coordinator's transactions after it are left out, and those of
    the order window after its end are skipped as a sum (crosslog.Alignment.end), so the band
    is a few cells wide, not the hour's transactions."""
    n, m = 400, 100
    ctx = [coord_txn(k, step=APART) for k in range(n)]
    ptx = [part_txn(k, step=APART) for k in range(m)]
    side = Side(True, ptx[-1]["marker_timestamp"] + 50)
    (findings, stats), widths = _judged_in_bands(ptx, ctx, side=side)
    assert findings == [] and stats == {"judged": m, "undecidable": 0, "unjudged": 0}
    assert widths and max(widths) <= 3, widths  # past the earlier end: skipped as a sum


@pytest.mark.parametrize("coordinator_first", [False, True])
def test_copies_seconds_apart_align_in_a_band_a_few_cells_wide(coordinator_first, monkeypatch):
    """One log copied 1,500 transactions (15 s) before the other, well inside the order window
    (so nothing is left out as after the other copy): the band stays around the diagonal and
    what lies after the earlier copy's end is skipped as a sum (crosslog.Alignment.end), so it
    is a few cells wide, not 1,500. With a split outcome shortly before that end, the judgement
    is the whole table's."""
    long, short = 6_000, 4_500
    n, m = (short, long) if coordinator_first else (long, short)
    ctx = [coord_txn(k, step=100) for k in range(n)]
    side = Side(True, None)
    coordinator = Coordinator(True, None, 0)
    for fault in (None, short - 20):
        ptx = [part_txn(k, "ABORT" if k == fault else "COMMIT", step=100) for k in range(m)]
        # the fault: a split outcome, or where the partition goes on past the coordinator's
        # end, data no transaction lists (each later transaction one entry on, which the
        # coordinator's copy may predate, one skip fewer: the cheaper explanation)
        got = _one_fault_in_a_narrow_band(ptx, ctx, side, coordinator, fault, 5)
    assert got == _judged_whole(monkeypatch, ptx, ctx, side=side, coordinator=coordinator)


def _one_fault_in_a_narrow_band(ptx, ctx, side, coordinator, fault, widest):
    """``judge``: every entry judged, the one ``fault`` (an entry's index, or None) found at
    its place, and no band wider than ``widest``."""
    got, widths = _judged_in_bands(ptx, ctx, side=side, coordinator=coordinator)
    assert got[1] == {"judged": len(ptx), "undecidable": 0, "unjudged": 0}
    assert [(f, r) for _, f, r in kinds(got[0])] == ([(3 * fault, 2)] if fault else [])
    assert widths and max(widths) <= widest, widths
    return got


def _judged_whole(monkeypatch, *args, **kw):
    """``judge(*args, **kw)`` with every alignment's band the whole table."""
    whole = Alignment.__init__
    monkeypatch.setattr(Alignment, "__init__",
                        lambda self, n, m, *a, **k: whole(self, n, m, a[0], max(n, m), *a[2:], **k))  # fmt: skip
    return judge(*args, **kw)


@pytest.mark.parametrize("coordinator_later", [False, True])
def test_a_history_starting_seconds_later_aligns_in_a_narrow_band(coordinator_later, monkeypatch):
    """The coordinator's history of a long-lived producer starting 1,500 transactions (150 s)
    after the partition's (its `__transaction_state` compacted), or the partition's after the
    coordinator's (its retention), well inside the order window (so nothing is left out as
    before the other log's history): the band stays around the diagonal of the ends and what
    lies before the later start is skipped as a sum (crosslog.Alignment.start), so it spans
    the few transactions within the clock tolerance of the copies' ends, not 1,500. With a
    split outcome just after the later start, the judgement is the whole table's."""
    n, gap = 6_000, 1_500
    coordinator = Coordinator(not coordinator_later, None, 0)
    side = Side(coordinator_later, None)
    ctx = [coord_txn(k, step=100, history_from_start=not coordinator_later)
           for k in range(gap if coordinator_later else 0, n)]  # fmt: skip
    coordinator.copy_end_ts = ctx[-1]["complete_timestamp"] + 50
    for fault in (None, gap + 20):
        ptx = [part_txn(k, "ABORT" if k == fault else "COMMIT", step=100)
               for k in range(0 if coordinator_later else gap, n)]  # fmt: skip
        side.copy_end_ts = ptx[-1]["marker_timestamp"] + 50
        # the fault: a split outcome, or (each earlier entry one transaction on, the first
        # skipped before the coordinator's history) data no transaction lists
        got = _one_fault_in_a_narrow_band(ptx, ctx, side, coordinator, fault, 100)
    assert got == _judged_whole(monkeypatch, ptx, ctx, side=side, coordinator=coordinator)


@pytest.mark.parametrize("fault_at", [None, "start", "end"])
def test_a_compacted_history_copied_earlier_aligns_in_a_narrow_band(fault_at, monkeypatch):
    """The coordinator's history of a long-lived producer both starting 1,500 transactions
    after the partition's (its `__transaction_state` compacted) and ending 1,500 before (copied
    150 s earlier), inside the order window (nothing left out before or after the other log's
    history): the band lies around the diagonal where the times place the shared history, what
    lies before and after it skipped as sums (crosslog.Alignment: "shift"), so it spans the few
    transactions within the clock tolerance of the coordinator's first and last, not the 3,000
    the band holding both ends spans. With a split outcome just after the coordinator's start
    or 6 s before its end (beyond what the clocks leave open), the judgement is the whole
    table's."""
    n, gap = 6_000, 1_500
    ctx = [coord_txn(k, step=100, history_from_start=False) for k in range(gap, n - gap)]
    # as the stream reads them from the coordinator's rows: its history of the producer whole
    # from its first transaction on (Coordinator.known_from_ts)
    coordinator = Coordinator(False, ctx[-1]["complete_timestamp"] + 50, 0,
                              ctx[0]["start_timestamp"])  # fmt: skip
    fault = {"start": gap + 20, "end": n - gap - 60}.get(fault_at)
    ptx = [part_txn(k, "ABORT" if k == fault else "COMMIT", step=100) for k in range(n)]
    side = Side(True, ptx[-1]["marker_timestamp"] + 50)
    got = _one_fault_in_a_narrow_band(ptx, ctx, side, coordinator, fault, 100)
    assert got == _judged_whole(monkeypatch, ptx, ctx, side=side, coordinator=coordinator)


def test_a_cut_that_would_change_the_judgement_is_aligned_whole(monkeypatch):
    """Data at the partition's end under an epoch the coordinator never recorded, then the
    producer paused for an hour, then went on: after the coordinator's end the data would be
    data its copy may predate (no finding), but the whole coordinator log lists the later
    transactions (a write outside any transaction). Cut short, the alignment reports a
    cheaper skip at its end, and the whole sequences are aligned again: the whole one's
    finding."""
    m, pause = 100, 36 * APART
    ctx = [coord_txn(k, step=APART) for k in range(m)]
    ctx += [coord_txn(k, step=APART, start=pause) for k in range(m, 3 * m)]
    ptx = [part_txn(k, step=APART, offset=10 * k) for k in range(m)]
    ptx.append(part_txn(m - 1, "OPEN", step=APART, epoch=7, offset=10 * m))
    side = Side(True, ptx[-2]["marker_timestamp"] + 50)
    got = judge(ptx, ctx, side=side)
    assert kinds(got[0]) == [("write_outside_transaction", 10 * m, 2)]
    monkeypatch.setattr(ProducerJudge, "_after_history", lambda self, seqs, pair, p, q: pair)
    assert got == judge(ptx, ctx, side=side)


def test_a_coordinator_copy_ending_inside_a_transaction_cuts_the_later_entries():
    """The coordinator's `__transaction_state` copied first, ending inside a transaction (an
    Ongoing record: no Prepare, its end unknown): its reach is its start plus the timeout (the
    coordinator aborts past it), so the partition's entries more than the order window after
    that are left out, and the band spans the window, not the hour the partition's copy adds."""
    n, m = 100, 400
    ctx = [coord_txn(k, step=APART) for k in range(n)]
    ctx[-1].update(outcome=None, prepare_timestamp=None, complete_timestamp=None)
    ptx = [part_txn(k, step=APART) for k in range(m)]
    side = Side(True, ptx[-1]["marker_timestamp"] + 50)
    coordinator = Coordinator(True, ctx[-1]["start_timestamp"] + 50, 0)
    got, widths = _judged_in_bands(ptx, ctx, side=side, coordinator=coordinator, timeout_ms=10_000)
    assert got[0] == [] and got[1] == {"judged": m, "undecidable": 0, "unjudged": 0}
    assert widths and max(widths) <= 10, widths
    # without the timeout its reach is unknown: aligned whole, the same judgement
    assert judge(ptx, ctx, side=side, coordinator=coordinator) == got


def test_a_band_beyond_its_budget_is_counted_not_run(monkeypatch):
    """A partition whose copy reaches past all of 400 listed transactions while holding the
    first 100 (300 missing markers): a band as wide as the difference. Past the budget of the
    rows the band keeps, the alignment is not run (a week of such a history would fill the
    executor's disk) and the partition's transactions are counted as beyond it, not judged."""
    from replay import crosslog
    from replay.coverage import TXNS_OVER_BUDGET
    from replay.crosslog_stream import COORDINATOR_TXNS, COUNTED, PARTITION_TXNS, columns_of

    n, m = 400, 100
    ctx = [coord_txn(k, step=APART) for k in range(n)]
    ptx = [part_txn(k, step=APART) for k in range(m)]
    side = Side(True, ctx[-1]["complete_timestamp"] + 10 * APART)
    coordinator = Coordinator(True, ctx[-1]["complete_timestamp"] + 50, 0)
    findings, _ = judge(ptx, ctx, side=side, coordinator=coordinator)
    assert len(findings) > 0  # within the budget: judged
    monkeypatch.setattr(crosslog, "MAX_KEPT_BYTES", 1_000)
    producer = ProducerJudge(PID, Bounds(2_000, 600_000), coordinator_view=coordinator,
                             side_views={X: side})  # fmt: skip
    producer.coordinator(columns_of(ctx, COORDINATOR_TXNS))
    producer.entries(columns_of(ptx, PARTITION_TXNS))
    findings, stats = producer.finish()
    assert findings == [] and stats == {"judged": 0, "undecidable": 0, "unjudged": 0}
    assert producer.counts == {X: {"over_budget": m}}
    assert COUNTED["over_budget"] == TXNS_OVER_BUDGET
