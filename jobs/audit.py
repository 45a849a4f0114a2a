"""`logreplay audit INPUT... --out DIR [--conf FILE] [--set K=V] [--gate]`: replay a dump and
report findings.

Writes every audit table as Parquet under `DIR/<table>/` and `DIR/summary.json` (findings per
kind and severity, inputs, bytes, run id, logical date, gate verdict, the files of every table).
DIR is a local path or a URI (`s3://`, `gs://`, `hdfs://`, `file://`). summary.json, written
last, commits the run (see :mod:`jobs.output`); rows are written in a fixed order under stable
file names, so a rerun with the same run id leaves the same bytes. With `--gate`, the gate of
:mod:`validations` runs on the run's tables before the commit and writes `DIR/gate/`; exit 1
when it fails. Runs the same under `spark-submit jobs/audit.py ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# tables small enough for one file each (one row per partition, group generation, file...)
SINGLE_FILE = {
    "findings", "partitions", "coordinator_transactions", "group_generations", "segments",
    "errors",
}  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    from jobs.session import add_job_arguments

    p.add_argument("inputs", nargs="+", metavar="INPUT", help="dump roots: paths or URIs")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument(
        "--gate", action="store_true", help="run the data-quality gate; exit 1 if it fails"
    )
    add_job_arguments(p)


def run(args) -> int:
    import decoders
    from jobs.session import job_conf

    conf = job_conf(args)
    missing = [p for p in args.inputs if "://" not in p and not os.path.exists(p)]
    if missing:
        print(f"logreplay audit: no such path: {', '.join(missing)}", file=sys.stderr)
        return 2
    files = decoders.discover(args.inputs)
    if not files:
        print(f"logreplay audit: no Kafka files under {', '.join(args.inputs)}", file=sys.stderr)
        return 2

    from pyspark.sql import functions as F

    from jobs.output import (
        LAYOUT_VERSION,
        SUMMARY,
        OutputDir,
        commit,
        forward_env,
        kill_point,
        prepare_storage,
        read_table,
        redacted,
        run_dir,
        run_id_of,
        run_key,
        versions,
        write_table,
    )
    from jobs.resilience import run_resilient
    from jobs.session import spark_session
    from replay.spark import audit, audit_summary

    env = prepare_storage(conf)
    spark = spark_session(args.master, "logreplay-audit", conf)
    forward_env(spark, env)
    run_id = run_id_of(args.run_id, args.logical_date)
    out = OutputDir(run_dir(args.out, run_id, conf["output"]["layout"]))
    previous = out.read_json(SUMMARY)  # the commit this run replaces
    key = run_key(run_id)
    spread = int(spark.conf.get("spark.sql.shuffle.partitions"))

    def attempt(skip: dict[str, str]):
        tables = audit(spark, args.inputs, conf, skip)
        entries = {}
        for name, df in tables.items():
            spread_of = 1 if name in SINGLE_FILE else spread
            entries[name] = write_table(df, out, name, spread_of, None, key, "audit:writing")
            kill_point("audit:staged-table")
        return tables, entries

    # a file whose decoding fails the job after every task attempt is left out, reported as
    # a decode_failed error (an error finding: a gate fails), and the run finishes
    (tables, entries), skipped = run_resilient(spark, files, attempt, decode_options=conf["decode"])
    rows = {name: e["rows"] for name, e in entries.items()}
    findings = read_table(spark, out, "findings", entries["findings"])
    by_kind = findings.groupBy("kind", "severity").count().collect()  # a few rows
    summary = {
        "run_id": run_id,
        "run_key": key,
        "layout": LAYOUT_VERSION,
        "logical_date": args.logical_date,
        "inputs": args.inputs,
        "files": len(files),
        "bytes": sum(f.size for f in files),
        "files_left_out": skipped,
        "rows": rows,
        "findings": _counts(by_kind, rows["findings"]),
        **audit_summary(tables),
        "conf": redacted(conf),
        "versions": versions(spark),
        "gate": None,
        "tables": entries,
    }
    verdict, gate_files = None, None
    if args.gate:
        from jobs.gate import GATE, validate

        verdict, written = validate(spark, out, summary, conf, run_id, args.logical_date)
        summary["gate"] = verdict.summary()
        gate_files = (GATE, written)
    top = (
        findings.orderBy(
            F.desc(F.expr("array_position(array('info','warning','error','critical'), severity)")),
            "kind",
            "topic",
            "partition",
            "first_offset",
        )  # fmt: skip
        .limit(30)
        .select("severity", "kind", "topic", "partition", "group_id", "message")
        .collect()
    )
    kill_point("audit:staged")
    commit(out, SUMMARY, summary, previous, gate_files)
    _print(summary, top)
    if verdict is not None:
        print(verdict.verdict(), file=sys.stderr)
        return 0 if verdict.success else 1
    return 0


def _counts(by_kind, total: int) -> dict:
    counts = {"total": total, "by_kind": {}, "by_severity": {}}
    for r in by_kind:
        counts["by_kind"][r["kind"]] = counts["by_kind"].get(r["kind"], 0) + r["count"]
        sev = counts["by_severity"]
        sev[r["severity"]] = sev.get(r["severity"], 0) + r["count"]
    return counts


def _print(summary: dict, top) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True, width=160)
    t = Table(title=f"findings: {summary['findings']['total']}")
    t.add_column("kind")
    t.add_column("count", justify="right")
    for kind, n in sorted(summary["findings"]["by_kind"].items()):
        t.add_row(kind, str(n))
    console.print(t)
    for r in top:
        console.print(f"[{r['severity']}] {r['kind']}: {r['message']}", markup=False)
    print(json.dumps({"run_id": summary["run_id"], "findings": summary["findings"]}))


def main(argv: list[str] | None = None) -> int:
    from jobs.cli import guarded

    p = argparse.ArgumentParser(prog="audit", description=__doc__.splitlines()[0])
    add_arguments(p)
    return guarded(run, p.parse_args(argv))


if __name__ == "__main__":  # spark-submit jobs/audit.py INPUT... --out DIR
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
