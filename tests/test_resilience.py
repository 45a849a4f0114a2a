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
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

import decoders
from decoders import seams
from decoders.errors import DECODE_FAILED
from jobs.resilience import classify, failure_reason, is_task_failure

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


class _Java:
    """A Java exception as py4j shows it: its class, message, Spark error condition, cause."""

    def __init__(self, name, message="", condition=None, cause=None):
        self.name, self.message, self.condition, self.cause = name, message, condition, cause

    def getClass(self):  # noqa: N802 (Java's names)
        return SimpleNamespace(getName=lambda: self.name)

    def getMessage(self):  # noqa: N802
        return self.message

    def getCondition(self):  # noqa: N802
        if not self.name.startswith("org.apache.spark."):  # not a SparkThrowable: no method
            from py4j.protocol import Py4JError

            raise Py4JError("Method getCondition([]) does not exist")
        return self.condition

    def getCause(self):  # noqa: N802
        return self.cause


class _JobFailed(Exception):
    """py4j's Py4JJavaError as the classification reads it: ``java_exception``, and a text
    that quotes the outermost Java exception as py4j's does."""

    def __init__(self, java):
        super().__init__(f"An error occurred while calling o1.collectToPython.\n: {java.name}: "
                         f"{java.message}")  # fmt: skip
        self.java_exception = java


SPARK = "org.apache.spark.SparkException"
ABORTED = "Job aborted due to stage failure: Task 0 in stage 7.0 failed 1 times"


def test_a_task_failure_is_recognised_from_the_java_classes():
    worker = _Java(SPARK, "Python worker exited unexpectedly (crashed). Consider setting it",
                   cause=_Java("java.io.EOFException"))  # fmt: skip
    crash = classify(_JobFailed(_Java(SPARK, ABORTED, cause=worker)))
    assert crash == type(crash)(
        True, "Python worker exited unexpectedly (crashed). Consider setting it", "java"
    )
    oom = _Java(SPARK, ABORTED, cause=_Java("java.lang.OutOfMemoryError", "Java heap space"))
    assert classify(_JobFailed(oom)).reason == "java.lang.OutOfMemoryError: Java heap space"
    assert classify(_JobFailed(oom)).task
    write = _Java(SPARK, ABORTED, cause=_Java(SPARK, "Task failed while writing rows to /out",
                  "TASK_WRITE_FAILED", cause=_Java("java.io.IOException", "No space left")))  # fmt: skip
    assert classify(_JobFailed(write)) == type(crash)(True, "No space left", "java")


def test_what_the_structure_rules_out_is_not_read_from_the_message():
    """A driver out of memory, a Java error outside any job, a cancelled job, a task's own
    Python exception: not task failures, whatever their text says."""
    from pyspark.errors import PythonException

    driver_oom = _Java("java.lang.OutOfMemoryError", "Java heap space (Lost task in text)")
    assert classify(_JobFailed(driver_oom)) == type(classify(_JobFailed(driver_oom)))(
        False, "java.lang.OutOfMemoryError: Java heap space (Lost task in text)", "java"
    )
    not_spark = _Java("java.lang.IllegalArgumentException", "stage failure in a name")
    assert not is_task_failure(_JobFailed(not_spark))
    cancelled = _Java(SPARK, "Job 3 cancelled: stage failure", "SPARK_JOB_CANCELLED")
    assert classify(_JobFailed(cancelled)).source == "condition"
    assert not is_task_failure(_JobFailed(cancelled))
    python = PythonException("An exception was thrown from the Python worker: Lost task")
    assert classify(python).source == "class" and not is_task_failure(python)


def test_what_the_structure_leaves_open_is_read_from_the_message():
    """A lost executor aborts the job with no cause and no error condition (Spark 4.3)."""
    lost = _Java(SPARK, "Job aborted due to stage failure: ExecutorLostFailure (executor 1 lost)")
    got = classify(_JobFailed(lost))
    assert got == type(got)(True, "ExecutorLostFailure (executor 1 lost)", "message")
    text = f"{ABORTED}, most recent failure: ExecutorLostFailure (executor 1 exited)"
    got = classify(RuntimeError(text))
    assert got.task and got.source == "message"
    assert got.reason == "ExecutorLostFailure (executor 1 exited)"


@pytest.mark.spark
def test_a_crashed_worker_is_recognised_from_spark_s_structure(spark):
    """Against the running Spark: a Python worker that dies fails the job with a SparkException
    caused by the EOFException of the worker's socket. A Spark that changes that fails here,
    rather than leaving the classification to its words."""

    def crash(batches):
        import os

        for _ in batches:
            os._exit(seams.CRASH_EXIT_CODE)
        yield from ()

    with pytest.raises(Exception) as failed:  # noqa: PT011 (whatever class Spark raises)
        spark.range(0, 2, 1, 1).mapInArrow(crash, "id long").collect()
    got = classify(failed.value)
    assert got.task and got.source == "java", got
    assert got.reason.startswith("Python worker exited unexpectedly"), got


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
