"""Outputs on object storage: `audit`, `decode` and `gate` read and write `s3://` (moto's S3 server
on loopback, reached through the AWS environment variables only) exactly as they do local paths,
and a run is published by its commit record alone."""

from __future__ import annotations

import json
import os

import pytest
from s3server import s3  # noqa: F401 (the session's S3 server)

from jobs.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

RUN = ["--run-id", "scheduled__2026-11-21T00:00:00+00:00", "--logical-date", "2026-11-21"]
DECODED = ["segments", "errors", "batches", "records", "txn_log"]


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    out = tmp_path_factory.mktemp("outputs") / "transaction_faults"
    assert (
        main(["synth", "--scenario", "transaction_faults", "--out", str(out), "--seed", "7"]) == 0
    )
    return out


@pytest.fixture(scope="module")
def remote_dump(s3, dump):  # noqa: F811
    return s3.upload(dump, "dumps/transaction_faults")


@pytest.fixture(scope="module")
def local_audit(dump):
    """The one-process audit of the same dump (``replay.local``: seconds); local mode's Spark
    audit equals it scenario by scenario (tests/test_audit.py)."""
    from replay.local import audit_local

    return audit_local([str(dump)])


@pytest.fixture(scope="module")
def s3_audit(spark, s3, remote_dump, tmp_path_factory):  # noqa: F811
    cwd = tmp_path_factory.mktemp("cwd")
    before = os.getcwd()
    os.chdir(cwd)
    try:
        code = main(["audit", remote_dump, "--out", s3.uri("audit"), "--gate", *RUN])
    finally:
        os.chdir(before)
    return code, cwd


def _findings(rows) -> list[tuple]:
    cols = ("kind", "severity", "topic", "partition", "first_offset", "group_id", "message")
    return sorted(tuple("" if r[c] is None else str(r[c]) for c in cols) for r in rows)


def test_audit_on_s3_fails_the_gate_as_locally(spark, s3, s3_audit, local_audit):  # noqa: F811
    from collections import Counter

    from jobs.output import OutputDir, committed, read_tables

    code, cwd = s3_audit
    assert code == 1
    assert os.listdir(cwd) == []  # nothing on the local disk: no `s3:` directory
    keys = s3.keys("audit")
    summary = json.loads(s3.read("audit/summary.json"))
    assert summary["layout"] == 2 and summary["gate"]["success"] is False
    for table in ("findings", "transactions", "partitions", "coordinator_transactions",
                  "offset_timeline"):  # fmt: skip
        assert summary["rows"][table] == len(local_audit[table]), table
    assert summary["rows"]["findings"] > 0
    assert summary["findings"]["by_kind"] == dict(
        Counter(f["kind"] for f in local_audit["findings"])
    )
    blocking = {
        f["kind"] for f in local_audit["findings"] if f["severity"] in ("error", "critical")
    }
    assert summary["gate"]["failed"] == sorted(
        f"[findings] no {kind} finding of severity error or above" for kind in blocking
    )
    listed = {f["path"] for t in summary["tables"].values() for f in t["files"]}
    assert listed and listed <= set(keys)
    assert {"gate/result.json", "gate/data_docs/index.html"} <= set(keys)
    # the committed findings read back from the bucket (in Spark tasks, through pyarrow)
    out = OutputDir(s3.uri("audit"))
    rows = read_tables(spark, out, committed(out)[1])["findings"].collect()
    assert _findings(r.asDict() for r in rows) == _findings(local_audit["findings"])


