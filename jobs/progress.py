"""Progress of a long job: phases with their timings, the input's size, and Spark's stages and
tasks as its status tracker reports them.

On an interactive terminal a `rich` live display; otherwise (Airflow's logs, a pipe) a plain
line every ``LOGREPLAY_PROGRESS_SECONDS`` seconds (default 15) and one per finished phase;
``--quiet`` turns both off. A job reports through the module functions (:func:`phase`,
:func:`total_bytes`, :func:`bytes_decoded`), which do nothing when no progress is running, so the jobs' code reads
the same under `spark-submit` and in tests. Spark is polled from a daemon thread through
``SparkContext.statusTracker()`` (a Spark Connect client has none: phases only), of the session
the job starts (jobs.session hands it over: :func:`watch`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

_current: Reporter | None = None


def add_quiet(p) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress display or progress lines")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


class SparkStatus:
    """Stages and tasks of the jobs Spark ran since the reporter started, in the SparkContext
    it is given (at once, or later through :meth:`attach`). Handed over rather than looked up:
    PySpark's only way to find a running context from another thread without creating one
    imports pyspark there, and this runs in the reporter's thread while the job's thread may be
    importing it (two threads initialising the same package race into "partially initialized
    module" errors)."""

    def __init__(self, context: Any = None) -> None:
        self.seen: dict[int, tuple[int, int, int]] = {}  # stage -> (done, total, active)
        self.finished: set[int] = set()  # jobs whose stages are recorded for good
        # jobs the session ran before this reporter (a user's or a test's session): not ours
        self.before: set[int] = set()
        self.context: Any = None
        if context is not None:
            self.attach(context)

    def attach(self, context: Any) -> None:
        """Follow ``context``'s jobs from now on."""
        with contextlib.suppress(Exception):  # a stopping context: count every job as ours
            self.before = set(context.statusTracker().getJobIdsForGroup(None))
        self.context = context

    def poll(self) -> tuple[int, int, int, int] | None:
        """(stages done, stages seen, tasks done, tasks seen), or None without a context."""
        sc = self.context
        if sc is None:
            return None
        tracker = sc.statusTracker()
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None:
                self.seen[sid] = (info.numCompletedTasks, info.numTasks, info.numActiveTasks)
        # jobs that began and ended between two polls (a small dump's whole decode): their
        # stages from the job's record, once
        for jid in set(tracker.getJobIdsForGroup(None)) - self.before - self.finished:
            job = tracker.getJobInfo(jid)
            if job is None:
                continue
            ended = str(job.status) in ("SUCCEEDED", "FAILED")
            for sid in job.stageIds:
                info = tracker.getStageInfo(sid)
                if info is None:
                    continue
                if ended and info.numCompletedTasks == 0:  # skipped: its output was reused
                    self.seen.pop(sid, None)
                    continue
                self.seen[sid] = (info.numCompletedTasks, info.numTasks, info.numActiveTasks)
            if ended:
                self.finished.add(jid)
        active = set(tracker.getActiveStageIds())
        for sid, (done, total, _a) in list(self.seen.items()):
            if sid not in active and done < total:
                info = tracker.getStageInfo(sid)
                if info is not None:
                    self.seen[sid] = (info.numCompletedTasks, info.numTasks, 0)
        stages_done = sum(1 for s, (d, t, _) in self.seen.items() if s not in active or d >= t)
        tasks_done = sum(d for d, _t, _a in self.seen.values())
        tasks = sum(t for _d, t, _a in self.seen.values())
        return stages_done, len(self.seen), tasks_done, tasks


class Reporter:
    """The running job's progress: phases, timings and Spark's counts, shown as it goes."""

    def __init__(self, job: str, out: TextIO, interactive: bool, every: float) -> None:
        self.job, self.out, self.interactive, self.every = job, out, interactive, every
        self.started = time.monotonic()
        self.phases: list[tuple[str, float]] = []
        self.current: tuple[str, float] | None = None
        self.bytes: int | None = None
        self.decoded = None  # () -> bytes the scan's finished tasks decoded (jobs.scan)
        self.spark = SparkStatus()
        self.counts: tuple[int, int, int, int] | None = None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.live = None
        self.results: list[str] = []  # the job's result lines, printed after the progress
        if interactive:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.live = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=Console(file=out),
                transient=False,
            )
            self.task = self.live.add_task(job, total=None, detail="starting")
            self.live.start()
        self.thread = threading.Thread(target=self._run, name="logreplay-progress", daemon=True)
        self.thread.start()

    # -- what jobs call ---------------------------------------------------------------------
    def phase(self, name: str) -> None:
        with self.lock:
            self._end_phase()
            self.current = (name, time.monotonic())
        if not self.interactive:
            self._line(f"phase {name}")
        self._refresh()

    def total_bytes(self, n: int) -> None:
        self.bytes = n
        self._refresh()

    def bytes_decoded(self, count) -> None:
        self.decoded = count
        self._refresh()

    def _decoded(self) -> int | None:
        if self.decoded is None:
            return None
        with contextlib.suppress(Exception):
            done = int(self.decoded())
            # a retried task adds its bytes again: never more than the input
            return min(done, self.bytes) if self.bytes is not None else done
        return None

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        with self.lock:
            self._end_phase()
        with contextlib.suppress(Exception):
            self.counts = self.spark.poll() or self.counts
        self._refresh()
        if self.live is not None:
            self.live.stop()
        timings = ", ".join(f"{n} {s:.1f} s" for n, s in self.phases)
        self._line(f"done in {time.monotonic() - self.started:.1f} s" +
                   (f" ({timings})" if timings else ""))  # fmt: skip

    # -- inside -----------------------------------------------------------------------------
    def _end_phase(self) -> None:
        if self.current is not None:
            name, since = self.current
            self.phases.append((name, time.monotonic() - since))
            if not self.interactive:
                # a phase shorter than the period still says what it did (Spark's counts so far)
                with contextlib.suppress(Exception):
                    self.counts = self.spark.poll() or self.counts
                detail = self._detail()
                self._line(f"phase {name} done in {self.phases[-1][1]:.1f} s" +
                           (f": {detail}" if detail else ""))  # fmt: skip
            self.current = None

    def _detail(self) -> str:
        parts = []
        decoded = self._decoded()
        if self.bytes is not None and decoded is not None:
            parts.append(f"decoded {_size(decoded)} of {_size(self.bytes)}")
        elif self.bytes is not None:
            parts.append(f"input {_size(self.bytes)}")
        if self.counts is not None and self.counts[1]:  # Spark ran stages for this job
            sd, st, td, tt = self.counts
            parts.append(f"stages {sd}/{st}, tasks {td}/{tt}")
        return "; ".join(parts)

    def _refresh(self) -> None:
        if self.live is None:
            return
        name = self.current[0] if self.current else self.job
        c = self.counts
        decoded = self._decoded()
        if decoded is not None and self.bytes:  # the bar follows the bytes while decoding
            done, total = decoded, self.bytes
        else:
            done, total = (c[2] if c else 0), (c[3] if c and c[3] else None)
        self.live.update(
            self.task, description=f"{self.job}: {name}", detail=self._detail(),
            completed=done, total=total,
        )  # fmt: skip

    def _line(self, text: str) -> None:
        if self.interactive and self.live is not None and self.live.live.is_started:
            self.live.console.print(f"{self.job}: {text}")
            return
        elapsed = time.monotonic() - self.started
        print(f"logreplay {self.job} [{elapsed:7.1f} s] {text}", file=self.out, flush=True)

    def _run(self) -> None:
        # a live display follows Spark's counts every half second; lines (a file, a pipe, a
        # scheduler's log) need them only when one is printed. A poll is a call into the
        # driver JVM per job and stage it has not seen end (~100 for the demo's audit), each
        # holding the GIL the job's own planning waits for.
        while not self.stop.wait(0.5 if self.interactive else self.every):
            with contextlib.suppress(Exception):  # a stopping context: keep the last counts
                self.counts = self.spark.poll() or self.counts
            self._refresh()
            if not self.interactive:
                name = self.current[0] if self.current else "running"
                detail = self._detail()
                self._line(f"{name}" + (f": {detail}" if detail else ""))


