"""How a scan task in a user's session hands its replay tables on: one stream per kind of rows
(replay.session_scan.by_kind), each with the columns its kind fills, so that a query of one
kind (the transactions) never converts another's rows (the LSO changes). No Spark runs here."""

from __future__ import annotations

import pyarrow as pa
import pytest

from replay.replicas import REPLAY_KINDS, REPLAY_TABLES, REPLICA_KEYS, kind_columns
from replay.session_scan import KIND_MARK, by_kind, spark_schemas, stream_keys
from replay.tables import table_of_rows


@pytest.mark.parametrize("table", sorted(REPLAY_TABLES))
def test_the_kinds_fill_every_column_of_their_table(table):
    """Each column of a replay table is the replica's key, ``out`` or a column of a kind: a
    column no kind fills would be lost from the session's streams."""
    filled = {f.name for f in REPLICA_KEYS} | {"out"}
    for kind in REPLAY_KINDS[table]:
        filled |= set(kind_columns(table, kind))
    assert filled == set(REPLAY_TABLES[table].names)


@pytest.mark.parametrize("table", sorted(REPLAY_TABLES))
def test_a_kind_s_spark_schema_is_its_columns_in_the_table_s_order(table):
    for kind in REPLAY_KINDS[table]:
        struct, arrow = spark_schemas(table, kind)
        assert struct.fieldNames() == kind_columns(table, kind) == arrow.names
        assert "out" not in struct.fieldNames()


def _replayed(rows: list[dict]) -> pa.RecordBatch:
    keys = {"cluster": "c", "replica_broker": "1", "replica_topic": "t", "replica_partition": 0}
    table = table_of_rows(REPLAY_TABLES["replayed"], [{**keys, **r} for r in rows])
    return table.combine_chunks().to_batches()[0]


def test_a_replay_batch_leaves_as_one_batch_per_kind_with_every_row():
    batch = _replayed([
        {"out": "lso", "topic": "t", "partition": 0, "timestamp": 5, "lso": 3, "log_end_offset": 4},
        {"out": "transaction", "topic": "t", "partition": 0, "producer_id": 7, "first_offset": 1},
        {"out": "lso", "topic": "t", "partition": 0, "timestamp": 6, "lso": 4, "log_end_offset": 4},
        {"out": "finding", "kind": "sequence_gap", "topic": "t", "partition": 0},
    ])  # fmt: skip
    parts = dict(by_kind("replayed", batch))
    assert sorted(parts) == [f"replayed{KIND_MARK}{k}" for k in ("finding", "lso", "transaction")]
    assert sum(p.num_rows for p in parts.values()) == batch.num_rows
    lso = parts[f"replayed{KIND_MARK}lso"]
    assert lso.schema.names == kind_columns("replayed", "lso")
    assert lso.column("lso").to_pylist() == [3, 4]  # in the rows' order
    assert lso.column("replica_topic").to_pylist() == ["t", "t"]
    txn = parts[f"replayed{KIND_MARK}transaction"]
    assert txn.column("producer_id").to_pylist() == [7]
    assert "lso" not in txn.schema.names


def test_a_row_of_no_known_kind_is_an_error_not_a_loss():
    batch = _replayed([{"out": "something_new", "topic": "t", "partition": 0}])
    with pytest.raises(ValueError, match="something_new"):
        list(by_kind("replayed", batch))


def test_a_decoded_table_leaves_as_it_is():
    batch = pa.record_batch({"topic": ["a", "b"], "partition": [0, 1]})
    assert list(by_kind("batches", batch)) == [("batches", batch)]
    keys = stream_keys(["batches", "grouped"])
    assert keys["batches"] == ("batches", None)
    assert {k for k, (t, _) in keys.items() if t == "grouped"} == {
        f"grouped{KIND_MARK}{k}" for k in REPLAY_KINDS["grouped"]
    }
