"""The audit in a user's own session against `logreplay audit`, on the same dumps, in one run.

    python benchmarks/bench_session.py [--dumps DIR ...] [--runs 3] [--data /tmp/perf-session]

Each run is a fresh process, Spark's start included, alternating the two ways:

- ``job``: ``logreplay audit DUMP --out OUT`` as the README shows it;
- ``session``: a plain session as a user builds one (``SparkSession.builder.master("local[2]")``,
  Spark's defaults: 200 shuffle partitions, no tuned JVM options; session time zone
  America/Los_Angeles), then ``replay.audit(spark, [DUMP])["findings"].count()``.

Without ``--dumps``: the demo scenario and every scenario under one root (``logreplay synth
--scenario all``), generated once under ``--data``. Prints each run's wall time and the ratio
of the medians two ways: the session's whole process (``session_over_job``: its JVM's start in
a default configuration included, which the user's session pays before ``replay`` is
imported) and the API's own time (``api_over_job``: ``import replay``, ``replay.audit`` and
the count, in the fresh session) over the job's whole process; the target (issue 29) is at
most 1.5x. Also the most tasks any stage of the session ran.
The machine is shared: compare figures within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import measure  # noqa: E402

SESSION = """
import json, sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]")
         .config("spark.sql.session.timeZone", "America/Los_Angeles").getOrCreate())
sc = spark.sparkContext
sc.setJobGroup("audit", "replay.audit")
began = time.perf_counter()
import replay
n = replay.audit(spark, [sys.argv[1]])["findings"].count()
took = time.perf_counter() - began
tracker = sc.statusTracker()
stages = [s for j in tracker.getJobIdsForGroup("audit") for s in tracker.getJobInfo(j).stageIds]
tasks = [tracker.getStageInfo(s).numTasks for s in stages if tracker.getStageInfo(s)]
print("RESULT " + json.dumps({"findings": n, "stages": len(tasks), "most_tasks": max(tasks),
                             "api": took}))
"""


def dumps(data: str) -> list[str]:
    out = []
    for scenario in ("demo", "all"):
        path = os.path.join(data, scenario)
        if not os.path.isdir(path):
            subprocess.run(
                [sys.executable, "-m", "jobs.cli", "synth", "--scenario", scenario, "--out",
                 path, "--quiet"], check=True, cwd=ROOT,
            )  # fmt: skip
        out.append(path)
    return out


def job(dump: str) -> measure.Measured:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "jobs.cli", "audit", dump, "--out", out, "--quiet"]
        return measure.run(cmd, env={**os.environ, "PYTHONPATH": ROOT})


def session(dump: str) -> tuple[measure.Measured, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(PYSPARK_PYTHON=sys.executable, PYTHONPATH=ROOT)
    got = measure.run([sys.executable, "-c", SESSION, dump], env=env)
    line = next((x for x in got.stdout.splitlines() if x.startswith("RESULT ")), None)
    if got.returncode or line is None:
        raise SystemExit(f"the session's audit failed:\n{got.stderr[-3000:]}")
    return got, json.loads(line[len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dumps", nargs="*", help="dump roots (default: demo and every scenario)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "perf-session"))
    args = ap.parse_args()
    for dump in args.dumps or dumps(args.data):
        walls: dict[str, list[float]] = {"job": [], "session": [], "api": []}
        facts = {}
        for _ in range(args.runs):
            j = job(dump)
            if j.returncode:
                raise SystemExit(f"logreplay audit failed:\n{j.stderr[-3000:]}")
            walls["job"].append(j.wall)
            s, facts = session(dump)
            walls["session"].append(s.wall)
            walls["api"].append(facts.pop("api"))
        med = {k: statistics.median(v) for k, v in walls.items()}
        print(json.dumps({
            "dump": dump, "runs": args.runs,
            "job_s": [round(x, 1) for x in walls["job"]],
            "session_s": [round(x, 1) for x in walls["session"]],
            "session_over_job": round(med["session"] / med["job"], 2),
            "api_s": [round(x, 1) for x in walls["api"]],
            "api_over_job": round(med["api"] / med["job"], 2), **facts,
        }))  # fmt: skip


if __name__ == "__main__":
    main()
