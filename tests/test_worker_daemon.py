"""The Python workers of logreplay's own local sessions (jobs.session, jobs.daemon): the daemon
is started as the session starts, by a job of its own, and Spark SQL's tasks (the scan's
mapInArrow) are forked from that same daemon, with the tasks' modules already imported.

Spark keeps one daemon per worker environment; an RDD's tasks and Spark SQL's differ by one
variable unless the session sets it for both. A Spark release that adds another would leave the
early daemon unused (the scan would start a second one, as before, and pay its imports): this
test fails then, instead of the small runs getting slower without an error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

# a session as the command line starts one, in a process of its own (the tests' shared session
# has run too many jobs by then for Spark's status store to keep its first)
SESSION = """
import json, os, sys, time
import pyarrow as pa
from jobs.session import WORKERS_JOB, spark_session

spark = spark_session("local[2]", "workers-test", source=False)
sc = spark.sparkContext
tracker = sc.statusTracker()
jobs = list(tracker.getJobIdsForGroup(WORKERS_JOB))
deadline = time.monotonic() + 120
while jobs and (info := tracker.getJobInfo(jobs[0])) is not None and info.status == "RUNNING":
    assert time.monotonic() < deadline, "the workers' job did not end"
    time.sleep(0.1)
status = tracker.getJobInfo(jobs[0]).status if jobs else None


def facts(batches):
    loaded = [m for m in ("numba", "decoders.kernels", "replay.plan") if m in sys.modules]
    for b in batches:
        n = b.num_rows
        yield pa.RecordBatch.from_pydict({"daemon": [os.getppid()] * n, "loaded": [",".join(loaded)] * n})


early = sc.parallelize(range(4), 2).mapPartitions(lambda _: [os.getppid()]).collect()
rows = spark.range(0, 4, 1, 2).mapInArrow(facts, "daemon long, loaded string").collect()
with open(f"/proc/{rows[0]['daemon']}/cmdline", "rb") as f:
    command = f.read().replace(bytes(1), b" ").decode()
print(json.dumps({"jobs": len(jobs), "status": str(status), "early": sorted(set(early)),
                  "queried": sorted({r["daemon"] for r in rows}), "command": command,
                  "loaded": sorted({r["loaded"] for r in rows})}))
spark.stop()
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_the_session_s_first_job_starts_the_daemon_the_queries_use():
    env = {**os.environ}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["jobs"] == 1 and got["status"].endswith("SUCCEEDED"), got
    assert got["queried"] == got["early"], "Spark SQL's tasks came from another daemon"
    assert len(got["queried"]) == 1 and "jobs.daemon" in got["command"]
    # forked from the preloaded daemon: the tasks' modules were there before the task ran
    assert got["loaded"] == ["numba,decoders.kernels,replay.plan"]
