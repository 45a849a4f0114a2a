"""replay.sides: a replica's (producer id, partition) pairs, gathered from the rows its replay
gives, are the distinct pairs of those rows (the cross-log's sides were that distinct over
the scan's tables, in Spark)."""

from __future__ import annotations

import random

import pyarrow as pa

from replay.grouped import COORDINATOR_SCHEMA, PARTITION_SCHEMA
from replay.sides import LISTED, TOUCHED, Pairs
from replay.tables import in_union, rows_table


def _txns(ids: list[int | None]) -> pa.Table:
    rows = [{"topic": "t", "partition": 3, "producer_id": p, "first_offset": i}
            for i, p in enumerate(ids)]  # fmt: skip
    return rows_table(PARTITION_SCHEMA, "transaction", rows)


def _coord(listings: list[tuple[int, list | None]]) -> pa.Table:
    rows = [{"producer_id": p, "partitions": parts} for p, parts in listings]
    return rows_table(COORDINATOR_SCHEMA, "coord_txn", rows)


def test_a_partition_s_pairs_are_its_transactions_producers_whatever_way_they_go_out():
    pairs = Pairs("t", 3)
    lso = rows_table(PARTITION_SCHEMA, "lso", [{"topic": "t", "partition": 3, "lso": 5}])
    pairs.saw("replayed", pa.concat_tables([_txns([7, 7, 9]), lso]))
    pairs.saw("replayed", lso)  # a block of another kind: nothing
    pairs.saw("grouped", _txns([11]))  # (no such rows there: never read)
    pairs.saw_rows([{"out": "transaction", "producer_id": 5}, {"out": "lso", "producer_id": 6},
                    {"out": "transaction", "producer_id": None}])  # fmt: skip
    assert pairs.touched_rows() == [
        {"topic": "t", "partition": 3, "producer_id": p} for p in (5, 7, 9, None)
    ]
    assert pairs.listed_rows() == []


def test_a_coordinator_s_pairs_are_every_partition_it_listed_per_producer():
    pairs = Pairs("__transaction_state", 0)
    a, b = {"topic": "a", "partition": 0}, {"topic": "b", "partition": 1}
    pairs.saw("coordinated", _coord([(1, [a, b]), (1, [b, a]), (2, None), (3, []), (2, [b])]))
    finding = rows_table(COORDINATOR_SCHEMA, "finding", [{"kind": "x", "producer_id": 4}])
    pairs.saw("coordinated", finding)
    assert pairs.listed_rows() == [
        {"producer_id": 1, "topic": "a", "partition": 0},
        {"producer_id": 1, "topic": "b", "partition": 1},
        {"producer_id": 2, "topic": "b", "partition": 1},
    ]
    assert pairs.touched_rows() == []


def test_the_pairs_of_many_blocks_are_the_distinct_pairs_of_all_their_rows():
    rng = random.Random(7)
    names = [{"topic": t, "partition": n} for t in "xyz" for n in range(3)]
    pairs, expected_listed, expected_touched = Pairs("p", 0), set(), set()
    for _ in range(20):
        listings = []
        for _ in range(rng.randrange(0, 30)):
            pid = rng.choice([1, 2, 3, 2**40])
            parts = rng.sample(names, rng.randrange(0, 4)) if rng.random() > 0.1 else None
            listings.append((pid, parts))
            expected_listed |= {(pid, x["topic"], x["partition"]) for x in parts or []}
        pairs.saw("coordinated", _coord(listings))
        ids = [rng.choice([4, 5, 6, None]) for _ in range(rng.randrange(0, 30))]
        expected_touched |= set(ids)
        pairs.saw("replayed", _txns(ids))
    assert {(r["producer_id"], r["topic"], r["partition"]) for r in pairs.listed_rows()} == (
        expected_listed
    )
    assert {r["producer_id"] for r in pairs.touched_rows()} == expected_touched


def test_the_pairs_rows_fit_their_replays_unions():
    # the plan reads them as rows of their kind (replay.replicas.REPLAY_KINDS)
    t = in_union(rows_table(PARTITION_SCHEMA, TOUCHED, [{"topic": "t", "partition": 1,
                                                          "producer_id": 2}]),
                 PARTITION_SCHEMA, TOUCHED)  # fmt: skip
    assert t.column("out").to_pylist() == [TOUCHED] and t.schema == PARTITION_SCHEMA
    c = rows_table(COORDINATOR_SCHEMA, LISTED, [{"topic": "t", "partition": 1, "producer_id": 2}])
    assert c.select(["topic", "partition", "producer_id"]).to_pylist() == [
        {"topic": "t", "partition": 1, "producer_id": 2}
    ]
