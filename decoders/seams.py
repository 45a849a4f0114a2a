"""Test seams: the named points where tests make a run fail the way production runs fail.

Production modules call :func:`reached` at these points and do nothing else about tests; what
happens there is chosen by environment variables that only tests set, so that a job run in
another process (spark-submit, the Python workers of any executor) is reached as well:

- ``LOGREPLAY_TEST_KILL_AT=<point>``: SIGKILL the job's driver when it (or any of its tasks)
  reaches the point of :data:`KILL_POINTS` so named, as a lost driver dies; the kill tests
  (tests/test_kill.py) reach named points instead of racing timers.
  ``LOGREPLAY_TEST_KILL_PID`` is the driver's pid, set by :func:`armed` as the run starts.
- ``LOGREPLAY_TEST_FAIL_FILE=<file>`` (as the ``file`` column names it, e.g.
  ``orders-0/00000000000000000000.log``): decoding that file fails at :data:`DECODING`, with
  ``LOGREPLAY_TEST_FAIL_MODE`` ``memory`` (MemoryError: the task can catch it) or ``crash``
  (the worker process ends at once, as the kernel's OOM killer ends it: Spark fails the task
  and, after its attempts, the job); tests/test_resilience.py.

Unset (always, outside tests) a point costs one dictionary lookup. This module sits in
``decoders`` so that every layer may call it.
"""

from __future__ import annotations

import os
import signal

KILL_AT, KILL_PID = "LOGREPLAY_TEST_KILL_AT", "LOGREPLAY_TEST_KILL_PID"
FAIL_FILE, FAIL_MODE = "LOGREPLAY_TEST_FAIL_FILE", "LOGREPLAY_TEST_FAIL_MODE"
CRASH_EXIT_CODE = 86

DECODING = "decoding"  # a file's decoding starts (the fault point)
# the kill points, in the order a run reaches them
KILL_POINTS = (
    "decode:decoding",  # a decode's task wrote its first file
    "decode:staged-table",  # every decoded table written
    "decode:staged",  # the manifest is next
    "audit:stash",  # an intermediate table's first file
    "audit:writing",  # an audit table's first file
    "audit:staged-table",  # an audit table written
    "audit:staged",  # every table written, the gate ran: the summary is next
    "gate:publishing",  # the gate's first file published
    "commit:manifest",  # the commit record written, not yet in place
    "commit:done",  # the commit record in place
    "commit:cleanup",  # the replaced run's files being removed
)


def reached(point: str, file: str | None = None) -> None:
    """A run reached ``point`` (one of :data:`KILL_POINTS`, or :data:`DECODING` of ``file``)."""
    if point == DECODING:
        _fail_decoding(file)
    elif os.environ.get(KILL_AT) == point:
        os.kill(int(os.environ.get(KILL_PID) or os.getpid()), signal.SIGKILL)


def armed() -> dict[str, str]:
    """As a job starts, before its Spark session: the seams' variables that its Spark tasks
    must see (forwarded to the Python workers with the storage settings), the driver's pid
    recorded for the kill."""
    if os.environ.get(KILL_AT):
        os.environ.setdefault(KILL_PID, str(os.getpid()))
    return {v: os.environ[v] for v in (KILL_AT, KILL_PID) if os.environ.get(v)}


def _fail_decoding(file: str | None) -> None:
    target = os.environ.get(FAIL_FILE)
    if not target or target != file:
        return
    if os.environ.get(FAIL_MODE, "memory") == "crash":
        os._exit(CRASH_EXIT_CODE)  # like the kernel's OOM killer: no cleanup, no traceback
    raise MemoryError(f"test fault injected while decoding {file}")
