"""The cross-log stream made from the scan's rows in sorted runs and merged in Python
(replay.crosslog_runs) judges every producer id as the sorted stream judges it
(replay.crosslog_stream.crosslog_tables, one producer's whole tables): random long histories
of several producers in two clusters, their scan rows cut into files in any order, held a few
hundred rows at a time and spread over buckets, with a replica the audit does not keep. Pure
Python: no Spark (tests/test_crosslog_scratch.py runs both ways in the job)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from test_long_histories import BOUNDS, history

from decoders.constants import TRANSACTION_STATE_TOPIC
from replay import tables as T
from replay.crosslog_runs import (
    BATCH_ROWS,
    KEY,
    KINDS,
    RunWriter,
    StreamFacts,
    fanned_in,
    judge_runs,
    key_bytes,
    keys_ascending,
    merged,
    stream_key,
    stream_rows,
)
from replay.crosslog_stream import crosslog_tables, producer_inputs
from replay.grouped import Facts
from replay.replicas import (
    REPLAY_TABLES,
    REPLICA_BROKER,
    ReplicaRow,
    chosen_replicas,
    kind_columns,
    replica_filter,
)
from replay.sides import LISTED, TOUCHED

FACTS = Facts(600_000, 60_000, BOUNDS)


def _table(table: str, kind: str, rows: list[dict]) -> pa.Table:
    schema = REPLAY_TABLES[table]
    fields = [schema.field(c) for c in kind_columns(table, kind)] + [schema.field("out")]
    return pa.Table.from_pylist([{**r, "out": kind} for r in rows], schema=pa.schema(fields))


def _scan(seed: int) -> tuple[dict, list[ReplicaRow], dict]:
    """Producers of two clusters (one producer id in both), each a random history of
    test_long_histories; their scan rows by (table, kind), the replicas, and each producer's
    rows of the audit's tables (for crosslog_tables)."""
    rng = np.random.default_rng(seed)
    producers = [("east", 7000), ("east", 7001), ("west", 7000), ("west", 42)]
    rows: dict[tuple[str, str], list[dict]] = {}
    replicas: dict[tuple, ReplicaRow] = {}
    inputs = {}
    for i, (cluster, pid) in enumerate(producers):
        ptx, ctx, sides, coordinator = history(seed * 10 + i, int(rng.integers(200, 900)))
        log_partition = pid % 3
        keys = {"cluster": cluster, REPLICA_BROKER: "b1"}
        txns = []
        for x in ptx:
            txns.append({**x, "producer_id": pid, "cluster": cluster, **keys,
                         "replica_topic": x["topic"], "replica_partition": x["partition"]})  # fmt: skip
        coord = []
        for k, a in enumerate(ctx):
            coord.append({**a, "producer_id": pid, "cluster": cluster, **keys,
                          "replica_topic": TRANSACTION_STATE_TOPIC,
                          "replica_partition": log_partition, "log_partition": log_partition,
                          "first_log_offset": 5 * k + i, "timeout_ms": 60_000,
                          "history_from_start": coordinator.complete_from_start,
                          "latest_epoch": 0})  # fmt: skip
        rows.setdefault(("replayed", "transaction"), []).extend(txns)
        rows.setdefault(("coordinated", "coord_txn"), []).extend(coord)
        touched = sorted({(x["topic"], x["partition"]) for x in ptx})
        listed = sorted({(p["topic"], p["partition"]) for a in ctx for p in a["partitions"]})
        for kind, table, tps in ((TOUCHED, "replayed", touched), (LISTED, "coordinated", listed)):
            rows.setdefault((table, kind), []).extend(
                {"topic": t, "partition": p, "producer_id": pid, "cluster": cluster, **keys,
                 "replica_topic": t, "replica_partition": p} for t, p in tps
            )  # fmt: skip
        for (t, p), side in sides.items():
            replicas[(cluster, t, p)] = ReplicaRow(
                cluster, t, p, "b1", 10**6, 1, complete_from=0 if side.complete_from_start else 7,
                copy_end_timestamp=side.copy_end_ts,
            )  # fmt: skip
        replicas[(cluster, TRANSACTION_STATE_TOPIC, log_partition)] = ReplicaRow(
            cluster, TRANSACTION_STATE_TOPIC, log_partition, "b1", 10**6, 1,
            copy_end_timestamp=coordinator.copy_end_ts,
        )  # fmt: skip
        inputs[(cluster, pid)] = (ptx, coord)
    # a shorter copy of one partition on another broker: the audit keeps b1's, and the rows
    # of this one (a transaction judged otherwise, a pair) are left out
    other = ReplicaRow("east", "out", 0, "b2", 10, 1, complete_from=0, copy_end_timestamp=1)
    replicas[("east", "out", 0, "b2")] = other
    first = next(x for x in rows[("replayed", "transaction")]
                 if (x["cluster"], x["topic"], x["partition"]) == ("east", "out", 0))  # fmt: skip
    stray = {**first, REPLICA_BROKER: "b2", "outcome": "ABORT"}
    rows[("replayed", "transaction")].append(stray)
    partitions = [{"cluster": r.cluster, "topic": r.topic, "partition": r.partition,
                   "complete_from": r.complete_from, "copy_end_timestamp": r.copy_end_timestamp}
                  for r in replicas.values() if r.broker == "b1"]  # fmt: skip
    wanted = {}
    for (cluster, pid), (ptx, coord) in inputs.items():
        mine = [p for p in partitions if p["cluster"] == cluster]
        wanted[(cluster, pid)] = producer_inputs(ptx, coord, mine)
    return rows, list(replicas.values()), wanted


