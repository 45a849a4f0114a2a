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
import textwrap
from collections.abc import Callable
from contextlib import contextmanager

from decoders import seams

TOP_FINDINGS = 30  # the worst findings printed at the end of a run
TOP_REMEDIATIONS = 5  # ... the first of them with their next step (replay.remediation)
WRITERS = 4  # tables written at once (threads of the driver, each submitting its Spark jobs)
# the longest a run waits for its first intermediate table's plan before its copies start
# (jobs.scan.Scratch.first_planned): a bound, not a cost (a plan takes a second or two)
PLANNING_WAIT = 30.0
# a table's files: one per this many bytes of dump (its rows grow with the dump's batches)
DUMP_BYTES_PER_FILE = 2 << 30
BATCHES_PER_FILE = 1 << 20  # ... or per this many of its batches
# tables small enough for one file each (one row per partition, group generation, file...)
SINGLE_FILE = {
    "findings", "partitions", "coordinator_transactions", "group_generations", "segments",
    "errors",
}  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    from jobs.progress import add_quiet
    from jobs.session import add_job_arguments

    p.add_argument("inputs", nargs="+", metavar="INPUT", help="dump roots: paths or URIs")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument(
        "--gate", action="store_true", help="run the data-quality gate; exit 1 if it fails"
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="then write DIR/report/index.html, the findings as one offline HTML page",
    )
    p.add_argument(
        "--since",
        metavar="PREVIOUS_OUT",
        help="the previous run's output (or 'auto': the latest earlier day's beside --out): "
        "tell findings new, provisional, still present or gone (findings_history; the gate "
        "fails on new and provisional ones by default); the run reads only the bytes past "
        "where the previous run's replays ended, going on from the state it published "
        "(docs/incremental.md)",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="with --since: read and replay the whole dump again (every byte verified anew), "
        "the findings still told new, provisional, still present or gone against the "
        "previous run's",
    )
    from jobs.report import add_options as report_options

    report_options(p)
    add_job_arguments(p)
    add_quiet(p)


def run(args) -> int:
    from jobs import progress
    from jobs.exits import USAGE
    from jobs.output import SUMMARY, start_run
    from jobs.session import DumpListing, full_jit, interpreted_if_small, job_conf
    from replay.plan import replay_spec

    conf = job_conf(args)
    # the dump listed once per run, in a thread while Spark starts (a dump without Kafka files
    # and a refused --since are said once the session has started)
    listing = DumpListing.started(
        "audit", args.inputs, lambda listed: replay_spec(args.inputs, conf.audit, listed), conf
    )
    if listing is None:
        return USAGE
    jit = full_jit(conf, listing.walked())
    progress.phase("starting Spark")
    started = start_run(args, conf, "logreplay-audit", SUMMARY, jit)
    listed = listing.result()
    if listed is None:
        return USAGE
    files, spec = listed[0], listing.derived()
    try:
        previous = _previous(args, conf, spec)
    except ValueError as e:  # history.Refused
        print(f"logreplay audit: --since refused: {e}", file=sys.stderr)
        return USAGE
    if previous is not None:  # the scan's tasks find where its replays ended (replay.points)
        from dataclasses import replace

        from jobs.history import points_of, previous_tables

        tables = None if getattr(args, "full", False) else previous_tables(previous)
        spec = replace(spec, points=points_of(previous), previous=tables)
    progress.total_bytes(sum(f.size for f in files))
    _load_gate(args)  # with --gate: Great Expectations loaded while the scan starts
    with interpreted_if_small(started.spark, conf) as small:
        return _audit(args, conf, files, spec, previous, started, small)


