"""Submitted by tests/test_cluster.py with spark-submit: where do the executors' Python tasks
find the project? Prints, as JSON on its last line, what each task saw: the interpreter,
PYTHONPATH, the file `decoders` was imported from, the working directory (the Worker's
per-executor directory) and the kafka-segments source's row count for a dump (read on the
executors)."""

import json
import os
import sys
import time

from pyspark.sql import SparkSession


def where(_):
    import decoders

    time.sleep(1)  # long enough for both executors to be offered tasks
    yield {
        "python": sys.executable,
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "decoders": decoders.__file__,
        "cwd": os.getcwd(),
    }


def main() -> None:
    spark = (
        SparkSession.builder.appName("logreplay-cluster-probe")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")  # the zone the jobs' sessions set
        .getOrCreate()
    )
    sc = spark.sparkContext
    expected = int(sys.argv[1])
    deadline = time.monotonic() + 120
    while sc._jsc.sc().getExecutorMemoryStatus().size() - 1 < expected:  # the driver counts too
        assert time.monotonic() < deadline, "executors did not register"
        time.sleep(0.5)
    tasks = sc.parallelize(range(8), 8).mapPartitions(where).collect()
    out = {"tasks": tasks, "executors": sc._jsc.sc().getExecutorMemoryStatus().size() - 1}
    if len(sys.argv) > 2:
        from decoders.spark import register

        register(spark)
        df = spark.read.format("kafka-segments").option("table", "batches").load(sys.argv[2])
        out["batches"] = df.count()
    print(json.dumps(out))
    spark.stop()


if __name__ == "__main__":
    main()