def _sorted_rows(t: pa.Table) -> list[str]:
    return sorted(map(repr, t.to_pylist()))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("buckets", [1, 3])
@pytest.mark.parametrize("fan_in", [None, 2])
def test_runs_merged_judge_every_producer_as_the_sorted_stream_does(seed, buckets, fan_in):
    rows, replicas, wanted = _scan(seed)
    kept = replica_filter(replicas, chosen_replicas(replicas))
    stream = StreamFacts.of(replicas, kept, buckets)
    rng = np.random.default_rng(seed)
    # the scan rows cut into "files" of random length, read in a random order, each kind's
    # rows in their order within a file (as a scan task writes them)
    pieces = []
    for (table, kind), these in rows.items():
        t = _table(table, kind, these)
        cuts = sorted(rng.integers(0, t.num_rows, 6).tolist())
        for a, b in zip([0, *cuts], [*cuts, t.num_rows], strict=True):
            if b > a:
                pieces.append((table, kind, t.slice(a, b - a)))
    order = rng.permutation(len(pieces))
    runs: dict[int, dict[int, list]] = {}
    writer = RunWriter(stream, lambda k, b, t: runs.setdefault(b, {}).setdefault(k, []).append(t),
                       limit=300)  # fmt: skip
    for i in order:
        made = stream_rows(*pieces[i], stream)
        if made is not None:
            writer.add(*made)
    writer.flush()
    assert sum(len(r) for b in runs.values() for r in b.values()) > 3 * len(KINDS)  # many runs
    got = []
    for by_kind in runs.values():
        runs_of = {k: [iter(t.to_batches(97)) for t in ts] for k, ts in by_kind.items()}
        if fan_in is not None:  # merged in passes first (a long history's many runs)
            runs_of = {k: fanned_in(r, lambda b: iter(list(b)), fan_in) for k, r in runs_of.items()}
        got.extend(judge_runs(runs_of, FACTS, stream.clusters))
    got = pa.concat_tables(got)
    want = pa.concat_tables([
        T.with_cluster(crosslog_tables(pid, left, coord, FACTS, cluster), cluster, first=True)
        for (cluster, pid), (left, coord) in sorted(wanted.items())
    ])  # fmt: skip
    assert got.schema == want.schema
    assert _sorted_rows(got) == _sorted_rows(want)
    kinds = set(got.column("out").to_pylist())
    assert kinds == {"finding", "count"}


