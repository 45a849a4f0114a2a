"""The cross-log stream's parts spread each on its own (replay.plan.spread_each): the judgement's
task for a producer still reads all of its rows of every part, whether the session's union keeps
its children's partitioning (Spark 4.1's default) or concatenates them (the setting off)."""

from __future__ import annotations

import random

import pytest

from replay.plan import UNION_PARTITIONING, spread_each

TASKS = 4


def _parts(spark):
    rnd = random.Random(3)
    kinds = ("txn", "side", "coord")
    sizes = (400, 7, 60)
    return [
        spark.createDataFrame([(rnd.randrange(25), kind, i) for i in range(n)],
                              "producer_id long, kind string, i long")
        for kind, n in zip(kinds, sizes, strict=True)
    ]  # fmt: skip


@pytest.mark.parametrize("keeps", ["true", "false"])
def test_a_producer_s_rows_of_every_part_reach_one_task(spark, keeps):
    before = spark.conf.get(UNION_PARTITIONING)
    spark.conf.set(UNION_PARTITIONING, keeps)
    try:
        parts = _parts(spark)
        spread = spread_each(spark, parts, lambda df: df.repartition(TASKS, "producer_id"))
        plan = spread._jdf.queryExecution().executedPlan().toString()
        tasks = spread.rdd.glom().map(lambda rows: [(r.producer_id, r.kind) for r in rows])
        got = tasks.collect()
    finally:
        spark.conf.set(UNION_PARTITIONING, before)
    # one shuffle per part where the union keeps their partitioning, one for the union if not
    assert plan.count("Exchange hashpartitioning") == (3 if keeps == "true" else 1)
    assert len(got) == TASKS
    expected = {}
    for part in parts:
        for r in part.collect():
            expected.setdefault(r.producer_id, []).append(r.kind)
    task_of = {}
    for t, rows in enumerate(got):
        for pid, _kind in rows:
            assert task_of.setdefault(pid, t) == t  # a producer's rows, of any part, in one task
    held = {pid: sorted(k for rows in got for p, k in rows if p == pid) for pid in task_of}
    assert held == {pid: sorted(kinds) for pid, kinds in expected.items()}


def test_a_listing_goes_through_the_stream_as_the_coordinator_listed_it(spark):
    """A coordinator transaction's partitions as the plan writes them into the stream's text
    (replay.plan.LISTING) and the judgement reads them back (crosslog_stream._partition_lists):
    the same lists, in their order; unknown (null) and none (empty) kept apart."""
    from replay.crosslog_stream import PARTITION_LIST, _partition_lists
    from replay.plan import LISTING

    rnd = random.Random(11)
    names = ["orders", "enriched.v2", "a-b_c", "__consumer_offsets"]
    listings = [None, []] + [
        [{"topic": rnd.choice(names), "partition": rnd.randrange(0, 2000)}
         for _ in range(rnd.randrange(1, 7))]
        for _ in range(60)
    ]  # fmt: skip
    df = spark.createDataFrame([(i, p) for i, p in enumerate(listings)],
                               "i int, partitions array<struct<topic:string,`partition`:int>>")  # fmt: skip
    text = df.selectExpr("i", f"{LISTING} AS listing").orderBy("i").toArrow()
    back = _partition_lists(text.column("listing"))
    assert back.type == PARTITION_LIST
    assert back.to_pylist() == listings
