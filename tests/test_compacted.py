"""Compacted user topics judged by the cleaner's rules (docs/compaction.md): the
production_compacted scenarios through the one-process runner (one seed here, ten in the slow
tier; one seed of each through Spark in tests/test_audit.py), and what the simulator's cleaner
leaves checked against the rules it follows. No Spark."""

from __future__ import annotations

import collections
from pathlib import Path

import pyarrow as pa
import pytest

from decoders import iter_file
from replay.findings import at_least
from replay.local import audit_local, summary
from replay.truthcheck import compare
from simulator import synth

SCENARIOS = ("production_compacted", "production_compacted_faults")
CHANGELOGS = ("order-state", "cart-state", "customers")


def _run(tmp_path: Path, scenario: str, seed: int) -> tuple[dict, dict, Path]:
    out = tmp_path / f"{scenario}-{seed}"
    (truth,) = synth(scenario, str(out), seed=seed)
    return truth.to_json(), audit_local([str(out)]), out


def _traces(root: Path) -> collections.Counter:
    """What the cleaner left in the changelogs' replicas: sparse batches, empty headers,
    delete horizons, offset holes; and the files of the interrupted pass."""
    seen: collections.Counter = collections.Counter()
    for d in sorted(root.glob("broker-*/*-[0-9]*")):
        if not d.name.startswith(CHANGELOGS):
            continue
        prev = None
        for f in sorted(d.glob("*.log")):
            for _, rb in iter_file(str(f), ("batches",)):
                for b in pa.Table.from_batches([rb]).to_pylist():
                    span = b["last_offset"] - b["base_offset"] + 1
                    seen["empty"] += b["record_count"] == 0
                    seen["sparse"] += 0 < b["record_count"] < span and not b["is_control"]
                    seen["horizon"] += b["delete_horizon"] is not None
                    seen["holes"] += prev is not None and b["base_offset"] > prev + 1
                    prev = b["last_offset"]
        seen["swap"] += len(list(d.glob("*.swap")))
        seen["deleted"] += len(list(d.glob("*.deleted")))
    return seen


@pytest.fixture(scope="module")
def seed3(tmp_path_factory):
    """Both scenarios at seed 3 (odd: the coordinator's log not cleaned), audited once."""
    tmp = tmp_path_factory.mktemp("compacted")
    return {s: _run(tmp, s, 3) for s in SCENARIOS}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_production_compacted_one_seed(seed3, scenario):
    """Healthy: nothing of warning or above although the replicas were cleaned to different
    points, a cleaning crashed mid-swap and the coordinator's log lists transactions the
    changelogs' cleaner removed (odd seed); faults: each anomaly found. The sequence and
    transaction checks inside the cleaned ranges are counted as judged by a weaker rule."""
    truth, result, root = seed3[scenario]
    res = compare(truth, result["findings"])
    assert res["missed"] == [] and res["unexpected"] == [], (res["missed"], res["unexpected"])
    kinds = {a["kind"] for a in truth["anomalies"]}
    if scenario.endswith("faults"):
        assert kinds == {"sequence_gap", "write_outside_transaction", "hanging_transaction",
                         "missing_marker", "replica_divergence"}  # fmt: skip
        assert len(truth["anomalies"]) == 8
    else:
        assert not kinds
        assert [f for f in result["findings"] if at_least(f["severity"], "warning")] == []
    traces = _traces(root)
    for what in ("empty", "sparse", "horizon", "holes", "swap", "deleted"):
        assert traces[what] > 0, (what, traces)
    cov = summary(result)["coverage"]
    assert cov["sequences"]["share"] == 1.0
    assert cov["sequences"]["weakened"]["cleaned range: gaps bounded by offsets"] > 100
    weakened = cov["transactions"]["weakened"]
    assert weakened["cleaned range: removed data and markers assumed"] > 50
    # the simulator's cleaner stamps every marker it finds without data (the unit tests hold
    # one left unstamped, as a round's last batch is)
    assert weakened["cleaned range: marker pending removal"] > 10


def test_open_transactions_share_an_evidence_key_with_their_cause(seed3):
    """Each hanging transaction of the faults variant names the same open transaction as the
    missing marker or the unlisted write that left it open."""
    import json

    _, result, _ = seed3["production_compacted_faults"]
    keys: dict[str, set[str]] = {}
    for f in result["findings"]:
        key = json.loads(f["evidence"]).get("open_transaction")
        if key:
            keys.setdefault(key, set()).add(f["kind"])
    assert sorted(map(sorted, keys.values())) == [
        ["hanging_transaction", "missing_marker"],
        ["hanging_transaction", "write_outside_transaction"],
        ["hanging_transaction", "write_outside_transaction"],
    ]


@pytest.mark.slow
def test_production_compacted_over_ten_seeds(tmp_path):
    found = false = 0
    for seed in range(1, 11):
        for scenario in SCENARIOS:
            truth, result, root = _run(tmp_path, scenario, seed)
            res = compare(truth, result["findings"])
            assert res["missed"] == [], (scenario, seed, res["missed"])
            found += len(res["found"])
            false += len([f for f in result["findings"] if at_least(f["severity"], "warning")]) - len(res["found"])  # fmt: skip
    assert false == 0 and found == 80
