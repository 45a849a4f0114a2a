"""The replay state machines on hand-built sequences (no Spark): each broker rule, each finding."""

from __future__ import annotations

import pyarrow as pa
import pytest

from decoders.constants import MAX_SEQUENCE
from replay.coordinator import replay_transactional_id
from replay.groups import replay_group
from replay.leakage import judge_partition
from replay.partition import PartitionReplay

T0 = 1_700_000_000_000


class Log:
    """Batches of one partition, offsets assigned in order."""

    def __init__(self, topic: str = "t") -> None:
        self.topic, self.rows, self.next = topic, [], 0

    def data(self, pid, epoch, seq, n=1, txn=False, ts=None, count=None, gap=0):
        self.next += gap
        last_seq = -1 if seq < 0 else (seq + n - 1) % (MAX_SEQUENCE + 1)
        self.rows.append(self._row(pid, epoch, seq, last_seq, n, txn, False, None, ts, count))
        return self.rows[-1]["base_offset"]

    def marker(self, pid, epoch, commit=True, ts=None, coordinator_epoch=0, empty=False):
        row = self._row(
            pid,
            epoch,
            -1,
            -1,
            1,
            True,
            True,
            "COMMIT" if commit else "ABORT",
            ts,
            0 if empty else 1,
        )
        row["coordinator_epoch"] = coordinator_epoch
        self.rows.append(row)
        return row["base_offset"]

    def _row(self, pid, epoch, seq, last_seq, n, txn, control, ctype, ts, count):
        base = self.next
        self.next += n
        return {
            "topic": self.topic, "partition": 0, "base_offset": base, "last_offset": base + n - 1,
            "producer_id": pid, "producer_epoch": epoch, "base_sequence": seq,
            "last_sequence": last_seq, "record_count": n if count is None else count,
            "is_transactional": txn, "is_control": control, "control_type": ctype,
            "coordinator_epoch": None, "max_timestamp": T0 + base if ts is None else ts,
            "magic": 2, "crc_valid": True, "has_delete_horizon": False, "file": "f.log",
            "position": base * 100,
        }  # fmt: skip

    def replay(self, **kw) -> PartitionReplay:
        return PartitionReplay(self.topic, 0, **kw).run(pa.Table.from_pylist(self.rows))


def kinds(r: PartitionReplay) -> list[tuple[str, int]]:
    return [(f["kind"], f["first_offset"]) for f in r.findings]


def test_contiguous_sequences_and_wraparound_are_clean():
    log = Log()
    log.data(7, 0, 0, 5)
    log.data(7, 0, 5, 3)
    log.data(7, 0, 1000, 2)  # a jump forward: flagged below
    clean = Log()
    clean.data(7, 0, MAX_SEQUENCE - 3, 2)  # no state yet: any sequence (KIP-360)
    clean.data(7, 0, MAX_SEQUENCE - 1, 2)
    clean.data(7, 0, 0, 4)  # 0 follows 2147483647
    clean.data(7, 0, 4, 1)
    assert kinds(clean.replay()) == []
    assert [k for k, _ in kinds(log.replay())] == ["sequence_gap"]


def test_duplicate_gap_and_step_back():
    log = Log()
    log.data(1, 0, 0, 3)
    log.data(1, 0, 3, 3)
    dup = log.data(1, 0, 3, 3)  # the same range again
    gap = log.data(1, 0, 10, 2)  # expected 6
    back = log.data(1, 0, 8, 2)  # expected 12, and not an earlier range
    r = log.replay()
    assert kinds(r) == [
        ("duplicate_sequence", dup),
        ("sequence_gap", gap),
        ("out_of_order_sequence", back),
    ]
    assert '"original_offset": 3' in r.findings[0]["evidence"]


