"""Kill tests: `decode` and `audit` killed with SIGKILL at named points of a run (while tasks
write, while tables are staged, while the run is published), on a local directory and on S3.

Each killed run is a real job process that reaches its point through the test-only hook
(`LOGREPLAY_TEST_KILL_AT`, see decoders.seams), not a timer. After every kill the
directory's commit record must be whole, every file it lists whole with the rows it says, and
the tables readable the way the gate reads them; a rerun of the killed run id then publishes a
complete result. Every killed run is an attempt of the same run id, as Airflow's retries are.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from s3server import s3  # noqa: F401 (the session's S3 server)

from jobs.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DECODE_TABLES = ["--tables", "segments", "errors", "batches"]
QUIET = ["--set", "gate.data_docs=false"]
# (job, point) in the order a run reaches them; the commit points come last so that each is
# reached (the cleanup point needs files of a replaced commit to remove)
POINTS = [
    ("decode", "decode:decoding"),  # a task has a Parquet file half written
    ("decode", "decode:staged-table"),  # one table written, the others not
    ("decode", "decode:staged"),  # every table written, no commit yet
    ("audit", "audit:writing"),  # a task has a Parquet file half written
    ("audit", "audit:staged-table"),
    ("audit", "gate:publishing"),  # the gate's files half uploaded
    ("audit", "audit:staged"),  # tables and gate written, no commit yet
    ("audit", "commit:manifest"),  # the commit record about to be written
    ("decode", "commit:done"),  # committed, the replaced run's files not yet removed
    ("decode", "commit:cleanup"),  # some of the replaced run's files removed
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("kill") / "dump"
    assert (
        main(["synth", "--scenario", "transaction_faults", "--out", str(out), "--seed", "3"]) == 0
    )
    return out


def _args(job: str, dump: str, out: str, run_id: str) -> list[str]:
    extra = DECODE_TABLES if job == "decode" else ["--gate", *QUIET]
    return [job, dump, "--out", out, "--run-id", run_id, *extra]


def _killed(args: list[str], point: str, logs) -> None:
    """Run the job until the hook kills it at ``point``; then end every process it started
    (its JVM and Python workers, in its own process group)."""
    env = {**os.environ, "LOGREPLAY_TEST_KILL_AT": point, "PYTHONPATH": REPO}
    env.pop("LOGREPLAY_TEST_KILL_PID", None)
    log = logs / f"{point.replace(':', '-')}.log"
    with open(log, "wb") as sink:  # a file, not a pipe: the JVM outlives the driver briefly
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", *args],
            cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            proc.wait(timeout=900)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    tail = log.read_text(errors="replace")[-3000:]
    assert proc.returncode == -signal.SIGKILL, (point, proc.returncode, tail)


def _check_committed(spark, uri: str, runs: set[str]) -> dict:
    """The commit record is whole, names one of ``runs``, and every file it lists is whole and
    holds the rows it says; the tables read as the gate reads them."""
    from jobs.output import OutputDir, committed, read_tables

    out = OutputDir(uri)
    _name, doc = committed(out)
    assert doc is not None and doc["layout"] == 2 and doc["run_id"] in runs
    for entry in doc["tables"].values():
        for f in entry["files"]:
            with out.fs.open_input_file(out.path(f["path"])) as handle:
                assert pq.ParquetFile(handle).metadata.num_rows == f["rows"], f["path"]
    frames = read_tables(spark, out, doc)
    assert {t: df.count() for t, df in frames.items()} == doc["rows"]
    return doc


# On S3 the points where an object store differs from a rename: a half-written upload, the
# gate's files half uploaded, the commit record about to be put, the replaced files half removed
# (every point runs locally; each killed run is a job process with its own Spark start-up).
S3_POINTS = {"audit:writing", "gate:publishing", "commit:manifest", "commit:cleanup"}


@pytest.mark.parametrize("where", ["local", "s3"])
def test_killed_runs_never_expose_a_partial_output(spark, s3, tiny, tmp_path, where):  # noqa: F811
    points = POINTS if where == "local" else [p for p in POINTS if p[1] in S3_POINTS]
    outs = {
        job: str(tmp_path / job) if where == "local" else s3.uri(f"kill/{job}")
        for job in ("decode", "audit")
    }
    base = {}
    for job, out in outs.items():  # the published output the kills must not damage
        code = main(_args(job, str(tiny), out, "base"))
        assert code == (1 if job == "audit" else 0)
        base[job] = _check_committed(spark, out, {"base"})
    for job, point in points:
        _killed(_args(job, str(tiny), outs[job], "retry"), point, tmp_path)
        doc = _check_committed(spark, outs[job], {"base", "retry"})
        assert doc["rows"] == base[job]["rows"]
        spark.catalog.clearCache()
    # the gate reads what the kills left: the audit's verdict stands
    assert main(["gate", outs["audit"], *QUIET]) == 1
    assert main(["gate", outs["decode"], *QUIET]) == 0
    for job, out in outs.items():  # the retry that is not killed publishes the whole run
        main(_args(job, str(tiny), out, "retry"))
        doc = _check_committed(spark, out, {"retry"})
        assert doc["rows"] == base[job]["rows"]
        listed = {f["path"] for t in doc["tables"].values() for f in t["files"]}
        from jobs.output import OutputDir

        debris = {
            rel
            for t in doc["tables"]
            for rel, _ in OutputDir(out).files_under(t)
            if rel not in listed and doc["run_key"] in rel
        }
        assert not debris  # the killed attempts' files are gone
    summary = _check_committed(spark, outs["audit"], {"retry"})
    assert summary["gate"]["success"] is False and json.dumps(summary)
