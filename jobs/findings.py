"""`logreplay findings OUT`: an audit's findings exported for other tools, and
`logreplay explain OUT ID`: one finding, its evidence, its next step and the logs around it.

Both read the committed tables the run's ``summary.json`` lists (local or S3 outputs, through
the output's pyarrow filesystem), a Parquet batch at a time, without Spark: a findings table
of any size streams through, and explaining a finding reads only the rows of the logs around
it (a filter per file).
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from typing import IO, Any

from jobs.output import SUMMARY, OutputDir
from replay.findings import SEVERITIES, at_least

FORMATS = ("jsonl", "csv")
AROUND = 8  # rows of each log shown on either side of the finding


def add_arguments(p) -> None:
    p.add_argument("out", metavar="OUT", help="an audit's output directory (local or s3://)")
    p.add_argument("--format", choices=FORMATS, default="jsonl")
    p.add_argument("--to", metavar="FILE", default=None, help="write here (default: stdout)")
    p.add_argument("--kind", action="append", default=None, help="only this kind (repeatable)")
    p.add_argument("--min-severity", choices=SEVERITIES, default=None,
                   help="only findings at this severity or above")  # fmt: skip


def add_explain_arguments(p) -> None:
    p.add_argument("out", metavar="OUT", help="an audit's output directory (local or s3://)")
    p.add_argument("id", metavar="ID", help="the finding's fingerprint (a prefix will do)")
    p.add_argument("--json", action="store_true", help="one JSON document instead of tables")


class Output:
    """A committed audit run's tables, read with pyarrow a batch at a time."""

    def __init__(self, uri: str) -> None:
        self.out = OutputDir(uri)
        summary, _ = self.out.read_json(SUMMARY)
        if summary is None:
            raise FileNotFoundError(f"{uri}: no {SUMMARY}; run `logreplay audit --out` first")
        self.summary = summary

    def batches(self, table: str, columns: list[str] | None = None, where=None) -> Iterator:
        """The table's record batches (``where``: a pyarrow dataset filter expression)."""
        import pyarrow.dataset as ds

        entry = (self.summary.get("tables") or {}).get(table) or {}
        for f in entry.get("files") or []:
            if not f.get("rows"):
                continue
            data = ds.dataset(self.out.path(f["path"]), format="parquet", filesystem=self.out.fs)
            have = [c for c in columns if c in data.schema.names] if columns else None
            yield from data.to_batches(columns=have, filter=where)

    def rows(self, table: str, where=None, columns: list[str] | None = None) -> list[dict]:
        return [r for b in self.batches(table, columns, where) for r in b.to_pylist()]


def selected(src: Output, kinds: list[str] | None, min_severity: str | None) -> Iterator[dict]:
    """Every finding (as a row), those of ``kinds`` at ``min_severity`` or above."""
    for batch in src.batches("findings"):
        for r in batch.to_pylist():
            if kinds and r["kind"] not in kinds:
                continue
            if min_severity and not at_least(r["severity"], min_severity):
                continue
            yield r


def export(rows: Iterator[dict], fmt: str, sink: IO[str]) -> int:
    """Findings as JSON lines (evidence as an object) or CSV (evidence as its JSON text)."""
    n = 0
    writer = None
    for r in rows:
        if fmt == "jsonl":
            doc = {**r, "evidence": _evidence(r.get("evidence"))}
            sink.write(json.dumps(doc, sort_keys=False, default=str) + "\n")
        else:
            if writer is None:
                writer = csv.DictWriter(sink, fieldnames=list(r))
                writer.writeheader()
            writer.writerow(r)
        n += 1
    return n


