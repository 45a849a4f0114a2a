"""The one-pass scan (jobs.scan) that `decode` and `audit` run in their Spark tasks, run here
in-process task by task: every table it writes holds exactly the rows the single-process
decoders give, including for segments split into ranges and holding corrupt bytes, and its byte
accounting adds up per file."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

import decoders
from decoders.spark import _struct, table_schema
from jobs.output import OutputDir
from jobs.scan import accounting, plan_scan, scan_options, scan_ranges
from replay.scan_task import merge_split, replica_of
from replay.settings import AuditConfig
from simulator import synth

RANGE = 64 << 10  # small enough to split the scenario's segments into several ranges
CONF = {"verify_crc": True, "window_bytes": 64 << 10, "memory_budget_mb": 64}


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A transactional dump (3 MB) with segments of ~150 KB, one of them damaged in two of its
    ranges."""
    out = tmp_path_factory.mktemp("scan") / "dump"
    synth("clean_transactions", str(out), seed=5, scale=0.15)
    found = decoders.discover([str(out)])
    logs = sorted((f for f in found if f.kind == "log" and f.size > RANGE), key=lambda f: f.path)
    assert logs, "the scenario must have segments larger than one range"
    with open(logs[0].path, "r+b") as f:
        f.seek(logs[0].size // 3)
        f.write(b"\xab" * 3000)  # garbage inside one range
        f.seek(logs[0].size * 2 // 3)
        f.write(b"\x00" * 200)  # a zeroed hole inside another
    return out


def _scan(dump, out, tables, deep):
    files = decoders.discover([str(dump)])
    opts = scan_options(lambda t, a: _struct(table_schema(t, a)), tables, deep, CONF, None)
    tasks = plan_scan(files, tables, RANGE)
    reports = []
    for i, ranges in enumerate(tasks):
        reports.append(scan_ranges(ranges, opts, str(out), "0123456789ab", i, 0))
    return files, tasks, reports


def _rows(out, reports, table) -> list[str]:
    rows = []
    for f in (f for r in reports for f in r.files):
        if f["table"] == table:
            t = pq.read_table(f"{out}/{f['path']}")
            for row in t.to_pylist():
                if f["partition"] is not None or "topic" in table_schema(table, False).names:
                    row["topic"] = f["partition"]
                rows.append(row)
    return rows


def _values(rows, cols) -> list[str]:
    return sorted(json.dumps([r[c] for c in cols], default=str) for r in rows)


@pytest.mark.parametrize("deep", [True, False])
def test_one_pass_gives_every_table_of_the_decoders(damaged, tmp_path, deep):
    tables = [t for t in decoders.TABLES if deep or t not in decoders.RECORD_TABLES]
    out = tmp_path / "out"
    files, tasks, reports = _scan(damaged, out, tables, deep)
    assert any(r.start > 0 for t in tasks for r in t), "some segment is split"
    want = decoders.read_dump([str(damaged)], tables, deep=deep)
    seg_rows, whole = merge_split([s for r in reports for s in r.split])
    assert whole == []  # no file was unreadable or changed while read
    for table in tables:
        got = _rows(out, reports, table)
        if table == "segments":
            got += seg_rows
        expected = want[table].to_pylist()
        # the files hold the types Spark reads (microsecond UTC timestamps, no unsigned ints):
        # compare every other column value for value
        cols = [f.name for f in want[table].schema if "timestamp" not in str(f.type)]
        assert _values(got, cols) == _values(expected, cols), table
    errors = want["errors"].to_pylist()
    assert any(e["file"].endswith(".log") for e in errors), "the damage is reported"
    acct = accounting(reports, seg_rows)
    segments = want["segments"].to_pylist()
    assert acct["files"] == len(files) == len(segments)
    assert acct["size"] == sum(s["size"] for s in segments) == sum(f.size for f in files)
    assert acct["valid"] + acct["padding"] + acct["corrupt"] == acct["size"]
    assert acct["corrupt"] == sum(s["bytes_corrupt"] for s in segments) > 0
    assert acct["errors"] == len(errors)


def test_a_rescan_writes_the_same_bytes(damaged, tmp_path):
    tables = ["batches", "records", "segments", "errors"]
    first, second = tmp_path / "a", tmp_path / "b"
    _scan(damaged, first, tables, True)
    _scan(damaged, second, tables, True)
    a = OutputDir(str(first)).files_under("")
    b = OutputDir(str(second)).files_under("")
    assert sorted(p for p, _ in a) == sorted(p for p, _ in b) and a
    for path, _ in a:
        assert (first / path).read_bytes() == (second / path).read_bytes(), path
    shutil.rmtree(first)


def test_the_audit_s_scan_replays_each_replica_in_the_task_that_reads_it(damaged, tmp_path):
    """Planned for the audit (``whole_replicas``), every file of a partition directory is in
    one task, unsplit; the task replays the replica (replay.replicas) and writes its rows and
    one row per replica; a replica of an internal topic, its coordinator's or groups' replay
    too. Kept to the replica the audit chooses, the rows are the one-process audit's:
    partitions, transactions, coordinator transactions, offset timeline and findings (the
    segment damaged by garbage included)."""
    from replay.local import audit_local
    from replay.replicas import REPLAY_TABLES, chosen_replicas, replay_spec
    from replay.scan_task import AUDIT_DECODED, audit_schema

    root = [str(damaged)]
    files = decoders.discover(root)
    tasks = plan_scan(files, AUDIT_DECODED, RANGE, min_tasks=3, whole_replicas=True)
    assert len(tasks) >= 3
    homes: dict = {}
    for i, ranges in enumerate(tasks):
        assert all(r.start == 0 and r.stop == r.file.size for r in ranges)  # none split
        for r in ranges:
            if replica_of(r.file) is not None:
                assert homes.setdefault(replica_of(r.file), i) == i  # one task per replica

    def schema(table, with_avro):
        return _struct(audit_schema(table))

    spec = replay_spec(root, AuditConfig.from_conf(None))
    opts = scan_options(schema, [*AUDIT_DECODED, *REPLAY_TABLES], False, CONF, None, spec)
    out = tmp_path / "out"
    reports = [
        scan_ranges(ranges, opts, str(out), "0123456789ab", i, 0) for i, ranges in enumerate(tasks)
    ]

    def rows(table):  # a replay table's files are each of one kind (``out``, their partition)
        return [
            {**row, "out": f["partition"]}
            for f in (f for r in reports for f in r.files)
            if f["table"] == table
            for row in pq.read_table(f"{out}/{f['path']}").to_pylist()
        ]

    replicas = [row for r in reports for row in r.replicas]
    batches = decoders.read_dump(root, ["batches"])["batches"].to_pylist()
    with_batches = {(b["broker"], b["topic"], b["partition"]) for b in batches if b["topic"]}
    assert {(r.broker, r.topic, r.partition) for r in replicas} == with_batches
    assert len(replicas) == len(with_batches)
    best = chosen_replicas(replicas)
    kept = [
        r for t in ("replayed", "coordinated", "grouped") for r in rows(t)
        if (r["cluster"], r["replica_topic"], r["replica_partition"], r["replica_broker"]) in best
    ]  # fmt: skip
    local = audit_local(root)
    for out_name, table, cols in (
        ("coord_txn", "coordinator_transactions", ("transactional_id", "producer_id",
                                                   "data_epoch", "outcome", "partitions",
                                                   "first_log_offset")),
        ("timeline", "offset_timeline", ("group_id", "topic", "partition", "committed_offset",
                                         "effective_log_offset", "producer_id")),
        ("partition", "partitions", ("topic", "partition", "broker", "log_end_offset", "lso",
                                     "data_records", "complete_from", "copy_end_timestamp")),
        ("transaction", "transactions", ("topic", "partition", "producer_id", "first_offset",
                                         "marker_offset", "outcome", "record_count")),
        ("finding", "findings", ("kind", "severity", "topic", "partition", "producer_id",
                                 "first_offset", "last_offset")),
    ):  # fmt: skip
        got = [r for r in kept if r["out"] == out_name]
        want = local[table]
        if table == "findings":  # the replays' findings, not the other stages'
            want = [f for f in want if f["kind"] in REPLAY_FINDINGS]
        else:
            assert got, table
        assert _values(got, cols) == _values(want, cols), table


# what replay.partition, the partition's index checks (replay.grouped), the coordinator's and
# the groups' replays find
REPLAY_FINDINGS = {
    "fenced_epoch_write", "non_transactional_write_in_txn", "invalid_epoch_start",
    "duplicate_sequence", "sequence_gap", "out_of_order_sequence", "index_inconsistent",
    "invalid_txn_transition", "offset_regression", "offset_overwrite",
}  # fmt: skip


@pytest.mark.parametrize("without", ["group_metadata", "offset_commits"])
def test_a_consumer_offsets_replica_without_one_kind_of_record_is_replayed(damaged, without):
    """A `__consumer_offsets` replica may hold commits and no group metadata (simple consumers,
    or a history compacted away), or the reverse: its groups' replay in the scan's task still
    runs, and what the records it has show (the commit timeline, or the generations) is what
    the one-process audit shows for that partition."""
    from decoders.constants import CONSUMER_OFFSETS_TOPIC
    from replay.local import audit_local
    from replay.replicas import ReplicaReplay, replay_spec

    root = [str(damaged)]
    logs = [f for f in decoders.discover(root)
            if f.kind == "log" and f.info.topic == CONSUMER_OFFSETS_TOPIC]  # fmt: skip
    local = audit_local(root)
    busiest = max(
        {(f.info.broker, f.info.partition) for f in logs},
        key=lambda bp: sum(t["log_partition"] == bp[1] for t in local["offset_timeline"]),
    )
    broker, partition = busiest
    spec = replay_spec(root, AuditConfig.from_conf(None))
    replica = ReplicaReplay(spec, broker, CONSUMER_OFFSETS_TOPIC, partition)
    for f in logs:
        if (f.info.broker, f.info.partition) == busiest:
            for t, b in decoders.iter_file(f, ("batches", "segments"), deep=False):
                replica.add(t, b)
            kept = tuple(sorted({"offset_commits", "group_metadata"} - {without}))
            for t, b in decoders.iter_file(f, kept, deep=True):
                replica.add(t, b)
    from tests.whole_tables import replica_result

    tables, row = replica_result(replica)
    assert (row.topic, row.partition, row.broker) == (CONSUMER_OFFSETS_TOPIC, partition, broker)
    got = tables["grouped"].to_pylist()
    timeline = [r for r in got if r["out"] == "timeline"]
    if without == "group_metadata":  # the commits alone make the same timeline
        cols = ("group_id", "topic", "partition", "committed_offset", "commit_log_offset")
        want = [t for t in local["offset_timeline"] if t["log_partition"] == partition]
        assert want and _values(timeline, cols) == _values(want, cols)
        assert not [r for r in got if r["out"] == "generation"]
    else:  # no commits: no timeline
        assert not timeline


def test_a_failed_run_s_background_writes_never_hang_its_release():
    """The driver's error leaves the scratch area's background writes as they are: those that
    ran have ended once the pool's threads are joined, those queued are cancelled, and a
    future nothing will complete (seen once after an error on the driver) is not waited for:
    the run ends with its own error instead of hanging."""
    import threading
    from concurrent.futures import Future, ThreadPoolExecutor

    from jobs.scan import Scratch

    scratch = object.__new__(Scratch)  # only its background writes matter here
    scratch.background = ThreadPoolExecutor(1)
    ran = scratch.background.submit(lambda: "written")
    orphan: Future = Future()  # no thread will ever complete it
    scratch.pending = [ran, orphan]
    released = threading.Thread(target=scratch.release, daemon=True)
    released.start()
    released.join(timeout=30)
    assert not released.is_alive(), "release waited for a future nothing completes"
    assert ran.result() == "written" and orphan.cancelled()
    assert scratch.background is None and scratch.pending == []


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    """Quiet partitions: 80 of them with two small batches each, from an idempotent producer."""
    from simulator.clients import Producer
    from simulator.cluster import Cluster, TopicConfig

    out = tmp_path_factory.mktemp("quiet") / "dump"
    c = Cluster(str(out), 3, brokers=1)
    c.create_topic(TopicConfig("quiet", 80))
    producer = Producer(c)
    for _ in range(2):
        c.clock.tick(5)
        for p in range(80):
            producer.send("quiet", p, 3)
    c.close()
    return out


@pytest.mark.parametrize("dump, slice_rows", [("damaged", 7), ("quiet", 64)])
def test_a_task_converts_its_files_and_replays_small_rows_together(dump, slice_rows, request,
                                                                    monkeypatch):  # fmt: skip
    """A quiet partition's six files and its replay's few rows cost more converted one by one
    than decoded (docs/benchmarks.md, "a quiet partition's rows"): a scan task gathers the
    files' ``segments`` rows and the replays' last rows and converts them a slice at a time
    (``GATHERED_ROWS``, a few here). The rows, and each replica's rows of each kind in their order,
    are those of the file-by-file decoders and of each replica's replay converting its own (a
    transactional replay hands on tables too: what waits goes first)."""
    import pyarrow as pa

    from replay import scan_task
    from replay.replicas import REPLAY_TABLES, ReplicaReplay, replay_spec
    from replay.scan_task import ScanTask, audit_options, replica_units

    monkeypatch.setattr(scan_task, "GATHERED_ROWS", slice_rows)
    root = [str(request.getfixturevalue(dump))]
    files = decoders.discover(root)
    spec = replay_spec(root, AuditConfig.from_conf(None))
    opts = audit_options(files, AuditConfig.from_conf(None), spec)
    got: dict[str, list[pa.RecordBatch]] = {}
    ScanTask(opts, lambda t, b: got.setdefault(t, []).append(b)).run(
        [r for unit in replica_units(files) for r in unit]
    )
    # the segments rows: every file's, as the decoders give them file by file, a slice a batch
    assert max(b.num_rows for b in got["segments"]) == slice_rows
    assert len(got["segments"]) == -(-len(files) // slice_rows)
    one_by_one = [
        row for f in files for t, b in decoders.iter_file(f, ["segments"], deep=False)
        for row in b.to_pylist()
    ]  # fmt: skip
    segments = pa.Table.from_batches(got["segments"]).drop_columns(["cluster"]).to_pylist()
    assert sorted(map(repr, segments)) == sorted(map(repr, one_by_one))

    # the replays' rows: each replica's, kind by kind in order, as its replay converts them
    def by_replica(batches: list) -> dict:
        out: dict = {}
        for row in (row for b in batches for row in b.to_pylist()):
            key = (row["replica_broker"], row["replica_topic"], row["replica_partition"])
            out.setdefault((*key, row["out"]), []).append(repr(row))
        return out

    replayed = by_replica(got["replayed"])
    replicas = {key[:3] for key in replayed}
    if dump == "quiet":  # not one conversion per replica, nor per kind
        assert len(replicas) > 50
        assert len(got["replayed"]) < len(replicas) / 4
    # each replica alone, its replay converting its own rows (no ``write_rows``)
    alone: dict[str, list] = {}

    def own(replica: ReplicaReplay | None) -> None:
        if replica is not None:
            replica.replay(lambda t, rows: alone.setdefault(t, []).extend(rows.to_batches()))

    for unit in replica_units(files):
        task = ScanTask(opts, lambda t, b: None)
        task._replay = own
        task.run(unit)
    for table in REPLAY_TABLES:
        assert by_replica(got.get(table, [])) == by_replica(alone.get(table, [])), table
