"""`logreplay gate DIR [--conf FILE]`: the data-quality gate over an audit's (or a decode's)
output directory.

Runs the Great Expectations suites of :mod:`validations` on the tables under DIR, writes the
validation result (`DIR/gate/result.json`) and the Data Docs (`DIR/gate/data_docs/index.html`),
records the verdict in `DIR/summary.json` for downstream tasks, prints which expectations failed
and the findings behind them, and exits 1 on failure. Runs the same under
`spark-submit jobs/gate.py DIR ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

SUMMARY, MANIFEST, GATE = "summary.json", "_manifest.json", "gate"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from jobs.session import add_job_arguments

    p.add_argument("dir", metavar="DIR", help="an audit or decode output directory")
    add_job_arguments(p)


def run(args) -> int:
    from jobs.session import job_conf

    conf = job_conf(args)
    if not os.path.isdir(args.dir):
        print(f"logreplay gate: no such directory: {args.dir}", file=sys.stderr)
        return 2
    recorded = _recorded(args.dir)
    if recorded is None:
        print(
            f"logreplay gate: {args.dir} holds no {SUMMARY} or {MANIFEST}: "
            "give the --out directory of `logreplay audit` or `logreplay decode`",
            file=sys.stderr,
        )
        return 2
    from jobs.output import run_id_of
    from jobs.session import spark_session

    spark = spark_session(args.master, "logreplay-gate", conf)
    run_id = run_id_of(args.run_id or recorded.get("run_id"), args.logical_date)
    logical_date = args.logical_date or recorded.get("logical_date")
    result = gate(spark, args.dir, args.dir, conf, run_id, logical_date, recorded.get("rows"))
    summary_path = os.path.join(args.dir, SUMMARY)
    if os.path.exists(summary_path):
        recorded["gate"] = result.summary()
        _write_json(summary_path, recorded)
    print(result.verdict(), file=sys.stderr)
    print(json.dumps({"run_id": run_id, "gate": result.summary()}))
    return 0 if result.success else 1


def gate(spark, tables_dir: str, out: str, conf: dict, run_id: str, logical_date, rows):
    """Validate ``tables_dir`` into a staged gate directory, then swap it in as ``out/gate``."""
    from jobs.output import publish
    from validations.gate import run_gate

    staging = os.path.join(os.path.abspath(out), f".staging-gate-{run_id}")
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(os.path.join(staging, GATE))
    result = run_gate(
        spark, tables_dir, os.path.join(staging, GATE), conf, run_id, logical_date, rows
    )
    publish(staging, out, [GATE], f"gate-{run_id}")
    if result.docs_index:
        from validations.gate import DOCS

        result.docs_index = os.path.join(out, GATE, DOCS, "index.html")
    return result


def _recorded(path: str) -> dict | None:
    for name in (SUMMARY, MANIFEST):
        full = os.path.join(path, name)
        if os.path.exists(full):
            with open(full) as f:
                return json.load(f)
    return None


def _write_json(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True, default=str)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    from jobs.cli import guarded

    p = argparse.ArgumentParser(prog="gate", description=__doc__.splitlines()[0])
    add_arguments(p)
    return guarded(run, p.parse_args(argv))


if __name__ == "__main__":  # spark-submit jobs/gate.py DIR ...
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
