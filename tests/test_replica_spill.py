"""A replica's replay in the scan holds at most replay.replicas.HOLD_BYTES of batch columns in
memory; the rest goes to a local spill file read back a piece at a time (the replay runs over
pieces in offset order, PartitionReplay.run_in_order). Spilling every batch must give exactly
the replay's rows of holding them all, over every scenario and production-shaped traffic, and
leave no file behind; a replica whose batches come out of offset order is replayed whole and
sorted, as before. A window of a few batches goes from the decoder to the replay as Python
values, never a table (decoders.batch_tables.HeaderBatch, replay.replicas.HeldHeaders,
PartitionReplay._few): the same values and the same rows as their tables. No Spark."""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import decoders
from decoders.spark import _struct
from jobs.scan import plan_scan, scan_options, scan_ranges
from replay import replicas
from replay.replicas import HELD_RECORDS, REPLAY_READS, REPLAY_TABLES, ReplicaReplay, replay_spec
from replay.scan_task import (
    AUDIT_DECODED,
    ScanTask,
    audit_schema,
    replica_of,
    replicated_partitions,
)
from replay.settings import AuditConfig
from simulator import synth
from tests.whole_tables import replica_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_TOPIC_READS = tuple(t for t in REPLAY_READS if t not in HELD_RECORDS)


# snapshots and `.txnindex` files, transactions and fences, the cleaner's leftovers, corrupt
# batches, message formats v0/v1, sequence faults, consume-transform-produce
SCENARIOS = ("transaction_faults", "clean_compaction", "corrupt_segments", "clean_legacy",
             "idempotence_faults", "clean_eos_pipeline")  # fmt: skip


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """Scenarios with everything a replica's replay reads, and a few MB of production-shaped
    traffic (small batches: the fast path's runs cut at every piece)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import prodshape

    base = tmp_path_factory.mktemp("spill")
    roots = []
    for name in SCENARIOS:
        roots.append(str(base / name))
        synth(name, roots[-1], seed=2)
    roots.append(str(base / "production"))
    prodshape.generate(roots[-1], 0.004, seed=4)
    return roots


def _scan(root: str, out: str, verify_crc: bool = True) -> dict[str, list[dict]]:
    """The audit scan's replay outputs (every replica of the dump), rows sorted."""
    files = decoders.discover([root])
    conf = {"verify_crc": verify_crc, "window_bytes": None, "memory_budget_mb": 256}
    spec = replay_spec([root], AuditConfig.from_conf(None))
    opts = scan_options(
        lambda t, a: _struct(audit_schema(t)),
        [*AUDIT_DECODED, *REPLAY_TABLES],
        False,
        conf,
        None,
        spec,
    )
    # as the audit scans: batch headers given of the partitions several brokers hold only
    opts.decode = replace(opts.decode, headers_of=replicated_partitions(files, spec))
    for i, ranges in enumerate(plan_scan(files, AUDIT_DECODED, 1 << 20, 4, True)):
        scan_ranges(ranges, opts, out, "0123456789ab", i, 0)
    return {t: sorted(_rows(f"{out}/{t}"), key=repr) for t in REPLAY_TABLES if _rows(f"{out}/{t}")}


def _rows(folder: str) -> list[dict]:
    """The rows of a replay table's scratch files: a folder per kind of row (``out=<kind>``),
    each file of the kind's own columns."""
    return [
        {**row, "out": os.path.basename(os.path.dirname(path)).split("=", 1)[1]}
        for path in glob.glob(f"{folder}/*/*.parquet")
        for row in pq.read_table(path).to_pylist()
    ]


def _sorted(t: pa.Table) -> list[dict]:
    return sorted(t.to_pylist(), key=repr)


def test_spilling_every_batch_replays_the_same(dumps, tmp_path, monkeypatch):
    spills = []
    made = replicas.SpillFile.__init__

    def counted(self):
        made(self)
        spills.append(self.path)

    local = tmp_path / "local"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    for n, root in enumerate(dumps):
        held = _scan(root, str(tmp_path / f"held-{n}"))
        with monkeypatch.context() as m:
            m.setattr(replicas, "HOLD_BYTES", 0)
            m.setattr(replicas.SpillFile, "__init__", counted)
            spilled = _scan(root, str(tmp_path / f"spilled-{n}"))
        assert held.keys() == spilled.keys() and "replayed" in held
        for table in held:
            assert spilled[table] == held[table], table
    assert len(spills) > 50  # every replica with batches spilled
    assert all(os.path.dirname(p) == str(local) for p in spills)
    assert os.listdir(local) == []  # each spill removed once read


