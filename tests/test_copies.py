"""The audit's tables copied from the scratch area (jobs.copies): the rows kept, their columns
and types, the files cut in order. That the copied tables equal the queries' (rows and Spark
schemas) is tests/test_audit.py::test_audit_command_line, over dumps with several replicas."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from jobs.copies import CopyTask, copy_task, in_runs, project
from jobs.output import OutputDir
from replay import tables as T
from replay.plan import TXN_ID_COLUMNS, Copied, _copied_schema, _copies
from replay.replicas import REPLAY_TABLES

COLUMNS = ["cluster", *T.PRODUCER_STATES.names]


def _replayed(rows: list[dict]) -> pa.RecordBatch:
    schema = REPLAY_TABLES["replayed"]
    full = [{f.name: r.get(f.name) for f in schema} for r in rows]
    return pa.RecordBatch.from_pylist(full, schema=schema)


def _row(broker: str, out: str, pid: int, ts: int | None = 1_700_000_000_123) -> dict:
    return {"cluster": "c1", "replica_broker": broker, "replica_topic": "t",
            "replica_partition": 0, "out": out, "topic": "t", "partition": 0,
            "producer_id": pid, "timestamp": ts}  # fmt: skip


def _task(copied: Copied, partition_by=None) -> CopyTask:
    arrow = to_arrow_schema(copied.schema, timezone="UTC")
    return CopyTask("producer_states", 0, copied, (), partition_by, arrow)


@pytest.mark.parametrize("excluded", [True, False])
def test_a_replay_table_keeps_its_kind_of_the_chosen_replicas(excluded):
    schema = _copied_schema("replayed", COLUMNS)
    batch = _replayed(  # a file of the kind's (test_a_copy_reads_only_the_files_of_its_kind)
        [_row("1", "producer_state", 7), _row("2", "producer_state", 8),
         _row("1", "producer_state", 10, None)]
    )  # fmt: skip
    listed = ("c1\0t\0" + "0\0" + ("2" if excluded else "1"),)
    got = project(
        batch, _task(Copied("replayed", schema, "producer_state", (listed, excluded))), None
    )
    assert got.column("producer_id").to_pylist() == [7, 10]
    assert got.schema == to_arrow_schema(schema, timezone="UTC")
    ts = got.column("timestamp").to_pylist()
    assert ts[1] is None and ts[0].timestamp() == pytest.approx(1_700_000_000.123)
    assert got.column_names == COLUMNS
    everyone = project(batch, _task(Copied("replayed", schema, "producer_state")), None)
    assert everyone.column("producer_id").to_pylist() == [7, 8, 10]


def test_a_decoded_table_keeps_its_broker_s_cluster_and_gets_its_topic_from_its_folder():
    """The scan's tasks give a decoded row the cluster of its broker directory
    (replay.tables.clusters_of: "" for a broker without one, or none); the copy lays the
    columns out as the query does, the partition column from the folder's name."""
    import decoders

    schema = _copied_schema("segments")
    assert schema.names[0] == "broker" and schema.names[-1] == "cluster"
    assert not schema["cluster"].nullable
    segments = decoders.TABLES["segments"]
    rows = [{"broker": b, "file": f"f{i}", "size": 1} for i, b in enumerate(["1", "2", None])]
    batch = pa.RecordBatch.from_pylist(
        [{f.name: r.get(f.name) for f in segments if f.name != "topic"} for r in rows],
        schema=segments.remove(segments.get_field_index("topic")),
    )
    clusters = T.clusters_of(batch.column("broker"), {"1": "east", "3": "west"})
    got = project(T.with_cluster(batch, clusters), _task(Copied("segments", schema), "topic"),
                  "orders")  # fmt: skip
    assert got.column("cluster").to_pylist() == ["east", "", ""]
    assert got.column("topic").to_pylist() == ["orders"] * 3
    assert got.column("file").to_pylist() == ["f0", "f1", "f2"]
    assert got.column_names == schema.names


