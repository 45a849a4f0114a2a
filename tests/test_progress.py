"""Progress of long jobs when stderr is not a terminal (Airflow's logs): periodic plain lines
with the phase, the input's size and Spark's stages and tasks, one line per finished phase and
the timings at the end; `--quiet` prints none of them."""

from __future__ import annotations

import re

import pytest

from jobs.cli import main

pytestmark = pytest.mark.spark

LINE = re.compile(r"^logreplay (?P<job>\w+) \[\s*(?P<t>[\d.]+) s\] (?P<text>.*)$")


def _lines(err: str, job: str) -> list[str]:
    return [m["text"] for m in map(LINE.match, err.splitlines()) if m and m["job"] == job]


def test_decode_logs_phases_stages_and_tasks_when_not_a_terminal(
    spark, sample_dump, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("LOGREPLAY_PROGRESS_SECONDS", "0.5")
    dump, _facts = sample_dump
    out = tmp_path / "decoded"
    assert main(["decode", str(dump), "--out", str(out), "--tables", "segments", "batches"]) == 0
    lines = _lines(capsys.readouterr().err, "decode")
    # one pass decodes every table (jobs/scan.py): one phase names them all
    assert "phase decoding segments, batches" in lines
    size = r"[\d.]+ [KMG]?B"
    counts = rf"(input {size}|decoded {size} of {size}); stages \d+/\d+, tasks \d+/\d+"
    # the finished phase's line says what it did, however short the phase was: every byte of
    # the input decoded (the scan tasks' accumulator), Spark's stages and tasks
    ended = [t for t in lines if t.startswith("phase decoding segments, batches done in")]
    assert len(ended) == 1 and re.search(r"done in [\d.]+ s: " + counts, ended[0]), lines
    decoded = re.search(rf"decoded ({size}) of ({size})", ended[0])
    assert decoded and decoded[1] == decoded[2], ended[0]
    # periodic lines (one per LOGREPLAY_PROGRESS_SECONDS while a phase runs) carry the same
    periodic = [t for t in lines if not t.startswith(("phase ", "done in"))]
    phase_seconds = float(re.search(r"done in ([\d.]+) s", ended[0])[1])
    if phase_seconds >= 1.5:  # a fast machine may finish the decode before the first period
        assert any(re.search(counts, t) for t in periodic), lines
    assert all(re.match(r"decoding segments, batches: (input|decoded) ", t) for t in periodic)
    done = [t for t in lines if t.startswith("done in")]
    assert len(done) == 1 and "starting Spark" in done[0] and "decoding segments" in done[0]
    # tasks done never exceed tasks seen
    for t in periodic:
        m = re.search(r"tasks (\d+)/(\d+)", t)
        assert m is None or int(m[1]) <= int(m[2])


def test_quiet_prints_no_progress(spark, sample_dump, tmp_path, capsys):
    dump, _facts = sample_dump
    out = tmp_path / "decoded"
    assert main(["decode", str(dump), "--out", str(out), "--tables", "segments", "--quiet"]) == 0
    assert _lines(capsys.readouterr().err, "decode") == []


def test_synth_logs_its_phases(tmp_path, capsys):
    assert main(["synth", "--scenario", "demo", "--out", str(tmp_path / "d")]) == 0
    lines = _lines(capsys.readouterr().err, "synth")
    assert lines[0] == "phase simulating demo" and lines[-1].startswith("done in")


def test_the_progress_thread_never_imports_pyspark():
    """The reporter polls Spark from its own thread while the job's thread imports pyspark;
    two threads initialising pyspark at once failed a gate under spark-submit with "cannot
    import name 'SQLContext' from partially initialized module 'pyspark.sql'"."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from jobs.progress import SparkStatus\n"
        "assert SparkStatus().poll() is None\n"
        "assert not [m for m in sys.modules if m.startswith('pyspark')], 'pyspark imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_bytes_decoded_are_shown_against_the_input_and_drive_the_bar():
    """The scan's accumulator (jobs.scan._byte_counter) counts a retried task's bytes twice:
    the display never shows more than the input."""
    import io

    from jobs.progress import Reporter

    decoded = [250_000]
    plain = Reporter("decode", io.StringIO(), interactive=False, every=3600)
    plain.total_bytes(1_000_000)
    plain.bytes_decoded(lambda: decoded[0])
    assert plain._detail() == "decoded 250.0 KB of 1.0 MB"
    decoded[0] = 1_400_000
    assert plain._detail() == "decoded 1.0 MB of 1.0 MB"
    plain.close()

    live = Reporter("audit", io.StringIO(), interactive=True, every=3600)
    live.total_bytes(1_000_000)
    live.bytes_decoded(lambda: 400_000)
    task = live.live.tasks[0]
    assert (task.completed, task.total) == (400_000, 1_000_000)
    live.close()


def test_a_job_that_ends_between_two_polls_is_counted_and_earlier_jobs_are_not(spark):
    """A small dump's decode is one job shorter than the poll period: its stages come from
    the job's record; the jobs a user's session ran before the reporter are not counted."""
    import time

    from jobs.progress import SparkStatus

    tracker = spark.sparkContext.statusTracker()
    known = set(tracker.getJobIdsForGroup(None))
    spark.range(3).count()  # the session's earlier work
    deadline = time.monotonic() + 30  # Spark's listener records jobs asynchronously
    while set(tracker.getJobIdsForGroup(None)) == known or tracker.getActiveJobsIds():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    status = SparkStatus(spark.sparkContext)
    assert status.poll() == (0, 0, 0, 0)
    spark.range(0, 10, 1, 2).count()  # runs and ends before the next poll
    counts = status.poll()
    while counts[1] == 0 or counts[0] < counts[1] or counts[2] < counts[3]:
        assert time.monotonic() < deadline, counts
        time.sleep(0.1)
        counts = status.poll()
    stages_done, stages, tasks_done, tasks = counts
    assert stages_done == stages >= 1 and tasks_done == tasks >= 2


class _Polls:
    """A SparkStatus that counts the polls made of it."""

    def __init__(self) -> None:
        self.polls = 0

    def poll(self):
        self.polls += 1
        return (1, 1, 2, 2)


@pytest.mark.parametrize("interactive", [False, True])
def test_spark_is_polled_for_a_live_display_but_for_lines_only_when_one_is_printed(interactive):
    """Each poll is calls into the driver JVM that hold the GIL the job's planning waits for:
    a log (Airflow's, a pipe) gets Spark's counts when it prints a line, at a phase's end or
    once a period, not every half second as a live display does."""
    import io
    import time

    from jobs.progress import Reporter

    out = io.StringIO()
    reporter = Reporter("audit", out, interactive=interactive, every=3600)
    reporter.spark = polls = _Polls()
    reporter.phase("scan")
    time.sleep(1.3)
    assert (polls.polls >= 2) if interactive else polls.polls == 0
    reporter.phase("tables")
    if not interactive:  # the scan's line says what it did: its counts polled for it, once
        assert polls.polls == 1
    reporter.close()
    if not interactive:
        assert "phase scan done in" in out.getvalue() and "stages 1/1, tasks 2/2" in out.getvalue()
