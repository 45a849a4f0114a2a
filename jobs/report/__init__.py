"""`logreplay report DIR` (and `logreplay audit --report`): an audit's output as one HTML page.

``DIR/report/index.html`` holds a verdict header, overview plots and one card per finding
(grouped by kind, worst first, capped per kind) with its evidence, the `logreplay dump`
command showing its raw batches and a plot of its context. The page carries its styles,
plotly.js and its data inside, so it opens without network (where dumps usually are).
It is built from the committed tables of the run (:mod:`jobs.output`) by Spark: aggregates,
the findings shown and the windows around them are computed in the executors (a handful of
jobs whatever the number of cards), and only those reach the driver that writes the page.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from jobs.report import context, overview, page, selection
from jobs.report.source import AuditOutput, rows

CARDS_PER_KIND = 20  # finding cards per kind; the rest are counted
PLOTS_PER_KIND = 3  # cards per kind that carry a context plot
REPORT = "report/index.html"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from jobs.progress import add_quiet
    from jobs.session import add_job_arguments

    p.add_argument("dir", metavar="DIR", help="an audit's output directory (path or URI)")
    add_options(p)
    add_job_arguments(p, run=False)
    add_quiet(p)


def add_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `report` and `audit --report`."""
    p.add_argument(
        "--include-payloads",
        action="store_true",
        help="show payload bytes in findings' evidence (default: length and hash only)",
    )
    p.add_argument(
        "--cards-per-kind", type=int, default=CARDS_PER_KIND, help="finding cards per kind"
    )


def build(
    spark,
    uri: str,
    include_payloads: bool = False,
    cards_per_kind: int = CARDS_PER_KIND,
    plots_per_kind: int = PLOTS_PER_KIND,
) -> tuple[str, dict]:
    """Write the report of the audit output at ``uri``; its path and a few facts about it."""
    src = AuditOutput(uri, spark)
    imported()
    return write(src, gather(src, include_payloads, cards_per_kind, plots_per_kind))


@dataclass
class Gathered:
    """What the page shows, computed by Spark from the run's tables (:func:`gather`); the
    page itself is made from it and the run's summary by :func:`write`."""

    started: float
    include_payloads: bool
    counts: dict
    order: list
    chosen: dict
    evidence: dict
    related: dict
    plots: dict
    segment_of: object
    inputs: dict
    overview: list = field(default_factory=list)


def imported() -> None:
    """Import what the report's threads use, on the calling thread: concurrent first imports
    of pyspark's modules can fail, and `logreplay audit` gathers the report in a thread of
    its own while its main thread runs the gate (jobs.audit)."""
    from pyspark.sql import Window, functions  # noqa: F401
    from pyspark.sql.utils import is_remote

    import replay.plan  # noqa: F401  (local_frame: the cards' keys)

    if not is_remote():  # the classic session's Window, imported on first use
        import pyspark.sql.classic.window  # noqa: F401


def gather(src: AuditOutput, include_payloads: bool = False,
           cards_per_kind: int = CARDS_PER_KIND, plots_per_kind: int = PLOTS_PER_KIND) -> Gathered:  # fmt: skip
    """Every query of the report, run by Spark: the counts, the findings shown, the windows
    around them, the overview's aggregates. Needs the run's tables, not its verdict: an audit
    gathers while its gate runs. The caller has run :func:`imported`."""
    started = time.monotonic()
    roots = list(src.summary.get("inputs") or [])
    # Spark runs the independent queries' small jobs side by side (driver threads)
    with ThreadPoolExecutor(4, thread_name_prefix="logreplay-report") as pool:
        counted = pool.submit(selection.counts_by_kind, src)
        facts_of_inputs = pool.submit(overview.inputs, src)
        overview_plots = pool.submit(overview.plots, src)
        chosen = pool.submit(selection.shown, src, cards_per_kind).result()
        counts = counted.result()
        order = selection.kinds_worst_first(counts)
        cards = [(kind, i, f) for kind in order for i, f in enumerate(chosen.get(kind, []))]
        evidence = {
            n: selection.evidence(f, include_payloads) for n, (_k, _i, f) in enumerate(cards)
        }
        related = _related(cards, evidence)
        finder = pool.submit(_segment_finder, src, [f for _k, _i, f in cards])
        plots = _contexts(pool, src, cards, evidence, roots, plots_per_kind)
        return Gathered(started, include_payloads, counts, order, chosen, evidence, related,
                        plots, finder.result(), facts_of_inputs.result(),
                        overview_plots.result())  # fmt: skip


