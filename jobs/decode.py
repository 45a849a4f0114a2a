"""`logreplay decode INPUT... --out DIR [--tables ...]`: every decoded table as Parquet.

Writes `DIR/<table>/` (partitioned by topic where the table has one) and `DIR/_manifest.json`
(inputs and sizes, byte accounting, row counts, run id, versions). Each run writes into a
staging directory first and then swaps it in with renames, so a rerun replaces the output and
never duplicates it. Runs the same under `spark-submit jobs/decode.py ...` with any master.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import uuid

DEFAULT_TABLES = (
    "segments",
    "errors",
    "batches",
    "records",
    "offset_commits",
    "group_metadata",
    "group_records",
    "txn_log",
    "index_entries",
    "producer_snapshots",
    "aborted_txns",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="dump roots: paths or URIs")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--tables", nargs="+", default=list(DEFAULT_TABLES), metavar="TABLE")
    p.add_argument(
        "--master", default=None, help="Spark master (default: conf/default.yaml, local mode)"
    )
    p.add_argument(
        "--header-only", action="store_true", help="scan batch headers only (no records tables)"
    )
    p.add_argument(
        "--range-bytes", type=int, default=None, help="bytes of segment per task (default 128 MiB)"
    )
    p.add_argument(
        "--run-id", default=None, help="identifies this run in the manifest (default: generated)"
    )


def run(args) -> int:
    import decoders
    from decoders.schemas import TABLES

    unknown = [t for t in args.tables if t not in TABLES]
    if unknown:
        print(
            f"logreplay decode: unknown table(s) {', '.join(unknown)}; known: {', '.join(TABLES)}",
            file=sys.stderr,
        )
        return 2
    if args.header_only:
        dropped = [t for t in args.tables if t in decoders.RECORD_TABLES]
        args.tables = [t for t in args.tables if t not in decoders.RECORD_TABLES]
        if dropped:
            print(f"--header-only: skipping {', '.join(dropped)}", file=sys.stderr)
    files = decoders.discover(args.inputs)  # names and sizes only: a small listing
    if not files:
        print(f"logreplay decode: no Kafka files under {', '.join(args.inputs)}", file=sys.stderr)
        return 2

    from jobs.session import spark_session

    spark = spark_session(args.master, "logreplay-decode")
    run_id = args.run_id or f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    out = os.path.abspath(args.out)
    staging = os.path.join(out, f".staging-{run_id}")
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)

    def reader(table: str):
        r = (
            spark.read.format("kafka-segments")
            .option("table", table)
            .option("paths", json.dumps(args.inputs))
        )
        if args.header_only:
            r = r.option("deep", "false")
        if args.range_bytes:
            r = r.option("range_bytes", str(args.range_bytes))
        return r.load()

    counts = {}
    for table in args.tables:
        df = reader(table)
        writer = df.write.mode("overwrite")
        if "topic" in df.columns:
            writer = writer.partitionBy("topic")
        writer.parquet(os.path.join(staging, table))
        counts[table] = spark.read.schema(df.schema).parquet(os.path.join(staging, table)).count()

    accounting = _accounting(spark, staging, reader, "segments" in args.tables)
    manifest = {
        "run_id": run_id,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "inputs": args.inputs,
        "files": [
            {"file": f.info.file, "kind": f.kind, "broker": f.info.broker, "size": f.size}
            for f in files
        ],
        "bytes": accounting,
        "rows": counts,
        "deep": not args.header_only,
        "versions": _versions(spark),
    }
    with open(os.path.join(staging, "_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    _publish(staging, out, [*args.tables, "_manifest.json"], run_id)
    print(json.dumps({"out": out, "run_id": run_id, "rows": counts, "bytes": accounting}))
    return 0


def _accounting(spark, staging: str, reader, have_segments: bool) -> dict:
    """Valid/padding/corrupt byte totals: one aggregated row comes back to the driver."""
    from pyspark.sql import functions as F

    seg = reader("segments")
    if have_segments:
        seg = spark.read.schema(seg.schema).parquet(os.path.join(staging, "segments"))
    row = seg.agg(
        F.count("*").alias("files"),
        F.sum("size").alias("size"),
        F.sum("bytes_valid").alias("valid"),
        F.sum("bytes_padding").alias("padding"),
        F.sum("bytes_corrupt").alias("corrupt"),
        F.sum("error_count").alias("errors"),
    ).collect()[0]
    return {k: int(v or 0) for k, v in row.asDict().items()}


def _versions(spark) -> dict:
    from importlib.metadata import version

    import pyarrow

    return {
        "logreplay": version("logreplay"),
        "spark": spark.version,
        "pyarrow": pyarrow.__version__,
        "python": platform.python_version(),
    }


def _publish(staging: str, out: str, names: list[str], run_id: str) -> None:
    """Swap each staged output in by rename; the previous run's copy is removed afterwards."""
    trash = os.path.join(out, f".replaced-{run_id}")
    os.makedirs(trash, exist_ok=True)
    for name in names:
        target = os.path.join(out, name)
        if os.path.lexists(target):
            os.replace(target, os.path.join(trash, name))
        os.replace(os.path.join(staging, name), target)
    shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="decode", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":  # spark-submit jobs/decode.py INPUT... --out DIR
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