def _audit(args, conf, files, spec, previous, started, small) -> int:
    """:func:`run` once its session has started: the audit, its summary, gate and report.
    ``small``: jobs.session.interpreted_if_small's, told whether the scan found a small dump."""
    from jobs import progress
    from jobs.exits import FAILED, OK
    from jobs.output import SUMMARY, commit
    from jobs.resilience import run_resilient

    # a file whose decoding fails the job after every task attempt is left out, reported as
    # a decode_failed error (an error finding: a gate fails), and the run finishes
    (entries, checked), skipped = run_resilient(
        started.spark,
        files,
        lambda skip: audited(started, files, conf, spec, skip, small),
        decode_options=conf.decode,
    )
    if getattr(args, "since", None):
        from jobs import history

        day = history.day_text(args.logical_date)
        entries[history.HISTORY] = history.written(
            started.spark, started.out, entries, previous, day, started.run_id, started.key
        )
    summary, top = summarised(args, started, files, conf, entries, checked, skipped)
    if getattr(args, "since", None):
        summary["since"] = previous.uri if previous else None
        by_status, new = history.statuses(started.out, entries[history.HISTORY])
        summary["findings"]["by_status"] = by_status
        top.sort(key=lambda f: f.get("fingerprint") not in new)  # new first, stable
        for f in top:
            f["_known"] = f.get("fingerprint") not in new
    verdict, gate_files = None, None
    with _gathering(args, started, summary) as report:
        if args.gate:
            from jobs.gate import GATE, validate

            progress.phase("gate" if report is None else "gate, the report's queries alongside")
            verdict, written = validate(
                started.spark, started.out, summary, conf, started.run_id, args.logical_date
            )
            summary["gate"] = verdict.summary()
            gate_files = (GATE, written)
        seams.reached("audit:staged")
        progress.phase("commit")
        commit(started.out, SUMMARY, summary, started.previous, gate_files)
        _print(summary, top)
        if report is not None:
            from jobs.report import write

            progress.phase("report")
            src, gathered = report
            path, _ = write(src, gathered.result(), summary)
            print(f"report: {path}", file=sys.stderr)
    if verdict is not None:
        print(verdict.verdict(), file=sys.stderr)
        return OK if verdict.success else FAILED
    return OK


@contextmanager
def _gathering(args, started, summary: dict):
    """With ``--report``: the report's queries (jobs.report.gather) running in a thread of
    their own over the tables just written, while the gate validates the same tables and the
    run commits; the page itself is written after the commit, with the verdict. Gives
    (source, future) or None; the thread is waited for however the block ends."""
    if not getattr(args, "report", False):
        yield None
        return
    from concurrent.futures import ThreadPoolExecutor

    from jobs.report import gather, imported
    from jobs.report.source import AuditOutput

    imported()  # here, not in the thread: concurrent first imports of pyspark can fail
    src = AuditOutput(started.out.uri, started.spark, summary)
    with ThreadPoolExecutor(1, thread_name_prefix="logreplay-report") as pool:
        yield src, pool.submit(gather, src, args.include_payloads, args.cards_per_kind)


def _load_gate(args) -> None:
    """With ``--gate``: Great Expectations imported in a thread of its own while the scan
    starts and the tables are written (about 3 s of pure Python; jobs.gate.load_in_background),
    after importing here what the run's own threads import: first imports of modules that
    import each other, in two threads at once, can deadlock.

    Why once the session is up, not while Spark starts: while the driver JVM started, the
    import held the GIL that each of the session's calls into the JVM waits for: Spark's start
    took 3.1-3.3 s instead of 1.9-2.1 s, and the demo's ``audit --gate --report`` 20.7-22.0 s
    against 20.2-20.3 s once moved (alternating, docs/benchmarks.md). It then filled the core
    the scan's first tasks left idle while the Python workers' daemon imported their modules;
    that daemon now starts with the session's context (jobs.session), so on two cores the
    import competes with the driver's planning after the scan instead (the demo's ``audit
    --gate --report`` as long as before, where ``audit`` alone ends 2.6 s sooner)."""
    if not args.gate:
        return
    import pandas  # noqa: F401
    import pyarrow.dataset  # noqa: F401
    import pyspark.sql.functions  # noqa: F401

    import jobs.copies  # noqa: F401
    import jobs.history  # noqa: F401
    import jobs.scan  # noqa: F401
    import replay.plan  # noqa: F401
    from jobs.gate import load_in_background

    if getattr(args, "report", False):
        from jobs.report import imported

        imported()
    load_in_background()


def _previous(args, conf, spec):
    """The previous output ``--since`` names, checked before any work (jobs.history), against
    the clusters of this dump's layout (``spec``: replay.replicas.replay_spec)."""
    if not getattr(args, "since", None):
        return None
    from importlib.metadata import version

    from jobs import history
    from jobs.output import LAYOUT_VERSION, run_dir, run_id_of

    out = run_dir(args.out, run_id_of(args.run_id, args.logical_date), conf["output"]["layout"])
    clusters = set(spec.clusters.values())
    return history.resolved(args.since, out, history.day_text(args.logical_date), clusters, conf,
                            version("logreplay"), LAYOUT_VERSION)  # fmt: skip


