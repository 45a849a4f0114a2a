"""`logreplay audit` of a production day (three brokers; partitions of user topics, of
`__transaction_state` and of `__consumer_offsets` held by two of them) beside an exactly-once
pipeline and a `read_uncommitted` group reading aborted data, each on one broker (clusters of
their own), writes the same tables whether its scan's tasks write the LSO changes and the
offset timeline of the partitions one broker holds themselves (jobs.scan.ScanWritten,
replay.plan.SCAN_WRITTEN; the leakage stage then reads those commits from the output, the
others from the scratch area: replay.plan.Audit._with_written) or every row of them is copied
from the scratch area (jobs.copies), as before."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.spark


def _table(out, entry: dict) -> pa.Table:
    return pa.concat_tables([pq.read_table(out / f["path"]) for f in entry["files"]])


def test_the_scan_written_tables_equal_the_copied_ones(spark, sim_all, tmp_path, monkeypatch):
    import jobs.scan
    from jobs.cli import main
    from simulator.cluster import cluster_id_for

    scenarios = ("production_day", "clean_eos_pipeline", "aborted_reads")
    for name in scenarios:
        shutil.copytree(sim_all / name, tmp_path / "dump" / name)
    dump = str(tmp_path / "dump")
    outs = {"written": tmp_path / "written", "copied": tmp_path / "copied"}
    assert main(["audit", dump, "--out", str(outs["written"]), "--run-id", "r1", "--quiet"]) == 0
    with monkeypatch.context() as m:
        m.setattr(jobs.scan, "_scan_written", lambda out, key, shared: None)
        assert main(["audit", dump, "--out", str(outs["copied"]), "--run-id", "r1",
                     "--quiet"]) == 0  # fmt: skip
    written, copied = (json.loads((o / "summary.json").read_text()) for o in outs.values())
    assert written["rows"] == copied["rows"]
    assert written["rows"]["lso_changes"] > 1000 and written["rows"]["offset_timeline"] > 1000
    # the leaks judged from commits of partitions one broker holds (read from the output)
    found = _table(outs["written"], written["tables"]["findings"])
    leaks = {c for k, c in zip(found.column("kind").to_pylist(),
                               found.column("cluster").to_pylist(), strict=True)
             if k == "aborted_read_leak"}  # fmt: skip
    assert cluster_id_for("aborted_reads") in leaks
    for name, entry in written["tables"].items():
        a, b = _table(outs["written"], entry), _table(outs["copied"], copied["tables"][name])
        assert a.schema == b.schema, name
        assert sorted(map(repr, a.to_pylist())) == sorted(map(repr, b.to_pylist())), name
    # the partitions one broker holds: the scan's files; the others copied, the chosen
    # replica's rows only (each row once: the counts above)
    held: dict[tuple[str, str], int] = {}
    for scenario in scenarios:
        for broker in (p for p in (tmp_path / "dump" / scenario).iterdir() if p.is_dir()):
            for d in broker.iterdir():
                held[(scenario, d.name)] = held.get((scenario, d.name), 0) + d.is_dir()
    shared = {k for k, n in held.items() if n > 1}
    assert any(n.startswith("__consumer_offsets-") for _, n in shared)
    assert not [k for k in shared if k[0] != scenarios[0]]
    scenario_of = {cluster_id_for(s): s for s in scenarios}

    def files(summary: dict, name: str, prefix: str) -> list[dict]:
        return [f for f in summary["tables"][name]["files"]
                if f["path"].rsplit("/", 1)[1].startswith(f"{prefix}-")]  # fmt: skip

    for name, topic, partition in (("lso_changes", "topic", "partition"),
                                   ("offset_timeline", None, "log_partition")):  # fmt: skip
        assert files(copied, name, "scan") == []
        for prefix, in_shared in (("scan", False), ("part", True)):
            these = files(written, name, prefix)
            assert these, (name, prefix)
            rows = _table(outs["written"], {"files": these})
            dirs = {(scenario_of[c], f"{t or '__consumer_offsets'}-{p}") for c, t, p in zip(
                rows.column("cluster").to_pylist(),
                rows.column(topic).to_pylist() if topic else [None] * rows.num_rows,
                rows.column(partition).to_pylist(), strict=True)}  # fmt: skip
            assert all((d in shared) == in_shared for d in dirs), (name, prefix, dirs)
