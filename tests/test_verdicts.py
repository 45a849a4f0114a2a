"""Verdicts on production-shaped dumps, through the one-process audit (replay.local: the same
replay functions the Spark plan runs): clean worlds give nothing of warning or above for every
seed, injected faults are found with their kind, place, offsets and record counts, absent files
prove nothing, clusters stay apart. Spark-free; the seed sweeps are `sweep` (their first
seeds; every seed with `slow`), the whole-corpus comparison `slow`."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

import decoders
from replay.findings import at_least
from replay.local import audit_local, summary
from replay.truthcheck import compare
from simulator import synth

# the first seeds of each sweep run in ./dev test, the rest with the `slow` tier (~9 s a seed)
SEEDS_CLEAN = [s if s <= 2 else pytest.param(s, marks=pytest.mark.slow) for s in range(1, 21)]
SEEDS_FAULTS = [s if s <= 2 else pytest.param(s, marks=pytest.mark.slow) for s in range(1, 6)]


def _audit(root: pathlib.Path, conf: dict | None = None) -> dict:
    return audit_local([str(root)], conf)


def _loud(findings: list[dict]) -> list[tuple]:
    return [
        (f["kind"], f["severity"], f["topic"], f["partition"], f["message"])
        for f in findings
        if at_least(f["severity"], "warning")
    ]


def _truth(root: pathlib.Path) -> dict:
    return json.loads((root / "truth.json").read_text())


@pytest.mark.sweep
@pytest.mark.parametrize("seed", SEEDS_CLEAN)
def test_a_production_day_gives_nothing_of_warning_or_above(tmp_path, seed):
    root = tmp_path / "day"
    synth("production_day", str(root), seed=seed)
    result = _audit(root)
    assert _loud(result["findings"]) == []
    res = compare(_truth(root), result["findings"])
    assert res["unexpected"] == [] and res["missed"] == []


@pytest.mark.sweep
@pytest.mark.parametrize("seed", SEEDS_FAULTS)
def test_every_fault_of_a_production_day_is_found_and_nothing_else(tmp_path, seed):
    root = tmp_path / "faults"
    synth("production_day_faults", str(root), seed=seed)
    truth = _truth(root)
    kinds = {a["kind"] for a in truth["anomalies"]}
    assert {"split_outcome", "missing_marker", "write_outside_transaction"} <= kinds
    assert "aborted_read_leak" in kinds
    res = compare(truth, _audit(root)["findings"])
    assert res["missed"] == [], res["missed"]
    assert res["unexpected"] == [], [(f["kind"], f["message"]) for f in res["unexpected"]]


@pytest.fixture(scope="module")
def clean_transactions(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("verdicts") / "clean_transactions"
    synth("clean_transactions", str(root), seed=3)
    return root


def _copy(src: pathlib.Path, dst: pathlib.Path, keep) -> pathlib.Path:
    for p in src.rglob("*"):
        if p.is_file() and keep(p):
            target = dst / p.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, target)
    return dst


def test_a_dump_of_only_log_files_proves_nothing_missing(clean_transactions, tmp_path):
    full = _audit(clean_transactions)
    checked = summary(full)["checks"]
    (cluster,) = checked
    assert checked[cluster]["aborted transactions checked against a .txnindex"] > 0
    logs = _copy(clean_transactions, tmp_path / "logs", lambda p: p.suffix == ".log")
    only = _audit(logs)
    assert _loud(only["findings"]) == []
    (counts,) = summary(only)["checks"].values()  # no meta.properties: a cluster of its own
    assert counts["aborted transactions checked against a .txnindex"] == 0
    assert (
        counts["aborted transactions in segments without a .txnindex"]
        == checked[cluster]["aborted transactions checked against a .txnindex"]
    )


def test_a_txnindex_that_exists_and_disagrees_is_still_inconsistent(clean_transactions, tmp_path):
    copy = _copy(clean_transactions, tmp_path / "copy", lambda p: True)
    indexes = sorted(p for p in copy.rglob("*.txnindex") if p.stat().st_size >= 34)
    assert indexes
    victim = indexes[0]
    data = victim.read_bytes()
    victim.write_bytes(data[34:])  # the first aborted transaction's entry is gone
    findings = _audit(copy)["findings"]
    bad = [f for f in findings if f["kind"] == "index_inconsistent"]
    assert len(bad) == 1 and victim.name in bad[0]["message"]
    assert bad[0]["severity"] == "warning"


@pytest.mark.parametrize("as_roots", [False, True])
@pytest.mark.parametrize("same_id", [False, True])
def test_two_clusters_side_by_side_stay_apart(tmp_path, same_id, as_roots):
    """Both copies have broker node.id=1 and the same topic names, with different contents:
    one cluster each, no replica divergence between them; also when both carry the same
    cluster id (container images ship a default one), and when the copies are given as two
    roots (their files then shown relative to the roots' common directory: one path names
    one file, one broker one log directory)."""
    old, new = tmp_path / "both" / "old", tmp_path / "both" / "new"
    synth("clean_idempotent", str(old), seed=1)
    synth("clean_idempotent", str(new), seed=2)
    for props in [] if same_id else new.rglob("meta.properties"):
        text = props.read_text()
        lines = [
            "cluster.id=bmV3LWNsdXN0ZXItaWQxMg" if ln.startswith("cluster.id=") else ln
            for ln in text.splitlines()
        ]
        props.write_text("\n".join(lines) + "\n")
    result = audit_local([str(old), str(new)] if as_roots else [str(tmp_path / "both")])
    files = decoders.discover([str(old), str(new)])
    assert len({f.info.file for f in files}) == len(files)
    assert {f.info.file.split("/")[0] for f in files} == {"old", "new"}
    assert {f.info.broker for f in files} == {"1@old/broker-1", "1@new/broker-1"}
    assert len(summary(result)["clusters"]) == 2
    assert _loud(result["findings"]) == []
    alone = _audit(old)["findings"] + _audit(new)["findings"]
    assert _keys(result["findings"]) == _keys(alone)


def _keys(findings: list[dict]) -> list[tuple]:
    cols = ("kind", "severity", "topic", "partition", "producer_id", "group_id", "first_offset",
            "last_offset", "record_count")  # fmt: skip
    return sorted(tuple(str(f.get(c)) for c in cols) for f in findings)


@pytest.mark.slow
def test_the_whole_corpus_in_one_run_equals_each_dump_alone(corpus):
    """The corpus holds 14 projects' dumps side by side (one of them an old and a new
    cluster), sharing topic names: one run over all of them must keep them apart."""
    whole = _audit(corpus)
    alone = []
    for dump in sorted(p for p in corpus.iterdir() if p.is_dir()):
        alone += _audit(dump)["findings"]
    assert _loud(whole["findings"]) == []
    assert _keys(whole["findings"]) == _keys(alone)
    assert len(summary(whole)["clusters"]) >= 15


def test_clock_tolerance_is_configurable():
    from replay.config import load

    conf = load(None, ["audit.clock_tolerance_ms=500"])
    assert conf["audit"]["clock_tolerance_ms"] == 500
    assert load()["audit"]["clock_tolerance_ms"] == 2000
