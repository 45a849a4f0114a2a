"""Findings with a memory (jobs/history.py): `logreplay audit --since` over four days of one
cluster's dumps as the daily DAG lays them out (`<out_root>/<ds>`), the gate failing on new
findings only, and every refusal of a previous output that cannot be built on."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from jobs.cli import main
from simulator import synth

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """transaction_faults, the same dump with one byte of a record flipped (a CRC mismatch:
    a new finding), and another cluster's dump."""
    root = tmp_path_factory.mktemp("history")
    synth("transaction_faults", str(root / "same"), seed=7)
    shutil.copytree(root / "same", root / "flipped")
    seg = root / "flipped" / "broker-1" / "ledger-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[200] ^= 0x01  # inside a record's value: the batch's CRC no longer holds
    seg.write_bytes(bytes(data))
    synth("clean_transactions", str(root / "other"), seed=7)
    return root


def _audit(dump, out, day, *extra) -> int:
    """A day's audit; its gate without Data Docs (tests/test_gate.py renders them)."""
    return main(["audit", str(dump), "--out", str(out), "--run-id", f"scheduled__{day}",
                 "--logical-date", day, "--set", "gate.data_docs=false", *extra])  # fmt: skip


def _history(out) -> dict[str, dict]:
    rows = pq.read_table(out / "findings_history").to_pylist()
    return {r["fingerprint"]: r for r in rows}


def _summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_four_days_tell_new_known_and_gone_and_the_gate_fails_on_new_only(
    spark, dumps, tmp_path, capsys
):
    days = tmp_path / "audits"
    # day 1: the first of the chain, with the gate: every finding is new, the gate fails
    assert _audit(dumps / "same", days / "2026-11-20", "2026-11-20", "--since", "auto",
                  "--gate") == 1  # fmt: skip
    first = _history(days / "2026-11-20")
    # the hanging transactions and the marker not yet written rest on where the copy ended:
    # provisional; the rest new
    kinds = {r["kind"]: r["status"] for r in first.values()}
    assert kinds["hanging_transaction"] == "provisional" and kinds["split_outcome"] == "new"
    assert {r["status"] for r in first.values()} == {"new", "provisional"}
    assert {r["first_seen"] for r in first.values()} == {"2026-11-20"}
    # day 2: the same anomalies are known; the gate (gate.on: new) passes and says why
    capsys.readouterr()
    assert _audit(dumps / "same", days / "2026-11-21", "2026-11-21", "--since", "auto",
                  "--gate") == 0  # fmt: skip
    err = capsys.readouterr().err
    second = _history(days / "2026-11-21")
    assert second.keys() == first.keys()
    assert {(r["status"], r["first_seen"], r["last_seen"]) for r in second.values()} == {
        ("still present", "2026-11-20", "2026-11-21")
    }
    summary = _summary(days / "2026-11-21")
    assert summary["since"].endswith("2026-11-20") and summary["day"] == "2026-11-21"
    assert summary["findings"]["by_status"] == {
        "new": 0, "provisional": 0, "still present": len(first), "gone": 0}  # fmt: skip
    assert "0 new" in err and "not counted:" in err and "(known)" in err
    assert main(["report", str(days / "2026-11-21")]) == 0
    page = (days / "2026-11-21" / "report" / "index.html").read_text()
    assert f"(0 new, 0 provisional, {len(first)} known, 0 gone)" in page
    assert "known since 2026-11-20" in page and ">new</span>" not in page
    # counting every finding again fails it, as before
    assert main(["gate", str(days / "2026-11-21"), "--set", "gate.on=all",
                 "--set", "gate.data_docs=false"]) == 1  # fmt: skip
    # day 3: one byte of an old segment flipped, read again in full (--full: a run going on
    # from the points reads only what is new): a CRC mismatch, new, the gate fails naming it
    capsys.readouterr()
    assert _audit(dumps / "flipped", days / "2026-11-22", "2026-11-22", "--since", "auto",
                  "--gate", "--full") == 1  # fmt: skip
    err = capsys.readouterr().err
    third = _history(days / "2026-11-22")
    new = [r for r in third.values() if r["status"] == "new"]
    assert "crc_mismatch" in {r["kind"] for r in new}
    assert "failed [findings] no crc_mismatch finding" in err
    assert all(third[fp]["first_seen"] == "2026-11-20" for fp in first)
    assert main(["report", str(days / "2026-11-22")]) == 0
    page = (days / "2026-11-22" / "report" / "index.html").read_text()
    crc = page[page.index("id='kind-crc_mismatch'") :]
    assert crc.index(">new</span>") < crc.index("</article>")  # its first card is the new one
    # day 4: the copy is whole again, read in full: the CRC mismatch is gone, the rest known
    assert _audit(dumps / "same", days / "2026-11-23", "2026-11-23", "--since", "auto",
                  "--gate", "--full") == 0  # fmt: skip
    fourth = _history(days / "2026-11-23")
    assert {fourth[r["fingerprint"]]["status"] for r in new} == {"gone"}
    assert {fourth[fp]["status"] for fp in first} == {"still present"}