def test_epochs_fencing_and_epoch_start():
    log = Log()
    log.data(1, 0, 0, 2)
    log.data(1, 1, 0, 2)  # a new epoch at 0: fine
    zombie = log.data(1, 0, 2, 1)  # an older epoch: rejected by the leader, state unchanged
    log.data(1, 1, 2, 2)  # continues epoch 1
    bad = log.data(1, 2, 7, 1)  # a newer epoch not at 0
    assert kinds(log.replay()) == [("fenced_epoch_write", zombie), ("invalid_epoch_start", bad)]


def test_tv1_sequences_continue_across_markers_and_tv2_restart_at_zero():
    tv1 = Log()
    tv1.data(5, 3, 0, 2, txn=True)
    tv1.marker(5, 3)
    tv1.data(5, 3, 2, 2, txn=True)  # TV1: same epoch, the sequence goes on
    tv1.marker(5, 3, commit=False)
    r = tv1.replay()
    assert kinds(r) == []
    assert [(t["outcome"], t["first_offset"], t["marker_offset"]) for t in r.transactions] == [
        ("COMMIT", 0, 2),
        ("ABORT", 3, 5),
    ]
    tv2 = Log()
    tv2.data(6, 0, 0, 2, txn=True)
    tv2.marker(6, 1)  # TV2: the marker carries epoch + 1
    tv2.data(6, 1, 0, 3, txn=True)  # and the next transaction starts at 0
    tv2.marker(6, 2)
    r = tv2.replay()
    assert kinds(r) == [] and len(r.transactions) == 2
    assert r.states()[6]["producer_epoch"] == 2 and r.states()[6]["last_sequence"] == -1


def test_producer_expiry_forgets_the_sequence():
    log = Log()
    log.data(9, 0, 0, 2)
    log.data(9, 0, 40, 2, ts=T0 + 86_400_000 + 10)  # idle past producer.id.expiration.ms
    assert kinds(log.replay()) == []
    short = Log()
    short.data(9, 0, 0, 2)
    short.data(9, 0, 40, 2, ts=T0 + 1000)
    assert [k for k, _ in kinds(short.replay())] == ["sequence_gap"]


def test_cleaner_leftovers_and_holes_are_not_judged():
    log = Log()
    log.data(4, 0, 0, 3)
    log.data(4, 0, 3, 3, count=0)  # an empty batch kept by the cleaner
    log.data(4, 0, 20, 2, gap=14)  # sequences 6..19 removed with their records (offsets 6..19)
    log.marker(4, 0, empty=True)  # a cleaned control batch: ignored
    r = log.replay()
    assert kinds(r) == [] and r.cleaned_upto == 6
    corrupt = Log()
    corrupt.data(4, 0, 0, 3)
    corrupt.data(4, 0, 7, 3, gap=4)  # offsets 3..6 unreadable (a corrupt region)
    assert kinds(corrupt.replay()) == []


@pytest.mark.parametrize(
    ("removed", "skipped", "found"),
    [(5, 5, False), (5, 4, False), (5, 6, True), (0, 1, True), (3, 0, False)],
)
def test_a_gap_in_a_cleaned_range_is_bounded_by_the_offsets_removed(removed, skipped, found):
    """The cleaner removes records, each with its offset and its sequence: between two
    surviving batches of one producer and epoch it can skip at most as many sequences as
    offsets (at the boundary: equal). A gap over contiguous offsets is a real sequence gap."""
    log = Log()
    log.data(4, 0, 0, 3)
    log.data(4, 0, 3, 3, count=0)  # an empty header: the cleaner kept the producer's state
    log.data(4, 0, 6 + skipped, 2, gap=removed)
    r = log.replay(cleaned_upto=log.next)  # all of it in the cleaner's checkpoint
    assert [k for k, _ in kinds(r)] == (["sequence_gap"] if found else [])
    if found:
        (f,) = r.findings
        assert "more than the log cleaner could have taken" in f["message"]


