"""What the cross-log judgement's Spark side costs per row, on one long-lived producer's stream:
its sort, and handing the sorted rows to a Python task as Arrow batches.

A synthetic stream shaped like the judgement's (replay.crosslog_stream: the cluster's name, the
producer id, the row's kind, topic, partition, 13 integer slots, positions) of ``--rows`` rows
of one producer over 5 partitions, written once as Parquet, then, alternating, ``--runs`` times:

- sorted within each of 8 tasks by STREAM_ORDER alone, against the same with the leading keys
  of ``replay.plan.crosslog_keyed`` (written to Spark's `noop` sink: the sort is the work);
- the rows in one task handed to a Python task that counts them (``mapInArrow``), with Spark's
  default ``spark.sql.execution.arrow.maxBytesPerBatch`` (64 MB: Spark measures the batch after
  each row) against no bound in bytes (conf/default.yaml).

    python benchmarks/bench_stream_sort.py [--rows 6000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

UNBOUNDED = str(2**31 - 1)


def stream(spark, rows: int, path: str):
    from pyspark.sql import functions as F

    from replay.crosslog_stream import KIND
    from replay.tables import CLUSTER

    spark.range(rows).select(
        F.lit("c2ltdWxhdGVkLWNsdXN0").alias(CLUSTER),
        F.lit(123456789).cast("long").alias("producer_id"),
        F.lit(2).alias(KIND),
        F.concat(F.lit("enriched-"), (F.col("id") % 5).cast("string")).alias("topic"),
        (F.col("id") % 4).cast("int").alias("partition"),
        (F.lit(rows) - F.col("id")).alias("_p1"),
        F.lit(0).cast("long").alias("_p2"),
        *[(F.col("id") * k).alias(f"_i{k}") for k in range(13)],
    ).write.mode("overwrite").parquet(path)
    return spark.read.parquet(path)


def timed(action) -> float:
    t = time.perf_counter()
    action()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=6_000_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    from jobs.session import spark_session
    from replay.crosslog_stream import STREAM_ORDER
    from replay.plan import crosslog_keyed
    from replay.replicas import ReplicaRow
    from replay.tables import CLUSTER

    spark = spark_session(None, "bench-stream-sort", {})
    scratch = tempfile.mkdtemp(prefix="bench-stream-sort-")
    try:
        df = stream(spark, args.rows, os.path.join(scratch, "stream"))
        replicas = [ReplicaRow("c2ltdWxhdGVkLWNsdXN0", f"enriched-{t}", p, "broker-1", None, 0)
                    for t in range(5) for p in range(4)]  # fmt: skip
        keyed, keyed_order = crosslog_keyed(spark, df, replicas)

        def sort(frame, keys):
            def run():
                frame.repartition(8, CLUSTER, "producer_id").sortWithinPartitions(
                    *keys
                ).write.format("noop").mode("overwrite").save()

            return run

        def count(batches):
            import pyarrow as pa

            n = sum(b.num_rows for b in batches)
            yield pa.RecordBatch.from_pydict({"n": [n]})

        one = df.repartition(1)

        def handed(bound: str):
            def run():
                spark.conf.set("spark.sql.execution.arrow.maxBytesPerBatch", bound)
                assert one.mapInArrow(count, "n long").collect()[0][0] == args.rows

            return run

        cases = {
            "sort: STREAM_ORDER": sort(df, STREAM_ORDER),
            "sort: leading keys, then STREAM_ORDER": sort(keyed, keyed_order),
            "to Python: maxBytesPerBatch 64 MB (Spark's default)": handed("64m"),
            "to Python: rows only (logreplay's sessions)": handed(UNBOUNDED),
        }
        for run in cases.values():  # warm the JVM's code for each
            run()
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, run in cases.items():
                times[name].append(timed(run))
        print(f"\n{args.rows:,} rows of one producer, 2 cores, medians of {args.runs}\n")
        print("| case | wall s | runs |\n|---|---:|---|")
        for name, got in times.items():
            runs = ", ".join(f"{t:.1f}" for t in got)
            print(f"| {name} | {statistics.median(got):.1f} | {runs} |")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