def test_a_replica_out_of_offset_order_is_replayed_sorted(dumps):
    """The batches of a replica given out of order (a log whose files or batches do not follow
    offsets) are replayed whole and sorted: the rows of the in-order replay."""
    root = dumps[SCENARIOS.index("transaction_faults")]  # snapshots, `.txnindex` files
    spec = replay_spec([root], AuditConfig.from_conf(None))
    files = decoders.discover([root])
    by_replica: dict[tuple, list] = {}
    for f in files:
        if f.info.topic is not None and not f.info.topic.startswith("__"):
            by_replica.setdefault(replica_of(f), []).append(f)
    compared = 0
    for key, fs in sorted(by_replica.items()):
        pieces = [
            (t, b)
            for f in fs
            for t, b in decoders.iter_file(f, USER_TOPIC_READS, deep=False)
            if b.num_rows
        ]
        rows = [("batches", b.slice(i, 1)) for t, b in pieces if t == "batches"
                for i in range(b.num_rows)]  # fmt: skip
        if len(rows) < 2:
            continue
        # the batch headers one by one, last first; the other tables as read
        shuffled = rows[::-1] + [(t, b) for t, b in pieces if t != "batches"]
        results = []
        for order in (pieces, shuffled):
            r = ReplicaReplay(spec, *key)
            for t, b in order:
                r.add(t, b)
            results.append(r)
        assert results[0].in_order and not results[1].in_order
        (a, _), (b, _) = (replica_result(r) for r in results)
        assert _sorted(a["replayed"]) == _sorted(b["replayed"]), key
        compared += 1
    assert compared >= 2


@pytest.mark.parametrize("scenario", ["clean_eos_pipeline", "transaction_faults"])
def test_internal_records_out_of_log_order_are_replayed_sorted(dumps, scenario):
    """An internal topic's records given out of log order (a damaged log) are replayed
    whole and sorted: the coordinator's and the groups' rows of the in-order replay, which
    merges the commits, group metadata and markers a piece at a time."""
    root = dumps[SCENARIOS.index(scenario)]
    spec = replay_spec([root], AuditConfig.from_conf(None))
    by_replica: dict[tuple, list] = {}
    for f in decoders.discover([root]):
        if f.info.topic in ("__consumer_offsets", "__transaction_state") and f.kind == "log":
            by_replica.setdefault(replica_of(f), []).append(f)
    compared = 0
    for key, fs in sorted(by_replica.items()):
        headers = [(t, b) for f in fs for t, b in decoders.iter_file(f, USER_TOPIC_READS,
                                                                      deep=False)]  # fmt: skip
        internal = tuple(sorted(HELD_RECORDS))
        records = [(t, b.slice(i, 1)) for f in fs
                   for t, b in decoders.iter_file(f, internal, deep=True)
                   if t in HELD_RECORDS for i in range(b.num_rows)]  # fmt: skip
        if len(records) < 2:
            continue
        results = []
        for order in (records, records[::-1]):
            r = ReplicaReplay(spec, *key)
            for t, b in headers + order:
                r.add(t, b)
            results.append(r)
        assert results[0].records_in_order and not results[1].records_in_order
        (a, _), (b, _) = (replica_result(r) for r in results)
        table = "coordinated" if key[1] == "__transaction_state" else "grouped"
        assert a[table].num_rows and _sorted(a[table]) == _sorted(b[table]), key
        compared += 1
    assert compared >= 2