def test_a_cleaned_range_judges_across_the_sequence_wrap():
    log = Log()
    log.data(4, 0, MAX_SEQUENCE - 2, 2)  # ..MAX_SEQUENCE - 1
    log.data(4, 0, 1, 1, gap=2)  # MAX_SEQUENCE and 0 removed with offsets 2 and 3
    assert kinds(log.replay(cleaned_upto=log.next)) == []
    log = Log()
    log.data(4, 0, MAX_SEQUENCE - 2, 2)
    log.data(4, 0, 3, 1, gap=2)  # 4 sequences skipped over 2 offsets
    assert [k for k, _ in kinds(log.replay(cleaned_upto=log.next))] == ["sequence_gap"]


def test_markers_the_cleaner_left_are_counted_never_findings():
    """Inside a cleaned range: an ABORT marker whose transaction's records the cleaner removed
    (no data before it, and no .txnindex entry needed), and a COMMIT marker stamped with a
    delete horizon (attribute bit 6, removed by a later pass). Both normal: no finding, each
    counted for the coverage's "transactions" family (docs/compaction.md)."""
    log = Log()
    log.data(8, 0, 0, 2, txn=True)
    log.marker(8, 0)
    horizon = log.marker(8, 0)  # its transaction's data gone too; a horizon set
    log.rows[-1]["has_delete_horizon"] = True
    log.marker(8, 0, commit=False)  # an aborted transaction's data removed, its marker kept
    log.data(8, 0, 2, 2, txn=True, gap=5)  # past the cleaned range: a transaction as usual
    log.marker(8, 0)
    r = log.replay(cleaned_upto=horizon + 6)
    assert kinds(r) == []
    assert r.cleaned_markers == [1, 1]  # the ABORT without data; the one with a horizon
    # no checkpoint: the horizon shows the cleaner has been there, up to that marker only
    bytes_only = log.replay()
    assert bytes_only.cleaned_upto == horizon + 1 and bytes_only.cleaned_markers == [0, 1]


def test_transactions_open_orphans_and_mixed_writes():
    log = Log()
    first = log.data(2, 0, 0, 2, txn=True)
    mixed = log.data(2, 0, 2, 1)  # non-transactional while the transaction is open
    log.data(3, 0, 0, 4)  # someone else, pinned behind the LSO
    orphan = log.marker(8, 0)
    r = log.replay()
    # a marker with no open transaction is legal here (a partition added without data, or a
    # retry); only the coordinator's log can say (replay.crosslog): kept as a data-less row
    assert kinds(r) == [("non_transactional_write_in_txn", mixed)]
    [m] = r.transactions
    assert (m["marker_offset"], m["record_count"], m["first_offset"]) == (orphan, 0, None)
    [t] = r.open_transactions()
    assert t["first_offset"] == first and t["outcome"] == "OPEN"
    assert t["record_count"] == 2 and t["pinned_records"] == 5
    assert r.lso() == first and r.log_end == 8


def test_internal_topics_get_no_sequence_checks():
    log = Log("__consumer_offsets")
    log.data(5, 0, 0, 1, txn=True)
    log.data(5, 0, 0, 1, txn=True)  # TxnOffsetCommit batches: coordinator-written
    log.marker(5, 0)
    assert kinds(log.replay()) == []


def test_zombie_coordinator_marker():
    log = Log()
    log.data(1, 0, 0, 1, txn=True)
    log.marker(1, 0, coordinator_epoch=5)
    log.data(1, 0, 1, 1, txn=True)
    stale = log.marker(1, 0, coordinator_epoch=4)
    assert kinds(log.replay()) == [("fenced_epoch_write", stale)]


# -- the transaction coordinator ----------------------------------------------------------------
def _txn(state, epoch=0, parts=None, ts=0, tv=0, tomb=False):
    return {
        "transactional_id": "tx", "producer_id": 11, "producer_epoch": epoch, "timeout_ms": 60000,
        "state": state, "partitions": [{"topic": t, "partitions": ps} for t, ps in (parts or {}).items()],
        "last_update_timestamp": T0 + ts, "start_timestamp": T0 + ts, "client_transaction_version": tv,
        "is_tombstone": tomb, "log_partition": 3, "log_offset": ts,
    }  # fmt: skip


