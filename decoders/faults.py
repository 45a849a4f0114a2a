"""Test-only fault injection: make decoding one named file fail inside a Spark task.

The resilience tests (tests/test_resilience.py) need a file whose decoding fails in the executor
for a reason outside the input, the way an out-of-memory error or a lost worker does. Jobs run in
another process (spark-submit, a Python worker), so the fault is chosen by environment variables
the worker inherits:

- ``LOGREPLAY_TEST_FAIL_FILE``: the file name (as in the ``file`` column, e.g.
  ``orders-0/00000000000000000000.log``) whose decoding fails;
- ``LOGREPLAY_TEST_FAIL_MODE``: ``memory`` raises MemoryError (the task can catch it),
  ``crash`` ends the worker process at once (it cannot; Spark fails the task and, after its
  attempts, the job).

Unset (always, outside tests) this costs one dictionary lookup per file.
"""

from __future__ import annotations

import os

FAIL_FILE = "LOGREPLAY_TEST_FAIL_FILE"
FAIL_MODE = "LOGREPLAY_TEST_FAIL_MODE"
CRASH_EXIT_CODE = 86


def inject(file: str) -> None:
    """Fail as configured when ``file`` is the one named; otherwise do nothing."""
    target = os.environ.get(FAIL_FILE)
    if not target or target != file:
        return
    if os.environ.get(FAIL_MODE, "memory") == "crash":
        os._exit(CRASH_EXIT_CODE)  # like the kernel's OOM killer: no cleanup, no traceback
    raise MemoryError(f"test fault injected while decoding {file}")