def test_a_previous_output_that_cannot_be_built_on_is_refused(spark, dumps, tmp_path, capsys):
    day1 = tmp_path / "2026-11-20"
    assert _audit(dumps / "same", day1, "2026-11-20") == 0

    def refused(since, *extra, out=None) -> str:
        capsys.readouterr()
        target = out or tmp_path / "2026-11-21"
        assert _audit(dumps / "same", target, "2026-11-21", "--since", str(since), *extra) == 2
        return capsys.readouterr().err

    assert "this run's own output" in refused(day1, out=day1)
    assert "no committed audit" in refused(tmp_path / "nothing-here")
    assert "another configuration" in refused(day1, "--set", "audit.clock_tolerance_ms=999")
    other = tmp_path / "other"
    assert _audit(dumps / "other", other, "2026-11-20") == 0
    assert "another dump" in refused(other)
    # the Python API: the same memory for an audit in a user's session, the same refusals
    import replay

    tables = replay.audit(spark, [str(dumps / "same")])
    rows = replay.findings_history(spark, tables, str(day1), logical_date="2026-11-21").collect()
    assert rows and {(r["status"], r["first_seen"]) for r in rows} == {
        ("still present", "2026-11-20")
    }
    with pytest.raises(ValueError, match="another configuration"):
        replay.findings_history(spark, tables, str(day1), {"audit": {"clock_tolerance_ms": 9}})
    lone_rows = replay.findings_history(spark, tables, None).collect()
    assert {r["status"] for r in lone_rows} == {"new", "provisional"}
    later = tmp_path / "2026-11-22"
    assert _audit(dumps / "same", later, "2026-11-22") == 0
    assert "after this run's day" in refused(later)
    # a run killed before its commit leaves no summary.json: refused as not committed
    partial = tmp_path / "partial"
    shutil.copytree(day1, partial)
    (partial / "summary.json").unlink()
    assert "no committed audit" in refused(partial)
    # --since auto falls back to a run without memory, saying why
    capsys.readouterr()
    lone = tmp_path / "lone" / "2026-11-21"
    assert _audit(dumps / "same", lone, "2026-11-21", "--since", "auto") == 0
    assert "--since auto: no committed output before 2026-11-21" in capsys.readouterr().err
    assert {r["status"] for r in _history(lone).values()} == {"new", "provisional"}