def test_coordinator_transactions_and_fencing():
    rows = [
        _txn("Empty"),
        _txn("Ongoing", 0, {"a": [0]}, 1),
        _txn("Ongoing", 0, {"a": [0], "b": [1]}, 2),
        _txn("PrepareCommit", 0, {"a": [0], "b": [1]}, 3),
        _txn("CompleteCommit", 0, {}, 4),
        _txn("Ongoing", 0, {"a": [0]}, 5),
        _txn("PrepareAbort", 1, {"a": [0]}, 6),  # epoch bumped: a timeout or a fence
        _txn("CompleteAbort", 1, {}, 7),
    ]
    txns, findings = replay_transactional_id(rows)
    assert findings == []
    assert [(t["outcome"], t["data_epoch"], t["marker_epoch"], t["fenced"]) for t in txns] == [
        ("COMMIT", 0, 0, False),
        ("ABORT", 0, 1, True),
    ]
    assert txns[0]["partitions"] == [{"topic": "a", "partition": 0}, {"topic": "b", "partition": 1}]


def test_coordinator_illegal_transition():
    rows = [_txn("Empty"), _txn("PrepareCommit", 0, {"a": [0]}, 1)]
    _, findings = replay_transactional_id(rows)
    assert [f["kind"] for f in findings] == ["invalid_txn_transition"]


def test_coordinator_abort_without_transaction_is_valid_for_tv2_only():
    # TransactionState.java: PrepareAbort may follow Empty for a transaction-version-2 client
    for tv, expected in ((2, []), (0, ["invalid_txn_transition"])):
        rows = [_txn("Empty", tv=tv), _txn("PrepareAbort", 1, {}, 1, tv=tv)]
        _, findings = replay_transactional_id(rows)
        assert [f["kind"] for f in findings] == expected


# -- groups -------------------------------------------------------------------------------------
def _meta(gen, members, off):
    ms = [
        {"member_id": m, "assigned_partitions": [{"topic": "t", "partitions": ps}]}
        for m, ps in members.items()
    ]
    return {"event": "metadata", "generation": gen, "members": ms, "is_tombstone": False,
            "protocol_type": "consumer", "protocol": "x", "leader": None,
            "record_timestamp": T0 + off, "log_partition": 0, "log_offset": off}  # fmt: skip


def _commit(p, o, off, pid=None):
    return {"event": "commit", "topic": "t", "partition": p, "committed_offset": o,
            "is_tombstone": False, "is_transactional": pid is not None, "producer_id": pid,
            "commit_timestamp": T0 + off, "record_timestamp": T0 + off, "log_partition": 0,
            "log_offset": off}  # fmt: skip


def _marker(pid, commit, off):
    return {"event": "marker", "producer_id": pid, "control_type": "COMMIT" if commit else "ABORT",
            "record_timestamp": T0 + off, "log_partition": 0, "log_offset": off}  # fmt: skip


def test_transactional_commits_take_effect_at_commit_markers_only():
    res = replay_group(
        "g",
        [_meta(1, {"a": [0]}, 0), _commit(0, 10, 1), _commit(0, 20, 2, pid=5), _marker(5, False, 3),
         _commit(0, 30, 4, pid=5), _marker(5, True, 6)],
    )  # fmt: skip
    assert [(r["committed_offset"], r["effective_log_offset"]) for r in res["timeline"]] == [
        (10, 1),
        (30, 6),
    ]
    assert res["findings"] == []


def test_broadcast_overwrites_and_regressions():
    bc = replay_group(
        "g",
        [_meta(1, {"a": [0], "b": [0], "c": [0]}, 0), _commit(0, 50, 1), _commit(0, 40, 2),
         _commit(0, 30, 3), _commit(0, 60, 4), _commit(0, 55, 5)],
    )  # fmt: skip
    [f] = bc["findings"]
    assert f["kind"] == "offset_overwrite" and f["record_count"] == 10 + 10 + 5
    assert '"concurrent_committers_lower_bound": 3' in f["evidence"]
    normal = replay_group(
        "h",
        [_meta(1, {"a": [0]}, 0), _commit(0, 50, 1), _meta(2, {}, 2), _commit(0, 0, 3),
         _meta(3, {"b": [0]}, 4), _commit(0, 40, 5), _commit(0, 30, 6)],
    )  # fmt: skip
    assert [(f["kind"], f["severity"], f["record_count"]) for f in normal["findings"]] == [
        ("offset_regression", "info", 50),
        ("offset_regression", "warning", 10),
    ]


