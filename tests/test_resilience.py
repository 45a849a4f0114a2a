"""Spark-level resilience (issue 17 item 5): one file whose decoding fails inside the executor
does not lose the run.

Two failures are exercised, chosen by decoders.seams' test-only environment variables, which the
job's Python workers inherit: ``memory`` raises MemoryError while decoding the file (the task
catches it per file: an error row, the rest of the task goes on) and ``crash`` ends the Python
worker (nothing in the task can catch that: Spark fails the task and the job; jobs.resilience
finds the file by bisection and reruns without it). Either way the run finishes with a
``decode_failed`` error row naming the file and the reason, and a gate fails.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import decoders
from decoders import seams
from decoders.errors import DECODE_FAILED
from jobs.resilience import failure_reason, is_task_failure

REPO = pathlib.Path(__file__).resolve().parents[1]

CRASH_TEXT = (
    "An error occurred while calling o123.collectToPython.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 7.0 "
    "failed 1 times, most recent failure: Lost task 0.0 in stage 7.0 (TID 9) (127.0.0.1 executor "
    "driver): org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator...\n"
)


def test_task_failures_are_recognised_and_explained_in_one_line():
    assert is_task_failure(RuntimeError(CRASH_TEXT))
    assert failure_reason(RuntimeError(CRASH_TEXT)) == "Python worker exited unexpectedly (crashed)"
    lost = "Job aborted due to stage failure: ExecutorLostFailure (executor 1 exited caused by one"
    assert failure_reason(RuntimeError(lost)).startswith("ExecutorLostFailure (executor 1 exited")
    assert not is_task_failure(ValueError("unknown table 'x'"))  # a usage error is not retried


def _first_user_log(root: pathlib.Path) -> decoders.DumpFile:
    logs = [
        f
        for f in decoders.discover([str(root)])
        if f.info.kind == "log" and not f.info.topic.startswith("__") and f.size > 0
    ]
    return logs[0]


def test_an_exception_while_decoding_one_file_is_an_error_row_and_the_rest_decodes(
    sample_dump, monkeypatch
):
    root, _ = sample_dump
    clean = decoders.read_dump([str(root)], ["batches", "segments", "errors"])
    victim = _first_user_log(root)
    monkeypatch.setenv(seams.FAIL_FILE, victim.info.file)
    monkeypatch.setenv(seams.FAIL_MODE, "memory")
    got = decoders.read_dump([str(root)], ["batches", "segments", "errors"])

    errors = got["errors"].to_pylist()
    failed = [e for e in errors if e["kind"] == DECODE_FAILED]
    assert [e["file"] for e in failed] == [victim.info.file]
    assert "MemoryError" in failed[0]["reason"] and failed[0]["length"] == victim.size
    # every other file decoded as before; the victim's bytes are accounted corrupt, not lost
    others = [b for b in clean["batches"].to_pylist() if b["file"] != victim.info.file]
    assert got["batches"].to_pylist() == others
    seg = {s["file"]: s for s in got["segments"].to_pylist()}[victim.info.file]
    assert seg["bytes_corrupt"] == seg["size"] == victim.size and seg["error_count"] == 1
    assert got["segments"].num_rows == clean["segments"].num_rows


def test_a_contained_exception_still_fails_the_fuzz_checks(monkeypatch):
    """Containment must not hide bugs from the fuzz tier: a decode_failed row is a failure
    there, with the exception's type and place as its signature."""
    from tests.fuzz import checks
    from tests.fuzz.mutators import Case

    def bug(*_a, **_k):
        raise IndexError("a bug in the decoder")

    monkeypatch.setattr(decoders, "_dispatch", bug)
    with pytest.raises(checks.Failure) as failed:
        checks.check(Case(bytes(100), "log", "t", "test"))
    assert failed.value.signature == "IndexError@test_resilience.py:" + str(
        bug.__code__.co_firstlineno + 1
    )


