"""The read planner: batch-aligned ranges that reproduce whole-file reads, and pruning that
never opens files of other topics or partitions."""

from __future__ import annotations

import pyarrow as pa
import pytest

import decoders
from decoders.layout import DumpFile
from decoders.planning import plan, split

MULTI = "dipendrasaini__kafka-learnning-series"


def _rows(tasks, table="records"):
    out = []
    for task in tasks:
        for r in task.ranges:
            stop = r.stop if r.stop < r.file.size else None
            out += [b for _, b in decoders.iter_file(r.file, [table], start=r.start, stop=stop)]
    return pa.Table.from_batches(out, schema=decoders.TABLES[table])


def test_ranges_reproduce_the_whole_files(corpus):
    files = decoders.discover([str(corpus / MULTI)])
    whole = decoders.read_dump([str(corpus / MULTI)], ["records", "batches"])
    tasks = plan(files, "records", range_bytes=200_000)
    split_logs = {r.file.info.file for t in tasks for r in t.ranges if r.start > 0}
    assert len(split_logs) >= 20  # every ~1 MB segment was cut
    got = _rows(tasks).sort_by([("topic", "ascending"), ("offset", "ascending")])
    want = whole["records"].sort_by([("topic", "ascending"), ("offset", "ascending")])
    assert got.equals(want)
    assert (
        _rows(plan(files, "batches", range_bytes=200_000), "batches").num_rows
        == whole["batches"].num_rows
    )


@pytest.mark.parametrize("with_index", [True, False])
def test_split_points_are_batch_starts(corpus, with_index):
    files = decoders.discover([str(corpus / MULTI)])
    log = next(f for f in files if f.kind == "log" and f.size > 900_000)
    index = next(
        f
        for f in files
        if f.kind == "index"
        and f.log_dir == log.log_dir
        and f.info.base_offset == log.info.base_offset
        and f.info.partition == log.info.partition
    )
    starts = set(decoders.read_segment(log, "batches", deep=False)["position"].to_pylist())
    ranges = split(log, 100_000, index if with_index else None)
    assert len(ranges) >= 8
    assert ranges[0].start == 0 and ranges[-1].stop == log.size
    assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:], strict=False))
    assert all(r.start in starts for r in ranges)


def test_pruning_never_opens_other_partitions(sample_dump, monkeypatch):
    out, _ = sample_dump
    opened = []
    original = DumpFile.open

    def recording_open(self):
        opened.append(self.info.file)
        return original(self)

    monkeypatch.setattr(DumpFile, "open", recording_open)
    files = decoders.discover([str(out)])
    tasks = plan(files, "records", range_bytes=1_000, topics={"orders"}, partitions={1})
    rows = _rows(tasks)
    assert set(rows["topic"].to_pylist()) == {"orders"} and set(rows["partition"].to_pylist()) == {
        1
    }
    assert opened and all("orders-1/" in f for f in opened)


def test_internal_tables_plan_only_their_topic(sample_dump):
    out, _ = sample_dump
    files = decoders.discover([str(out)])
    tasks = plan(files, "txn_log")
    assert {r.file.info.topic for t in tasks for r in t.ranges} == {"__transaction_state"}
    assert {r.file.kind for t in plan(files, "aborted_txns") for r in t.ranges} == {"txnindex"}


def test_small_files_share_tasks(corpus):
    files = decoders.discover([str(corpus / "seanorth__kafka-server")])
    tasks = plan(files, "segments")
    assert len(tasks) < len(files) / 10
    assert sum(len(t.ranges) for t in tasks) == len(files)


def test_a_task_unpickles_its_own_plan_only(corpus):
    """A Spark job's function carries every task's plan (decoders.planning.TaskPlans); a task
    unpickles its own: the others stay bytes, however many files the dump has."""
    import pickle

    from decoders.planning import ByteRange, TaskPlans

    files = decoders.discover([str(corpus / "seanorth__kafka-server")])
    tasks = [[ByteRange(f, 0, f.size) for f in files[i::3]] for i in range(3)]
    plans = pickle.loads(pickle.dumps(TaskPlans(tasks)))  # as a task gets them
    # every task's plan still bytes: none of the dump's files made until a task asks for its own
    assert len(plans) == len(tasks) and all(type(p) is bytes for p in plans.pickled)
    assert [(r.file.path, r.start, r.stop) for r in plans[1]] == [
        (r.file.path, r.start, r.stop) for r in tasks[1]
    ]


def test_a_range_pickles_back_whole_in_one_call(corpus):
    """A plan's ranges pickle as one call of plain values (ByteRange.__reduce__): what comes
    back is equal field for field, the file's place, broker label, cluster and filesystem
    included, and nothing of the dataclasses' own pickling (a reduce per object) is left."""
    import pickle
    import pickletools

    from pyarrow import fs as pafs

    from decoders.planning import ByteRange

    files = decoders.discover([str(corpus / "seanorth__kafka-server")])
    remote = files[0].__class__(files[0].path, files[0].info, 7, files[0].log_dir,
                                pafs.LocalFileSystem(), "cluster-a")  # fmt: skip
    ranges = [ByteRange(f, 3, f.size) for f in files] + [ByteRange(remote, 0, 7)]
    assert any(f.info.broker and f.cluster for f in files)  # labelled by the layout
    back = pickle.loads(pickle.dumps(ranges, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == ranges
    assert isinstance(back[-1].file.filesystem, pafs.LocalFileSystem)
    ops = {op.name for op, _arg, _pos in pickletools.genops(pickle.dumps(ranges[0]))}
    assert "BUILD" not in ops  # no object rebuilt from a state: one call with its values