def audited(started, files, conf, spec, skip: dict[str, str],
            small: Callable[[bool], None]) -> tuple[dict, dict]:  # fmt: skip
    """One attempt of the audit (jobs.resilience): the dump decoded once, by one scan whose
    tasks replay every replica they read (replay.scan_task) and write what the audit's stages
    read into the run's scratch area; the tables written; the scratch area gone once they are
    written and summarised. (the tables' entries, the summary's clusters and checks)
    ``small`` is told, once the scan is done, whether the stages after it run over few rows
    (replay.plan.Audit.single)."""
    from jobs import progress
    from jobs.output import read_rows
    from jobs.scan import decoded_once
    from replay.plan import CLUSTER, Audit, summary_of

    progress.phase("decoding: one scan of the dump, then the replay")
    spark, out = started.spark, started.out
    if spec.layout is not None:
        print_layout(spec.layout.described)
    with decoded_once(spark, files, conf.decode, out, started.key, skip, spec) as scratch:
        audit = Audit(spark, conf.audit, scratch)
        small(audit.single)  # before run(): it starts the intermediate stages' jobs
        tables = audit.run()
        progress.phase("replay: writing tables")
        batches = sum(r.crc_valid_batches for r in scratch.replicas)
        spread = output_files(sum(f.size for f in files), batches, spark)
        entries = write_tables(spark, tables, scratch, out, started.key, spread)
        # the summary from the files just written (a few rows: one per check, the clusters
        # of the partitions), read here rather than by running their queries again
        checks = read_rows(out, entries["checks"])
        clusters = {r[CLUSTER] for r in read_rows(out, entries["partitions"], [CLUSTER])}
        coverage = read_rows(out, entries["coverage"], ["family", "judged", "reason", "unit", "count"])  # fmt: skip
        layout = spec.layout.described if spec.layout is not None else None
        summary = summary_of(checks, clusters, coverage, layout)
        # the bytes this run's scan read (a run going on from a previous one's points reads
        # what is past them; the dump's whole size is the summary's "bytes")
        summary["bytes_read"] = scratch.accounting["size"]
        if spec.points:  # --since: how each log went on from the previous run's point
            from replay.points import since_summary

            summary["since_points"] = since_summary(scratch.replicas, spec.points)
        return {n: entries[n] for n in tables}, summary


def write_tables(spark, tables, scratch, out, key: str, spread: int) -> dict:
    """Every table of the audit written (their entries for the commit record): the ones that
    are the scan's rows copied by jobs of pyarrow copies (jobs.copies: one for those that join
    a lookup, after it, one for the others), the others written
    from their queries, concurrently: most are small, and a small table's job is mostly the
    driver's planning and scheduling, which leaves the executors idle unless other jobs are
    running (Spark schedules the jobs of several threads)."""
    from concurrent.futures import ThreadPoolExecutor

    from jobs.copies import copy_tables
    from jobs.output import write_table

    def files_of(name: str) -> int:
        return 1 if name in SINGLE_FILE else spread

    def write(name: str) -> dict:
        entry = write_table(tables[name], out, name, files_of(name), None, key, "audit:writing",
                            tables.single)  # fmt: skip
        seams.reached("audit:staged-table")
        return entry

    def copy(joined: bool) -> dict:
        """The copied tables that join a lookup (``joined``: once their lookups are written
        in the scratch area, by a small query each) or the others."""
        copies = {n: how for n, how in tables.copies.items() if (how.lookup is not None) == joined}
        lookups = {
            name: tables.written[name]() if name in tables.written
            else write_table(tables.lookups[name](), scratch.area, f"lookup/{name}", 1, None,
                             key, "audit:writing", tables.single)
            for name in sorted({how.lookup for how in copies.values() if how.lookup})
        }  # fmt: skip
        wanted = {n: (how, files_of(n)) for n, how in copies.items()}
        entries = copy_tables(spark, scratch, wanted, out, key, "audit:writing", lookups)
        seams.reached("audit:staged-table")
        return entries

    queried = [n for n in tables if n not in tables.copies]
    scratch.first_planned(PLANNING_WAIT)
    with ThreadPoolExecutor(WRITERS) as pool:
        copied = [pool.submit(copy, joined) for joined in (False, True)]
        entries = dict(zip(queried, pool.map(write, queried), strict=True))
        for c in copied:
            entries |= c.result()
        return entries