def test_a_provisional_finding_is_confirmed_or_withdrawn_by_the_next_run(spark):
    """jobs.history.history over small tables: a finding resting on where the copy ended is
    provisional the first time; found again it is still present (first seen kept), not found
    again it is gone; a finding of the same kind that does not rest on the end (a missing
    marker whose partition entry is closed) is new."""
    from jobs.history import history
    from replay.findings import rests_on_copy_end

    def findings(*rows):
        cols = ["fingerprint", "kind", "severity", "cluster", "topic", "partition",
                "producer_id", "transactional_id", "group_id", "first_offset", "evidence"]  # fmt: skip
        return spark.createDataFrame(
            [(fp, kind, "error", "c", "t", 0, 7, "tx", None, off, json.dumps(ev))
             for fp, kind, off, ev in rows],
            "fingerprint string, kind string, severity string, cluster string, topic string, "
            "partition int, producer_id long, transactional_id string, group_id string, "
            "first_offset long, evidence string",
        ).select(*cols)  # fmt: skip

    hanging = ("h1", "hanging_transaction", 10, {"first_offset": 10})
    withdrawn = ("h2", "hanging_transaction", 20, {"first_offset": 20})
    open_marker = ("m1", "missing_marker", 30, {"outcome": "OPEN"})
    closed_marker = ("m2", "missing_marker", 40, {"outcome": "COMMIT"})
    assert [rests_on_copy_end(k, json.dumps(e)) for _, k, _, e in
            (hanging, open_marker, closed_marker)] == [True, True, False]  # fmt: skip

    def statuses(df) -> dict[str, tuple]:
        return {r["fingerprint"]: (r["status"], r["first_seen"], r["last_seen"])
                for r in df.collect()}  # fmt: skip

    day1 = history(spark, findings(hanging, withdrawn, open_marker, closed_marker),
                   findings().limit(0), None, "2026-11-20", "r1", "2026-11-20")  # fmt: skip
    assert statuses(day1) == {
        "h1": ("provisional", "2026-11-20", "2026-11-20"),
        "h2": ("provisional", "2026-11-20", "2026-11-20"),
        "m1": ("provisional", "2026-11-20", "2026-11-20"),
        "m2": ("new", "2026-11-20", "2026-11-20"),
    }
    # the next copy shows h2's marker (it is no longer found): withdrawn; h1 and m1 confirmed
    day2 = history(spark, findings(hanging, open_marker, closed_marker), None, day1,
                   "2026-11-21", "r2", "2026-11-20")  # fmt: skip
    assert statuses(day2) == {
        "h1": ("still present", "2026-11-20", "2026-11-21"),
        "h2": ("gone", "2026-11-20", "2026-11-20"),
        "m1": ("still present", "2026-11-20", "2026-11-21"),
        "m2": ("still present", "2026-11-20", "2026-11-21"),
    }