def test_findings_export_and_explain_read_the_s3_output(s3, s3_audit, local_audit, capsys):  # noqa: F811
    """`logreplay findings` and `logreplay explain` on the bucket's output: the rows the
    one-process audit gives, each with its next step and fingerprint; the hanging transaction
    explained with its remediation and the partition's transactions around it."""
    capsys.readouterr()
    assert main(["findings", s3.uri("audit"), "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert _findings(rows) == _findings(local_audit["findings"])
    assert all(r["remediation"] and len(r["fingerprint"]) == 16 for r in rows)
    assert isinstance(rows[0]["evidence"], dict)
    assert main(["findings", s3.uri("audit"), "--format", "csv", "--to",
                 s3.uri("exports/findings.csv")]) == 0  # fmt: skip
    assert s3.read("exports/findings.csv").decode().startswith("cluster,kind,severity")
    hanging = next(r for r in rows if r["kind"] == "hanging_transaction")
    assert main(["explain", s3.uri("audit"), hanging["fingerprint"][:8]]) == 0
    text = capsys.readouterr().out
    assert "find-hanging" in text and "transactions around it" in text
    assert main(["explain", s3.uri("audit"), "ffffffffffffffff"]) == 2


def test_extract_a_finding_from_the_s3_output_and_audit_the_slice(s3, s3_audit, tmp_path, capsys):  # noqa: F811
    """`logreplay extract finding` on the bucket's output and dump, as the README shows it: the
    slice (written to the bucket, and locally) holds the manifest, is within the bound, and
    `logreplay audit` on it (Spark, as a user runs it) finds the hanging transaction again,
    same fingerprint; the payloads are tokens."""
    capsys.readouterr()
    assert main(["findings", s3.uri("audit"), "--kind", "hanging_transaction"]) == 0
    hanging = json.loads(capsys.readouterr().out.splitlines()[0])
    fid = hanging["fingerprint"]
    assert main(["extract", "finding", s3.uri("audit"), fid, "--to", s3.uri("slices/h")]) == 0
    manifest = json.loads(s3.read("slices/h/manifest.json"))
    assert manifest["reproduced"]["fingerprint"] and manifest["finding"]["fingerprint"] == fid
    assert manifest["bytes"] <= manifest["bound_bytes"]
    assert any(k.endswith(".log") for k in s3.keys("slices/h/"))
    local = tmp_path / "slice"
    assert main(["extract", "finding", s3.uri("audit"), fid[:10], "--to", str(local)]) == 0
    out = tmp_path / "slice-audit"
    assert main(["audit", str(local), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["findings", str(out), "--kind", "hanging_transaction"]) == 0
    again = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert fid in {r["fingerprint"] for r in again}
    logs = [p for p in local.rglob("*.log") if not p.parent.name.startswith("__")]
    assert logs and not any(b'"tag"' in p.read_bytes() for p in logs)


def test_audits_on_s3_build_on_the_previous_day_s(s3, remote_dump, s3_audit, capsys):  # noqa: F811
    """`--since auto` on the bucket: the next day's audit finds the day before beside its
    output (the DAG's `<out_root>/<ds>`), its findings are all known, its gate passes; and
    `--since` naming the first audit explicitly gives the same; every partition goes on from
    where the first day's replays ended."""
    day2 = ["--run-id", "d2", "--logical-date", "2026-11-22"]
    first = s3.uri("daily/2026-11-21")
    assert main(["audit", remote_dump, "--out", first, "--since", "auto", *RUN]) == 0
    capsys.readouterr()
    assert main(["audit", remote_dump, "--out", s3.uri("daily/2026-11-22"), "--since", "auto",
                 "--gate", *day2]) == 0  # fmt: skip
    summary = json.loads(s3.read("daily/2026-11-22/summary.json"))
    assert summary["since"] == first and summary["gate"]["success"] is True
    status = summary["findings"]["by_status"]
    assert status["new"] == 0 and status["still present"] == summary["findings"]["total"] > 0
    # where the first day's replays ended (its replay_states, on the bucket), found again in
    # the same dump (on the bucket too): every partition goes on from there, nothing past it
    points = summary["since_points"]
    assert points["points"] > 0 and points["went_on"] == points["points"]
    assert points["bytes_after"] == 0 and points["log_bytes"] > 0 and points["changes"] == {}
    assert points["points_without_replica"] == 0
    assert main(["audit", remote_dump, "--out", s3.uri("next"), "--since", s3.uri("audit"),
                 *day2]) == 0  # fmt: skip
    assert json.loads(s3.read("next/summary.json"))["findings"]["by_status"] == status


def test_gate_on_the_s3_output(s3, s3_audit):  # noqa: F811
    assert main(["gate", s3.uri("audit"), "--set", "gate.data_docs=false", *RUN]) == 1
    summary = json.loads(s3.read("audit/summary.json"))
    assert summary["gate"]["success"] is False and summary["layout"] == 2
    assert "gate/data_docs/index.html" not in s3.keys("audit")  # docs off: older ones removed
    lenient = ["--set", "gate.fail_at=never", "--set", "gate.data_docs=false"]
    assert main(["gate", s3.uri("audit"), *lenient, *RUN]) == 0
    assert json.loads(s3.read("audit/summary.json"))["gate"]["success"] is True


def test_decode_to_s3_equals_local(spark, s3, remote_dump, dump, tmp_path):  # noqa: F811
    local = tmp_path / "decoded"
    args = ["--tables", *DECODED, *RUN]
    assert main(["decode", str(dump), "--out", str(local), *args]) == 0
    assert main(["decode", remote_dump, "--out", s3.uri("decoded"), *args]) == 0
    remote = json.loads(s3.read("decoded/_manifest.json"))
    mine = json.loads((local / "_manifest.json").read_text())
    assert remote["rows"] == mine["rows"] and remote["rows"]["records"] > 0
    assert remote["bytes"] == mine["bytes"]
    # the same bytes in every file, under the same names
    for table in DECODED:
        for f in remote["tables"][table]["files"]:
            assert s3.read(f"decoded/{f['path']}") == (local / f["path"]).read_bytes()
    assert main(["gate", s3.uri("decoded"), "--set", "gate.data_docs=false"]) == main(
        ["gate", str(local), "--set", "gate.data_docs=false"]
    )


def test_a_rerun_on_s3_replaces_with_the_same_bytes(s3, remote_dump):  # noqa: F811
    args = ["decode", remote_dump, "--out", s3.uri("rerun"), "--tables", "batches", "records"]
    assert main([*args, "--run-id", "first"]) == 0
    first = {k: s3.read(f"rerun/{k}") for k in s3.keys("rerun")}
    assert main([*args, "--run-id", "second"]) == 0
    second = {k: s3.read(f"rerun/{k}") for k in s3.keys("rerun")}
    manifest = json.loads(second["_manifest.json"])
    assert manifest["run_id"] == "second"
    listed = {f["path"] for t in manifest["tables"].values() for f in t["files"]}
    assert set(second) == listed | {"_manifest.json"}  # the first run's files are gone
    assert main([*args, "--run-id", "second"]) == 0
    assert {k: s3.read(f"rerun/{k}") for k in s3.keys("rerun")} == second
    assert first.keys() != second.keys()


def test_a_failed_run_leaves_the_committed_output_readable(spark, s3, remote_dump, monkeypatch):  # noqa: F811
    """A run that fails after writing its files and before its commit: readers still see the
    previous commit whole, and none of the failed run's files."""
    import jobs.output
    from jobs.output import OutputDir, committed, read_tables

    args = ["decode", remote_dump, "--out", s3.uri("failed"), "--tables", "batches", "records"]
    assert main([*args, "--run-id", "good"]) == 0
    good = json.loads(s3.read("failed/_manifest.json"))

    def crash(*_args, **_kwargs):
        raise RuntimeError("lost before the commit")

    monkeypatch.setattr(jobs.output, "commit", crash)
    assert main([*args, "--run-id", "bad"]) == 3
    monkeypatch.undo()
    keys = s3.keys("failed")
    listed = {f["path"] for t in good["tables"].values() for f in t["files"]}
    assert set(keys) - listed - {"_manifest.json"}  # the failed run's files are there...
    out = OutputDir(s3.uri("failed"))
    _name, doc = committed(out)
    assert doc == good  # ...but the commit is the good run's
    frames = read_tables(spark, out, doc)
    assert {t: df.count() for t, df in frames.items()} == good["rows"]


def test_cross_log_runs_on_s3(spark, s3, remote_dump, local_audit, monkeypatch):  # noqa: F811
    """The job's cross-log judgement spread over buckets (the dump's stages as they run on a
    large one: replay.plan.SINGLE_ROWS) writes its sorted runs in the bucket's scratch area,
    merges them from there (ranged reads of each run's batches) and finds what the
    one-process audit finds; the transactions carry the transactional ids the runs tasks
    wrote, and their copy starts before the judgement has ended (it waits for the runs)."""
    import threading

    import jobs.copies as copies
    import jobs.crosslog_scratch as crosslog_scratch
    import replay.plan as plan
    from jobs.output import OutputDir, committed, read_tables

    runs: list[str] = []
    judged, copy_tables = crosslog_scratch.judge_scratch, copies.copy_tables
    copying = threading.Event()  # the transactions' copy has started
    before: list[bool] = []  # ...before the judgement went on from the runs

    def spied(*args, **kwargs):
        ready = args[7]

        def ids_ready(entry):
            ready(entry)
            before.append(copying.wait(60))

        entries = judged(*args[:7], ids_ready, **kwargs)
        runs.extend(k for k in s3.keys("spread") if "/cross-runs/" in k)  # before the cleanup
        return entries

    def copied(spark, scratch, wanted, *args, **kwargs):
        if "transactions" in wanted:
            copying.set()
        return copy_tables(spark, scratch, wanted, *args, **kwargs)

    monkeypatch.setattr(crosslog_scratch, "judge_scratch", spied)
    monkeypatch.setattr(copies, "copy_tables", copied)
    monkeypatch.setattr(plan, "SINGLE_ROWS", -1)
    assert main(["audit", remote_dump, "--out", s3.uri("spread"), *RUN]) == 0
    assert runs and all(k.endswith(".arrow") for k in runs)
    assert before == [True]
    assert not [k for k in s3.keys("spread") if "_scratch" in k]
    out = OutputDir(s3.uri("spread"))
    tables = read_tables(spark, out, committed(out)[1])
    assert _findings(r.asDict() for r in tables["findings"].collect()) == _findings(
        local_audit["findings"]
    )
    ids = {r["producer_id"]: r["transactional_id"] for r in local_audit["coordinator_transactions"]}
    got = {(r["producer_id"], r["transactional_id"]) for r in tables["transactions"].collect()}
    assert got == {(p, ids.get(p)) for p, _ in got}
    assert any(t for _, t in got)
