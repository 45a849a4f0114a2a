"""replay.producer_state.RecentRanges: a run's ranges added at once hold what adding each in turn
holds (the broker's memory of a producer's recent batches, by which a resent batch is told
apart from a gap)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from replay import producer_state
from replay.producer_state import RecentRanges

ranges = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 1), st.integers(0, 99)), max_size=12)
rising = st.builds(
    lambda start, n: [(start + 2 * i, 1, start + i) for i in range(n)],
    st.integers(0, 40), st.integers(0, 12),
)  # fmt: skip
# the group coordinator's transactional offset commits: one range, again and again
repeated = st.builds(lambda n, start: [(0, 0, start + i) for i in range(n)],
                     st.integers(1, 12), st.integers(0, 40))  # fmt: skip


MEMORY = 7  # ranges remembered in this test (RECENT_RANGES), so that runs overflow it


@settings(max_examples=300, deadline=None)
@given(runs=st.lists(st.one_of(ranges, rising, repeated), min_size=1, max_size=5))
def test_a_run_added_at_once_holds_what_each_added_in_turn_holds(runs):
    """Runs of distinct rising ranges (a producer's batches: one step), and runs that repeat
    a range or one held already (at once while none is pushed out, else one by one), with a memory of 7 ranges so that runs overflow
    it: the same ranges, in the same order, the same offsets, the same highest sequence."""
    saved = producer_state.RECENT_RANGES
    producer_state.RECENT_RANGES = MEMORY
    try:
        each, at_once = RecentRanges(), RecentRanges()
        for run in runs:
            firsts = [f for f, _, _ in run]
            lasts = [f + d for f, d, _ in run]
            offsets = [o for _, _, o in run]
            for f, last, o in zip(firsts, lasts, offsets, strict=True):
                each.add(f, last, o)
            at_once.add_all(firsts, lasts, offsets)
            assert list(at_once.ranges.items()) == list(each.ranges.items())
            assert at_once.highest == each.highest
    finally:
        producer_state.RECENT_RANGES = saved
