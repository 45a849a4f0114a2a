"""`__consumer_offsets` blocks applied over columns (replay.group_blocks.apply_block) give
exactly what the event-by-event groups replay gives: the generations, commit timelines and
findings, table by table in order, over every simulated scenario, over production-shaped
traffic, and over random histories of several groups (plain and transactional commits of
several producers taking turns, COMMIT and ABORT markers, tombstones, rewinds and resets,
generations with broadcast assignments, groups declared broadcast), cut into small blocks so
that commits wait for their markers across them. No Spark."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import decoders
import replay.group_blocks as blocks_module
import replay.tables as T
from replay.grouped import COMMIT_COLUMNS, MARKER_COLUMNS, METADATA_COLUMNS
from replay.groups import GroupsReplay
from tests.test_partition_runs import _millis, by_table
from tests.whole_tables import dump_roots, group_partition_tables, production_dump

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = 1_767_225_600_000
MEMBERS_TYPE = pa.list_(pa.struct([
    pa.field("member_id", pa.string()),
    pa.field("assigned_partitions", pa.list_(pa.struct([
        pa.field("topic", pa.string()), pa.field("partitions", pa.list_(pa.int32()))]))),
]))  # fmt: skip


def _both(partition, commits, metadata, markers, broadcast, monkeypatch) -> int:
    """The replay with and without blocks applied at once: equal table by table. Returns the
    events applied in blocks."""
    applied = []
    original = blocks_module.apply_block

    def counting(replay, block):
        done = original(replay, block)
        applied.append(block.num_rows if done else 0)
        return done

    monkeypatch.setattr("replay.groups.apply_block", counting)
    fast = group_partition_tables(partition, commits, metadata, markers, broadcast)
    monkeypatch.setattr(GroupsReplay, "fast", False)
    slow = group_partition_tables(partition, commits, metadata, markers, broadcast)
    monkeypatch.setattr(GroupsReplay, "fast", True)
    assert by_table(fast) == by_table(slow)
    return sum(applied)


def _of_dump(root: str):
    """Each `__consumer_offsets` partition's commits, group metadata and markers of a dump
    (each broker's copy)."""
    return of_tables(decoders.read_dump([root], ["offset_commits", "group_metadata", "batches"]))


def of_tables(t: dict[str, pa.Table]):
    """Each `__consumer_offsets` partition's commits, group metadata and markers of decoded
    tables (each broker's copy)."""
    t = {k: _millis(v) for k, v in t.items()}
    b = t["batches"]
    b = b.filter(pc.and_(pc.equal(b.column("topic"), "__consumer_offsets"),
                         pc.and_(pc.fill_null(b.column("is_control"), False),
                                 pc.greater(b.column("record_count"), 0))))  # fmt: skip
    out = []
    keys = {(r["broker"], r["log_partition"]) for r in t["offset_commits"].select(
        ["broker", "log_partition"]).to_pylist()}  # fmt: skip
    for broker, part in sorted(keys):

        def mine(x, column="log_partition", broker=broker, part=part):
            return x.filter(pc.and_(pc.equal(x.column("broker"), broker),
                                    pc.equal(x.column(column), part)))  # fmt: skip

        commits = mine(t["offset_commits"]).select(list(COMMIT_COLUMNS))
        metadata = mine(t["group_metadata"])
        metadata = metadata.set_column(
            metadata.schema.get_field_index("members"), "members",
            pa.array([[{"member_id": m["member_id"], "assigned_partitions": m["assigned_partitions"]}
                       for m in ms] if ms is not None else None
                      for ms in metadata.column("members").to_pylist()], MEMBERS_TYPE),
        ).select(list(METADATA_COLUMNS))  # fmt: skip
        markers = mine(b, "partition").select(list(MARKER_COLUMNS))
        out.append((part, commits, metadata, markers))
    return out


@pytest.fixture(scope="module")
def production(tmp_path_factory):
    return production_dump(tmp_path_factory, seed=7)


@pytest.mark.sweep  # every scenario and production traffic: in ./dev test, not the inner loop
def test_every_scenario_s_groups_replay_the_same(sim_all, production, monkeypatch):
    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 59)
    applied = total = 0
    for root in dump_roots(sim_all, production):
        for part, commits, metadata, markers in _of_dump(root):
            applied += _both(part, commits, metadata, markers, {"broadcast-app"}, monkeypatch)
            total += commits.num_rows + markers.num_rows
    assert applied > total // 2