@pytest.mark.parametrize("verify_crc", [True, False])
def test_a_few_batches_replay_as_their_tables(dumps, tmp_path, monkeypatch, verify_crc):
    """The scan's replay of windows of a few batches and of snapshots' entries given as
    decoded and replayed as rows gives the rows of their tables replayed over columns
    (``as_values`` off: every window and snapshot a table; ``small_piece`` 0: every piece by
    runs), held or spilled, CRCs checked or not."""
    from replay.partition import PartitionReplay

    given = []
    made = replicas.HeldHeaders.__init__

    def counted(self, headers):
        made(self, headers)
        given.append(headers.num_rows)

    monkeypatch.setattr(replicas.HeldHeaders, "__init__", counted)
    for n, root in enumerate(dumps):
        as_rows = _scan(root, str(tmp_path / f"rows-{n}"), verify_crc)
        with monkeypatch.context() as m:
            m.setattr(replicas, "HOLD_BYTES", 0)
            spilled = _scan(root, str(tmp_path / f"spilled-{n}"), verify_crc)
        with monkeypatch.context() as m:
            m.setattr(PartitionReplay, "small_piece", 0)
            m.setattr(ScanTask, "as_values", False)
            tables = _scan(root, str(tmp_path / f"tables-{n}"), verify_crc)
        assert as_rows.keys() == tables.keys() == spilled.keys() and "replayed" in as_rows
        for table in as_rows:
            assert as_rows[table] == tables[table], (root, table)
            assert spilled[table] == tables[table], (root, table)
    assert len(given) > 30 and max(given) < PartitionReplay.small_piece


def test_a_header_batch_holds_its_tables_values(dumps):
    """A HeaderBatch's values are its table's rows (timestamps as epoch milliseconds), every
    column; held, the rows the replay reads are those of the held table's replay columns,
    timestamps outside Spark's range and none at all null, CRCs not checked null."""
    from decoders.batch_tables import HeaderBatch
    from decoders.constants import DELETE_HORIZON_FLAG_MASK, SPARK_MAX_MS
    from decoders.schemas import BATCHES
    from replay.partition import _replay_columns

    seen = 0
    for spec, f in _files(dumps, "log"):
        for verify in (True, False):
            for _t, b in decoders.decode_file(f, ("batches",), deep=False, verify_crc=verify,
                                             header_rows=1 << 30):  # fmt: skip
                if not isinstance(b, HeaderBatch):
                    continue
                assert b.values(BATCHES.names) == _values(b.table()), f.path
                # garbage clocks: none, before and after Spark's range, its last millisecond;
                # a delete horizon (the cleaner's leftover)
                stamps = b.h.max_ts
                stamps[: min(4, len(stamps))] = [-1, -(10**15), SPARK_MAX_MS + 1,
                                                 SPARK_MAX_MS][: min(4, len(stamps))]  # fmt: skip
                b.h.attributes[-1] |= DELETE_HORIZON_FLAG_MASK
                b._table, b._numbers = None, None
                held = replicas.HeldHeaders(b)
                assert held.rows() == _replay_columns(held.table()).to_pylist(), f.path
                # what the replica learns of them before its replay, as of their table
                learnt = []
                for given in (b, b.table()):
                    r = ReplicaReplay(spec, *replica_of(f))
                    r.add("batches", given)
                    learnt.append([getattr(r, a) for a in LEARNT])
                assert learnt[0] == learnt[1], f.path
                seen += 1
    assert seen > 50


# what a replica learns of its batches as they come, before its replay (ReplicaReplay._batches)
LEARNT = ("in_order", "first_offset", "last_base", "end", "crc_valid", "leftovers_end",
          "batch_rows")  # fmt: skip


def test_a_few_batches_out_of_offset_order_are_replayed_sorted(dumps):
    """A replica's windows of a few batches given as decoded, last file first: replayed whole
    and sorted, as their tables are."""
    compared = held = 0
    for root, key, fs in _replicas_of_several_logs(dumps):
        spec = replay_spec([root], AuditConfig.from_conf(None))
        results = []
        for rows, order in ((0, fs), (1 << 30, fs[::-1])):
            r = ReplicaReplay(spec, *key)
            for f in order:
                for t, b in decoders.decode_file(f, USER_TOPIC_READS, deep=False,
                                                 header_rows=rows):  # fmt: skip
                    r.add(t, b)
            results.append(r)
        assert results[0].in_order and not results[1].in_order
        held += any(isinstance(p, replicas.HeldHeaders) for p in results[1].batches.memory)
        (a, _), (b, _) = (replica_result(r) for r in results)
        assert _sorted(a["replayed"]) == _sorted(b["replayed"]), key
        compared += 1
    assert compared >= 2 and held >= 2  # (a legacy log's batches are a table)


