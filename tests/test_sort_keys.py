"""The cross-log stream's leading sort keys (replay.plan.crosslog_keyed) put rows in the same order as
the full order they stand for: offsets past the key's width, missing positions, coordinator
transactions by log partition and offset; and a cluster or partition the scan never saw
still keeps its rows together. Its text sent as codes (``coded``) comes back the same, in the
same order."""

from __future__ import annotations

import itertools
import random

from replay.crosslog_stream import COORD, KIND, SIDE, STREAM_ORDER, TXN
from replay.plan import POSITION_BITS, crosslog_keyed, stream_codes
from replay.replicas import ReplicaRow
from replay.tables import CLUSTER

SCHEMA = f"{CLUSTER} string, producer_id long, {KIND} int, topic string, partition int, _p1 long, _p2 long, _s0 string"  # fmt: skip
# outcomes as the stream's text slot holds them: coded, none, and one without a code
OUTCOMES = ["COMMIT", "ABORT", "OPEN", None, "PREPARE_COMMIT"]
BIG = 1 << POSITION_BITS  # positions from here on share the key's saturated value


def _rows(clusters: list[str], topics: list[str], seed: int) -> list[tuple]:
    rnd = random.Random(seed)
    positions = [0, 1, 2, 7, BIG - 1, BIG, BIG + 5, 3 * BIG, None]
    rows = []
    for cluster, pid in itertools.product(clusters, (5, 9, 1 << 40)):
        for topic, partition in itertools.product(topics, (0, 1, 11)):
            rows.append((cluster, pid, SIDE, topic, partition, 0, 0, None))
            for p in rnd.sample(positions, 6):
                rows.append((cluster, pid, TXN, topic, partition, p, 0, rnd.choice(OUTCOMES)))
        for log_partition, offset in itertools.product((0, 3, 49), rnd.sample(positions, 4)):
            rows.append((cluster, pid, COORD, None, None, log_partition, offset or 0,
                         rnd.choice(OUTCOMES)))  # fmt: skip
    rnd.shuffle(rows)
    return rows


def _sorted(spark, rows: list[tuple], replicas: list[ReplicaRow], keyed: bool,
            coded: bool = False) -> list[tuple]:  # fmt: skip
    df = spark.createDataFrame(rows, SCHEMA).repartition(1)
    order = list(STREAM_ORDER)
    if keyed:  # as the audit's cross-log stage keys and sorts it
        df, order = crosslog_keyed(spark, df, replicas, coded=coded)
    got = df.sortWithinPartitions(*order).drop("_k1")
    if coded:  # as the judgement reads it back (replay.crosslog_stream.judge_stream)
        table = stream_codes(replicas).decoded(got.toArrow())
        return [tuple(r[c] for c in (*STREAM_ORDER, "_s0")) for r in table.to_pylist()]
    return [tuple(r) for r in got.select(*STREAM_ORDER, "_s0").collect()]


def _replicas(clusters: list[str], topics: list[str]) -> list[ReplicaRow]:
    return [ReplicaRow(c, t, p, "broker-1", None, 0)
            for c in clusters for t in topics for p in (0, 1, 11)]  # fmt: skip


def test_the_keys_give_the_full_order(spark):
    clusters, topics = ["east", "west"], ["a", "orders", "orders~2", "z.topic"]
    rows = _rows(clusters, topics, seed=1)
    replicas = _replicas(clusters, topics)
    want = _sorted(spark, rows, replicas, keyed=False)
    assert _sorted(spark, rows, replicas, keyed=True) == want
    assert _sorted(spark, rows, replicas, keyed=True, coded=True) == want


def test_coded_text_is_null_in_the_shuffle_where_a_code_stands_for_it(spark):
    """What the codes save: a known cluster, a known partition's topic and a known outcome
    travel as numbers only; the rest as text."""
    rows = _rows(["east", "north"], ["a", "z.topic"], seed=3)
    df = spark.createDataFrame(rows, SCHEMA)
    coded, _ = crosslog_keyed(spark, df, _replicas(["east"], ["a"]), coded=True)
    got = coded.collect()
    assert {r[CLUSTER] for r in got} == {None, "north"}
    assert {r["topic"] for r in got} == {None, "z.topic"}
    assert {r["_s0"] for r in got} == {None, "PREPARE_COMMIT"}
    assert {r["_oc"] for r in got} == {None, 0, 1, 2}


def test_what_the_scan_never_saw_keeps_together(spark):
    """A cluster and a topic missing from the replicas: each producer's rows, and each of its
    partitions' rows, are still one run, in the full order within it."""
    clusters, topics = ["east", "west", "north"], ["a", "orders", "z.topic"]
    rows = _rows(clusters, topics, seed=2)
    got = _sorted(spark, rows, _replicas(["east"], ["a", "z.topic"]), keyed=True)
    assert got == _sorted(
        spark, rows, _replicas(["east"], ["a", "z.topic"]), keyed=True, coded=True
    )
    assert sorted(got, key=repr) == sorted(rows, key=repr)
    for key in (lambda r: r[:2], lambda r: r[:5]):
        runs = [k for k, _ in itertools.groupby(got, key)]
        assert len(runs) == len(set(runs))  # no group comes back after another one
    want = _sorted(spark, rows, [], keyed=False)
    for group in {r[:5] for r in rows}:
        assert [r for r in got if r[:5] == group] == [r for r in want if r[:5] == group]


def test_a_scan_without_replicas_still_keys_its_rows(spark):
    """No replica at all (a dump of no partition the scan could replay): every cluster is one
    the scan never saw, and the rows still keep together, coded or not."""
    rows = _rows(["east"], ["a"], seed=4)
    got = _sorted(spark, rows, [], keyed=True)
    assert got == _sorted(spark, rows, [], keyed=True, coded=True)
    assert sorted(got, key=repr) == sorted(rows, key=repr)
