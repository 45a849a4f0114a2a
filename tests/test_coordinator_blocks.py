"""`__transaction_state` blocks applied over columns (replay.coordinator_blocks.apply_block) give
exactly what the record-by-record coordinator replay gives: the coordinator's transactions and
findings, table by table in order, over every simulated scenario, over production-shaped
traffic, and over random histories of several transactional ids taking turns (transaction
versions 0 to 2, aborts, fencing, re-initialisation, producer id rotation) damaged at random
(tombstones, transitions 8.4 does not allow, lost records, epoch fences, cleaned ranges),
cut into small blocks so that transactions cross them. No Spark."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import decoders
import replay.coordinator_blocks as blocks_module
import replay.tables as T
from replay.coordinator import CoordinatorReplay
from replay.grouped import COORDINATOR_COLUMNS
from tests.test_partition_runs import _millis, by_table
from tests.whole_tables import coordinator_tables, dump_roots, production_dump

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = 1_767_225_600_000


def _both(records: pa.Table, complete_from: dict[int, int], monkeypatch) -> int:
    """The replay with and without blocks applied at once: equal table by table. Returns the
    records applied in blocks."""
    applied = []
    original = blocks_module.apply_block

    def counting(replay, block):
        done = original(replay, block)
        applied.append(block.num_rows if done else 0)
        return done

    monkeypatch.setattr("replay.coordinator.apply_block", counting)
    fast = coordinator_tables(records, complete_from)
    monkeypatch.setattr(CoordinatorReplay, "fast", False)
    slow = coordinator_tables(records, complete_from)
    monkeypatch.setattr(CoordinatorReplay, "fast", True)
    assert by_table(fast) == by_table(slow)
    return sum(applied)


def _txn_logs(root: str) -> list[pa.Table]:
    """Each `__transaction_state` partition's records of a dump (each broker's copy)."""
    t = _millis(decoders.read_dump([root], ["txn_log"])["txn_log"])
    if not t.num_rows:
        return []
    out = []
    for key in {(b, p) for b, p in zip(t.column("broker").to_pylist(),
                                       t.column("log_partition").to_pylist(), strict=True)}:  # fmt: skip
        mine = pc.and_(
            pc.equal(t.column("broker"), key[0]), pc.equal(t.column("log_partition"), key[1])
        )
        out.append(t.filter(mine).select(list(COORDINATOR_COLUMNS)))
    return out


@pytest.fixture(scope="module")
def production(tmp_path_factory):
    return production_dump(tmp_path_factory, seed=5)


@pytest.mark.sweep  # every scenario and production traffic: in ./dev test, not the inner loop
def test_every_scenario_s_coordinator_replays_the_same(sim_all, production, monkeypatch):
    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 61)
    applied = total = 0
    for root in dump_roots(sim_all, production):
        for records in _txn_logs(root):
            # whole, and with the first half of each partition's log cleaned
            half = {p: int(pc.max(records.column("log_offset")).as_py()) // 2
                    for p in set(records.column("log_partition").to_pylist())}  # fmt: skip
            applied += _both(records, {}, monkeypatch)
            _both(records, half, monkeypatch)
            total += records.num_rows
    assert applied > total // 2


def history(rng: random.Random, records: int, ids: int = 3) -> list[dict]:
    """Several transactional ids taking turns, each going through InitProducerId's Empty record
    and then transactions of one or two Ongoing records, a Prepare and a Complete; some abort,
    some are fenced (TV0/1: an abort with a bumped epoch), TV2 ones bump the epoch at every
    end and may abort with no transaction ongoing, some ids re-initialise (Empty at a new epoch) or rotate to a new producer id."""
    rows: list[dict] = []
    state = {}
    for i in range(ids):
        state[f"app-{i}"] = {"pid": 1000 + i, "epoch": 0, "tv": rng.choice([0, 1, 2]),
                             "steps": [], "start": -1}  # fmt: skip

    def add(tid, st, name, parts=(), epoch=None, previous=-1):
        rows.append({
            "transactional_id": tid, "producer_id": st["pid"],
            "producer_epoch": st["epoch"] if epoch is None else epoch, "timeout_ms": 60_000,
            "state": name,
            "partitions": [{"topic": t, "partitions": [p]} for t, p in parts] if parts else [],
            "last_update_timestamp": T0 + len(rows), "start_timestamp": st["start"],
            "client_transaction_version": st["tv"], "is_tombstone": False, "log_partition": 3,
            "log_offset": len(rows), "previous_producer_id": previous,
        })  # fmt: skip

    for st in state.values():
        st["steps"] = ["init"]
    while len(rows) < records:
        tid = rng.choice(list(state))
        st = state[tid]
        if not st["steps"]:
            roll = rng.random()
            if roll < 0.05:
                st["steps"] = ["reinit"]
            elif roll < 0.08:
                st["steps"] = ["rotate"]
            elif roll < 0.12 and st["tv"] >= 2:  # TV2: an abort with no transaction ongoing
                st["steps"] = [("prepare", "Abort", False), ("complete", "Abort", False)]
            else:
                outcome = "Abort" if rng.random() < 0.15 else "Commit"
                fenced = outcome == "Abort" and st["tv"] < 2 and rng.random() < 0.3
                st["steps"] = ["ongoing"] * rng.randint(1, 2) + [
                    ("prepare", outcome, fenced), ("complete", outcome, fenced)]  # fmt: skip
        step = st["steps"].pop(0)
        topics = [
            (rng.choice(["out", "other"]), rng.randrange(4)) for _ in range(rng.randint(1, 3))
        ]
        if step == "init":
            st["start"] = -1
            add(tid, st, "Empty")
        elif step == "reinit":
            st["epoch"] += 1
            st["start"] = -1
            add(tid, st, "Empty")
        elif step == "rotate":
            old = st["pid"]
            st["pid"] += 100
            st["epoch"] = 0
            add(tid, st, "Empty", previous=old)
        elif step == "ongoing":
            if st["start"] < 0:
                st["start"] = T0 + len(rows)
            add(tid, st, "Ongoing", topics)
        else:
            kind, outcome, fenced = step
            bump = fenced or st["tv"] >= 2
            epoch = st["epoch"] + (1 if bump else 0)
            # a Complete record's partitions (if any) add nothing to the transaction
            listed = topics if kind == "prepare" or rng.random() < 0.3 else ()
            add(tid, st, f"{'Prepare' if kind == 'prepare' else 'Complete'}{outcome}", listed,
                epoch=epoch)  # fmt: skip
            if kind == "complete":
                st["epoch"], st["start"] = epoch, -1
    return rows


def _damaged(rows: list[dict], rng: random.Random) -> list[dict]:
    rows = [dict(r) for r in rows]
    for _ in range(rng.randint(1, 5)):
        i = rng.randrange(len(rows))
        fault = rng.choice(["tombstone", "swap", "lost", "fence"])
        if fault == "tombstone":
            rows[i].update(is_tombstone=True, state=None, partitions=None, producer_id=None)
        elif fault == "swap":
            rows[i]["state"] = rng.choice(["Ongoing", "PrepareCommit", "CompleteAbort", "Empty"])
        elif fault == "lost":
            del rows[i]
        elif fault == "fence":
            rows[i]["state"] = "PrepareEpochFence"
    for offset, r in enumerate(rows):
        r["log_offset"] = offset
    return rows


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows).select(list(COORDINATOR_COLUMNS))


def test_healthy_histories_go_in_blocks(monkeypatch):
    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 53)
    records = _table(history(random.Random(1), 4000))
    # all but the blocks with a TV2 abort from no transaction (a transaction of its own)
    assert _both(records, {}, monkeypatch) > 0.6 * records.num_rows


@pytest.mark.sweep  # 80 random damaged histories: in ./dev test, not in the inner loop
def test_damaged_histories_replay_the_same(monkeypatch):
    rng = random.Random(23)
    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 41)
    monkeypatch.setattr(T, "BLOCK_ROWS", 11)  # a block that fails: its slices again
    applied = total = 0
    for n in range(80):
        rows = history(rng, rng.randint(100, 1500), rng.randint(1, 5))
        rows = _damaged(rows, rng) if n % 4 else rows
        cleaned = {3: rng.randrange(len(rows))} if n % 3 == 0 else {}
        applied += _both(_table(rows), cleaned, monkeypatch)
        total += len(rows)
    assert applied > total // 3
