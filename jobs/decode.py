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
    from jobs.progress import add_quiet

    add_quiet(p)
    p.add_argument("--tables", nargs="+", default=list(DEFAULT_TABLES), metavar="TABLE")
    p.add_argument(
        "--header-only", action="store_true", help="scan batch headers only (no records tables)"
    )
    p.add_argument(
        "--range-bytes",
        type=int,
        default=None,
        help="bytes of segment per task (default: decode.range_bytes)",
    )
    from jobs.session import add_job_arguments

    add_job_arguments(p)


def run(args) -> int:
    import decoders
    from decoders.schemas import TABLES
    from jobs.exits import OK, USAGE
    from jobs.session import job_conf

    conf = job_conf(args)

    unknown = [t for t in args.tables if t not in TABLES]
    if unknown:
        print(
            f"logreplay decode: unknown table(s) {', '.join(unknown)}; known: {', '.join(TABLES)}",
            file=sys.stderr,
        )
        return USAGE
    if args.header_only:
        dropped = [t for t in args.tables if t in decoders.RECORD_TABLES]
        args.tables = [t for t in args.tables if t not in decoders.RECORD_TABLES]
        if dropped:
            print(f"--header-only: skipping {', '.join(dropped)}", file=sys.stderr)
    files = decoders.discover(args.inputs)  # names and sizes only: a small listing
    if not files:
        print(f"logreplay decode: no Kafka files under {', '.join(args.inputs)}", file=sys.stderr)
        return USAGE
    from jobs import progress

    progress.total_bytes(sum(f.size for f in files))
    progress.phase("starting Spark")
    from jobs.output import LAYOUT_VERSION, MANIFEST, commit, kill_point, start_run, versions
    from jobs.resilience import run_resilient
    from jobs.scan import scan_options, scan_tables

    spark, run_id, out, previous, key = start_run(args, conf, "logreplay-decode", MANIFEST)
    decode = conf["decode"]
    from decoders.avro import load_topics
    from decoders.spark import _struct, table_schema

    avro_topics = load_topics(conf["topics"])
    opts = scan_options(
        lambda t, with_avro: _struct(table_schema(t, with_avro)),
        args.tables,
        not args.header_only,
        decode,
        avro_topics,
    )
    # one pass: each task decodes its byte ranges once and writes every table from them; its
    # ranges are fixed byte ranges decoded in order, so rows come out in the same order on
    # every run and no shuffle is needed for stable bytes, only stable file names
    range_bytes = args.range_bytes or decode["range_bytes"]

    def attempt(skip: dict[str, str]):
        progress.phase(f"decoding {', '.join(args.tables)}")
        return scan_tables(
            spark, files, opts, out.uri, key, range_bytes, "decode:decoding", skipped=skip
        )

    # a file whose decoding fails the job after every task attempt is left out and reported
    # as a decode_failed error row; the run finishes
    scanned, skipped = run_resilient(spark, files, attempt, decode_options=decode)
    tables, accounting = scanned.tables, scanned.accounting
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
    progress.result(
        json.dumps({"out": out.uri, "run_id": run_id, "rows": counts, "bytes": accounting})
    )
    return OK


def main(argv: list[str] | None = None) -> int:
    from jobs.exits import job_main

    return job_main("decode", __doc__, add_arguments, run, argv)


if __name__ == "__main__":  # spark-submit jobs/decode.py INPUT... --out DIR
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
