"""`logreplay demo`: write the sample dump, then dump, verify and summarise it."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

import decoders
from jobs import dump
from jobs.sample import write_sample_dump


def run(out: str, as_json: bool) -> int:
    console = Console(stderr=True)
    write_sample_dump(out)
    console.rule(f"sample dump written to {out}")
    status = dump.run(
        [f"{out}/broker-1/orders-1", f"{out}/broker-2/orders-1"],
        deep=True,
        as_json=as_json,
        do_verify=False,
        limit=None,
    )
    tables = decoders.read_dump([out], ["segments", "errors", "offset_commits", "txn_log"])
    seg = tables["segments"]
    summary = Table(title="byte accounting per file kind")
    for col in ("kind", "files", "bytes", "valid", "padding", "corrupt"):
        summary.add_column(col, justify="right" if col != "kind" else "left")
    grouped = seg.group_by("kind").aggregate(
        [
            ("size", "count"),
            ("size", "sum"),
            ("bytes_valid", "sum"),
            ("bytes_padding", "sum"),
            ("bytes_corrupt", "sum"),
        ]
    )
    for r in grouped.to_pylist():
        summary.add_row(
            r["kind"],
            str(r["size_count"]),
            str(r["size_sum"]),
            str(r["bytes_valid_sum"]),
            str(r["bytes_padding_sum"]),
            str(r["bytes_corrupt_sum"]),
        )
    console.print(summary)
    errs = Table(title="error rows (decode what is decodable, report the rest)")
    for col in ("file", "position", "kind", "reason"):
        errs.add_column(col)
    for r in tables["errors"].to_pylist():
        errs.add_row(r["file"], str(r["position"]), r["kind"], r["reason"])
    console.print(errs)
    console.print(
        f"offset commits: {tables['offset_commits'].num_rows}, transaction-log records: {tables['txn_log'].num_rows}"
    )
    problems = decoders.verify.verify([f"{out}/broker-1"]) if hasattr(decoders, "verify") else None
    if problems is None:
        from decoders.verify import verify

        problems = verify([f"{out}/broker-1"])
    console.print(
        f"verify broker-1 (indexes, .txnindex, snapshots against the log): {len(problems)} inconsistencies"
    )
    return status