def test_a_group_declared_broadcast_is_judged_as_one_without_metadata():
    """conf groups.<g>.assignor=broadcast: the commits of a group whose metadata is gone (or
    never in the dump) are judged as a broadcast group's: overwrites, not regressions."""
    events = [_commit(0, 50, 1), _commit(0, 40, 2), _commit(0, 60, 3, pid=9), _marker(9, True, 4),
              _commit(0, 45, 5)]  # fmt: skip
    undeclared = replay_group("g", events)
    assert {f["kind"] for f in undeclared["findings"]} == {"offset_regression"}
    declared = replay_group("g", events, declared_broadcast=True)
    [f] = declared["findings"]
    assert f["kind"] == "offset_overwrite" and f["record_count"] == 10 + 15
    assert all(r["broadcast"] for r in declared["timeline"])


# -- leakage ------------------------------------------------------------------------------------
def test_leak_needs_proof_or_a_declaration():
    txns = [
        {"producer_id": 1, "producer_epoch": 0, "first_offset": 10, "last_offset": 14,
         "marker_offset": 15, "outcome": "ABORT", "record_count": 5, "marker_timestamp": T0 + 10_000},
    ]  # fmt: skip

    def commit(group, offset, ts, pid=None):
        return {"group_id": group, "committed_offset": offset, "effective_timestamp": T0 + ts,
                "effective_log_offset": ts, "producer_id": pid}  # fmt: skip

    commits = [
        commit("early", 12, 2_000),  # past the open transaction, long before its marker
        commit("late", 20, 20_000),  # only after the abort: exposure
        commit("declared", 20, 20_000),
        commit("close", 12, 9_500),  # within the clock-skew tolerance: no proof
    ]
    out = judge_partition("t", 0, txns, commits, {"declared": "read_uncommitted"}, skew_ms=1000)
    got = {(f["group_id"], f["kind"], f["severity"]) for f in out}
    assert got == {
        ("early", "aborted_read_leak", "error"),
        ("late", "aborted_read_exposure", "info"),
        ("declared", "aborted_read_leak", "error"),
        ("close", "aborted_read_exposure", "info"),
    }
    assert all(f["record_count"] == 5 for f in out)


def _proof_by_every_pair(transactions, commits, skew_ms):
    """The leak's proof as its rule reads (every commit in time order against every
    transaction in the partition's order): the streamed replay.leakage.PartitionLeakage must
    equal."""
    for c in sorted(commits, key=lambda c: c["effective_timestamp"]):
        for t in sorted(transactions, key=lambda t: t["first_offset"]):
            marker_ts = t["marker_timestamp"]
            if marker_ts is None:
                marker_ts = t.get("copy_end_timestamp")
            if marker_ts is None:
                continue
            if (c["committed_offset"] > t["first_offset"]
                    and c["effective_timestamp"] < marker_ts - skew_ms):  # fmt: skip
                return (c["effective_log_offset"], t["first_offset"], t["producer_id"])
    return None


def _proof(transactions, commits, skew_ms):
    """The proof replay.leakage.PartitionLeakage finds for one group's commits."""
    from replay.leakage import PartitionLeakage, _merged

    judge = PartitionLeakage("t", 0, {}, skew_ms)
    commits = [{**c, "group_id": "g", "producer_id": None} for c in commits]
    for kind, piece in _merged(transactions, commits):
        (judge.commits if kind == 0 else judge.transactions)(piece)
    group = judge.groups.get("g")
    return judge._proof(group.proof if group else None)