def test_a_run_since_the_previous_finds_where_each_replay_ended(spark, tmp_path, capsys):
    """The previous run's `replay_states` points found again in a later copy of the same logs
    (replay.points.resume_from, in the scan's tasks): every partition goes on from its point,
    the bytes past the points are the bytes the later copy added; a log truncated below its
    point is said, by name, in the summary and on the console."""
    import os
    import random

    import decoders
    from tests.test_carried_state import _earlier_copy

    later, earlier = tmp_path / "later", tmp_path / "earlier"
    synth("transaction_faults", str(later), seed=7)
    _earlier_copy(str(later), str(earlier), random.Random(8))
    days = tmp_path / "audits"
    assert _audit(earlier, days / "2026-11-20", "2026-11-20") in (0, 1)
    states = pq.read_table(days / "2026-11-20" / "replay_states").to_pylist()

    def log_bytes(root):
        return sum(f.size for f in decoders.discover([str(root)]) if f.kind == "log")

    assert _audit(later, days / "2026-11-21", "2026-11-21", "--since",
                  str(days / "2026-11-20")) in (0, 1)  # fmt: skip
    since = _summary(days / "2026-11-21")["since_points"]
    assert since["points"] == len(states) > 5
    assert since["went_on"] == since["points"] and since["changes"] == {}
    assert since["bytes_after"] == log_bytes(later) - log_bytes(earlier) > 0
    assert since["points_without_replica"] == 0
    # it read only those bytes, going on from the states: the same findings and replay tables
    # as a full audit of the later copy
    summary = _summary(days / "2026-11-21")
    assert _audit(later, tmp_path / "full", "2026-11-21") in (0, 1)
    assert since["bytes_after"] < summary["bytes_read"] < _summary(tmp_path / "full")["bytes_read"]
    for table, key in (("findings", ("fingerprint",)),
                       ("transactions", ("topic", "partition", "producer_id", "first_offset",
                                         "marker_offset", "outcome", "record_count")),
                       ("coordinator_transactions", ("transactional_id", "producer_id",
                                                     "first_log_offset", "outcome")),
                       ("offset_timeline", ("group_id", "topic", "partition",
                                            "committed_offset", "effective_log_offset")),
                       ("partitions", ("topic", "partition", "log_end_offset", "lso",
                                       "complete_from", "data_records"))):  # fmt: skip
        rows = [sorted(tuple(r[k] for k in key) for r in pq.read_table(out / table).to_pylist())
                for out in (days / "2026-11-21", tmp_path / "full")]  # fmt: skip
        assert rows[0] == rows[1] and (rows[0] or table == "offset_timeline"), table
    # the same in a user's session (the Python API)
    import replay

    with replay.audit_session(spark, [str(later)], since=str(days / "2026-11-20")) as tables:
        found = sorted(r["fingerprint"] for r in tables["findings"].collect())
    assert found == sorted(r["fingerprint"] for r in
                           pq.read_table(tmp_path / "full" / "findings").to_pylist())  # fmt: skip

    # one partition's log cut below where the previous run's replay ended
    cut = tmp_path / "cut"
    shutil.copytree(earlier, cut)
    row = next(r for r in states if r["topic"] == "ledger" and r["segment_position"])
    seg = cut / "broker-1" / f"ledger-{row['partition']}" / f"{row['segment_base_offset']:020d}.log"
    os.truncate(seg, row["segment_position"])
    capsys.readouterr()
    assert _audit(cut, days / "2026-11-22", "2026-11-22", "--since",
                  str(days / "2026-11-20")) in (0, 1)  # fmt: skip
    since = _summary(days / "2026-11-22")["since_points"]
    assert since["changes"] == {"truncated": 1}
    assert since["truncated"] == [f"ledger-{row['partition']} (broker {row['broker']})"]
    assert f"truncated below it (an unclean election, a restore?): ledger-{row['partition']}" in (
        capsys.readouterr().err
    )
    # below the high watermark the broker had checkpointed in the earlier copy: committed
    # records lost, a finding with its evidence
    lost = [f for f in pq.read_table(days / "2026-11-22" / "findings").to_pylist()
            if f["kind"] == "committed_data_truncated"]  # fmt: skip
    assert row["high_watermark"] is not None and row["high_watermark"] > row["last_batch_offset"]
    assert [(f["topic"], f["partition"], f["severity"]) for f in lost] == [
        ("ledger", row["partition"], "error")]  # fmt: skip
    evidence = json.loads(lost[0]["evidence"])
    assert evidence["previous_high_watermark"] == row["high_watermark"]
    assert evidence["log_end_offset"] == lost[0]["first_offset"] <= row["last_batch_offset"]

    # the same, its topic deleted and created again (another topic id): not a truncation
    import uuid

    from simulator.writer import partition_metadata_text

    again = tmp_path / "again"
    shutil.copytree(cut, again)
    for meta in (again / "broker-1").glob("ledger-*/partition.metadata"):
        if meta.parent.name.removeprefix("ledger-").isdigit():  # not ledger-ok's
            meta.write_text(partition_metadata_text(uuid.UUID(int=7)))
    assert _audit(again, days / "2026-11-23", "2026-11-23", "--since",
                  str(days / "2026-11-20")) in (0, 1)  # fmt: skip
    since = _summary(days / "2026-11-23")["since_points"]
    ledger = sum(1 for r in states if r["topic"] == "ledger")
    assert since["changes"] == {"recreated": ledger} and since["truncated"] == []
    assert "committed_data_truncated" not in {
        f["kind"] for f in pq.read_table(days / "2026-11-23" / "findings").to_pylist()
    }


def test_nothing_found_now_or_before_writes_an_empty_history_without_a_spark_job(spark, tmp_path):
    """A healthy chain's day: no findings, none the day before: its `findings_history` has no
    rows, written without the join's Spark jobs (four of them, ~1.2 s a run)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    from jobs import history
    from jobs.output import OutputDir, write_empty
    from replay import tables as T

    schema = from_arrow_schema(pa.schema([pa.field("cluster", pa.string()), *T.FINDINGS]))
    findings = spark.createDataFrame([], schema)
    before, now = OutputDir(str(tmp_path / "before")), OutputDir(str(tmp_path / "now"))
    doc = {"tables": {"findings": write_empty(findings, before, "findings", "0123456789ab")}}
    entries = {"findings": write_empty(findings, now, "findings", "0123456789ab")}
    previous = history.Previous(before.uri, doc, "2026-11-20")
    group = "logreplay-test-history-of-nothing"
    spark.sparkContext.setJobGroup(group, "findings_history of a healthy day")
    try:
        entry = history.written(spark, now, entries, previous, "2026-11-21", "r", "0123456789ab")
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(group) == []
    assert entry["rows"] == 0
    written = pq.read_table(tmp_path / "now" / history.HISTORY)
    assert written.num_rows == 0
    assert set(T.FINDINGS_HISTORY.names) <= set(written.column_names)