def write(src: AuditOutput, got: Gathered, summary: dict | None = None) -> tuple[str, dict]:
    """The page made from what :func:`gather` computed and the run's ``summary`` (its
    verdict; default the source's), written as ``report/index.html``; its path and facts."""
    summary = src.summary if summary is None else summary
    roots = list(summary.get("inputs") or [])
    doc = page.Page(f"logreplay report {summary.get('run_id', '')}")
    doc.add(page.header(summary, got.inputs, got.counts, got.order))
    doc.add("<div class='grid' id='overview-plots'>")
    for fig in got.overview:
        doc.add(f"<div class='panel'>{doc.figure(fig)}</div>")
    doc.add("</div>")
    n = 0
    for kind in got.order:
        shown = got.chosen.get(kind, [])
        doc.add(page.kind_heading(kind, got.counts[kind], len(shown)))
        if selection.family(kind) == "commits":
            doc.add(
                "<div class='note'>Offset commit records name no member: a commit is "
                "attributed to the members the group's assignment (group metadata) gave the "
                "partition to in the generation it landed in.</div>"
            )
        for f in shown:
            ev = got.evidence[n]
            command = selection.dump_command(f, ev, roots, got.segment_of)
            doc.add(page.card(f, ev, command, doc.figure(got.plots.get(n)), n,
                              got.related.get(n, [])))  # fmt: skip
            n += 1
        doc.add("</section>")
    doc.add(
        "<p class='note'>Made by logreplay from the committed tables of run "
        f"{page._esc(summary.get('run_id'))}. Payloads "
        f"{'included' if got.include_payloads else 'shown as length and hash only'}.</p></main>"
    )
    data = doc.render().encode()
    src.out.write_bytes(REPORT, data)
    facts = {
        "path": src.out.child(REPORT),
        "bytes": len(data),
        "cards": n,
        "figures": len(doc.figures),
        "context_plots": len(got.plots),
        "findings": sum(sum(v.values()) for v in got.counts.values()),
        "seconds": round(time.monotonic() - got.started, 2),
    }
    return facts["path"], facts


def _related(cards: list, evidence: dict) -> dict[int, list[tuple[int, str]]]:
    """Cards whose findings share an open transaction (a hanging transaction and the missing
    marker or unlisted write that left it open): card number -> the others' (number, kind)."""
    by_key: dict[str, list[tuple[int, str]]] = {}
    for n, (kind, _i, _f) in enumerate(cards):
        key = evidence[n].get("open_transaction")
        if key:
            by_key.setdefault(key, []).append((n, kind))
    return {n: [o for o in group if o[0] != n] for group in by_key.values() if len(group) > 1
            for n, _ in group}  # fmt: skip


# the context plots of each family of findings (replay.findings.FAMILIES): (source, cards,
# evidence, dump roots) -> card number -> plot
PLOTS = {
    "transactions": lambda src, cards, evidence, roots: context.transaction_contexts(src, cards),
    "reads": lambda src, cards, evidence, roots: context.read_contexts(src, cards, evidence),
    "commits": lambda src, cards, evidence, roots: context.commit_contexts(src, cards, evidence),
    "sequences": lambda src, cards, evidence, roots: context.sequence_contexts(
        src, cards, evidence, roots
    ),
}