def test_the_merge_gives_every_row_in_key_order():
    """Random sorted runs (keys with negative parts, the least int64 among them) merged are
    every row once, in key order: one sort of them all."""
    rng = np.random.default_rng(3)
    runs = []
    for _ in range(9):
        n = int(rng.integers(0, 2_000))
        parts = [rng.integers(0, 3, n), rng.integers(-5, 5, n), rng.integers(-2, 4, n),
                 rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)]  # fmt: skip
        t = pa.table({"v": pa.array(rng.integers(0, 10**9, n)), KEY: stream_key(parts)})
        t = t.take(pa.array(np.argsort(key_bytes(t.column(KEY)), kind="stable")))
        runs.append(t)
    out = pa.Table.from_batches(list(merged(iter(t.to_batches(BATCH_ROWS // 64)) for t in runs)))
    whole = pa.concat_tables(runs)
    keys = key_bytes(out.column(KEY))
    assert out.num_rows == whole.num_rows
    assert (keys[1:] >= keys[:-1]).all()
    assert sorted(out.column("v").to_pylist()) == sorted(whole.column("v").to_pylist())


def test_many_runs_are_merged_a_few_at_a_time(tmp_path, monkeypatch):
    """Past MERGE_FAN_IN runs, a kind's runs are merged in passes, never more than ``fan_in``
    read at once, into at most ``fan_in`` runs holding every row in key order; through local
    spill files (jobs.crosslog_scratch._stored_run), each removed once read or dropped."""
    from jobs.crosslog_scratch import _stored_run

    local = tmp_path / "local"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    rng = np.random.default_rng(5)
    runs = []
    for _ in range(23):
        n = int(rng.integers(0, 300))
        parts = [np.zeros(n, np.int64), rng.integers(0, 3, n), rng.integers(0, 9, n),
                 rng.integers(0, 10**6, n)]  # fmt: skip
        t = pa.table({"v": pa.array(rng.integers(0, 10**9, n)), KEY: stream_key(parts)})
        runs.append(t.take(pa.array(np.argsort(key_bytes(t.column(KEY)), kind="stable"))))
    reading = [0, 0]  # runs being read now, the most at once

    def counted(batches):
        started = False
        for b in batches:
            if not started:
                started = True
                reading[0] += 1
                reading[1] = max(reading[1], reading[0])
            yield b
        if started:
            reading[0] -= 1

    stored = [0]

    def store(batches):
        stored[0] += 1
        return counted(_stored_run(batches))

    out = fanned_in([counted(iter(t.to_batches(17))) for t in runs], store, 4)
    assert len(out) <= 4 and reading[1] <= 4 and stored[0] == 6 + 2  # two passes
    assert len(os.listdir(local)) == 2  # the last pass's runs, not yet read
    merged_out = pa.Table.from_batches(list(merged(out)))
    keys = key_bytes(merged_out.column(KEY))
    whole = pa.concat_tables(runs)
    assert merged_out.num_rows == whole.num_rows and (keys[1:] >= keys[:-1]).all()
    assert sorted(merged_out.column("v").to_pylist()) == sorted(whole.column("v").to_pylist())
    assert os.listdir(local) == []  # each removed once read
    dropped = _stored_run(iter(runs[0].to_batches()))
    assert len(os.listdir(local)) == 1
    del dropped
    assert os.listdir(local) == []  # never read: removed with the run
    assert list(_stored_run(iter(()))) == [] and os.listdir(local) == []  # an empty run


def test_keys_order_as_their_parts_do():
    rng = np.random.default_rng(4)
    n = 5_000
    parts = [rng.integers(-3, 3, n), rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64),
             rng.integers(-2, 2, n), rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)]  # fmt: skip
    by_key = np.argsort(key_bytes(stream_key(parts)), kind="stable")
    by_parts = np.lexsort(parts[::-1])
    assert (by_key == by_parts).all()


def test_partitions_outside_the_dump_keep_their_rows_together():
    """Rows of a (topic, partition) that no replica of the dump holds (none is expected) rank
    below the dump's, each such partition its own rank: its entries stay one contiguous run in
    offset order, as the judge reads a partition's, however their offsets interleave."""
    replicas = [ReplicaRow("c", "in", 0, "b1", 10, 1)]
    stream = StreamFacts.of(replicas, None, 1)
    rows = [{"cluster": "c", "producer_id": 5, "topic": t, "partition": p, "first_offset": o,
             "marker_offset": o + 1, "replica_topic": "in", "replica_partition": 0,
             REPLICA_BROKER: "b1"}
            for o in range(0, 40, 2) for t, p in (("gone", 1), ("gone", 2), ("in", 0))]  # fmt: skip
    _, t = stream_rows("replayed", "transaction", _table("replayed", "transaction", rows), stream)
    ordered = t.take(pa.array(np.argsort(key_bytes(t.column(KEY)), kind="stable")))
    out = pa.Table.from_batches(list(merged([iter(ordered.to_batches(7))])))
    parts = list(zip(out.column("topic").to_pylist(), out.column("partition").to_pylist(),
                     strict=True))  # fmt: skip
    runs = [parts[0]] + [b for a, b in zip(parts, parts[1:], strict=False) if a != b]
    assert sorted(runs) == [("gone", 1), ("gone", 2), ("in", 0)] and runs[-1] == ("in", 0)
    for tp in runs:
        offsets = [o for x, o in zip(parts, out.column("first_offset").to_pylist(), strict=True)
                   if x == tp]  # fmt: skip
        assert offsets == list(range(0, 40, 2))


def test_transactional_ids_written_by_tasks_combine_as_the_whole():
    """The transactions' lookup of transactional ids is written by the runs tasks, each with
    the coordinator transactions it read (replay.crosslog_runs.ProducerIds): a producer id's
    rows spread over several tasks give a row in each, and the lookup read from their files
    (jobs.copies.Lookup) is the aggregation of them all (replay.plan._txn_ids: the greatest
    id, fenced if any row says so; null where none says)."""
    from jobs.copies import Lookup
    from replay.crosslog_runs import COORD, IDS_PARTS, ProducerIds

    rows, replicas, _ = _scan(5)
    rng = np.random.default_rng(5)
    coord = [{**r, "transactional_id": [None, "app-a", "app-b", "app-c"][int(rng.integers(0, 4))],
              "fenced": [None, False, True][int(rng.integers(0, 3))]}
             for r in rows[("coordinated", "coord_txn")]]  # fmt: skip
    for r in coord:  # one producer id whose rows say neither
        if r["producer_id"] == 42:
            r["transactional_id"] = r["fenced"] = None
    want: dict[tuple, list] = {}
    for r in coord:
        got = want.setdefault((r["cluster"], r["producer_id"]), [None, None])
        if r["transactional_id"] is not None:
            got[0] = max(got[0] or "", r["transactional_id"])
        if r["fenced"] is not None:
            got[1] = bool(got[1]) or r["fenced"]
    stream = StreamFacts.of(replicas, replica_filter(replicas, chosen_replicas(replicas)), 3)
    t = _table("coordinated", "coord_txn", coord)
    tasks = [ProducerIds() for _ in range(3)]
    for a in range(0, t.num_rows, 7):  # more pieces than a task holds before combining them
        kind, made = stream_rows("coordinated", "coord_txn", t.slice(a, 7), stream)
        assert kind == COORD
        tasks[int(rng.integers(0, 3))].add(made)
    assert t.num_rows / 7 / 3 > 1.5 * IDS_PARTS
    written = [task.table() for task in tasks]
    assert sum(w.num_rows for w in written) > len(want)  # producers in several tasks' files
    lookup = Lookup(pa.concat_tables(written)).table
    assert lookup.num_rows == len(want)
    got = {(r["cluster"], r["producer_id"]): [r["transactional_id"], r["coordinator_fenced"]]
           for r in lookup.to_pylist()}  # fmt: skip
    assert got == want
    assert [None, None] in got.values() and any(v[0] for v in got.values())


def test_keys_are_found_in_order_as_their_bytes_compare():
    """A flush's keys in order (written without a sort) are found so exactly where their bytes
    compare in order: negative, equal and large parts, each part deciding in turn."""
    rng = np.random.default_rng(5)
    for trial in range(2000):
        n = int(rng.integers(0, 10))
        parts = [rng.choice([-(1 << 62), -1, 0, 1, 1 << 62], n) for _ in range(4)]
        if trial % 2:  # sorted, ties included
            order = np.lexsort(parts[::-1])
            parts = [p[order] for p in parts]
        keys = key_bytes(stream_key(parts))
        by_bytes = bool(n < 2 or (keys[1:] >= keys[:-1]).all())
        assert keys_ascending(keys) == by_bytes, parts