def test_files_are_cut_in_order_into_runs_of_about_equal_rows():
    listed = list("abcdef")
    assert in_runs(listed, [1, 1, 1, 1, 1, 1], 3) == [["a", "b"], ["c", "d"], ["e", "f"]]
    assert in_runs(listed, [10, 1, 1, 1, 1, 1], 2) == [["a"], ["b", "c", "d", "e", "f"]]
    assert in_runs(listed, [1] * 6, 1) == [listed]
    assert in_runs([], [], 4) == []


def test_a_copy_task_streams_its_files_into_one_output_file(tmp_path):
    """Two scratch files of the kind's, read a batch at a time, into one whole-or-nothing
    output file whose rows keep the files' order."""
    schema = _copied_schema("replayed", COLUMNS)
    scratch = tmp_path / "scratch"
    (scratch / "replayed").mkdir(parents=True)
    for i, pids in enumerate([[1, 2], [3]]):
        rows = [_row("1", "producer_state", p) for p in pids]
        pq.write_table(pa.Table.from_batches([_replayed(rows)]), scratch / f"replayed/p{i}.parquet")
    arrow = to_arrow_schema(schema, timezone="UTC")
    task = CopyTask("producer_states", 0, Copied("replayed", schema, "producer_state"),
                    (("replayed/p0.parquet", None), ("replayed/p1.parquet", None)), None,
                    arrow)  # fmt: skip
    out = OutputDir(str(tmp_path / "out"))
    (report,) = copy_task(task, str(scratch), out.uri, "k1", 0)
    assert report == {"table": "producer_states", "rows": 3,
                      "path": "producer_states/part-00000-k1-0.parquet"}  # fmt: skip
    written = pq.read_table(tmp_path / "out" / report["path"])
    assert written.column("producer_id").to_pylist() == [1, 2, 3]
    assert written.schema == arrow
    assert [p.name for p in (tmp_path / "out" / "producer_states").iterdir()] == [
        "part-00000-k1-0.parquet"
    ]


@pytest.mark.parametrize(("shift", "far"), [(0, False), (0, True), (1 << 60, False)])
def test_a_copy_joins_its_lookup_by_cluster_and_producer_in_the_rows_order(tmp_path, shift, far):
    """The transactions table copied (a long-lived producer's millions of rows are neither
    shuffled nor sorted): each row gets its producer's transactional id from the lookup
    written in the scratch area, by cluster and producer id (the same id in two clusters is
    two producers), null where the coordinator's log has none (a cluster it does not have
    either), the rows in the files' order. The keys are one int64 each while producer ids
    are below 2**56 (jobs.copies.PRODUCER_ID_SPAN), text beyond (``shift``: every id there;
    ``far``: one row's only): the same join."""
    copied = _copies(None)["transactions"]
    assert copied.lookup == "txn_ids" and copied.schema.names[-2:] == list(TXN_ID_COLUMNS)
    scratch = tmp_path / "scratch"
    (scratch / "replayed").mkdir(parents=True)
    (scratch / "lookup").mkdir()
    keys = [("c1", 7), ("c2", 7), ("c1", 8), ("c1", 9), ("c1", 7), ("c3", 7)]
    if far:
        keys.append(("c1", (1 << 60) + 7))
    rows = [dict(_row("1", "transaction", p + shift), cluster=c) for c, p in keys]
    pq.write_table(pa.Table.from_batches([_replayed(rows)]), scratch / "replayed/p0.parquet")
    ids = pa.table({"cluster": ["c2", "c1", "c1"], "producer_id": [7 + shift, 7 + shift, 9 + shift],
                    "transactional_id": ["b", "a", None], "coordinator_fenced": [True, False, None]})  # fmt: skip
    pq.write_table(ids, scratch / "lookup/ids.parquet")
    arrow = to_arrow_schema(copied.schema, timezone="UTC")
    task = CopyTask("transactions", 0, copied, (("replayed/p0.parquet", None),), None, arrow,
                    ("lookup/ids.parquet",))  # fmt: skip
    out = OutputDir(str(tmp_path / "out"))
    (report,) = copy_task(task, str(scratch), out.uri, "k1", 0)
    written = pq.read_table(tmp_path / "out" / report["path"])
    assert written.schema == arrow
    extra = [None] if far else []
    assert written.column("producer_id").to_pylist() == [p + shift for _, p in keys]
    assert written.column("transactional_id").to_pylist() == [
        "a",
        "b",
        None,
        None,
        "a",
        None,
        *extra,
    ]
    assert written.column("coordinator_fenced").to_pylist() == [
        False,
        True,
        None,
        None,
        False,
        None,
        *extra,
    ]


