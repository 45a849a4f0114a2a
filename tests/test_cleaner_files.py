"""Files a crash leaves in a partition directory mid-cleaning or mid-deletion (`.deleted`,
`.cleaned`, `.swap`), resolved as the broker's log recovery would (replay.scan_task.Recovery,
LogLoader): decoded and accounted, never replayed twice (no Spark)."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from replay.local import audit_local
from replay.scan_task import Recovery


def _file(kind: str, base: int):
    return SimpleNamespace(kind=kind, info=SimpleNamespace(base_offset=base))


def _keys(result) -> list[tuple]:
    return sorted((f["kind"], f["severity"], f["topic"], f["first_offset"]) for f in result["findings"])  # fmt: skip


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """One broker, one partition an idempotent producer writes, a transactional one too."""
    from simulator.clients import Producer, TransactionalProducer
    from simulator.cluster import Cluster, TopicConfig

    root = tmp_path_factory.mktemp("crash") / "dump"
    c = Cluster(str(root), 1, offsets_partitions=1, txn_partitions=1)
    c.create_topic(TopicConfig("payments", 1))
    plain, tx = Producer(c), TransactionalProducer(c, "payments-tx")
    for r in range(20):
        plain.send("payments", 0, 3, tag=f"p{r}")
        tx.send("payments", 0, 2, tag=f"t{r}")
        tx.commit() if r % 4 else tx.abort()
    c.close()
    return root, _keys(audit_local([str(root)]))


@pytest.mark.parametrize("suffix", [".deleted", ".cleaned", ".swap"])
def test_a_segment_left_by_a_crash_is_not_replayed_twice(dump, suffix):
    """A copy of a live segment as a deletion's `.deleted`, an interrupted cleaning's
    `.cleaned`, or a completed cleaning's `.swap` (which replaces the segment it covers): the
    findings stay those of the clean dump (replaying both once gave a duplicate_sequence per
    batch), and the file's bytes are still accounted."""
    root, before = dump
    log = sorted((root / "broker-1" / "payments-0").glob("*.log"))[0]
    left = log.with_name(log.name + suffix)
    shutil.copy(log, left)
    try:
        result = audit_local([str(root)])
        assert _keys(result) == before
        assert any(c["check"].startswith("producer batches replayed") for c in result["checks"])
    finally:
        left.unlink()


def test_recovery_keeps_what_log_loader_keeps():
    files = [_file("log", 0), _file("log", 100), _file("log.swap", 0), _file("log.cleaned", 100),
             _file("log.swap", 150), _file("log.deleted", 0), _file("txnindex", 0)]  # fmt: skip
    r = Recovery(files)
    assert r.keeps(files[2]) and not r.keeps(files[4])  # a swap above the lowest .cleaned: dropped
    assert not r.keeps(files[3]) and not r.keeps(files[5])
    assert r.keeps(files[0])  # nothing known covered yet
    import pyarrow as pa

    r.saw(files[2], pa.record_batch({"base_offset": [0, 40], "last_offset": [39, 99]}))
    assert not r.keeps(files[0]) and not r.keeps(files[6])  # replaced by the swap
    assert r.keeps(files[1])
