"""`logreplay demo`: write a sample dump, inspect it with `dump`, then decode it with the Spark
job (local mode by default) and summarise what came out."""

from __future__ import annotations

import json
import os

from rich.console import Console
from rich.table import Table

from jobs import dump
from jobs.sample import write_sample_dump


def run(out: str, as_json: bool, spark: bool = True, master: str | None = None) -> int:
    console = Console(stderr=True)
    sample = os.path.join(out, "dump")
    write_sample_dump(sample)
    console.rule(
        f"1. sample dump written to {sample}: logreplay dump of one partition and its damaged replica"
    )
    status = dump.run(
        [f"{sample}/broker-1/orders-1", f"{sample}/broker-2/orders-1"],
        deep=True,
        as_json=as_json,
        do_verify=True,
        limit=None,
    )
    if not spark:
        return status
    console.rule("2. logreplay decode (Spark) of the whole dump into Parquet tables")
    from jobs.decode import main as decode

    decoded = os.path.join(out, "decoded")
    if decode([sample, "--out", decoded, *(["--master", master] if master else [])]) != 0:
        return 3
    with open(os.path.join(decoded, "_manifest.json")) as f:
        manifest = json.load(f)
    rows = Table(title=f"rows per table in {decoded}")
    rows.add_column("table")
    rows.add_column("rows", justify="right")
    for table, n in manifest["rows"].items():
        rows.add_row(table, str(n))
    console.print(rows)
    b = manifest["bytes"]
    console.print(
        f"bytes: {b['size']} in {b['files']} files = {b['valid']} valid + {b['padding']} padding + "
        f"{b['corrupt']} corrupt; {b['errors']} error rows (see {decoded}/errors)"
    )
    return status
