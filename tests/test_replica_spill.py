"""A replica's replay in the scan holds at most replay.replicas.HOLD_BYTES of batch columns in
memory; the rest goes to a local spill file read back a piece at a time (the replay runs over
pieces in offset order, PartitionReplay.run_in_order). Spilling every batch must give exactly
the replay's rows of holding them all, over every scenario and production-shaped traffic, and
leave no file behind; a replica whose batches come out of offset order is replayed whole and
sorted, as before. No Spark."""

from __future__ import annotations

import glob
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import decoders
from decoders.spark import _struct
from jobs.scan import plan_scan, scan_options, scan_ranges
from replay import replicas
from replay.replicas import HELD_RECORDS, REPLAY_READS, REPLAY_TABLES, ReplicaReplay, replay_spec
from replay.scan_task import AUDIT_DECODED, audit_schema, replica_of
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


def _scan(root: str, out: str) -> dict[str, list[dict]]:
    """The audit scan's replay outputs (every replica of the dump), rows sorted."""
    files = decoders.discover([root])
    conf = {"verify_crc": True, "window_bytes": None, "memory_budget_mb": 256}
    opts = scan_options(
        lambda t, a: _struct(audit_schema(t)),
        [*AUDIT_DECODED, *REPLAY_TABLES],
        False,
        conf,
        None,
        replay_spec([root], AuditConfig.from_conf(None)),
    )
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
    made = replicas._Spill.__init__

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
            m.setattr(replicas._Spill, "__init__", counted)
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