def test_a_copy_reads_only_the_files_of_its_kind(tmp_path):
    """The scan writes each kind of a replay table's rows as files of their own, partitioned
    by the kind and holding its own columns only (jobs.scan.TaskTables: the union's ~55
    columns, most of them null in a kind's rows, cost as much again to write), without
    statistics: a copy of one kind reads its kind's files only, and its rows in their order."""
    from types import SimpleNamespace

    from jobs.copies import plan_copies
    from jobs.output import _TaskFiles
    from replay.replicas import kind_columns, kinds_apart

    rows = [_row("1", out, pid) for out, pid in
            [("lso", 1), ("producer_state", 2), ("lso", 3), ("producer_state", 4)]]  # fmt: skip
    mixed = pa.Table.from_batches([_replayed(rows)])
    listed = []
    for task in (0, 1):
        sink = _TaskFiles(str(tmp_path), "replayed", task, 0, "k", mixed.schema, "out", (),
                          lambda kind: kind_columns("replayed", kind))  # fmt: skip
        for _, piece in kinds_apart(mixed):
            sink.write(piece)
        for path, n, kind in zip(*(c.to_pylist() for c in sink.close().columns), strict=True):
            listed.append({"path": path, "rows": n, "partition": kind})
    assert sorted(f["path"] for f in listed)[0] == "replayed/out=lso/part-00000-k-0.parquet"
    file = pq.ParquetFile(tmp_path / listed[0]["path"])
    assert file.schema_arrow.names == kind_columns("replayed", listed[0]["partition"])
    group = file.metadata.row_group(0)
    assert all(group.column(i).statistics is None for i in range(group.num_columns))
    scratch = SimpleNamespace(
        entries={"replayed": {"files": listed, "partition_by": "out"}},
        opts=SimpleNamespace(written=None),
    )
    schema = _copied_schema("replayed", COLUMNS)
    (task,) = plan_copies(scratch, {"producer_states": (Copied("replayed", schema,
                                                               "producer_state"), 1)})  # fmt: skip
    assert [v for _, v in task.files] == ["producer_state", "producer_state"]
    out = OutputDir(str(tmp_path / "out"))
    (report,) = copy_task(task, str(tmp_path), out.uri, "k1", 0)
    written = pq.read_table(tmp_path / "out" / report["path"])
    assert written.column("producer_id").to_pylist() == [2, 4, 2, 4]