def _contexts(pool, src: AuditOutput, cards: list, evidence: dict, roots: list[str],
              plots_per_kind: int) -> dict:  # fmt: skip
    """card number -> its context plot, for the first ``plots_per_kind`` cards of each kind;
    every family's cards answered together (:mod:`jobs.report.context`), the families side
    by side in ``pool``."""
    families: dict[str, dict[int, dict]] = {}
    for n, (kind, i, f) in enumerate(cards):
        fam = selection.family(kind)
        if fam is not None and i < plots_per_kind:
            families.setdefault(fam, {})[n] = f
    running = [
        pool.submit(PLOTS[fam], src, cards, evidence, roots) for fam, cards in families.items()
    ]
    plots: dict = {}
    for done in running:
        plots |= done.result()
    return plots


def _segment_finder(src: AuditOutput, shown: list[dict]):
    """(topic, partition, offset) -> the log segment file holding that offset, for the
    findings shown, from the decoding's accounting of files: the replayed replica's broker
    first, the segment with the greatest base offset not above the offset; without one, the
    earliest segment. One Spark job for every card."""
    import pyarrow as pa
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from replay.plan import local_frame

    wanted = sorted(
        {(f["topic"], f["partition"], f.get("first_offset")) for f in shown
         if f.get("topic") is not None and f.get("partition") is not None},
        key=lambda k: (k[0], k[1], k[2] is not None, k[2] or 0),
    )  # fmt: skip
    segs, parts = src.frame("segments"), src.frame("partitions", ["topic", "partition", "broker"])
    found: dict[tuple, str] = {}
    if wanted and segs is not None:
        keys = F.broadcast(local_frame(
            src.spark, [(n, t, p, o) for n, (t, p, o) in enumerate(wanted)],
            pa.schema([("card", pa.int32()), ("topic", pa.string()), ("partition", pa.int32()),
                       ("centre", pa.int64())])))  # fmt: skip
        logs = segs.where(F.col("kind") == "log").select("topic", "partition", "broker", "file",
                                                         "base_offset")  # fmt: skip
        if parts is not None:
            replayed = parts.select("topic", "partition", "broker", F.lit(1).alias("replayed"))
            logs = logs.join(replayed, ["topic", "partition", "broker"], "left")
        else:
            logs = logs.withColumn("replayed", F.lit(None))
        c = logs.join(keys, ["topic", "partition"])
        pref = F.coalesce(F.col("replayed"), F.lit(0))
        base = F.coalesce(F.col("base_offset"), F.lit(0))
        fits = F.col("centre").isNull() | (base <= F.col("centre"))
        best = Window.partitionBy("card").orderBy(
            fits.desc(), F.when(fits, pref).otherwise(-pref).desc(),
            F.when(fits, base).otherwise(-base).desc(), F.col("file"),
        )  # fmt: skip
        picked = c.select("card", "file", F.row_number().over(best).alias("_n")).where("_n = 1")
        found = {wanted[r["card"]]: r["file"] for r in rows(picked)}

    def find(topic: str, partition: int, offset: int | None) -> str | None:
        return found.get((topic, partition, offset))

    return find


def run(args) -> int:
    """`logreplay report DIR`: the report of a committed audit, computed by a Spark session
    (local mode unless ``--master`` or spark-submit says otherwise)."""
    from jobs import progress
    from jobs.exits import USAGE
    from jobs.output import SUMMARY, OutputDir, forward_env, prepare_storage
    from jobs.session import job_conf, spark_session

    conf = job_conf(args)
    env = prepare_storage(conf)
    if OutputDir(args.dir).read_json(SUMMARY)[0] is None:
        print(f"logreplay report: {args.dir} holds no {SUMMARY}: give the --out directory of "
              "`logreplay audit`", file=sys.stderr)  # fmt: skip
        return USAGE
    progress.phase("starting Spark")
    spark = spark_session(args.master, "logreplay-report", conf)
    forward_env(spark, env)
    progress.phase("report")
    _, facts = build(spark, args.dir, args.include_payloads, args.cards_per_kind)
    print(
        f"report: {facts['path']} ({facts['bytes'] / 1e6:.1f} MB, {facts['cards']} finding "
        f"cards of {facts['findings']} findings, {facts['figures']} plots, "
        f"{facts['seconds']} s)",
        file=sys.stderr,
    )
    progress.result(facts["path"])
    return 0
