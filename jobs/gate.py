"""`logreplay gate DIR [--conf FILE]`: the data-quality gate over an audit's (or a decode's)
output directory.

Runs the Great Expectations suites of :mod:`validations` on the tables DIR's commit record
lists (DIR a local path or a URI: `s3://`, `gs://`, `hdfs://`, `file://`), writes the
validation result (`DIR/gate/result.json`) and the Data Docs (`DIR/gate/data_docs/index.html`),
records the verdict in `DIR/summary.json` for downstream tasks, prints which expectations failed
and the findings behind them, and exits 1 on failure. Runs the same under
`spark-submit jobs/gate.py DIR ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

SUMMARY, MANIFEST, GATE = "summary.json", "_manifest.json", "gate"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from jobs.progress import add_quiet
    from jobs.session import add_job_arguments

    p.add_argument("dir", metavar="DIR", help="an audit or decode output directory")
    add_job_arguments(p)
    add_quiet(p)


def run(args) -> int:
    from jobs.exits import FAILED, OK, USAGE
    from jobs.output import OutputDir, committed, prepare_storage
    from jobs.session import job_conf

    conf = job_conf(args)
    env = prepare_storage(conf)
    out = OutputDir(args.dir)
    if not out.exists():
        print(f"logreplay gate: no such directory: {args.dir}", file=sys.stderr)
        return USAGE
    name, recorded = committed(out)
    if recorded is None:
        print(
            f"logreplay gate: {args.dir} holds no {SUMMARY} or {MANIFEST}: "
            "give the --out directory of `logreplay audit` or `logreplay decode`",
            file=sys.stderr,
        )
        return USAGE
    from jobs import progress
    from jobs.output import commit, forward_env, run_id_of
    from jobs.session import spark_session

    progress.phase("starting Spark")
    import pandas  # noqa: F401  what the main thread imports meanwhile, first
    import pyspark.sql.functions  # noqa: F401

    load_in_background()  # Great Expectations imported while Spark starts
    spark = spark_session(args.master, "logreplay-gate", conf)
    forward_env(spark, env)
    run_id = run_id_of(args.run_id or recorded.get("run_id"), args.logical_date)
    logical_date = args.logical_date or recorded.get("logical_date")
    progress.phase("validating")
    result, written = validate(spark, out, recorded, conf, run_id, logical_date)
    progress.phase("commit")
    if name == SUMMARY:  # the verdict joins the run's commit record, rewritten whole
        recorded["gate"] = result.summary()
        commit(out, SUMMARY, recorded, (None, None), (GATE, written))
    else:  # a decode's manifest holds no verdict: only older gate files go
        for rel, _ in out.files_under(GATE):
            if rel not in written:
                out.delete(rel)
    print(result.verdict(), file=sys.stderr)
    progress.result(json.dumps({"run_id": run_id, "gate": result.summary()}))
    return OK if result.success else FAILED


def validate(spark, out, recorded: dict, conf: dict, run_id: str, logical_date):
    """Validate the tables ``recorded`` (a commit record) lists, reading only its files;
    publish the result and Data Docs under ``out/gate``, file by file (the Data Docs are
    built in a local temporary directory: Great Expectations writes through ``os``).
    Returns the result and the gate files written."""
    from jobs.output import LAYOUT_VERSION, committed_rows, read_columns, read_tables
    from validations.gate import DOCS, run_gate

    frames = read_tables(spark, out, recorded)
    on_driver = None
    if recorded.get("layout") == LAYOUT_VERSION:  # its tables' files listed (jobs.output)

        def on_driver(table: str, columns: list[str], most_rows: int):
            entry = recorded["tables"][table]
            if not columns:
                return committed_rows(out, entry, most_rows)
            return read_columns(out, entry, columns, most_rows)

    with tempfile.TemporaryDirectory(prefix="logreplay-gate-") as tmp:
        local = os.path.join(tmp, GATE)
        os.makedirs(local)
        result = run_gate(spark, frames, local, conf, run_id, logical_date, recorded.get("rows"),
                          on_driver)  # fmt: skip
        written = out.upload_tree(local, GATE, kill="gate:publishing")
    if result.docs_index:
        result.docs_index = out.child(f"{GATE}/{DOCS}/index.html")
    return result, written


# what the gate imports of Great Expectations (validations.gate, validations.suites)
GE_MODULES = (
    "great_expectations",
    "great_expectations.expectations.row_conditions",
    "great_expectations.data_context.types.base",
    "great_expectations.core.run_identifier",
    "validations.gate",
)


def load_in_background():
    """Import Great Expectations in a thread of its own: about 3 s of pure Python (it loads
    scipy, altair, pyspark.ml, ...), which `audit --gate` and `logreplay gate` spend while
    their driver waits on Spark starting (and scanning and writing the tables), not after. The
    gate that follows finds the modules loaded (or, had the import failed here, fails
    importing them itself). Callers import first whatever their own threads import
    meanwhile: first imports of modules that import each other, in two threads at once, can
    deadlock."""
    import importlib
    import threading

    def load() -> None:
        for name in GE_MODULES:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the gate imports it again and reports why
                return

    thread = threading.Thread(target=load, name="logreplay-gate-import", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> int:
    from jobs.exits import job_main

    return job_main("gate", __doc__, add_arguments, run, argv)


if __name__ == "__main__":  # spark-submit jobs/gate.py DIR ...
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jobs.exits import ended

    sys.exit(ended(main()))
