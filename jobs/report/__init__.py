"""`logreplay report DIR` (and `logreplay audit --report`): an audit's output as one HTML page.

``DIR/report/index.html`` holds a verdict header, overview plots and one card per finding
(grouped by kind, worst first, capped per kind) with its evidence, the `logreplay dump`
command showing its raw batches and a plot of its context. The page carries its styles,
plotly.js and its data inside, so it opens without network (where dumps usually are).
It is built from the committed tables of the run (:mod:`jobs.output`), by pyarrow scans that
project and filter at the read: only aggregates and windows around the shown findings reach
the process that writes the page.
"""

from __future__ import annotations

import argparse
import sys
import time

from jobs.report import context, overview, page, selection
from jobs.report.source import AuditOutput

CARDS_PER_KIND = 20  # finding cards per kind; the rest are counted
PLOTS_PER_KIND = 3  # cards per kind that carry a context plot
REPORT = "report/index.html"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="an audit's output directory (path or URI)")
    add_options(p)


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
    uri: str,
    include_payloads: bool = False,
    cards_per_kind: int = CARDS_PER_KIND,
    plots_per_kind: int = PLOTS_PER_KIND,
) -> tuple[str, dict]:
    """Write the report of the audit output at ``uri``; its path and a few facts about it."""
    started = time.monotonic()
    src = AuditOutput(uri)
    summary = src.summary
    roots = list(summary.get("inputs") or [])
    counts = selection.counts_by_kind(src)
    order = selection.kinds_worst_first(counts)
    doc = page.Page(f"logreplay report {summary.get('run_id', '')}")
    doc.add(page.header(summary, overview.inputs(src), counts, order))
    doc.add("<div class='grid' id='overview-plots'>")
    for fig in overview.plots(src):
        doc.add(f"<div class='panel'>{doc.figure(fig)}</div>")
    doc.add("</div>")
    segment_of = _segment_finder(src)
    cards = plotted = 0
    chosen = selection.shown(src, cards_per_kind)
    for kind in order:
        rows = chosen.get(kind, [])
        doc.add(page.kind_heading(kind, counts[kind], len(rows)))
        fam = selection.family(kind)
        if fam == "commits":
            doc.add(
                "<div class='note'>Offset commit records name no member: a commit is "
                "attributed to the members the group's assignment (group metadata) gave the "
                "partition to in the generation it landed in.</div>"
            )
        for i, f in enumerate(rows):
            ev = selection.evidence(f, include_payloads)
            fig = _context(src, fam, f, ev, roots) if i < plots_per_kind else None
            plotted += fig is not None
            doc.add(
                page.card(f, ev, selection.dump_command(f, ev, roots, segment_of), doc.figure(fig))
            )
            cards += 1
        doc.add("</section>")
    doc.add(
        "<p class='note'>Made by logreplay from the committed tables of run "
        f"{page._esc(summary.get('run_id'))}. Payloads "
        f"{'included' if include_payloads else 'shown as length and hash only'}.</p></main>"
    )
    data = doc.render().encode()
    src.out.write_bytes(REPORT, data)
    facts = {
        "path": src.out.child(REPORT),
        "bytes": len(data),
        "cards": cards,
        "figures": len(doc.figures),
        "context_plots": plotted,
        "findings": sum(sum(v.values()) for v in counts.values()),
        "seconds": round(time.monotonic() - started, 2),
    }
    return facts["path"], facts


def _context(src: AuditOutput, fam: str | None, f: dict, ev: dict, roots: list[str]):
    if fam == "transactions":
        return context.transaction_context(src, f)
    if fam == "reads":
        return context.read_context(src, f, ev)
    if fam == "commits":
        return context.commit_context(src, f, ev)
    if fam == "sequences":
        return context.sequence_context(f, ev, roots)
    return None


def _segment_finder(src: AuditOutput):
    """(topic, partition, offset) -> the log segment file holding that offset, from the
    decoding's accounting of files (the replayed replica's broker first)."""
    import pyarrow.compute as pc

    cache: dict[tuple, list[dict]] = {}

    def find(topic: str, partition: int, offset: int | None) -> str | None:
        key = (topic, partition)
        if key not in cache:
            where = (
                (pc.field("topic") == topic)
                & (pc.field("partition") == partition)
                & (pc.field("kind") == "log")
            )
            brokers = {r["broker"] for r in src.rows("partitions", ["broker"],
                       (pc.field("topic") == topic) & (pc.field("partition") == partition))}  # fmt: skip
            segs = src.rows("segments", ["broker", "file", "base_offset"], where)
            segs.sort(key=lambda s: (s["broker"] not in brokers, -(s["base_offset"] or 0)))
            cache[key] = segs
        for s in cache[key]:
            if offset is None or (s["base_offset"] or 0) <= offset:
                return s["file"]
        return cache[key][-1]["file"] if cache[key] else None

    return find


def run(args) -> int:
    _, facts = build(args.dir, args.include_payloads, args.cards_per_kind)
    print(
        f"report: {facts['path']} ({facts['bytes'] / 1e6:.1f} MB, {facts['cards']} finding "
        f"cards of {facts['findings']} findings, {facts['figures']} plots, "
        f"{facts['seconds']} s)",
        file=sys.stderr,
    )
    print(facts["path"])
    return 0