def test_the_leak_proof_over_arrays_finds_what_every_pair_finds():
    """The proof search in one pass in offset order (a partition holds millions of commits
    and transactions: every pair would be quadratic, and neither is held whole) picks the same
    commit and transaction as comparing every pair, over random partitions with open, aborted
    and committed ones."""
    import random

    rng = random.Random(7)
    found = 0
    for _ in range(400):
        txns = []
        for pid in range(rng.randint(0, 30)):
            first = rng.randint(0, 1000)
            open_ = rng.random() < 0.15
            txns.append({
                "producer_id": pid, "first_offset": first, "last_offset": first + 5,
                "marker_timestamp": None if open_ else T0 + rng.randint(0, 100_000),
                "copy_end_timestamp": rng.choice([None, T0 + 100_000]),
            })  # fmt: skip
        commits = [
            {"committed_offset": rng.randint(0, 1100),
             "effective_timestamp": T0 + rng.randint(0, 100_000), "effective_log_offset": n}
            for n in range(rng.randint(0, 40))
        ]  # fmt: skip
        skew = rng.choice([0, 1000, 30_000])
        want = _proof_by_every_pair(txns, commits, skew)
        got = _proof(txns, commits, skew)
        assert (None if got is None else (got["commit_log_offset"],
                got["open_transaction_first_offset"], got["open_transaction_producer_id"])) == want  # fmt: skip
        found += want is not None
    assert 20 <= found <= 380  # both outcomes well represented


def test_a_log_starting_mid_stream_is_seeded_from_its_snapshot():
    log = Log()
    log.next = 100  # older segments deleted by retention
    log.data(3, 2, 50, 5)
    log.marker(4, 0, commit=False)
    snapshot = [
        {"producer_id": 3, "producer_epoch": 2, "last_sequence": 44, "last_offset": 99,
         "offset_delta": 4, "coordinator_epoch": -1, "current_txn_first_offset": -1, "timestamp": T0},
        {"producer_id": 4, "producer_epoch": 0, "last_sequence": 9, "last_offset": 97,
         "offset_delta": 0, "coordinator_epoch": 0, "current_txn_first_offset": 90, "timestamp": T0},
    ]  # fmt: skip
    table = pa.Table.from_pylist(log.rows)
    unseeded = PartitionReplay("t", 0).run(table)
    assert unseeded.findings == []  # no state: any sequence is fine
    assert [t["record_count"] for t in unseeded.transactions] == [0]  # the marker: data-less
    seeded = PartitionReplay("t", 0).run(table, seed=snapshot)
    assert [f["kind"] for f in seeded.findings] == ["sequence_gap"]  # expected 45, got 50
    [t] = seeded.transactions  # the transaction open in the snapshot, aborted in this log
    assert (t["first_offset"], t["outcome"]) == (90, "ABORT")


def test_a_transaction_open_in_the_snapshot_is_open_at_least_since_the_next_marker():
    """Its data lies below the log start (retention): how long it has been open is bounded
    from below by the first marker after it (that batch was appended before), never taken
    from an unknown first timestamp; with no marker after it, cannot tell (never hanging)."""
    snapshot = [{"producer_id": 4, "producer_epoch": 0, "last_sequence": 9, "last_offset": 97,
                 "offset_delta": 0, "coordinator_epoch": 0, "current_txn_first_offset": 90,
                 "timestamp": T0}]  # fmt: skip
    for marked in (True, False):
        log = Log()
        log.next = 100
        log.data(3, 0, 0, 5, ts=T0 + 1_000)
        if marked:
            log.data(5, 0, 0, 1, txn=True, ts=T0 + 2_000)
            log.marker(5, 0, ts=T0 + 3_000)
        log.data(3, 0, 5, 5, ts=T0 + 60_000)
        replay = PartitionReplay("t", 0).run(pa.Table.from_pylist(log.rows), seed=snapshot)
        [t] = replay.open_transactions()
        assert (t["producer_id"], t["first_offset"]) == (4, 90)
        assert t["open_ms"] == (57_000 if marked else None)


