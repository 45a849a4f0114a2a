"""Daily audits that go on from the day before (replay.previous) find what full audits find.

A dump copied once a day (tests/daily_copies.py: each partition's log cut at a later random
batch every day, inside transactions, runs of one producer, rebalances, between segments) is
audited by the one-process runner day after day, each run going on from the previous one's
output: it reads only the bytes past each replica's point. Every day, its findings (by
fingerprint) and its replay tables are those of a full audit of the same day's copy. With
retention deleting old segments between days, a full audit of the day's copy knows less than
the chain: the chain finds at least what it finds, and what a full audit of a copy
holding every day's data finds, but what it no longer carries: a partition's history below its
log start. No Spark."""

from __future__ import annotations

import collections
import json
import random

import pytest

from replay import tables as T
from replay.local import audit_local
from tests.daily_copies import daily_copies

DAYS = 7
# the replay tables a run hands on (its own rows and those it carried), compared row for row
TABLES = {
    "transactions": T.TRANSACTIONS, "coordinator_transactions": T.COORDINATOR_TXNS,
    "offset_timeline": T.TIMELINE, "group_generations": T.GENERATIONS,
    "lso_changes": T.LSO_CHANGES, "partitions": T.PARTITIONS,
}  # fmt: skip
# scenarios by seed: each seed a few of them (every family of finding over the five)
SCENARIOS = {
    0: ("transaction_faults", "aborted_reads"),
    1: ("idempotence_faults", "broadcast_groups", "corrupt_segments"),
    2: ("clean_eos_pipeline", "offset_resets", "clean_compaction"),
    3: ("replica_divergence", "transaction_faults"),
    4: ("demo", "idempotence_faults"),
}


def _seeds(n: int, in_suite: int = 1) -> list:
    """Seeds 0..n-1: the first ``in_suite`` in ./dev test (the sweep tier), the others `slow`
    as well (``./dev test -m slow``): the suite keeps to its time budget."""
    return [s if s < in_suite else pytest.param(s, marks=pytest.mark.slow) for s in range(n)]


def _prints(result: dict) -> collections.Counter:
    return collections.Counter(f["fingerprint"] for f in result["findings"])


def _place(f: dict) -> tuple:
    """A finding's identity but its cluster's name (a copy's without a cluster id is named by
    its path: two copies of one day in two folders)."""
    from replay.remediation import IDENTITY, identity_of

    return tuple(f.get(c) if c in identity_of(f) else None for c in IDENTITY if c != T.CLUSTER)


def _places(result: dict) -> collections.Counter:
    return collections.Counter(_place(f) for f in result["findings"])


def _rows(result: dict, name: str) -> collections.Counter:
    cols = [T.CLUSTER, *TABLES[name].names]
    return collections.Counter(json.dumps([r.get(c) for c in cols], default=str)
                               for r in result[name])  # fmt: skip


def _chain(roots: list[list[str]]) -> list[dict]:
    out, previous = [], None
    for day in roots:
        previous = audit_local(day, since=previous)
        out.append(previous)
    return out


def _went_on(result: dict) -> tuple[int, int, int]:
    """(replicas that went on from their point, bytes read past the points, their logs')"""
    since = [r.since for r in result["replicas"] if r.since is not None]
    went = [s for s in since if s["carried"]]
    return len(went), sum(s["bytes_after"] for s in went), sum(s["log_bytes"] for s in went)


def _same_as_full(sim_all, tmp_path, seed: int, scenarios, days=range(1, DAYS + 1)) -> None:
    """The chain of daily runs against full audits of ``days``' copies."""
    roots = daily_copies([sim_all / s for s in scenarios], tmp_path, DAYS, random.Random(seed))
    chain = _chain(roots)
    for day, (result, root) in enumerate(zip(chain, roots, strict=True), 1):
        if day not in days:
            continue
        full = audit_local(root)
        where = (seed, scenarios, day)
        assert _prints(result) == _prints(full), where
        for name in TABLES:
            assert _rows(result, name) == _rows(full, name), (*where, name)
        if day > 1:  # every replica with a point went on from it, reading only what is new
            went, read, logs = _went_on(result)
            pointed = [r for r in result["replicas"] if r.since is not None]
            assert went == len(pointed) >= len(result["replicas"]) // 2, where
            assert read < logs, where


