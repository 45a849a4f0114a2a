"""The writer's partition directories decode back to what was written, verify cleanly, and the
`logreplay` commands work the way a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.compute as pc
import pytest

import decoders
from decoders.verify import verify
from jobs.cli import main
from simulator.writer import offset_index_bytes


def test_sample_dump_decodes_to_what_was_written(sample_dump):
    out, facts = sample_dump
    t = decoders.read_dump(
        [str(out / "broker-1")],
        ["records", "batches", "aborted_txns", "txn_log", "offset_commits", "errors", "segments"],
    )
    rec = t["records"].filter(pc.invert(t["records"]["is_control"]))
    assert facts["records"]
    for tp, n in facts["records"].items():
        topic, part = tp.rsplit("-", 1)
        mask = pc.and_(pc.equal(rec["topic"], topic), pc.equal(rec["partition"], int(part)))
        assert pc.sum(mask).as_py() == n, tp
    assert t["errors"].num_rows == 0
    assert pc.sum(t["segments"]["bytes_corrupt"]).as_py() == 0
    (ab,) = t["aborted_txns"].to_pylist()
    assert (
        ab["topic"],
        ab["partition"],
        ab["producer_id"],
        ab["first_offset"],
        ab["last_offset"],
    ) == facts["aborted"][0]
    markers = t["batches"].filter(pc.is_valid(t["batches"]["control_type"]))
    assert sorted(markers["control_type"].to_pylist()) == ["ABORT", "COMMIT", "COMMIT"]
    assert t["txn_log"]["state"].to_pylist()[-1] == "CompleteAbort"
    txn_commit = t["offset_commits"].filter(t["offset_commits"]["is_transactional"]).to_pylist()
    assert [(c["committed_offset"], c["producer_id"], c["value_version"]) for c in txn_commit] == [
        (9, 2000, 4)
    ]
    legacy = rec.filter(pc.equal(rec["topic"], "legacy"))
    assert legacy["offset"].to_pylist() == list(range(7))
    assert legacy["timestamp_type"].to_pylist()[-1] == "LogAppendTime"
    assert verify([str(out / "broker-1")]) == []
    seg = t["segments"].filter(pc.equal(t["segments"]["kind"], "log"))
    assert (
        pc.sum(pc.and_(pc.equal(seg["topic"], "orders"), pc.equal(seg["partition"], 0))).as_py()
        == 3
    )  # rolled at 4 KiB


def test_damaged_replica_is_reported_exactly(sample_dump):
    out, facts = sample_dump
    t = decoders.read_dump([str(out / "broker-2")], ["errors", "segments", "records"])
    errs = t["errors"].to_pylist()
    assert [(e["kind"], e["position"]) for e in errs] == [
        ("crc_mismatch", facts["damaged"]["crc_position"]),
        ("truncated_batch", facts["damaged"]["torn_position"]),
    ]
    log = t["segments"].filter(pc.equal(t["segments"]["kind"], "log")).to_pylist()[0]
    assert log["bytes_padding"] > 0 and log["bytes_corrupt"] > 0
    assert log["bytes_valid"] + log["bytes_padding"] + log["bytes_corrupt"] == log["size"]


def test_dump_json_lines(sample_dump, capsys):
    out, _ = sample_dump
    assert main(["dump", str(out / "broker-1" / "orders-1"), "--deep", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    kinds = {x["type"] for x in lines}
    assert {
        "batch",
        "record",
        "segments",
        "aborted_txns",
        "producer_snapshots",
        "index_entries",
    } <= kinds
    marker = next(x for x in lines if x["type"] == "batch" and x["control_type"] == "ABORT")
    assert marker["coordinator_epoch"] == 5 and marker["producer_id"] == 2000
    rec = next(x for x in lines if x["type"] == "record" and x["key"] == "tx1-0")
    assert rec["headers"] == [{"key": "trace-id", "value": "t0"}, {"key": "empty", "value": None}]


def test_dump_text_shows_decoded_internal_records(sample_dump, capsys):
    out, facts = sample_dump
    part = out / "broker-1" / f"__consumer_offsets-{facts['offsets_partition']}"
    assert main(["dump", str(part), "--deep"]) == 0
    text = capsys.readouterr().out
    assert "group_metadata v3 group=orders-app generation=1" in text
    assert (
        "offset_commit v4 group=orders-app orders-1 offset=9" in text
        and "transactional pid=2000" in text
    )
    assert "marker=COMMIT(coordinator_epoch=5)" in text
    assert "TOMBSTONE" in text


def test_dump_verify_flags_a_bad_index(sample_dump, capsys):
    out, _ = sample_dump
    part = out / "broker-1" / "orders-1"
    assert main(["dump", str(part), "--verify"]) == 0
    (part / "00000000000000000000.index").write_bytes(offset_index_bytes([(3, 77)]))
    capsys.readouterr()
    assert main(["dump", str(part), "--verify"]) == 1
    assert "no batch starts at log position 77" in capsys.readouterr().out


def test_dump_usage_errors(tmp_path, capsys):
    assert main(["dump", str(tmp_path / "missing")]) == 2
    assert main(["schema", "nope"]) == 2
    assert main(["schema", "records"]) == 0
    assert "headers" in capsys.readouterr().out


def test_the_command_ends_with_its_objects_frozen_out_of_the_collector():
    """The ``logreplay`` command (its console script and ``python -m jobs.cli``) returns its
    job's exit code with the process's objects frozen (jobs.exits.ended: Python's exit does not
    collect them one by one); ``main``, which tests and notebooks call, freezes nothing."""
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "logreplay"]
    assert script.value == "jobs.cli:entry"
    probe = (
        "import gc, sys; from jobs.cli import entry, main\n"
        "code = main(['schema', 'nope']); print(gc.get_freeze_count(), code)\n"
        "code = entry(); print(gc.get_freeze_count() > 0, code)"
    )
    res = subprocess.run([sys.executable, "-c", probe, "schema", "records"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert (lines[0], lines[-1]) == ("0 2", "True 0") and "records:" in lines


@pytest.mark.spark  # the demo audits with Spark
def test_console_script_runs_demo(tmp_path):
    """The README's first command: simulate a dump with anomalies, audit it with Spark, show
    the findings by kind against what was injected. Run from a project of the user's own (an
    Airflow home, a repository) whose packages share logreplay's names, with a
    ``PYSPARK_PYTHON`` exported for a cluster's executors: the driver and the Python workers
    Spark starts in that directory still run logreplay's code (conf/default.yaml,
    ``spark.executorEnv.PYTHONSAFEPATH``; jobs.session.worker_python)."""
    project = tmp_path / "project"
    for package in ("jobs", "replay", "decoders", "validations"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(
            f"raise ImportError('the project of the user, not logreplay: {package}')\n"
        )
    exe = os.path.join(os.path.dirname(sys.executable), "logreplay")
    env = {**os.environ, "PYSPARK_PYTHON": "/opt/cluster/bin/python3"}
    res = subprocess.run(
        [exe, "demo", "--out", str(tmp_path / "demo")], capture_output=True, text=True,
        timeout=900, cwd=project, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "marker=ABORT" in res.stdout and "verify: 0 inconsistencies" in res.stdout
    summary = json.loads((tmp_path / "demo" / "audit" / "summary.json").read_text())
    truth = json.loads((tmp_path / "demo" / "dump" / "truth.json").read_text())
    assert {a["kind"] for a in truth["anomalies"]} <= set(summary["findings"]["by_kind"])
    assert (
        f"{len(truth['anomalies'])}/{len(truth['anomalies'])} injected anomalies found"
        in res.stderr
    )
    assert summary["gate"]["success"] is False and "a pipeline would stop here" in res.stderr
    assert (tmp_path / "demo" / "audit" / "gate" / "data_docs" / "index.html").is_file()
    report = tmp_path / "demo" / "audit" / "report" / "index.html"
    assert res.stderr.rstrip().splitlines()[-1] == f"report: {report}"  # the demo ends with it
    assert report.stat().st_size > 1_000_000 and "finding-card" in report.read_text()


def test_kraft_control_records_decode_in_every_corpus_metadata_log(corpus, capsys):
    logs = sorted({p.parent for p in corpus.rglob("__cluster_metadata-0/*.log")})
    assert len(logs) >= 4
    assert main(["dump", *map(str, logs), "--deep"]) == 0
    text = capsys.readouterr().out
    assert text.count("control=LEADER_CHANGE {") >= 28 and '"leader_id"' in text
    assert "control=SNAPSHOT_HEADER {" in text and "control=SNAPSHOT_FOOTER {" in text
    assert "undecodable" not in text


def test_replicas_of_a_partition_across_brokers(sample_dump):
    out, _ = sample_dump
    reps = decoders.replicas(decoders.discover([str(out)]))
    assert set(reps[("orders", 1)]) == {"1", "2"}
    assert set(reps[("orders", 0)]) == {"1"} and len(reps[("orders", 0)]["1"]) == 3
