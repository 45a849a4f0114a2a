"""The cross-log stream's leading sort keys (replay.plan.crosslog_keyed) put rows in the same order as
the full order they stand for: offsets past the key's width, missing positions, coordinator
transactions by log partition and offset; and a cluster or partition the scan never saw
still keeps its rows together."""

from __future__ import annotations

import itertools
import random

from replay.crosslog_stream import COORD, KIND, SIDE, STREAM_ORDER, TXN
from replay.plan import POSITION_BITS, crosslog_keyed
from replay.replicas import ReplicaRow
from replay.tables import CLUSTER

SCHEMA = f"{CLUSTER} string, producer_id long, {KIND} int, topic string, partition int, _p1 long, _p2 long"  # fmt: skip
BIG = 1 << POSITION_BITS  # positions from here on share the key's saturated value


def _rows(clusters: list[str], topics: list[str], seed: int) -> list[tuple]:
    rnd = random.Random(seed)
    positions = [0, 1, 2, 7, BIG - 1, BIG, BIG + 5, 3 * BIG, None]
    rows = []
    for cluster, pid in itertools.product(clusters, (5, 9, 1 << 40)):
        for topic, partition in itertools.product(topics, (0, 1, 11)):
            rows.append((cluster, pid, SIDE, topic, partition, 0, 0))
            for p in rnd.sample(positions, 6):
                rows.append((cluster, pid, TXN, topic, partition, p, 0))
        for log_partition, offset in itertools.product((0, 3, 49), rnd.sample(positions, 4)):
            rows.append((cluster, pid, COORD, None, None, log_partition, offset or 0))
    rnd.shuffle(rows)
    return rows


def _sorted(spark, rows: list[tuple], replicas: list[ReplicaRow], keyed: bool) -> list[tuple]:
    df = spark.createDataFrame(rows, SCHEMA).repartition(1)
    order = list(STREAM_ORDER)
    if keyed:  # as the audit's cross-log stage keys and sorts it
        df, order = crosslog_keyed(spark, df, replicas)
    got = df.sortWithinPartitions(*order).select(*STREAM_ORDER).collect()
    return [tuple(r) for r in got]


def _replicas(clusters: list[str], topics: list[str]) -> list[ReplicaRow]:
    return [ReplicaRow(c, t, p, "broker-1", None, 0)
            for c in clusters for t in topics for p in (0, 1, 11)]  # fmt: skip


def test_the_keys_give_the_full_order(spark):
    clusters, topics = ["east", "west"], ["a", "orders", "orders~2", "z.topic"]
    rows = _rows(clusters, topics, seed=1)
    replicas = _replicas(clusters, topics)
    assert _sorted(spark, rows, replicas, keyed=True) == _sorted(spark, rows, replicas, keyed=False)


def test_what_the_scan_never_saw_keeps_together(spark):
    """A cluster and a topic missing from the replicas: each producer's rows, and each of its
    partitions' rows, are still one run, in the full order within it."""
    clusters, topics = ["east", "west", "north"], ["a", "orders", "z.topic"]
    rows = _rows(clusters, topics, seed=2)
    got = _sorted(spark, rows, _replicas(["east"], ["a", "z.topic"]), keyed=True)
    assert sorted(got, key=repr) == sorted(rows, key=repr)
    for key in (lambda r: r[:2], lambda r: r[:5]):
        runs = [k for k, _ in itertools.groupby(got, key)]
        assert len(runs) == len(set(runs))  # no group comes back after another one
    want = _sorted(spark, rows, [], keyed=False)
    for group in {r[:5] for r in rows}:
        assert [r for r in got if r[:5] == group] == [r for r in want if r[:5] == group]