def test_the_scan_writes_the_rows_of_partitions_one_broker_holds_and_the_copy_the_rest(tmp_path):
    """The LSO changes and the offset timeline (replay.plan.SCAN_WRITTEN) of a partition only
    one broker holds are written by the scan's task in the table's own form, straight into
    the output (``scan-`` files: jobs.scan.ScanWritten); those of a partition two brokers hold
    go to the scratch area, and the copy keeps the chosen replica's (a ``part-`` file). The
    two together are every row the copy alone would give, in the table's schema; neither
    table's rows of a partition one broker holds stay in the scratch area (the leakage stage
    reads the timeline's written ones: tests/test_scan_written.py). The commit's clean-up
    knows both names as a task's file."""
    from types import SimpleNamespace

    from decoders.spark import _struct
    from jobs.copies import plan_copies
    from jobs.output import PART
    from jobs.scan import ScanWritten, TaskTables, _scan_written, scan_options
    from replay.config import default
    from replay.scan_task import audit_schema

    def lso(broker: str, partition: int, n: int) -> list[dict]:
        return [{**_row(broker, "lso", 0), "replica_partition": partition, "partition": partition,
                 "timestamp": 1_700_000_000_000 + i, "log_end_offset": 10 * i, "lso": 10 * i - 3}
                for i in range(n)]  # fmt: skip

    def timeline(broker: str, partition: int, n: int) -> list[dict]:
        return [{**_row(broker, "timeline", 7), "replica_topic": "__consumer_offsets",
                 "replica_partition": partition, "group_id": "g", "committed_offset": i,
                 "commit_timestamp": 1_700_000_000_000 + i, "log_partition": partition}
                for i in range(n)]  # fmt: skip

    shared = frozenset({("c1", "t", 1), ("c1", "__consumer_offsets", 1)})
    out = OutputDir(str(tmp_path / "out"))
    opts = scan_options(lambda t, _a: _struct(audit_schema(t)), ["replayed", "grouped"], False,
                        default("decode"), None)  # fmt: skip
    opts.written = _scan_written(out, "0123456789ab", shared)
    assert set(opts.written.tables) == {"lso_changes", "offset_timeline"}
    scratch = str(tmp_path / "scratch")
    rows = {"replayed": lso("1", 0, 5) + lso("1", 1, 4) + lso("2", 1, 3),
            "grouped": timeline("1", 0, 6) + timeline("1", 1, 2) + timeline("2", 1, 1)}  # fmt: skip
    tasks = TaskTables(opts, scratch, "0123456789ab", 3, 0, None)
    for table, these in rows.items():
        schema = REPLAY_TABLES[table]
        tasks.write(table, pa.RecordBatch.from_pylist(
            [{f.name: r.get(f.name) for f in schema} for r in these], schema=schema))  # fmt: skip
    files = tasks.close()
    mine = {f["table"]: f for f in files if f.get("output")}
    assert {t: f["path"] for t, f in mine.items()} == {
        "lso_changes": "lso_changes/scan-00003-0123456789ab-0.parquet",
        "offset_timeline": "offset_timeline/scan-00003-0123456789ab-0.parquet",
    }
    assert all(PART.match(f["path"].rsplit("/", 1)[1]) for f in files)
    assert {(f["table"], f["partition"], f["rows"]) for f in files if not f.get("output")} == {
        ("replayed", "lso", 7), ("grouped", "timeline", 3)}  # fmt: skip
    # the copies: of the chosen replica (broker 1) of the partitions two brokers hold
    kept = (("c1\0t\x001\x002", "c1\0__consumer_offsets\x001\x002"), True)
    area = SimpleNamespace(
        entries={t: {"files": [{"path": f["path"], "rows": f["rows"], "partition": f["partition"]}
                               for f in files if f["table"] == t and not f.get("output")],
                     "partition_by": "out"} for t in rows},
        opts=SimpleNamespace(written=opts.written),
    )  # fmt: skip
    copies = {n: (c, 1) for n, c in _copies(kept).items() if n in opts.written.tables}
    copied = {t.table: copy_task(t, scratch, out.uri, "0123456789ab", 0)[0]
              for t in plan_copies(area, copies)}  # fmt: skip
    assert {t: r["path"] for t, r in copied.items()} == {
        "lso_changes": "lso_changes/part-00000-0123456789ab-0.parquet",
        "offset_timeline": "offset_timeline/part-00000-0123456789ab-0.parquet",
    }
    for table, kind, want in (
        ("lso_changes", "replayed", 5 + 4),
        ("offset_timeline", "grouped", 6 + 2),
    ):
        every = pa.RecordBatch.from_pylist(
            [{f.name: r.get(f.name) for f in REPLAY_TABLES[kind]} for r in rows[kind]],
            schema=REPLAY_TABLES[kind],
        )
        schema = opts.written.tables[table][1]
        copied_alone = project(every, CopyTask(table, 0, copies[table][0], (), None, schema), None)
        got = pa.concat_tables([pq.read_table(tmp_path / "out" / f) for f in
                                (mine[table]["path"], copied[table]["path"])])  # fmt: skip
        assert got.schema == copied_alone.schema == schema
        assert got.num_rows == copied_alone.num_rows == want
        assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, copied_alone.to_pylist()))
    # no partition held by two brokers: nothing is left to copy
    alone = SimpleNamespace(entries=area.entries,
                            opts=SimpleNamespace(written=ScanWritten(out.uri, "k", opts.written.tables,
                                                                     frozenset())))  # fmt: skip
    assert plan_copies(alone, copies) == []
