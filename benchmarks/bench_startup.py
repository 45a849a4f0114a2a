"""Spark start-up with and without the driver JVM's class-data archive (jobs.jvm_archive).

    python benchmarks/bench_startup.py [--runs 5]

Why: the archive is kept only if it pays on the default JDK. Each run is a fresh Python process
that starts a session as the jobs do (``jobs.session.spark_session``, local mode, no data
source lookup), runs ``spark.range(1).count()`` and one small ``mapInArrow`` job, and exits.
Runs alternate between ``LOGREPLAY_JVM_ARCHIVE=off`` and ``on`` (the archive made and probed
beforehand under a temporary ``LOGREPLAY_CACHE_DIR``, so every ``on`` run maps a warm archive),
so that the machine's load drifts over both alike. Printed: per setting, the median over the
runs of the process's wall time, the session's start, the first action, the Python job, and the
CPU seconds of the driver JVM (every process is measured with benchmarks/measure.py). The JDK
is the one Spark's launcher runs (``JAVA_HOME``): on JDK 19+ the archive is the JDK's own
(``-XX:+AutoCreateSharedArchive``, see jobs/jvm_archive.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import measure  # noqa: E402

from jobs import jvm_archive  # noqa: E402

FIELDS = ("wall", "session", "first_action", "python_job", "jvm_cpu")
# a claiming session's JVM writes the archive as it exits, after its Python process returned
DUMP_WAIT_SECONDS = 300


def child() -> None:
    """One measured run: a session as the jobs start it, a first action, a first Python job."""
    t0 = time.perf_counter()
    from jobs.session import spark_session

    spark = spark_session(None, "bench-startup", source=False)
    res: dict = {"session": time.perf_counter() - t0}
    t = time.perf_counter()
    assert spark.range(1).count() == 1
    res["first_action"] = time.perf_counter() - t

    def ident(batches):
        yield from batches

    t = time.perf_counter()
    assert len(spark.range(1000).mapInArrow(ident, "id long").collect()) == 1000
    res["python_job"] = time.perf_counter() - t
    res["java_options"] = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
    print(json.dumps(res))


def run(env: dict[str, str]) -> dict:
    m = measure.run([sys.executable, __file__, "--child"], env)
    if m.returncode:
        print(m.stderr[-3000:], file=sys.stderr)
        raise SystemExit("a measured run failed")
    res = json.loads(m.stdout.strip().splitlines()[-1])
    res["wall"] = m.wall
    res["jvm_cpu"] = sum(p.cpu for p in m.procs.values() if p.role == "jvm")
    return res


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def warm(env: dict[str, str], cache: str) -> None:
    """Runs until a session maps an archive that was there before it started: on JDK 17 the
    first claims it (its JVM writes it at exit) and a later one has it probed and maps it; on
    JDK 19+ the first JVM writes it at exit and the next maps it."""
    for _ in range(4):
        ready = any(name.endswith(".jsa") for name in os.listdir(cache))
        res = run(env)
        if ready and "-XX:SharedArchiveFile=" in res["java_options"]:
            return
        deadline = time.monotonic() + DUMP_WAIT_SECONDS
        for name in os.listdir(cache):
            if name.endswith(".pending.json"):
                with open(os.path.join(cache, name)) as f:
                    pid = json.load(f).get("jvm_pid")
                while alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.5)
        time.sleep(2)  # a JVM writing its archive as it exits, after its Python returned
    raise SystemExit("no archive was made: nothing to compare")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5, help="runs of each setting (median)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child()
        return
    cache = tempfile.mkdtemp(prefix="logreplay-bench-startup-")
    base = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    envs = {
        "off": {**base, jvm_archive.ENABLE_ENV: "off"},
        "on": {**base, jvm_archive.ENABLE_ENV: "on", jvm_archive.CACHE_ENV: cache},
    }
    try:
        warm(envs["on"], cache)
        results: dict[str, list[dict]] = {"off": [], "on": []}
        for i in range(args.runs):
            for name in ("off", "on") if i % 2 == 0 else ("on", "off"):
                res = run(envs[name])
                mapped = "-XX:SharedArchiveFile=" in res["java_options"]
                assert mapped == (name == "on"), res["java_options"]
                results[name].append(res)
                print(f"run {i + 1} {name:>3}: " + ", ".join(f"{f} {res[f]:.2f}" for f in FIELDS),
                      file=sys.stderr)  # fmt: skip
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"medians of {args.runs} runs each, seconds ({os.cpu_count()} cores)")
    print(f"{'archive':<8}" + "".join(f"{f:>14}" for f in FIELDS))
    for name, runs in results.items():
        medians = [statistics.median(r[f] for r in runs) for f in FIELDS]
        print(f"{name:<8}" + "".join(f"{m:>14.2f}" for m in medians))


if __name__ == "__main__":
    main()