def _evidence(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def run(args) -> int:
    src = Output(args.out)
    rows = selected(src, args.kind, args.min_severity)
    if args.to:  # a local path or a URI (s3://...), through its pyarrow filesystem
        import io

        from decoders.filesystems import filesystem

        fs, path = filesystem(args.to)
        with fs.open_output_stream(path) as raw, io.TextIOWrapper(raw, "utf-8", newline="") as sink:
            n = export(rows, args.format, sink)
    else:
        n = export(rows, args.format, sys.stdout)
    print(f"logreplay findings: {n} findings", file=sys.stderr)
    return 0


# -- explain -----------------------------------------------------------------------------------


def find(src: Output, fid: str) -> dict:
    """The finding whose fingerprint starts with ``fid``; a prefix naming several is refused."""
    import pyarrow.compute as pc

    hits = []
    for batch in src.batches("findings"):
        if "fingerprint" not in batch.schema.names:
            raise LookupError("this run's findings have no fingerprints (a run before them)")
        mask = pc.starts_with(batch.column("fingerprint"), fid)
        hits += batch.filter(mask).to_pylist()
    if not hits:
        raise LookupError(f"no finding with fingerprint {fid!r}")
    if len({h["fingerprint"] for h in hits}) > 1:
        names = ", ".join(sorted({h["fingerprint"] for h in hits})[:5])
        raise LookupError(f"{fid!r} names several findings ({names}): give more of it")
    return hits[0]


def context(src: Output, f: dict) -> dict[str, list[dict]]:
    """The logs around a finding: its partition's transactions, its producer's coordinator
    transactions, its group's commits of the partition; a few rows each side."""
    import pyarrow.dataset as ds

    out: dict[str, list[dict]] = {}
    field = ds.field
    same = field("cluster") == f["cluster"]
    if f.get("topic") is not None and f.get("partition") is not None:
        place = same & (field("topic") == f["topic"]) & (field("partition") == f["partition"])
        at = f.get("first_offset")
        if at is not None:
            lo, hi = at - 50 * AROUND, (f.get("last_offset") or at) + 50 * AROUND
            near = place & (field("first_offset") >= lo) & (field("first_offset") <= hi)
            txns = src.rows("transactions", near, TXN_COLUMNS)
            txns.sort(key=lambda t: t["first_offset"] if t["first_offset"] is not None else -1)
            out["transactions"] = _around(txns, at, "first_offset")
        if f.get("group_id") is not None:
            commits = src.rows("offset_timeline",
                               place & (field("group_id") == f["group_id"]), COMMIT_COLUMNS)  # fmt: skip
            commits.sort(key=lambda c: c.get("effective_log_offset") or 0)
            out["commits"] = _around(commits, at, "committed_offset")
    if f.get("producer_id") is not None and f.get("transactional_id"):
        coord = src.rows(
            "coordinator_transactions",
            same & (field("producer_id") == f["producer_id"])
            & (field("transactional_id") == f["transactional_id"]),
            COORD_COLUMNS,
        )  # fmt: skip
        coord.sort(key=lambda c: (c.get("log_partition") or 0, c.get("first_log_offset") or 0))
        epoch = f.get("producer_epoch")
        out["coordinator"] = _around(coord, epoch, "data_epoch")
    return out


TXN_COLUMNS = ["producer_id", "producer_epoch", "first_offset", "last_offset", "marker_offset",
               "outcome", "record_count", "first_timestamp", "marker_timestamp"]  # fmt: skip
COMMIT_COLUMNS = ["commit_log_offset", "effective_log_offset", "committed_offset",
                  "previous_offset", "generation", "group_state", "producer_id",
                  "effective_timestamp"]  # fmt: skip
COORD_COLUMNS = ["data_epoch", "marker_epoch", "outcome", "state_at_end", "partitions",
                 "start_timestamp", "complete_timestamp", "log_partition", "first_log_offset"]  # fmt: skip


def _around(rows: list[dict], at: Any, key: str) -> list[dict]:
    """At most ``AROUND`` rows on either side of the first row at or past ``at``."""
    if at is None:
        return rows[-2 * AROUND :]
    i = next((n for n, r in enumerate(rows) if r.get(key) is not None and r[key] >= at),
             len(rows))  # fmt: skip
    return rows[max(0, i - AROUND) : i + AROUND]


def explain(args) -> int:
    src = Output(args.out)
    try:
        f = find(src, args.id)
    except LookupError as e:
        print(f"logreplay explain: {e}", file=sys.stderr)
        return 2
    logs = context(src, f)
    if args.json:
        print(json.dumps({"finding": {**f, "evidence": _evidence(f.get("evidence"))},
                          "context": logs}, default=str, indent=2))  # fmt: skip
        return 0
    _print(f, logs)
    return 0


def _print(f: dict, logs: dict[str, list[dict]]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    console.print(f"[{f['severity']}] {f['kind']} · {f['fingerprint']}", markup=False)
    console.print(f["message"], markup=False)
    place = Table(title="where and evidence", show_header=False)
    for col in ("cluster", "topic", "partition", "producer_id", "producer_epoch",
                "transactional_id", "group_id", "first_offset", "last_offset", "record_count"):  # fmt: skip
        if f.get(col) is not None:
            place.add_row(col, str(f[col]))
    ev = _evidence(f.get("evidence"))
    for k, v in ev.items() if isinstance(ev, dict) else [("evidence", ev)]:
        place.add_row(k, json.dumps(v, default=str) if isinstance(v, (dict, list)) else str(v))
    console.print(place)
    if f.get("remediation"):
        console.print("next step (never run by logreplay):")
        console.print(f["remediation"], markup=False, soft_wrap=True)
    for name, rows in logs.items():
        if not rows:
            continue
        t = Table(title=f"{name} around it")
        for col in rows[0]:
            t.add_column(col)
        for r in rows:
            t.add_row(*[_cell(r[c]) for c in rows[0]])
        console.print(t)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v, default=str)
    return str(v)
