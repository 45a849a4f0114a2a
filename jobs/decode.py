"""`logreplay decode INPUT... --out DIR [--tables ...]`: every decoded table as Parquet.

Writes `DIR/<table>/` (partitioned by topic where the table has one) and `DIR/_manifest.json`
(inputs and sizes, byte accounting, row counts, run id, versions). Each run writes into a
staging directory first and then swaps it in with renames, so a rerun replaces the output and
never duplicates it. Runs the same under `spark-submit jobs/decode.py ...` with any master.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

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
        "--header-only", action="store_true", help="scan batch headers only (no records tables)"
    )
    p.add_argument(
        "--range-bytes", type=int, default=None, help="bytes of segment per task (default 128 MiB)"
    )
    from jobs.session import add_job_arguments

    add_job_arguments(p)


def run(args) -> int:
    import decoders
    from decoders.schemas import TABLES
    from jobs.session import job_conf

    conf = job_conf(args)

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

    from jobs.output import publish, run_dir, run_id_of, staging_dir, versions, write_parquet
    from jobs.session import spark_session

    spark = spark_session(args.master, "logreplay-decode", conf)
    run_id = run_id_of(args.run_id, args.logical_date)
    out = run_dir(args.out, run_id, conf["output"]["layout"])
    staging = staging_dir(args.out, run_id)
    decode = conf["decode"]
    from decoders.avro import load_topics, to_option

    avro_topics = load_topics(conf["topics"])

    def reader(table: str):
        r = (
            spark.read.format("kafka-segments")
            .option("table", table)
            .option("paths", json.dumps(args.inputs))
            .option("window_bytes", str(decode["window_bytes"]))
            .option("verify_crc", str(decode["verify_crc"]).lower())
            .option("range_bytes", str(args.range_bytes or decode["range_bytes"]))
        )
        if args.header_only:
            r = r.option("deep", "false")
        if table == "records" and avro_topics:
            r = r.option("avro", to_option(avro_topics))
        return r.load()

    counts = {}
    for table in args.tables:
        df = reader(table)
        # each task decodes fixed byte ranges in order: rows come out in the same order on
        # every run, so no shuffle is needed for stable bytes, only stable file names
        path = os.path.join(staging, table)
        written = write_parquet(df, path, 0, "topic" if "topic" in df.columns else None)
        counts[table] = sum(written.values())

    accounting = _accounting(spark, staging, reader, "segments" in args.tables)
    manifest = {
        "run_id": run_id,
        "logical_date": args.logical_date,
        "inputs": args.inputs,
        "files": [
            {"file": f.info.file, "kind": f.kind, "broker": f.info.broker, "size": f.size}
            for f in files
        ],
        "bytes": accounting,
        "rows": counts,
        "deep": not args.header_only,
        "versions": versions(spark),
    }
    with open(os.path.join(staging, "_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    publish(staging, out, [*args.tables, "_manifest.json"], run_id)
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


def main(argv: list[str] | None = None) -> int:
    from jobs.cli import guarded

    p = argparse.ArgumentParser(prog="decode", description=__doc__.splitlines()[0])
    add_arguments(p)
    return guarded(run, p.parse_args(argv))


if __name__ == "__main__":  # spark-submit jobs/decode.py INPUT... --out DIR
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