def test_an_unset_fault_does_nothing(sample_dump, monkeypatch):
    """Without the variables, or naming another file, decoding is what it is without the
    hook; the same call does fail once the variable names the file."""
    root, _ = sample_dump
    victim = _first_user_log(root)
    tables = ["batches", "records", "segments", "errors"]
    monkeypatch.delenv(seams.FAIL_FILE, raising=False)
    monkeypatch.delenv(seams.FAIL_MODE, raising=False)
    assert seams.reached(seams.DECODING, victim.info.file) is None
    unset = decoders.read_dump([str(root)], tables)
    assert DECODE_FAILED not in unset["errors"].column("kind").to_pylist()
    assert unset["records"].num_rows > 0

    monkeypatch.setenv(seams.FAIL_MODE, "memory")
    monkeypatch.setenv(seams.FAIL_FILE, "other-0/00000000000000000000.log")
    assert seams.reached(seams.DECODING, victim.info.file) is None
    other = decoders.read_dump([str(root)], tables)
    for t in tables:
        assert other[t].equals(unset[t]), t

    monkeypatch.setenv(seams.FAIL_FILE, victim.info.file)
    with pytest.raises(MemoryError, match="test fault injected"):
        seams.reached(seams.DECODING, victim.info.file)


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def scenario(sim_all, tmp_path_factory) -> pathlib.Path:
    """clean_transactions: the gate passes it (tests/test_gate.py), so a failing gate here comes
    from the left-out file alone."""
    root = tmp_path_factory.mktemp("resilience") / "clean_transactions"
    shutil.copytree(sim_all / "clean_transactions", root)
    return root


@pytest.mark.spark
def test_a_worker_crash_on_one_file_leaves_it_out_and_the_gate_fails(scenario, tmp_path):
    victim = _first_user_log(scenario)
    out = tmp_path / "audit"
    env = {seams.FAIL_FILE: victim.info.file, seams.FAIL_MODE: "crash"}
    done = _run(["audit", str(scenario), "--out", str(out), "--gate"], env)
    assert done.returncode == 1, done.stderr[-3000:]  # the gate fails, the run finished
    assert f"leaving out {victim.path}" in done.stderr

    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["files_left_out"]) == [victim.path]
    assert "Python worker exited unexpectedly" in summary["files_left_out"][victim.path]
    assert summary["gate"]["success"] is False
    errors = pq.read_table(out / "errors").to_pylist()
    assert [(e["file"], e["kind"]) for e in errors] == [(victim.info.file, DECODE_FAILED)]
    findings = pq.read_table(out / "findings").to_pylist()
    bad = [f for f in findings if f["severity"] in ("error", "critical")]
    assert [(f["kind"], f["severity"]) for f in bad] == [(DECODE_FAILED, "error")]
    assert victim.info.file in bad[0]["message"]
    segments = {s["file"]: s for s in pq.read_table(out / "segments").to_pylist()}
    assert segments[victim.info.file]["bytes_corrupt"] == victim.size
    # the other files were decoded: the victim's partition's replicas and the rest of the dump
    assert summary["rows"]["transactions"] > 0


@pytest.mark.spark
def test_decode_finishes_without_the_file_that_crashes_its_worker(scenario, tmp_path):
    victim = _first_user_log(scenario)
    out = tmp_path / "decoded"
    env = {seams.FAIL_FILE: victim.info.file, seams.FAIL_MODE: "crash"}
    args = ["decode", str(scenario), "--out", str(out), "--tables", "batches", "segments", "errors"]
    done = _run(args, env)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((out / "_manifest.json").read_text())
    assert list(manifest["files_left_out"]) == [victim.path]
    errors = pq.read_table(out / "errors").to_pylist()
    assert [(e["file"], e["kind"]) for e in errors] == [(victim.info.file, DECODE_FAILED)]
    batches = pq.read_table(out / "batches")
    files = set(batches.column("file").to_pylist())
    assert victim.info.file not in files and len(files) > 1
    assert manifest["bytes"]["corrupt"] == victim.size
