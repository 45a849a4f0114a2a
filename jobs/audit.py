"""`logreplay audit INPUT... --out DIR [--conf FILE]`: replay a dump and report findings.

Writes every audit table as Parquet under `DIR/<table>/` and `DIR/summary.json` (findings per
kind and severity, inputs, bytes, run id). Output is staged and swapped in by rename, so a rerun
with the same run id replaces it. Runs the same under `spark-submit jobs/audit.py ...`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import uuid


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="dump roots: paths or URIs")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--conf", default=None, help="YAML file with an `audit:` section")
    p.add_argument("--master", default=None, help="Spark master (default: local mode)")
    p.add_argument("--run-id", default=None, help="identifies the run (default: generated)")


def run(args) -> int:
    import decoders

    missing = [p for p in args.inputs if "://" not in p and not os.path.exists(p)]
    if missing:
        print(f"logreplay audit: no such path: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.conf and not os.path.exists(args.conf):
        print(f"logreplay audit: --conf {args.conf}: no such file", file=sys.stderr)
        return 2
    files = decoders.discover(args.inputs)
    if not files:
        print(f"logreplay audit: no Kafka files under {', '.join(args.inputs)}", file=sys.stderr)
        return 2
    from replay import load_conf

    conf = load_conf(args.conf)

    from pyspark.sql import functions as F

    from jobs.decode import _publish, _versions
    from jobs.session import spark_session
    from replay.spark import audit

    spark = spark_session(args.master, "logreplay-audit")
    run_id = args.run_id or f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    out = os.path.abspath(args.out)
    staging = os.path.join(out, f".staging-{run_id}")
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    tables = audit(spark, args.inputs, conf)
    rows = {}
    for name, df in tables.items():
        path = os.path.join(staging, name)
        df.write.mode("overwrite").parquet(path)
        rows[name] = spark.read.parquet(path).count()
    findings = spark.read.parquet(os.path.join(staging, "findings"))
    by_kind = findings.groupBy("kind", "severity").count().collect()  # a few rows
    summary = {
        "run_id": run_id,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "inputs": args.inputs,
        "files": len(files),
        "bytes": sum(f.size for f in files),
        "rows": rows,
        "findings": {
            "total": rows["findings"],
            "by_kind": {r["kind"]: 0 for r in by_kind},
            "by_severity": {},
        },
        "conf": conf,
        "versions": _versions(spark),
    }
    for r in by_kind:
        summary["findings"]["by_kind"][r["kind"]] += r["count"]
        sev = summary["findings"]["by_severity"]
        sev[r["severity"]] = sev.get(r["severity"], 0) + r["count"]
    top = (
        findings.orderBy(
            F.desc(F.expr("array_position(array('info','warning','error','critical'), severity)"))
        )
        .limit(30)
        .select("severity", "kind", "topic", "partition", "group_id", "message")
        .collect()
    )
    with open(os.path.join(staging, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, sort_keys=True, default=str)
    _publish(staging, out, [*tables, "summary.json"], run_id)
    _print(summary, top)
    return 0


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
        console.print(f"[{r['severity']}] {r['kind']}: {r['message']}")
    print(json.dumps({"run_id": summary["run_id"], "findings": summary["findings"]}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="audit", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":  # spark-submit jobs/audit.py INPUT... --out DIR
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
