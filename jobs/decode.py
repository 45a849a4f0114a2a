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

    from jobs.output import (
        LAYOUT_VERSION,
        MANIFEST,
        OutputDir,
        _TaskFiles,
        commit,
        forward_env,
        kill_point,
        prepare_storage,
        run_dir,
        run_id_of,
        run_key,
        versions,
    )
    from jobs.scan import merge_partials, plan_scan, run_scan, scan_options, to_output
    from jobs.session import spark_session

    env = prepare_storage(conf)
    spark = spark_session(args.master, "logreplay-decode", conf)
    forward_env(spark, env)
    run_id = run_id_of(args.run_id, args.logical_date)
    out = OutputDir(run_dir(args.out, run_id, conf["output"]["layout"]))
    previous = out.read_json(MANIFEST)  # the commit this run replaces
    key = run_key(run_id)
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
    tasks = plan_scan(files, args.tables, args.range_bytes or decode["range_bytes"])
    reports = run_scan(spark, tasks, opts, out.uri, key, "decode:decoding")
    kill_point("decode:staged-table")
    listed: dict[str, list[dict]] = {t: [] for t in args.tables}
    for r in reports:
        if r["kind"] == "file":
            part = opts.partition_by[r["table"]]
            listed[r["table"]].append(
                {"path": r["path"], "rows": r["rows"]}
                | ({"partition": r["partition"]} if part else {})
            )
    # split files: the driver adds their ranges' accounting up (one small row per file)
    seg_rows, whole_errors = merge_partials(reports)
    extra = {"segments": seg_rows, "errors": whole_errors}
    for table, rows in extra.items():
        if table in listed and rows:
            from decoders.schemas import from_rows

            sink = _TaskFiles(out.uri, table, len(tasks), 0, key, opts.schemas[table][1],
                              opts.partition_by[table])  # fmt: skip
            for b in from_rows(table, rows).to_batches():
                sink.write(to_output(b, table, opts))
            written = sink.close()
            for path, n, value in zip(*(c.to_pylist() for c in written.columns), strict=True):
                listed[table].append(
                    {"path": path, "rows": n}
                    | ({"partition": value} if opts.partition_by[table] else {})
                )
    tables = {}
    for table, entries in listed.items():
        schema, arrow = opts.schemas[table]
        entries.sort(key=lambda f: f["path"])
        if not entries:  # an empty table is still readable: one file with its schema, no rows
            sink = _TaskFiles(out.uri, table, 0, 0, key, arrow, None)
            sink.write(arrow.empty_table())
            entries = [{"path": f, "rows": 0} for f in sink.close().column("file").to_pylist()]
        tables[table] = {
            "schema": json.loads(schema.json()),
            "partition_by": opts.partition_by[table] if "partition" in entries[0] else None,
            "rows": sum(f["rows"] for f in entries),
            "files": entries,
        }
    counts = {t: e["rows"] for t, e in tables.items()}
    accounting = _accounting(reports, seg_rows)
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
        "rows": counts,
        "deep": not args.header_only,
        "versions": versions(spark),
        "tables": tables,
    }
    commit(out, MANIFEST, manifest, previous)
    print(json.dumps({"out": out.uri, "run_id": run_id, "rows": counts, "bytes": accounting}))
    return 0


def _accounting(reports: list[dict], split_files: list[dict]) -> dict:
    """Valid/padding/corrupt byte totals over every file: the tasks' sums of the files they
    decoded whole, plus the split files' rows the driver added up."""
    acct = dict.fromkeys(("files", "size", "valid", "padding", "corrupt", "errors"), 0)
    for r in reports:
        if r["kind"] == "totals":
            for k in acct:
                acct[k] += r[k]
    for row in split_files:
        acct["files"] += 1
        acct["size"] += row["size"]
        acct["valid"] += row["bytes_valid"]
        acct["padding"] += row["bytes_padding"]
        acct["corrupt"] += row["bytes_corrupt"]
        acct["errors"] += row["error_count"]
    return acct


def main(argv: list[str] | None = None) -> int:
    from jobs.cli import guarded

    p = argparse.ArgumentParser(prog="decode", description=__doc__.splitlines()[0])
    add_arguments(p)
    return guarded(run, p.parse_args(argv))


if __name__ == "__main__":  # spark-submit jobs/decode.py INPUT... --out DIR
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