def test_a_week_of_daily_audits_finds_what_full_audits_find(sim_all, tmp_path):
    _same_as_full(sim_all, tmp_path, 0, ("transaction_faults", "broadcast_groups"), (3, DAYS))


@pytest.mark.sweep
@pytest.mark.parametrize("seed", sorted(SCENARIOS))
def test_every_seed_s_week_finds_what_full_audits_find(sim_all, tmp_path, seed):
    _same_as_full(sim_all, tmp_path, seed + 10, SCENARIOS[seed], (4, DAYS))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_the_larger_scenarios_weeks_find_what_full_audits_find(sim_all, tmp_path, seed):
    """The production-shaped families (every layout, compaction, a long-lived producer): their
    findings every day; their tables but for the compacted topics' (a compacted log counts as
    cleaned to each copy's end where no checkpoint says otherwise: docs/incremental.md)."""
    scenarios = ("production_day_faults", "production_layouts_faults",
                 "long_lived_producer_faults")  # fmt: skip
    _same_as_full(sim_all, tmp_path, seed + 20, scenarios, (2, 4, DAYS))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_the_compacted_family_s_weeks_find_what_full_audits_find(sim_all, tmp_path, seed):
    """Compacted changelogs and internal topics (the cleaner's leftovers, diverging replicas of
    a changelog, aborted transactions the cleaner removed): every day the chain finds what a
    full audit of the day's copy finds, every replica going on from its point. Findings only:
    a compacted log's cleaned range is each copy's own, so a few rows'
    ``in_cleaned_range`` differ by design (docs/incremental.md, "Compacted topics")."""
    scenario = sim_all / "production_compacted_faults"
    roots = daily_copies([scenario], tmp_path, DAYS, random.Random(seed + 20))
    for day, (result, root) in enumerate(zip(_chain(roots), roots, strict=True), 1):
        assert _prints(result) == _prints(audit_local(root)), (seed, day)
        if day > 1:
            went, read, logs = _went_on(result)
            assert went == len(result["replicas"]) and read < logs, (seed, day)