def _replicas_of_several_logs(dumps) -> list[tuple[str, tuple, list]]:
    """(dump, replica, its files) of the user partitions with more than one segment."""
    out = []
    for root in dumps:
        by_replica: dict[tuple, list] = {}
        for f in decoders.discover([root]):
            if f.info.topic is not None and not f.info.topic.startswith("__"):
                by_replica.setdefault(replica_of(f), []).append(f)
        out += [(root, key, fs) for key, fs in sorted(by_replica.items())
                if sum(f.kind == "log" for f in fs) > 1]  # fmt: skip
    return out


def test_a_snapshot_s_entries_as_values_are_its_table_s(dumps):
    """A snapshot's entries as decoded (SnapshotEntries) hold its table's values (the timestamp
    as epoch milliseconds), and a replica's side rows of them are those of its table, a
    timestamp of none, or outside Spark's range, null."""
    from decoders.constants import SPARK_MIN_MS
    from decoders.schemas import PRODUCER_SNAPSHOTS
    from decoders.snapshot import SnapshotEntries

    seen = 0
    for spec, f in _files(dumps, "snapshot"):
        for _t, e in decoders.decode_file(f, ("producer_snapshots",), snapshot_values=True):
            assert isinstance(e, SnapshotEntries)
            assert e.values(PRODUCER_SNAPSHOTS.names) == _values(e.table()), f.path
            stamps = e.fields["timestamp"]
            stamps[: min(2, len(stamps))] = [-1, SPARK_MIN_MS - 1][: min(2, len(stamps))]
            sides = []
            for given in (e, e.table().to_batches()[0]):
                r = ReplicaReplay(spec, *replica_of(f))
                r.add("producer_snapshots", given)
                sides.append(r.side)
            assert sides[0] == sides[1] and [list(s) for s in sides[0]] == [
                list(s) for s in sides[1]], f.path  # fmt: skip
            seen += 1
    assert seen >= 10


def test_a_replica_of_many_small_windows_holds_its_first_as_decoded(dumps):
    """A replica read in many windows of a few batches (a log of many small segments) holds
    its first HELD_HEADERS windows as decoded and the rest as columns (held as decoded, a
    window takes ~8 times their memory), counted as they take; its replay is the same."""
    root = dumps[-1]  # production-shaped: partitions of hundreds of small batches
    spec = replay_spec([root], AuditConfig.from_conf(None))
    by_replica: dict[tuple, list] = {}
    for f in decoders.discover([root]):
        if f.info.topic is not None and not f.info.topic.startswith("__"):
            by_replica.setdefault(replica_of(f), []).append(f)
    compared = 0
    for key, fs in sorted(by_replica.items())[:6]:
        results = []
        for rows, window in ((0, None), (1 << 30, 4096)):
            r = ReplicaReplay(spec, *key)
            for f in fs:
                for t, b in decoders.decode_file(f, USER_TOPIC_READS, deep=False,
                                                 header_rows=rows, window_bytes=window):  # fmt: skip
                    r.add(t, b)
            results.append(r)
        held = [p for p in results[1].batches.memory if isinstance(p, replicas.HeldHeaders)]
        if len(results[1].batches.memory) <= replicas.HELD_HEADERS:
            continue
        assert len(held) == replicas.HELD_HEADERS
        assert results[1].held_bytes >= replicas.HELD_HEADER_BYTES * sum(p.num_rows for p in held)
        (a, _), (b, _) = (replica_result(r) for r in results)
        assert _sorted(a["replayed"]) == _sorted(b["replayed"]), key
        compared += 1
    assert compared >= 2


def _files(dumps, kind: str):
    """(its dump's replay spec, the file) of every file of ``kind`` in the dumps."""
    for root in dumps:
        spec = replay_spec([root], AuditConfig.from_conf(None))
        for f in decoders.discover([root]):
            if f.kind == kind:
                yield spec, f


def _values(table: pa.Table | pa.RecordBatch) -> list[list]:
    """A table's columns as Python values, timestamps as epoch milliseconds (a garbage one
    makes no datetime)."""
    return [(c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c).to_pylist()
            for c in table.columns]  # fmt: skip