def test_row_rules_make_findings_as_the_spark_checks_lay_them_out():
    """replay.rules: one rule, applied to a dict here and laid out as columns by
    replay.checks; the severity comes from the vocabulary, the other columns from the row."""
    import json

    from replay.findings import FINDING_COLUMNS, KINDS, LOWERED, finding
    from replay.rules import DIVERGENCE, INTEGRITY, PROPAGATION

    error = {"kind": "truncated_batch", "position": 1028, "file": "b/t-0/0.log",
             "reason": "torn", "broker": "b", "length": 117, "offset": None, "topic": "t",
             "partition": 0, "first_offset": None}  # fmt: skip
    f = INTEGRITY.finding(error)
    assert list(f) == list(FINDING_COLUMNS)
    assert (f["kind"], f["severity"]) == ("truncated_batch", KINDS["truncated_batch"])
    assert f["message"] == "truncated_batch at byte 1028 of b/t-0/0.log: torn"
    assert json.loads(f["evidence"])["length"] == 117 and f["topic"] == "t"
    # a decoding problem of a kind the vocabulary does not name counts as corrupt bytes
    assert INTEGRITY.finding({**error, "kind": "odd"})["severity"] == KINDS["corrupt_bytes"]

    div = DIVERGENCE.finding({"topic": "t", "partition": 1, "batches": 2, "brokers": ["a", "b"],
                              "first_offset": 5, "last_offset": 9, "record_count": 4})  # fmt: skip
    assert div["message"] == "replicas of t-1 disagree on 2 batches between offsets 5 and 9"
    assert (div["severity"], div["record_count"]) == (KINDS["replica_divergence"], 4)

    row = {"group_id": "g", "record_count": 3, "topic": "in", "partition": 0, "producer_id": 7,
           "output_partitions": ["out-0", "out-1"], "committed_transactions": 1,
           "output_records": 3, "leak": "{}", "transactional_id": None}  # fmt: skip
    prop = PROPAGATION.finding(row)
    assert prop["message"].endswith("producer 7, which committed them on into out-0, out-1")
    assert prop["severity"] == KINDS["aborted_data_propagated"] and prop["producer_id"] == 7

    lowered = finding("offset_regression", "reset", {}, lowered=True)
    assert lowered["severity"] == LOWERED["offset_regression"] != KINDS["offset_regression"]
    with pytest.raises(TypeError):
        finding("offset_regression", "m", {}, no_such_column=1)


def test_coordinator_history_of_a_rotated_producer_id_starts_at_the_rotation():
    # TV2 rotation (docs/formats.md 8.3): Prepare at 32767 with the old id, Complete with the new
    # id at epoch 0 naming the old one. Below offset 10 the cleaner kept only the latest record
    # of each id: the old id's history is not whole there, the new id's starts at the rotation.
    def rot(state, pid, epoch, parts, off, previous=-1):
        return {**_txn(state, epoch, parts, off, tv=2), "producer_id": pid,
                "previous_producer_id": previous}  # fmt: skip

    rows = [
        rot("CompleteCommit", 11, 32765, {}, 5),
        rot("Ongoing", 11, 32766, {"a": [0]}, 11),
        rot("PrepareCommit", 11, 32767, {"a": [0]}, 12),
        rot("CompleteCommit", 12, 0, {}, 13, previous=11),
        rot("Ongoing", 12, 0, {"a": [0]}, 14, previous=12),
        rot("PrepareCommit", 12, 1, {"a": [0]}, 15, previous=12),
        rot("CompleteCommit", 12, 1, {}, 16, previous=12),
    ]
    txns, findings = replay_transactional_id(rows, complete_from={3: 10})
    assert findings == []
    assert [
        (t["producer_id"], t["data_epoch"], t["marker_epoch"], t["history_from_start"])
        for t in txns
    ] == [(11, None, 32765, False), (11, 32766, 32767, False), (12, 0, 1, True)]