def summarised(args, started, files, conf, entries: dict, checked: dict, skipped) -> tuple:
    """The run's summary (summary.json, before the gate's verdict) and its worst findings."""
    from jobs.history import day_text, verdict_config
    from jobs.output import LAYOUT_VERSION, redacted, versions

    rows = {name: e["rows"] for name, e in entries.items()}
    by_kind, top = findings_overview(started.out, entries["findings"], TOP_FINDINGS)
    summary = {
        "run_id": started.run_id,
        "run_key": started.key,
        "layout": LAYOUT_VERSION,
        "logical_date": args.logical_date,
        "inputs": args.inputs,
        "files": len(files),
        "bytes": sum(f.size for f in files),
        "files_left_out": skipped,
        "rows": rows,
        "findings": _counts(by_kind, rows["findings"]),
        **checked,
        "conf": redacted(conf),
        "verdict_config": verdict_config(conf),
        "day": day_text(args.logical_date),
        "versions": versions(started.spark),
        "gate": None,
        "tables": entries,
    }
    return summary, top


def output_files(dump_bytes: int, batches: int, spark) -> int:
    """How many files each table that grows with the dump is written as: one per
    :data:`DUMP_BYTES_PER_FILE` of dump or :data:`BATCHES_PER_FILE` of its batches, whichever
    gives more, at most ``spark.sql.shuffle.partitions``. The same input and configuration
    give the same files (the run's bytes do not depend on the cluster); a small dump's tables
    are not spread over many small files, each one more task and file to write, and a dump
    of small batches (a Streams thread's transaction every 100 ms: a transaction's row and
    two LSO changes per partition and marker) is not written by one task sorting millions of
    rows."""
    most = int(spark.conf.get("spark.sql.shuffle.partitions"))
    wanted = max(-(-dump_bytes // DUMP_BYTES_PER_FILE), -(-batches // BATCHES_PER_FILE))
    return max(1, min(most, wanted))


def findings_overview(out, entry: dict, limit: int) -> tuple[list[dict], list[dict]]:
    """The findings per (kind, severity) and the ``limit`` worst ones (severity, then kind,
    topic, partition, first offset), read from the table just written with pyarrow, a batch at
    a time: the console's summary needs no Spark job, and the driver holds ``limit`` rows."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from replay.findings import SEVERITIES

    columns = ["severity", "kind", "topic", "partition", "first_offset", "group_id", "message",
               "remediation", "fingerprint"]  # fmt: skip
    # Spark's ascending order puts nulls first: a key's validity sorts before the key
    keyed = columns[1:5]
    order = [("rank", "descending")]
    for c in keyed:
        order += [(f"{c}?", "ascending"), (c, "ascending")]
    severities = pa.array(SEVERITIES)
    counts: dict[tuple, int] = {}
    top = None
    for f in entry["files"]:
        if not f["rows"]:
            continue
        with out.fs.open_input_file(out.path(f["path"])) as src:
            pf = pq.ParquetFile(src)
            have = [c for c in columns if c in pf.schema_arrow.names]  # an older run's table
            for batch in pf.iter_batches(columns=have):
                t = pa.Table.from_batches([batch])
                for c in columns:
                    if c not in have:
                        t = t.append_column(c, pa.nulls(t.num_rows, pa.string()))
                per = t.group_by(["kind", "severity"]).aggregate([([], "count_all")])
                for r in per.to_pylist():
                    key = (r["kind"], r["severity"])
                    counts[key] = counts.get(key, 0) + r["count_all"]
                rank = pc.fill_null(pc.index_in(t.column("severity"), severities), -1)
                t = t.append_column("rank", rank)
                for c in keyed:
                    t = t.append_column(f"{c}?", pc.is_valid(t.column(c)))
                top = t if top is None else pa.concat_tables([top, t])
                top = top.take(pc.sort_indices(top, order)[:limit])
    by_kind = [{"kind": k, "severity": s, "count": n} for (k, s), n in sorted(counts.items())]
    return by_kind, [] if top is None else top.select(columns).to_pylist()


def _counts(by_kind, total: int) -> dict:
    counts = {"total": total, "by_kind": {}, "by_severity": {}}
    for r in by_kind:
        counts["by_kind"][r["kind"]] = counts["by_kind"].get(r["kind"], 0) + r["count"]
        sev = counts["by_severity"]
        sev[r["severity"]] = sev.get(r["severity"], 0) + r["count"]
    return counts


def print_layout(described: dict) -> None:
    """How the dump's directories were read as clusters and brokers, and why (at the start
    of a run: a wrong grouping makes every check after it wrong)."""
    from rich.console import Console

    console = Console(stderr=True, width=160)
    clusters = described.get("clusters", {})
    console.print(f"layout: {len(clusters)} cluster(s)", markup=False)
    for name, brokers in clusters.items():
        shown = ", ".join(
            f"{b} ({', '.join(dirs)})" if len(dirs) > 1 else b
            for b, dirs in sorted(brokers.items())
        )
        console.print(f"  {name}: brokers {shown}", markup=False)
    for why in described.get("reasons", []):
        console.print(f"  - {why}", markup=False)
    anchors = described.get("alignment_anchors", [])
    if anchors:  # a slice of a dump (docs/extract.md): its audit aligns from what the dump's proved
        console.print(f"  - {len(anchors)} alignment anchor(s) read from alignment.json: "
                      "those producers' partitions align from the pairs the whole dump's audit "
                      "matched", markup=False)  # fmt: skip
    stale = described.get("stale_replicas", [])
    if stale:
        console.print(f"  - {len(stale)} stale replica(s) kept apart (stale_replica findings)", markup=False)  # fmt: skip
    unlisted = described.get("unlisted_directories", [])
    if unlisted:
        console.print(f"  - {len(unlisted)} directory(ies) could not be listed, their files "
                      "not in the run (unlisted_directory findings)", markup=False)  # fmt: skip


def since_line(points: dict) -> str:
    """The console's line on how the logs went on since the previous run's points."""
    mb = 1 << 20
    line = (f"since the previous run: {points['went_on']} of {points['points']} replicas went "
            f"on from where their replay ended, reading {points['bytes_after'] / mb:.1f} MB past "
            f"those points of {points['log_bytes'] / mb:.1f} MB")  # fmt: skip
    changes = points.get("changes") or {}
    if changes:
        line += "; changed below the point: " + ", ".join(f"{k} {v}" for k, v in changes.items())
    if points.get("truncated"):
        line += "; truncated below it (an unclean election, a restore?): " + ", ".join(
            points["truncated"]
        )
    if points.get("points_without_replica"):
        line += f"; {points['points_without_replica']} replicas of it not in this dump"
    return line


def _print(summary: dict, top) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True, width=160)
    coverage = summary.get("coverage") or {}
    if coverage:
        c = Table(title="coverage: what the audit could judge")
        for col in ("family", "judged", "of", "not judged, largest reasons"):
            c.add_column(col, justify="right" if col in ("judged", "of") else "left")
        for family, f in coverage.items():
            share = "-" if f["share"] is None else f"{f['share']:.1%}"
            reasons = "; ".join(f"{r}: {n}" for r, n in list(f["reasons"].items())[:2])
            weak = "; ".join(f"{r}: {n}" for r, n in (f.get("weakened") or {}).items())
            reasons += (
                f"{'; ' if reasons and weak else ''}{'judged weaker, ' + weak if weak else ''}"
            )
            c.add_row(family, share, f"{f['seen']} {f['unit']}", reasons)
        console.print(c)
    points = summary.get("since_points")
    if points:
        console.print(since_line(points), markup=False, soft_wrap=True)
    title = f"findings: {summary['findings']['total']}"
    status = summary["findings"].get("by_status")
    if status is not None:  # --since: what the previous run did not find comes first
        title += (f" ({status['new']} new, {status.get('provisional', 0)} provisional, "
                  f"{status['still present']} known; {status['gone']} gone)")  # fmt: skip
    console.print(title, markup=False, soft_wrap=True)  # a table's title wraps to its width
    t = Table()
    t.add_column("kind")
    t.add_column("count", justify="right")
    for kind, n in sorted(summary["findings"]["by_kind"].items()):
        t.add_row(kind, str(n))
    console.print(t)
    for i, r in enumerate(top):
        known = " (known)" if r.get("_known") else ""
        console.print(f"[{r['severity']}]{known} {r['kind']}: {r['message']}", markup=False)
        if i < TOP_REMEDIATIONS and r.get("remediation"):  # what to run or check next
            console.print(textwrap.indent(r["remediation"], "    "), markup=False, soft_wrap=True)
    from jobs import progress

    progress.result(json.dumps({"run_id": summary["run_id"], "findings": summary["findings"]}))


def main(argv: list[str] | None = None) -> int:
    from jobs.exits import job_main

    return job_main("audit", __doc__, add_arguments, run, argv)


if __name__ == "__main__":  # spark-submit jobs/audit.py INPUT... --out DIR
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jobs.exits import ended

    sys.exit(ended(main()))
