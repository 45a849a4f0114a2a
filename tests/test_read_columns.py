"""`jobs.output.read_columns`: a committed table's columns on the driver, within a row budget
the files' own footers decide (what the gate validates on the driver, validations.gate)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.output import OutputDir, committed_rows, read_columns


def _table(root, name: str, parts: list[dict], declared: list[int] | None = None) -> dict:
    files = []
    for i, part in enumerate(parts):
        rel = f"{name}/part-{i}.parquet"
        (root / name).mkdir(exist_ok=True)
        pq.write_table(pa.table(part), root / rel)
        rows = len(next(iter(part.values())))
        files.append({"path": rel, "rows": rows if declared is None else declared[i]})
    return {"files": files, "partition_by": None}


def test_the_columns_asked_for_come_whole_within_the_budget(tmp_path):
    out = OutputDir(str(tmp_path))
    entry = _table(tmp_path, "t", [{"a": [1, 2], "b": ["x", "y"]}, {"a": [3], "b": ["z"]}])
    got = read_columns(out, entry, ["b"], 3)
    assert got.column_names == ["b"] and got.column("b").to_pylist() == ["x", "y", "z"]
    assert committed_rows(out, entry, 3) == 3 and committed_rows(out, entry, 2) is None
    assert read_columns(out, entry, ["a"], 2) is None  # over the budget: Spark reads it


def test_the_footers_not_the_record_bound_what_is_read(tmp_path):
    """A commit record that declares fewer rows than its files hold: the files are still
    read to the budget only; a column in the directory names is left to Spark."""
    out = OutputDir(str(tmp_path))
    entry = _table(tmp_path, "t", [{"a": list(range(10))}, {"a": list(range(10))}], [1, 1])
    assert read_columns(out, entry, ["a"], 15) is None and committed_rows(out, entry, 15) is None
    assert read_columns(out, entry, ["a"], 20).num_rows == 20
    assert read_columns(out, {**entry, "partition_by": "a"}, ["a"], 20) is None
    assert read_columns(out, {"files": []}, ["a"], 20) is None
