"""`logreplay decode INPUT... --out DIR [--tables ...]`: every decoded table as Parquet.

Writes `DIR/<table>/` (partitioned by topic where the table has one) and `DIR/_manifest.json`
(inputs and sizes, byte accounting, row counts, run id, versions, and the files of every
table). DIR is a local path or a URI (`s3://`, `gs://`, `hdfs://`, `file://`): the manifest,
written last, commits the run (see :mod:`jobs.output`), so a rerun replaces the output and
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

    from decoders.spark import SKIP_OPTION
    from jobs.output import (
        LAYOUT_VERSION,
        MANIFEST,
        OutputDir,
        commit,
        forward_env,
        kill_point,
        prepare_storage,
        run_dir,
        run_id_of,
        run_key,
        versions,
        write_table,
    )
    from jobs.resilience import run_resilient
    from jobs.session import spark_session

    env = prepare_storage(conf)
    spark = spark_session(args.master, "logreplay-decode", conf)
    forward_env(spark, env)
    run_id = run_id_of(args.run_id, args.logical_date)
    out = OutputDir(run_dir(args.out, run_id, conf["output"]["layout"]))
    previous = out.read_json(MANIFEST)  # the commit this run replaces
    key = run_key(run_id)
    decode = conf["decode"]
    from decoders.avro import load_topics, to_option

    avro_topics = load_topics(conf["topics"])

    skip: dict[str, str] = {}  # files left out after failing every task attempt

    def reader(table: str):
        r = (
            spark.read.format("kafka-segments")
            .option("table", table)
            .option("paths", json.dumps(args.inputs))
            .option("window_bytes", str(decode["window_bytes"]))
            .option("memory_budget_mb", str(decode["memory_budget_mb"]))
            .option("verify_crc", str(decode["verify_crc"]).lower())
            .option("range_bytes", str(args.range_bytes or decode["range_bytes"]))
        )
        if args.header_only:
            r = r.option("deep", "false")
        if table == "records" and avro_topics:
            r = r.option("avro", to_option(avro_topics))
        if skip:
            r = r.option(SKIP_OPTION, json.dumps(skip))
        return r.load()

    def attempt(left_out: dict[str, str]):
        skip.clear()
        skip.update(left_out)
        tables = {}
        for table in args.tables:
            df = reader(table)
            # each task decodes fixed byte ranges in order: rows come out in the same order on
            # every run, so no shuffle is needed for stable bytes, only stable file names
            part = "topic" if "topic" in df.columns else None
            tables[table] = write_table(df, out, table, 0, part, key, "decode:decoding")
            kill_point("decode:staged-table")
        return tables, _accounting(spark, out, tables.get("segments"), reader)

    # a file whose decoding fails the job after every task attempt is left out and reported
    # as a decode_failed error row; the run finishes
    (tables, accounting), skipped = run_resilient(spark, files, attempt, decode_options=decode)
    counts = {t: e["rows"] for t, e in tables.items()}
    kill_point("decode:staged")
    manifest = {
        "run_id": run_id,
        "run_key": key,
        "layout": LAYOUT_VERSION,
        "logical_date": args.logical_date,
        "inputs": args.inputs,
        "files": [
            {"file": f.info.file, "kind": f.kind, "broker": f.info.broker, "size": f.size}
            for f in files
        ],
        "bytes": accounting,
        "files_left_out": skipped,
        "rows": counts,
        "deep": not args.header_only,
        "versions": versions(spark),
        "tables": tables,
    }
    commit(out, MANIFEST, manifest, previous)
    print(json.dumps({"out": out.uri, "run_id": run_id, "rows": counts, "bytes": accounting}))
    return 0


def _accounting(spark, out, segments: dict | None, reader) -> dict:
    """Valid/padding/corrupt byte totals: one aggregated row comes back to the driver. Read
    from the run's own segments files when it wrote them (decoded once, not twice)."""
    from pyspark.sql import functions as F

    from jobs.output import read_table

    seg = read_table(spark, out, "segments", segments) if segments else reader("segments")
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
