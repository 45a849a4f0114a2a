"""The `logreplay` command line. Exit codes (docs/architecture.md): 0 done, 1 check failed, 2 usage or
configuration error, 3 unexpected failure."""

from __future__ import annotations

import argparse
import os
import sys

from jobs.exits import OK, USAGE, guarded


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logreplay", description="Decode and replay raw Kafka log-segment dumps."
    )
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser(
        "dump", help="inspect a segment, index, snapshot, partition directory or dump"
    )
    d.add_argument("paths", nargs="+", metavar="PATH")
    d.add_argument(
        "--deep", action="store_true", help="decode records, internal-topic keys and values"
    )
    d.add_argument("--json", action="store_true", help="JSON lines instead of readable lines")
    d.add_argument(
        "--verify",
        action="store_true",
        help="check indexes, .txnindex and snapshots against the log",
    )
    d.add_argument("--limit", type=int, default=None, help="at most N batches and records per file")

    s = sub.add_parser("schema", help="print the columns of the decoded tables")
    s.add_argument("tables", nargs="*")

    from jobs.decode import add_arguments as decode_arguments

    dec = sub.add_parser("decode", help="decode a dump into Parquet tables with Spark")
    decode_arguments(dec)

    from jobs.audit import add_arguments as audit_arguments

    aud = sub.add_parser("audit", help="replay a dump with Spark and report findings")
    audit_arguments(aud)

    from jobs.gate import add_arguments as gate_arguments

    gate = sub.add_parser("gate", help="run the data-quality gate over an audit's output")
    gate_arguments(gate)

    from jobs.synth import add_arguments as synth_arguments

    syn = sub.add_parser("synth", help="simulate a cluster and write a dump with its truth.json")
    synth_arguments(syn)

    from jobs.report import add_arguments as report_arguments

    rep = sub.add_parser("report", help="write an audit's findings as one offline HTML page")
    report_arguments(rep)

    from jobs.findings import add_arguments as findings_arguments
    from jobs.findings import add_explain_arguments

    fnd = sub.add_parser("findings", help="export an audit's findings as JSON lines or CSV")
    findings_arguments(fnd)
    exp = sub.add_parser(
        "explain", help="one finding: its evidence, its next step and the logs around it"
    )
    add_explain_arguments(exp)

    from jobs.extract import add_arguments as extract_arguments

    ext = sub.add_parser(
        "extract",
        help="the smallest re-auditable slice of a dump behind a finding, or of a "
        "transactional id, group or partition",
    )
    extract_arguments(ext)

    demo = sub.add_parser("demo", help="write a sample dump and inspect it")
    demo.add_argument("--out", default="demo-output", help="where to write the sample dump")
    demo.add_argument("--json", action="store_true")
    demo.add_argument("--no-spark", action="store_true", help="skip the Spark decode step")
    demo.add_argument("--master", default=None, help="Spark master (default: local mode)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return guarded(_dispatch, args)


def entry() -> int:
    """The ``logreplay`` command: :func:`main`, then the process ends (:func:`jobs.exits.ended`)."""
    from jobs.exits import ended

    return ended(main())


def _dispatch(args) -> int:
    if args.command == "dump":
        missing = [p for p in args.paths if not os.path.exists(p)]
        if missing:
            print(
                f"logreplay dump: no such file or directory: {', '.join(missing)}",
                file=sys.stderr,
            )
            return USAGE
        from jobs.dump import run

        return run(args.paths, args.deep, args.json, args.verify, args.limit)
    if args.command == "schema":
        return _schema(args.tables)
    if args.command == "explain":
        from jobs.findings import explain

        return explain(args)
    if args.command == "demo":
        from jobs.demo import run as demo

        return demo(args.out, args.json, spark=not args.no_spark, master=args.master)
    jobs = {
        "decode": "jobs.decode",
        "audit": "jobs.audit",
        "gate": "jobs.gate",
        "synth": "jobs.synth",
        "report": "jobs.report",
        "findings": "jobs.findings",
        "extract": "jobs.extract",
    }
    if args.command in jobs:
        import importlib

        return importlib.import_module(jobs[args.command]).run(args)
    return USAGE


def _schema(tables: list[str]) -> int:
    from decoders.schemas import TABLES, describe

    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        print(
            f"unknown table(s): {', '.join(unknown)}; known: {', '.join(TABLES)}", file=sys.stderr
        )
        return USAGE
    for t in tables or TABLES:
        print(f"{t}:")
        for name, typ, doc in describe(t):
            print(f"  {name:<26} {typ:<40} {doc}")
    return OK


if __name__ == "__main__":
    sys.exit(entry())