@contextlib.contextmanager
def running(job: str, quiet: bool, out: TextIO | None = None) -> Iterator[Reporter | None]:
    """Progress for the length of a job (none when quiet)."""
    global _current
    if quiet:
        yield None
        return
    stream = out or sys.stderr
    interactive = stream.isatty() and os.environ.get("TERM") != "dumb"
    every = float(os.environ.get("LOGREPLAY_PROGRESS_SECONDS", "15"))
    reporter = Reporter(job, stream, interactive, every)
    previous, _current = _current, reporter
    try:
        yield reporter
    finally:
        _current = previous
        reporter.close()
        for line in reporter.results:
            print(line, flush=True)


def result(line: str) -> None:
    """Print the job's machine-readable result (one JSON line) on stdout, after every progress
    line: callers read it as stdout's last line, and under spark-submit the Python driver's
    stderr is merged into its stdout (Spark's PythonRunner), progress lines included."""
    if _current is not None:
        _current.results.append(line)
    else:
        print(line, flush=True)


def watch(spark: Any) -> None:
    """The running job's Spark session (jobs.session gives each it returns): its stages and
    tasks are shown from now on. A Spark Connect session has no SparkContext: phases only."""
    if _current is None:
        return
    with contextlib.suppress(Exception):
        _current.spark.attach(spark.sparkContext)


def phase(name: str) -> None:
    """The running job enters a phase (the previous one's time is recorded)."""
    if _current is not None:
        _current.phase(name)


def total_bytes(n: int) -> None:
    if _current is not None:
        _current.total_bytes(n)


def bytes_decoded(count) -> None:
    """``count()`` gives the bytes the decoding's finished tasks have read so far (a Spark
    accumulator's value, see jobs.scan.run_scan); shown against :func:`total_bytes`."""
    if _current is not None:
        _current.bytes_decoded(count)
