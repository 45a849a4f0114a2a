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

from decoders import seams

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
    from jobs import progress
    from jobs.exits import OK, USAGE
    from jobs.output import MANIFEST, commit, start_run
    from jobs.resilience import run_resilient
    from jobs.session import DumpListing, job_conf

    conf = job_conf(args)
    tables = _tables(args)
    if tables is None:
        return USAGE
    listing = DumpListing.started("decode", args.inputs, conf=conf)  # while Spark starts
    if listing is None:
        return USAGE
    progress.phase("starting Spark")
    started = start_run(args, conf, "logreplay-decode", MANIFEST)
    listed = listing.result()
    if listed is None:
        return USAGE
    files = listed[0]
    progress.total_bytes(sum(f.size for f in files))
    opts = _scan_options(tables, not args.header_only, conf)
    # one pass: each task decodes its byte ranges once and writes every table from them; its
    # ranges are fixed byte ranges decoded in order, so rows come out in the same order on
    # every run and no shuffle is needed for stable bytes, only stable file names
    range_bytes = args.range_bytes or conf.decode["range_bytes"]

    def attempt(skip: dict[str, str]):
        from jobs.scan import scan_tables

        progress.phase(f"decoding {', '.join(tables)}")
        return scan_tables(started.spark, files, opts, started.out.uri, started.key,
                           range_bytes, "decode:decoding", skipped=skip)  # fmt: skip

    # a file whose decoding fails the job after every task attempt is left out and reported
    # as a decode_failed error row; the run finishes
    scanned, skipped = run_resilient(started.spark, files, attempt, decode_options=conf.decode)
    seams.reached("decode:staged")
    manifest = _manifest(args, started, files, scanned, skipped)
    commit(started.out, MANIFEST, manifest, started.previous)
    progress.result(json.dumps({"out": started.out.uri, "run_id": started.run_id,
                                "rows": manifest["rows"], "bytes": scanned.accounting}))  # fmt: skip
    return OK


def _tables(args) -> list[str] | None:
    """The tables asked for (records tables left out of a header-only run, said); None, said on
    stderr, when one is unknown."""
    import decoders
    from decoders.schemas import TABLES

    unknown = [t for t in args.tables if t not in TABLES]
    if unknown:
        print(
            f"logreplay decode: unknown table(s) {', '.join(unknown)}; known: {', '.join(TABLES)}",
            file=sys.stderr,
        )
        return None
    if not args.header_only:
        return list(args.tables)
    dropped = [t for t in args.tables if t in decoders.RECORD_TABLES]
    if dropped:
        print(f"--header-only: skipping {', '.join(dropped)}", file=sys.stderr)
    return [t for t in args.tables if t not in decoders.RECORD_TABLES]


def _scan_options(tables: list[str], deep: bool, conf):
    from decoders.avro import load_topics
    from decoders.spark import _struct, table_schema
    from jobs.scan import scan_options

    def spark_schema(table: str, with_avro: bool):
        return _struct(table_schema(table, with_avro))

    return scan_options(spark_schema, tables, deep, conf.decode, load_topics(conf["topics"]))


def _manifest(args, started, files, scanned, skipped) -> dict:
    """The run's commit record (_manifest.json)."""
    from jobs.output import LAYOUT_VERSION, versions

    return {
        "run_id": started.run_id,
        "run_key": started.key,
        "layout": LAYOUT_VERSION,
        "logical_date": args.logical_date,
        "inputs": args.inputs,
        "files": [
            {"file": f.info.file, "kind": f.kind, "broker": f.info.broker, "size": f.size}
            for f in files
        ],
        "bytes": scanned.accounting,
        "files_left_out": skipped,
        "rows": {t: e["rows"] for t, e in scanned.tables.items()},
        "deep": not args.header_only,
        "versions": versions(started.spark),
        "tables": scanned.tables,
    }


def main(argv: list[str] | None = None) -> int:
    from jobs.exits import job_main

    return job_main("decode", __doc__, add_arguments, run, argv)


if __name__ == "__main__":  # spark-submit jobs/decode.py INPUT... --out DIR
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jobs.exits import ended

    sys.exit(ended(main()))
