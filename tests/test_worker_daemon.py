"""The Python workers of logreplay's own local sessions (jobs.session, jobs.daemon): the daemon
is started as the session starts, by a job of its own, and Spark SQL's tasks (the scan's
mapInArrow) are forked from that same daemon, with the tasks' modules already imported.

Spark keeps one daemon per worker environment; an RDD's tasks and Spark SQL's differ by one
variable unless the session sets it for both. A Spark release that adds another would leave the
early daemon unused (the scan would start a second one, as before, and pay its imports): this
test fails then, instead of the small runs getting slower without an error."""

from __future__ import annotations

import os
import sys
import time

import pyarrow as pa
import pytest

from jobs.session import WORKERS_JOB

pytestmark = pytest.mark.spark


def _daemon_command(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_the_session_s_first_job_starts_the_daemon_the_queries_use(spark):
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    (job,) = tracker.getJobIdsForGroup(WORKERS_JOB)
    deadline = time.monotonic() + 120
    while (info := tracker.getJobInfo(job)) is not None and info.status == "RUNNING":
        assert time.monotonic() < deadline, "the workers' job did not end"
        time.sleep(0.1)
    assert info is None or info.status == "SUCCEEDED"

    def task_facts(batches):  # by value: the workers do not import the tests
        loaded = ",".join(
            m for m in ("numba", "decoders.kernels", "replay.plan") if m in sys.modules
        )
        for b in batches:
            n = b.num_rows
            yield pa.RecordBatch.from_pydict({"daemon": [os.getppid()] * n, "loaded": [loaded] * n})

    early = set(sc.parallelize(range(4), 2).mapPartitions(lambda _: [os.getppid()]).collect())
    got = spark.range(0, 4, 1, 2).mapInArrow(task_facts, "daemon long, loaded string")
    rows = got.collect()
    queried = {r["daemon"] for r in rows}
    assert queried == early, "Spark SQL's tasks came from another daemon than the RDD's"
    (daemon,) = queried
    assert "jobs.daemon" in _daemon_command(daemon)
    # forked from the preloaded daemon: the tasks' modules were there before the task ran
    assert {r["loaded"] for r in rows} == {"numba,decoders.kernels,replay.plan"}
