"""The end of `logreplay audit`: the findings per kind and severity and the worst findings,
read from the written table with pyarrow a batch at a time (no Spark job). Spark-free."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.audit import findings_overview
from jobs.output import OutputDir
from replay.findings import SEVERITIES


def _write(path, rows: list[dict]) -> dict:
    schema = pa.schema(
        [("severity", pa.string()), ("kind", pa.string()), ("topic", pa.string()),
         ("partition", pa.int32()), ("first_offset", pa.int64()), ("group_id", pa.string()),
         ("message", pa.string())]
    )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    # small row groups: the overview sees several batches
    pq.write_table(pa.Table.from_pylist(rows, schema), path, row_group_size=3)
    return {"path": f"findings/{path.name}", "rows": len(rows)}


def test_the_overview_counts_every_finding_and_keeps_the_worst_in_order(tmp_path):
    rows = []
    for i in range(40):
        sev = SEVERITIES[i % len(SEVERITIES)]
        rows.append({"severity": sev, "kind": f"k{i % 3}", "topic": None if i % 5 == 0 else "t",
                     "partition": None if i % 5 == 0 else i % 4, "first_offset": 100 - i,
                     "group_id": None, "message": f"m{i}"})  # fmt: skip
    rows.append({"severity": "unheard-of", "kind": "k0", "topic": "t", "partition": 0,
                 "first_offset": 0, "group_id": "g", "message": "odd"})  # fmt: skip
    entry = {"files": [
        _write(tmp_path / "findings" / "part-0.parquet", rows[:25]),
        {"path": "findings/none.parquet", "rows": 0},
        _write(tmp_path / "findings" / "part-1.parquet", rows[25:]),
    ]}  # fmt: skip
    by_kind, top = findings_overview(OutputDir(str(tmp_path)), entry, 7)
    counts = {}
    for r in rows:
        counts[(r["kind"], r["severity"])] = counts.get((r["kind"], r["severity"]), 0) + 1
    assert {(r["kind"], r["severity"]): r["count"] for r in by_kind} == counts

    def key(r):  # Spark's orderBy: severity worst first, then ascending with nulls first
        rank = SEVERITIES.index(r["severity"]) if r["severity"] in SEVERITIES else -1
        return (-rank, r["kind"], *((v is not None, v) for v in
                (r["topic"], r["partition"], r["first_offset"])))  # fmt: skip

    # a table written before findings had a remediation and a fingerprint: read all the same
    assert top == [
        {**r, "remediation": None, "fingerprint": None} for r in sorted(rows, key=key)[:7]
    ]
    assert top[-1]["severity"] != "unheard-of"
    empty = findings_overview(OutputDir(str(tmp_path)), {"files": []}, 7)
    assert empty == ([], [])