@pytest.mark.sweep
@pytest.mark.parametrize("seed", _seeds(3))
def test_with_retention_the_chain_carries_what_the_day_s_copy_still_holds(sim_all, tmp_path,
                                                                           seed):  # fmt: skip
    """Retention deletes each partition's oldest segment from a random day on (production-
    shaped logs of many segments, transactions open across the deletion). Every day the chain
    finds at least what a full audit of the day's copy finds and nothing that no full audit
    finds (of the day's copy, or of a copy holding every day's data: the same cuts without
    retention); what it no longer finds of the latter lies below its partition's log start.
    Its transactions are the latter's but a prefix of each partition below its log start:
    what a chain carries is bounded by retention, not by the days it ran."""
    sources = [sim_all / "production_day_faults"]  # (the others' logs are a segment or two)
    days = 5  # (production-shaped logs: a shorter week)
    kept = daily_copies(sources, tmp_path / "kept", days, random.Random(seed))
    deleted = daily_copies(sources, tmp_path / "deleted", days, random.Random(seed),
                           random.Random(seed + 100))  # fmt: skip
    for day, result in enumerate(_chain(deleted), 1):
        if day not in (3, days):
            continue  # (the chain goes on over every day)
        whole, alone = audit_local(kept[day - 1]), audit_local(deleted[day - 1])
        where = (seed, day)
        chain, every, its = _places(result), _places(whole), _places(alone)
        assert not its - chain, where
        assert not chain - every - its, where
        # where each partition's history starts in the chain: its kept replica's log start
        start = {(p["topic"], p["partition"]): p["log_start_offset"] for p in result["partitions"]}

        def aged_out(r: dict, at: str, start: dict = start) -> bool:
            return r[at] is not None and r[at] < start.get((r["topic"], r["partition"]), 0)

        lost = [f for f in whole["findings"] if _place(f) not in chain]
        assert all(aged_out(f, "last_offset") for f in lost), (where, lost)
        # the transactions both hold, but below the log start: those the chain no longer
        # carries, and those whose data retention deleted before a run read it (the chain
        # then sees, as a full audit of the day's copy, their marker, or the producer
        # snapshot's word that one is open)
        held, had = _rows(result, "transactions"), _rows(whole, "transactions")
        cols = [T.CLUSTER, *T.TRANSACTIONS.names]
        rows = {json.dumps([r.get(c) for c in cols], default=str): r
                for r in [*whole["transactions"], *result["transactions"]]}  # fmt: skip
        trimmed = [rows[k] for k in (had - held).elements()]

        def begun_before(r: dict) -> bool:
            return aged_out(r, "first_offset" if r["first_offset"] is not None
                            else "marker_offset")  # fmt: skip

        def place(r: dict) -> tuple:
            return r["topic"], r["partition"], r["producer_id"], r["marker_offset"]

        straddling = {place(r) for r in trimmed if begun_before(r)}
        assert all(begun_before(r) for r in trimmed), where
        for r in (rows[k] for k in (held - had).elements()):
            assert begun_before(r) or place(r) in straddling, (where, r)
        if day == days:
            assert trimmed, where  # retention deleted transactions the chain no longer carries


def _twins(root, scenarios, seed: int) -> tuple[list, list]:
    """(uncleaned, cleaned) dumps of ``scenarios``: the same seed, the cleaner kept from the
    first (simulator.cleaner.clean_twice cleans nothing), so the two hold the same records at
    the same offsets but where the cleaner rewrote the compacted logs."""
    import simulator.cleaner
    from simulator import synth

    raw, cleaned = [root / "raw" / s for s in scenarios], [root / "cleaned" / s for s in scenarios]
    for s, r, c in zip(scenarios, raw, cleaned, strict=True):
        synth(s, str(c), seed=seed)
        real = simulator.cleaner.clean_twice
        simulator.cleaner.clean_twice = lambda *a, **k: 0
        try:
            synth(s, str(r), seed=seed)
        finally:
            simulator.cleaner.clean_twice = real
    return raw, cleaned


@pytest.mark.sweep
@pytest.mark.parametrize("seed", _seeds(2))
def test_the_cleaner_passing_between_days_changes_no_verdict(tmp_path, seed):
    """The cleaner rewrites compacted logs (user changelogs, `__consumer_offsets`,
    `__transaction_state`; each broker its own replicas, to its own reach) from some day on:
    the day its reach first passes the day before's point (records, markers and whole
    coordinator transactions after the point may be gone, segments merged) or a later one.
    Every day the chain finds all a full audit of the day's copy finds, and nothing that no
    full audit of any day's copy found (what the cleaner may legally change is no finding; a
    finding whose evidence the cleaner removed may stay, as the chain judged it)."""
    # (not production_compacted_faults: its diverging replicas are placed past the cleaned
    # ranges, so its two twins differ outside them too, as no cleaner makes logs differ)
    scenarios = ("clean_compaction", "production_compacted", "transaction_faults")
    raw, cleaned = _twins(tmp_path / "dumps", scenarios, seed)
    roots = daily_copies(raw, tmp_path / "days", DAYS, random.Random(seed),
                         cleaned=(cleaned, random.Random(seed + 300)))  # fmt: skip
    rewritten = 0
    seen: collections.Counter = collections.Counter()
    for day, (result, root) in enumerate(zip(_chain(roots), roots, strict=True), 1):
        full = _prints(audit_local(root))
        seen |= full
        assert not full - _prints(result), (seed, day)
        assert not set(_prints(result)) - set(seen), (seed, day)
        rewritten += sum(1 for r in result["replicas"]
                         if r.since is not None and "cleaner" in (r.since.get("reason") or ""))  # fmt: skip
    assert rewritten, "no point's segment was rewritten by the cleaner between two days"