def history(rng: random.Random, events: int, broken: bool = False):
    """Commits of a few groups: plain ones, and an exactly-once app's transactional ones whose
    producers' markers follow (COMMIT, now and then ABORT), tombstones; with ``broken``,
    rewinds, resets and generations (one assigning a partition to two members)."""
    commits, metadata, markers = [], [], []
    offsets: dict = {}
    pids = [11, 12, 13]
    for offset in range(events):
        roll = rng.random()
        if roll < 0.25:
            markers.append({"base_offset": offset, "max_timestamp": T0 + offset,
                            "producer_id": rng.choice(pids),
                            "control_type": "ABORT" if rng.random() < 0.1 else "COMMIT"})  # fmt: skip
            continue
        if broken and roll < 0.255:
            members = [{"member_id": f"m{k}", "assigned_partitions": [
                {"topic": "t", "partitions": [0, 1] if k < 2 else [2]}]} for k in range(3)]  # fmt: skip
            metadata.append({
                "group_id": rng.choice(["app", "plain", "broadcast-app"]), "log_partition": 5,
                "log_offset": offset, "record_timestamp": T0 + offset,
                "generation": offset, "protocol_type": "consumer", "protocol": "range",
                "leader": "m0", "members": members if rng.random() < 0.7 else [],
                "is_tombstone": False,
            })  # fmt: skip
            continue
        group = rng.choice(["app", "app", "plain", "broadcast-app", "other"])
        # with ``broken``, a group mixing plain and transactional commits of a partition
        txn = group == "app" or (broken and group == "other" and rng.random() < 0.5)
        tp = ("t", rng.randrange(3))
        step = -rng.randint(1, 5) if broken and rng.random() < 0.01 else rng.randint(0, 3)
        offsets[(group, tp)] = max(0, offsets.get((group, tp), 0) + step)
        commits.append({
            "group_id": group, "log_partition": 5, "log_offset": offset,
            "record_timestamp": T0 + offset, "is_tombstone": rng.random() < 0.02,
            "topic": tp[0], "partition": tp[1], "committed_offset": offsets[(group, tp)],
            "commit_timestamp": T0 + offset - rng.randint(0, 5), "is_transactional": txn,
            # a partition's commits come from the one producer whose task owns it
            "producer_id": pids[tp[1]] if txn and not broken else rng.choice(pids) if txn else None,
        })  # fmt: skip
    commits = pa.Table.from_pylist(commits).select(list(COMMIT_COLUMNS))
    meta_schema = pa.schema([
        ("group_id", pa.string()), ("log_partition", pa.int32()), ("log_offset", pa.int64()),
        ("record_timestamp", pa.int64()), ("generation", pa.int32()),
        ("protocol_type", pa.string()), ("protocol", pa.string()), ("leader", pa.string()),
        ("members", MEMBERS_TYPE), ("is_tombstone", pa.bool_()),
    ])  # fmt: skip
    metadata = pa.Table.from_pylist(metadata, schema=meta_schema)
    markers = pa.Table.from_pylist(markers, schema=pa.schema([
        ("base_offset", pa.int64()), ("max_timestamp", pa.int64()), ("producer_id", pa.int64()),
        ("control_type", pa.string())]))  # fmt: skip
    return commits, metadata, markers


def test_healthy_histories_go_in_blocks(monkeypatch):
    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 47)
    commits, metadata, markers = history(random.Random(1), 5000)
    applied = _both(5, commits, metadata, markers, {"broadcast-app"}, monkeypatch)
    assert applied == commits.num_rows + markers.num_rows


@pytest.mark.sweep  # 60 random histories with rewinds and generations: in ./dev test
def test_broken_histories_replay_the_same(monkeypatch):
    rng = random.Random(29)
    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 43)
    monkeypatch.setattr(T, "BLOCK_ROWS", 11)  # a block that fails: its slices again
    applied = total = 0
    for _ in range(60):
        commits, metadata, markers = history(rng, rng.randint(200, 2000), broken=True)
        applied += _both(5, commits, metadata, markers, {"broadcast-app"}, monkeypatch)
        total += commits.num_rows + markers.num_rows + metadata.num_rows
    assert applied > total // 10  # the blocks between generations and regressions


def test_distinct_tuples_are_ranked_as_numpy_ranks_byte_rows():
    """The block replays find each distinct (group, topic, partition) and (transactional id,
    producer id) of a block by ranking the tuples as one integer (replay.tables.distinct_rows):
    the same first rows and indexes as numpy's unique over rows, negative values and spans
    too wide for one integer (producer ids) included."""
    import numpy as np

    rng = np.random.default_rng(7)
    for case in range(400):
        n = int(rng.integers(1, 60)) if case < 300 else int(rng.integers(1000, 5000))
        wide = case % 3 == 0
        keys = (rng.integers(-3, 4, n), rng.integers(0, 3, n),
                rng.integers(-(2**40), 2**40, n) if wide else rng.integers(0, 5, n))  # fmt: skip
        if case >= 300:  # mostly in order already, as a block's rows in log order come
            keys = tuple(np.sort(k) for k in keys[:2]) + (keys[2],)
        _, first, which = np.unique(np.stack(keys), axis=1, return_index=True,
                                    return_inverse=True)  # fmt: skip
        got_first, got_which = T.distinct_rows(*keys)
        assert got_first.tolist() == first.tolist() and got_which.tolist() == which.ravel().tolist()
    assert [a.tolist() for a in T.distinct_rows(np.zeros(0, np.int64))] == [[], []]
