"""The one-pass scan (jobs.scan) that `decode` and `audit` run in their Spark tasks, run here
in-process task by task: every table it writes holds exactly the rows the single-process
decoders give, including for segments split into ranges and holding corrupt bytes, and its byte
accounting adds up per file."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

import decoders
from decoders.spark import _struct, table_schema
from jobs.output import OutputDir
from jobs.scan import accounting, merge_partials, plan_scan, scan_options, scan_ranges
from simulator import synth

RANGE = 64 << 10  # small enough to split the scenario's segments into several ranges
CONF = {"verify_crc": True, "window_bytes": 64 << 10, "memory_budget_mb": 64}


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A transactional dump (3 MB) with segments of ~150 KB, one of them damaged in two of its
    ranges."""
    out = tmp_path_factory.mktemp("scan") / "dump"
    synth("clean_transactions", str(out), seed=5, scale=0.15)
    found = decoders.discover([str(out)])
    logs = sorted((f for f in found if f.kind == "log" and f.size > RANGE), key=lambda f: f.path)
    assert logs, "the scenario must have segments larger than one range"
    with open(logs[0].path, "r+b") as f:
        f.seek(logs[0].size // 3)
        f.write(b"\xab" * 3000)  # garbage inside one range
        f.seek(logs[0].size * 2 // 3)
        f.write(b"\x00" * 200)  # a zeroed hole inside another
    return out


def _scan(dump, out, tables, deep):
    files = decoders.discover([str(dump)])
    opts = scan_options(lambda t, a: _struct(table_schema(t, a)), tables, deep, CONF, None)
    tasks = plan_scan(files, tables, RANGE)
    reports = []
    for i, ranges in enumerate(tasks):
        reports += scan_ranges(ranges, opts, str(out), "0123456789ab", i, 0)
    return files, tasks, reports


def _rows(out, reports, table) -> list[str]:
    rows = []
    for r in reports:
        if r["kind"] == "file" and r["table"] == table:
            t = pq.read_table(f"{out}/{r['path']}")
            for row in t.to_pylist():
                if r["partition"] is not None or "topic" in table_schema(table, False).names:
                    row["topic"] = r["partition"]
                rows.append(row)
    return rows


def _values(rows, cols) -> list[str]:
    return sorted(json.dumps([r[c] for c in cols], default=str) for r in rows)


@pytest.mark.parametrize("deep", [True, False])
def test_one_pass_gives_every_table_of_the_decoders(damaged, tmp_path, deep):
    tables = [t for t in decoders.TABLES if deep or t not in decoders.RECORD_TABLES]
    out = tmp_path / "out"
    files, tasks, reports = _scan(damaged, out, tables, deep)
    assert any(r.start > 0 for t in tasks for r in t), "some segment is split"
    want = decoders.read_dump([str(damaged)], tables, deep=deep)
    seg_rows, whole = merge_partials(reports)
    assert whole == []  # no file was unreadable or changed while read
    for table in tables:
        got = _rows(out, reports, table)
        if table == "segments":
            got += seg_rows
        expected = want[table].to_pylist()
        # the files hold the types Spark reads (microsecond UTC timestamps, no unsigned ints):
        # compare every other column value for value
        cols = [f.name for f in want[table].schema if "timestamp" not in str(f.type)]
        assert _values(got, cols) == _values(expected, cols), table
    errors = want["errors"].to_pylist()
    assert any(e["file"].endswith(".log") for e in errors), "the damage is reported"
    acct = accounting(reports, seg_rows)
    segments = want["segments"].to_pylist()
    assert acct["files"] == len(files) == len(segments)
    assert acct["size"] == sum(s["size"] for s in segments) == sum(f.size for f in files)
    assert acct["valid"] + acct["padding"] + acct["corrupt"] == acct["size"]
    assert acct["corrupt"] == sum(s["bytes_corrupt"] for s in segments) > 0
    assert acct["errors"] == len(errors)


def test_a_rescan_writes_the_same_bytes(damaged, tmp_path):
    tables = ["batches", "records", "segments", "errors"]
    first, second = tmp_path / "a", tmp_path / "b"
    _scan(damaged, first, tables, True)
    _scan(damaged, second, tables, True)
    a = OutputDir(str(first)).files_under("")
    b = OutputDir(str(second)).files_under("")
    assert sorted(p for p, _ in a) == sorted(p for p, _ in b) and a
    for path, _ in a:
        assert (first / path).read_bytes() == (second / path).read_bytes(), path
    shutil.rmtree(first)
