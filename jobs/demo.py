"""`logreplay demo`: simulate a cluster with anomalies, inspect a partition with `dump`, audit
the dump with Spark (local mode by default), and print the findings by kind next to what the
simulator injected."""

from __future__ import annotations

import json
import os

from rich.console import Console
from rich.table import Table

from jobs import dump
from jobs.exits import FAILED, OK, UNEXPECTED


def run(out: str, as_json: bool, spark: bool = True, master: str | None = None) -> int:
    from simulator import synth

    console = Console(stderr=True, width=140)
    sim = os.path.join(out, "dump")
    [truth] = synth("demo", sim, seed=0)
    console.rule(f"1. simulated dump in {sim} (truth in {sim}/truth.json); one partition:")
    status = dump.run(
        [os.path.join(sim, "broker-1", "orders-1")],
        deep=False,
        as_json=as_json,
        do_verify=True,
        limit=12,
    )
    if not spark:
        return status
    console.rule("2. logreplay audit --gate (Spark): replay the dump, findings, the gate")
    from jobs.audit import main as audit
    from replay.truthcheck import compare

    audited = os.path.join(out, "audit")
    gated = audit([sim, "--out", audited, "--gate", *(["--master", master] if master else [])])
    if gated not in (OK, FAILED):
        return UNEXPECTED
    import pyarrow.parquet as pq

    findings = pq.read_table(os.path.join(audited, "findings")).to_pylist()
    with open(os.path.join(sim, "truth.json")) as f:
        res = compare(json.load(f), findings)
    t = Table(title="injected by the simulator vs found by the audit")
    for col in ("kind", "where", "records", "found"):
        t.add_column(col)
    for a in truth.anomalies:
        ok = not any(
            m["kind"] == a.kind and m.get("partition") == a.partition and m.get("topic") == a.topic
            for m in res["missed"]
        )
        where = f"{a.topic}-{a.partition}" + (f" group={a.group_id}" if a.group_id else "")
        t.add_row(a.kind, where, str(a.record_count or ""), "yes" if ok else "NO")
    console.print(t)
    console.print(
        f"{len(res['found'])}/{len(truth.anomalies)} injected anomalies found, "
        f"{len(res['unexpected'])} unexpected findings; tables under {audited}/"
    )
    console.print(
        f"gate: {'passed' if gated == OK else 'FAILED (exit 1): a pipeline would stop here'}; "
        f"Data Docs at {os.path.join(audited, 'gate', 'data_docs', 'index.html')}"
    )
    # the demo dump holds injected anomalies, so the gate is expected to fail on it
    return OK if not res["missed"] and not res["unexpected"] and gated == FAILED else FAILED