@pytest.mark.sweep
@pytest.mark.parametrize("seed", _seeds(2))
def test_replicas_that_come_and_go_change_nothing_but_what_they_hold(sim_all, tmp_path, seed):
    """Replica directories appear from a random day on (a reassignment, a new log dir) or go
    (a broker or log dir removed): every day the chain finds what a full audit of the day's
    copy finds, a new replica read whole and compared with the others from their start."""
    scenarios = ("replica_divergence", "transaction_faults", "production_layouts_faults")
    roots = daily_copies([sim_all / s for s in scenarios], tmp_path, DAYS, random.Random(seed),
                         churn=random.Random(seed + 200))  # fmt: skip
    for day, result in enumerate(_chain(roots), 1):
        if day in (4, DAYS):
            assert _prints(result) == _prints(audit_local(roots[day - 1])), (seed, day)


def test_copies_without_meta_properties_go_on_once_their_cluster_is_named(sim_all, tmp_path):
    """Copies whose brokers have no meta.properties, under a new root each day (`day-1`,
    `day-2`, ...: named like a partition directory, and shown from themselves): brokers are
    named by their paths below the root, the cluster by `audit.cluster`; each day goes on
    from the day before's points and finds what a full audit of the day's copy finds."""
    roots = daily_copies([sim_all / "transaction_faults"], tmp_path, 3, random.Random(2))
    for meta in tmp_path.rglob("meta.properties"):
        meta.unlink()
    conf = {"audit": {"cluster": "prod"}}
    previous = None
    for day, root in enumerate(roots, 1):
        result = audit_local(root, conf, since=previous)
        full = audit_local(root, conf)
        assert {f["cluster"] for f in full["findings"]} == {"prod"}
        assert _prints(result) == _prints(full), day
        for name in TABLES:
            assert _rows(result, name) == _rows(full, name), (day, name)
        if day > 1:
            went, read, logs = _went_on(result)
            assert went == len(result["replicas"]) > 0, day
            assert read < logs, day
        previous = result


def test_a_previous_output_of_path_named_clusters_elsewhere_is_refused_with_the_remedy(tmp_path):
    """`--since` an output whose clusters are all another path's (brokers without
    meta.properties) is another dump as far as names tell (exit 2); the message says how to
    name such a cluster alike every day."""
    from jobs import history
    from jobs.output import LAYOUT_VERSION, SUMMARY
    from replay.config import load

    conf = load(None)
    before = tmp_path / "before"
    before.mkdir()
    doc = {"layout": LAYOUT_VERSION, "versions": {"logreplay": "9.9"}, "day": "2026-11-20",
           "verdict_config": history.verdict_config(conf),
           "clusters": ["dir:/copies/2026-11-20/broker-1"]}  # fmt: skip
    (before / SUMMARY).write_text(json.dumps(doc))
    now = {"dir:/copies/2026-11-21/broker-1"}
    with pytest.raises(history.Refused, match="another dump.*audit.cluster"):
        history.previous_output(str(before), None, "2026-11-21", now, conf, "9.9", LAYOUT_VERSION)
    named = {"prod"}  # the remedy named only where a cluster is named by its path
    doc["clusters"] = ["Q2x1c3Rlci1B"]
    (before / SUMMARY).write_text(json.dumps(doc))
    with pytest.raises(history.Refused) as refused:
        history.previous_output(str(before), None, "2026-11-21", named, conf, "9.9", LAYOUT_VERSION)
    assert "audit.cluster" not in str(refused.value)
