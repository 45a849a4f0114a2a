"""The audit end to end on Spark: simulated scenarios against their truth, the real corpus, the
command line and the as-of queries (`spark-submit jobs/audit.py`: on the standalone cluster,
tests/test_cluster.py and tests/test_airflow.py)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import denied, frames

from jobs.cli import main
from replay import audit, committed_offsets_at, lso_at
from replay.findings import at_least
from replay.truthcheck import compare
from simulator import SCENARIOS

pytestmark = pytest.mark.spark


def _findings(tables) -> list[dict]:
    return [r.asDict() for r in tables["findings"].collect()]


@pytest.fixture(autouse=True)
def _release_cache(spark):
    """Each audit caches its replayed tables; one session runs many audits here."""
    yield
    spark.catalog.clearCache()


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_injected_anomaly_is_found_and_nothing_else(
    sim_all, scenario_audit, scenario_local, scenario
):
    truth = json.loads((sim_all / scenario / "truth.json").read_text())
    findings = scenario_audit(scenario)["findings"].to_pylist()
    res = compare(truth, findings)
    assert res["missed"] == [], res["missed"]
    assert res["unexpected"] == [], [(f["kind"], f["message"]) for f in res["unexpected"]]
    if not truth["anomalies"]:  # clean scenarios: nothing of severity warning or above
        assert [f for f in findings if at_least(f["severity"], "warning")] == []
    # the one-process audit runs the same replay functions: the same findings
    local = scenario_local(scenario)["findings"]
    assert _keys(findings) == _keys(local)
    # each with its next step, computed in Spark's tasks as the pure function gives it
    from replay.remediation import Target, remediation

    assert all(f["remediation"] == remediation(f, Target()) for f in findings)
    assert all(f["remediation"] for f in findings + local)


def _keys(findings: list[dict]) -> list[tuple]:
    cols = ("cluster", "kind", "severity", "topic", "partition", "producer_id", "group_id",
            "first_offset", "last_offset", "record_count")  # fmt: skip
    return sorted(tuple(str(f.get(c)) for c in cols) for f in findings)


def test_the_real_corpus_has_no_warning_or_worse(spark, corpus):
    """All 14 projects' dumps in one run: clusters are kept apart (they share topic names,
    and two of them even a cluster id)."""
    tables = audit(spark, [str(corpus)])
    findings = _findings(tables)
    bad = [(f["kind"], f["message"]) for f in findings if at_least(f["severity"], "warning")]
    assert bad == []
    clusters = {r["cluster"] for r in tables["partitions"].select("cluster").distinct().collect()}
    assert len(clusters) == 15
    # The only info findings: in a Kafka 4.0 development cluster, group adminService committed
    # lower offsets of jwtCheckAnswer-0 while its latest generation had no members (its app
    # restarting and committing before rejoining): a real property of that dump, judged as
    # resets of an empty group.
    noted = {(f["cluster"], f["kind"]) for f in findings}
    assert noted == {("MkU3OEVBNTcwNTJENDM2Qk@MashaKosher__Internship", "offset_regression")}


def test_derived_tables(spark, scenario_audit):
    tables = frames(spark, scenario_audit("clean_transactions"))
    tx = tables["transactions"]
    outcomes = {r["outcome"]: r["count"] for r in tx.groupBy("outcome").count().collect()}
    assert (
        outcomes.get("COMMIT", 0) > 10 and outcomes.get("ABORT", 0) > 3 and "OPEN" not in outcomes
    )
    assert tx.filter("transactional_id IS NULL").count() == 0
    states = tables["producer_states"]
    assert states.filter("snapshot_matches = false").count() == 0
    assert states.filter("snapshot_matches = true").count() > 0
    gens = tables["group_generations"].filter("group_id = 'payments-rc'").collect()
    assert [g["generation"] for g in gens] == [1, 2] and gens[-1]["member_count"] == 2
    assert not any(g["broadcast"] for g in gens)
    coord = tables["coordinator_transactions"].filter("fenced").count()
    assert coord == 1  # the coordinator's timeout abort


def test_the_leakage_family_counts_as_the_one_process_audit_counts_it(scenario_audit,
                                                                      scenario_local):  # fmt: skip
    """The coverage's "leakage" family, partition by partition: a partition's aborted or open
    transactions with data, judged where a group committed on it. The plan keeps only the
    commits of such partitions, by a lookup of them (``Audit._leakage_counts``), where
    replay.local looks at every commit; both the judged and the not-judged rows occur."""
    seen = set()
    for scenario in SCENARIOS:

        def leakage(rows) -> list[tuple]:
            return sorted((r["topic"], r["partition"], r["judged"], r["reason"] or "", r["count"])
                          for r in rows if r["family"] == "leakage")  # fmt: skip

        ours = leakage(scenario_audit(scenario)["coverage"].to_pylist())
        assert ours == leakage(scenario_local(scenario)["coverage"]), scenario
        seen |= {judged for _t, _p, judged, _r, _n in ours}
    assert seen == {True, False}


def test_as_of_queries(spark, scenario_audit):
    """As-of answers hold with the scenario's clocks a few hundred ms apart: asked well inside
    a long-open transaction (more than the clock tolerance from either end) and after it."""
    import datetime as dt

    tables = frames(spark, scenario_audit("aborted_reads"))
    aborted = (
        tables["transactions"]
        .filter("outcome = 'ABORT' AND topic = 'trades' AND partition = 0")
        .filter("unix_millis(marker_timestamp) - unix_millis(first_timestamp) > 4000")
        .orderBy("first_offset")
        .first()
    )
    opened, closed = aborted["first_timestamp"], aborted["marker_timestamp"]
    while_open = (opened + (closed - opened) / 2).strftime("%Y-%m-%d %H:%M:%S.%f")
    after = (closed + dt.timedelta(seconds=3)).strftime("%Y-%m-%d %H:%M:%S.%f")
    lso = {(r["topic"], r["partition"]): r["lso"] for r in lso_at(tables, while_open).collect()}
    assert lso[("trades", 0)] is not None and lso[("trades", 0)] <= aborted["first_offset"]
    later = {(r["topic"], r["partition"]): r["lso"] for r in lso_at(tables, after).collect()}
    assert later[("trades", 0)] is None or later[("trades", 0)] > aborted["first_offset"]
    offsets = committed_offsets_at(tables, while_open).filter("group_id = 'risk-ru'").collect()
    # the read_uncommitted group had already committed past the open transaction
    assert any(
        r["partition"] == 0 and r["committed_offset"] > aborted["first_offset"] for r in offsets
    )


# the scenarios whose partitions exercise the replay in the scan tasks: replicas on several
# brokers that disagree, faulty idempotence and transactions, aborted transactions (.txnindex),
# a compacted log (cleaner checkpoints), CRC-failed batches
REPLICA_SCENARIOS = (
    "replica_divergence", "idempotence_faults", "transaction_faults", "aborted_reads",
    "clean_compaction", "corrupt_segments",
)  # fmt: skip


def test_audit_command_line(spark, sim_all, scenario_audit, tmp_path, capsys, monkeypatch):
    """`logreplay audit` as users run it, over six scenarios copied under one root (named as in
    ``sim_all``): the job replays every partition replica inside the scan task that reads it
    (replay.scan_task), and every table it writes equals the session's
    (``replay.audit_session``, the same scan kept in Spark's cache); transaction_faults'
    findings are its truth's. The dump is small: the job's queries after the scan are
    interpreted (jobs.session.interpreted_if_small), the session's compiled, and the session
    has its own settings back after the run."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import replay.plan
    from jobs.session import INTERPRETED

    for s in REPLICA_SCENARIOS:
        shutil.copytree(sim_all / s, tmp_path / "dump" / s)
    root = tmp_path / "dump"
    out = tmp_path / "audit"
    settings = []
    planned = replay.plan.Audit.run

    def run(self):
        settings.append({k: spark.conf.get(k, None) for k in INTERPRETED} | {"single": self.single})
        return planned(self)

    monkeypatch.setattr(replay.plan.Audit, "run", run)
    assert {k: spark.conf.get(k, None) for k in INTERPRETED} == dict.fromkeys(INTERPRETED)
    assert main(["audit", str(root), "--out", str(out), "--run-id", "r1"]) == 0
    assert settings == [INTERPRETED | {"single": True}]
    assert {k: spark.conf.get(k, None) for k in INTERPRETED} == dict.fromkeys(INTERPRETED)
    monkeypatch.undo()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run_id"] == "r1"
    # every table's columns (names, types, nullability) are its query's, the tables copied
    # from the scratch area (jobs.copies) included; the queries planned, not run
    queried = audit(spark, [str(root)])
    for name, entry in summary["tables"].items():
        written = [(f["name"], f["type"], f["nullable"]) for f in entry["schema"]["fields"]]
        planned = [(f.name, f.dataType.jsonValue(), f.nullable) for f in queried[name].schema]
        assert written == planned, name
    for name, entry in summary["tables"].items():
        want = pa.concat_tables([scenario_audit(s)[name] for s in REPLICA_SCENARIOS])
        got = pq.read_table(out / name).select(want.column_names).cast(want.schema)
        assert got.num_rows == want.num_rows == entry["rows"], name
        cols = [c for c in want.column_names if "map" not in str(want.schema.field(c).type)]
        flat = [c for c in cols if not pa.types.is_nested(want.schema.field(c).type)]
        order = [(c, "ascending") for c in flat]
        g, w = (_node_ids(t.select(cols)).sort_by(order) for t in (got, want))
        assert g.equals(w), name
    truth = json.loads((root / "transaction_faults" / "truth.json").read_text())
    want = {}
    for a in truth["anomalies"]:
        want[a["kind"]] = want.get(a["kind"], 0) + 1
    mine = scenario_audit("transaction_faults")["findings"].column("kind").to_pylist()
    assert {k: mine.count(k) for k in set(mine)} == want
    err = capsys.readouterr().err
    assert "split_outcome" in err
    assert "    One transaction committed in one partition and aborted" in err  # its next step
    # the findings exported for other tools, each with its next step and fingerprint, and one
    # of them explained with the logs around it (tests/test_outputs.py: the same on S3)
    assert main(["findings", str(out), "--to", str(tmp_path / "f.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "f.jsonl").read_text().splitlines()]
    assert len(rows) == summary["rows"]["findings"]
    assert all(r["remediation"] and r["fingerprint"] for r in rows)
    assert len({r["fingerprint"] for r in rows}) == len(rows)
    split = next(r for r in rows if r["kind"] == "split_outcome")
    assert main(["explain", str(out), split["fingerprint"], "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["finding"]["fingerprint"] == split["fingerprint"]
    assert any(t["first_offset"] == split["first_offset"] for t in doc["context"]["transactions"])
    assert doc["context"]["coordinator"]
    assert main(["audit", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert main(["audit", str(root), "--out", str(out), "--conf", str(tmp_path / "x.yaml")]) == 2


def test_the_command_line_goes_on_past_what_it_cannot_read(spark, tmp_path, monkeypatch,
                                                           capsys):  # fmt: skip
    """`logreplay audit --gate` over a clean dump whose listing names a file that is gone (a
    dangling symlink a copy left; a segment a live broker's retention deletes while the dump is
    read goes the same way: tests/test_hostile.py) and holds a partition directory the run's
    user cannot read: the run ends and its gate passes; the file is one ``file_vanished``
    finding (info) with its row in ``errors``, where the listing used to end the run with a
    traceback, and the directory one ``unlisted_directory`` finding (info) and a line of the
    layout, where it used to be left out in silence."""
    import pyarrow.parquet as pq

    from simulator import synth

    synth("clean_idempotent", str(tmp_path / "dump"), 1)
    gone = "broker-1/events-0/00000000000000099999.log"
    (tmp_path / "dump" / gone).symlink_to(tmp_path / "nowhere.log")
    denied(monkeypatch, "scandir", tmp_path / "dump" / "broker-1" / "events-1")
    out = tmp_path / "out"
    assert main(["audit", str(tmp_path / "dump"), "--out", str(out), "--gate"]) == 0
    assert "1 directory(ies) could not be listed" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["findings"]["by_kind"] == {"file_vanished": 1, "unlisted_directory": 1}
    assert summary["findings"]["by_severity"] == {"info": 2}
    errors = pq.read_table(out / "errors").to_pylist()
    assert [(e["kind"], e["file"]) for e in errors] == [("file_vanished", gone)]
    findings = pq.read_table(out / "findings").to_pylist()
    (unlisted,) = [f for f in findings if f["kind"] == "unlisted_directory"]
    assert (unlisted["topic"], unlisted["partition"]) == ("events", 1)


def test_declared_facts_change_the_judgement(spark, sim_all, tmp_path):
    """conf topics.<t> and groups.<g>: facts the dump does not hold."""
    # the ledger partitions alone: no coordinator log, so no transaction timeout from it
    partial = tmp_path / "ledger-only" / "broker-1"
    partial.mkdir(parents=True)
    for d in (sim_all / "transaction_faults" / "broker-1").iterdir():
        if d.name.startswith("ledger-"):
            shutil.copytree(d, partial / d.name)

    from replay.local import audit_local

    def kinds(conf, floor="warning"):  # the rules in one process (replay.local: Spark's own)
        found = audit_local([str(partial.parent)], conf)["findings"]
        return {f["kind"] for f in found if at_least(f["severity"], floor)}

    # open ~25 s: not hanging under the default 15 min timeout, hanging under a declared 5 s
    assert "hanging_transaction" not in kinds(None, "info")
    # a compacted topic with no cleaner checkpoint: the cleaner keeps a marker while data of its
    # transaction remains, so its open data is KAFKA-8351's trace or a copy torn across a
    # cleaning pass: info, which cannot tell them apart
    compacted = {
        "topics": {"ledger": {"transaction_timeout_ms": 5000, "cleanup_policy": "compact"}}
    }
    assert "hanging_transaction" not in kinds(compacted)
    assert "hanging_transaction" in kinds(compacted, "info")
    # the declared facts reach Spark's plan: one audit of both dumps (two clusters)
    resets = str(sim_all / "offset_resets")
    declared = {
        "topics": {"ledger": {"transaction_timeout_ms": 5000}},
        "groups": {"auditors": {"assignor": "broadcast"}},
    }
    found = _findings(audit(spark, [str(partial.parent), resets], declared))
    assert "hanging_transaction" in {f["kind"] for f in found if f["topic"] == "ledger"}
    assert {f["kind"] for f in found if f["group_id"] == "auditors"} == {"offset_overwrite"}
    alone = audit_local([str(partial.parent), resets], declared)["findings"]
    assert sorted(f["kind"] for f in found) == sorted(f["kind"] for f in alone)


def test_the_job_s_stages_start_from_the_scratch_area_not_the_whole_lineage(
    spark, sim_all, scenario_audit, tmp_path
):
    """The audit job writes the replay's intermediate tables to the run's scratch area and
    reads them back (jobs.scan.Scratch.later): the same tables as the cached scan's, with plans
    a fraction of the size (Spark ships a stage's plan and lineage in every task: ~30 MB per
    task on the every-scenario dump before). Checked on the findings' plan. Each scratch table
    is read once as a DataFrame, whichever stages read it."""
    import decoders
    from jobs.output import OutputDir
    from jobs.scan import decoded_once
    from replay.config import default
    from replay.plan import Audit
    from replay.replicas import replay_spec
    from replay.settings import AuditConfig

    dump = str(sim_all / "clean_transactions")
    files = decoders.discover([dump])
    out = OutputDir(str(tmp_path / "out"))
    cached = scenario_audit("clean_transactions")  # the same audit with cached tables
    config = AuditConfig.from_conf(None)
    spec = replay_spec([dump], config)  # replayed in the scan's tasks, as the job does
    with decoded_once(spark, files, default("decode"), out, "0123abcd", None, spec) as sc:
        tables = Audit(spark, config, sc).run()
        # each scratch table (and each kind of a replay table's rows) read as one DataFrame,
        # the plan's many readers (from several threads) sharing it
        assert sc.rows("replayed", "transaction") is sc.rows("replayed", "transaction")
        assert sc.table("segments") is sc.table("segments")
        assert sc.table("segments", ["orders"]) is not sc.table("segments")
        plan = tables["findings"]._jdf.queryExecution().optimizedPlan().toString()
        assert len(plan) < 100_000, len(plan)
        for name in ("findings", "transactions", "offset_timeline", "partitions"):
            got = tables[name].toArrow()
            want = cached[name]
            # the shared audit ran over every scenario, where brokers are named by their path
            # (several directories share node id 1): every other column must be equal
            cols = [
                c for c in want.column_names
                if "map" not in str(want.schema.field(c).type) and c != "broker"
            ]  # fmt: skip
            order = [(c, "ascending") for c in cols]
            assert got.select(cols).sort_by(order).equals(want.select(cols).sort_by(order)), name
    assert not (tmp_path / "out" / "_scratch" / "0123abcd").exists()  # removed after


def test_a_small_dump_s_stages_after_the_scan_shuffle_nothing(spark, sim_all, tmp_path,
                                                              monkeypatch):  # fmt: skip
    """A run whose scan decoded at most replay.plan.SINGLE_ROWS batches runs every stage after
    the scan as one task: each shuffle is a Spark job of its own, whose scheduling costs a small
    dump more than its rows. Every Spark job of the plan is then one stage, and every table is
    the same as the plan spread over tasks gives it (the same dump with no run small enough)."""
    import decoders
    import replay.plan as plan
    from jobs.output import OutputDir
    from jobs.scan import decoded_once
    from replay.config import default
    from replay.replicas import replay_spec
    from replay.settings import AuditConfig

    dump = str(sim_all / "demo")  # leaks, propagation, a hanging transaction, broadcast groups
    files = decoders.discover([dump])
    config = AuditConfig.from_conf(None)
    spec = replay_spec([dump], config)
    tracker = spark.sparkContext.statusTracker()

    def audited(single_rows: int, key: str) -> tuple[dict, list[int]]:
        monkeypatch.setattr(plan, "SINGLE_ROWS", single_rows)
        out = OutputDir(str(tmp_path / key))
        with decoded_once(spark, files, default("decode"), out, key, None, spec) as sc:
            before = set(tracker.getJobIdsForGroup())
            tables = plan.Audit(spark, config, sc).run()
            assert tables.single == (single_rows >= 0)
            got = {name: tables[name].toArrow() for name in sorted(tables)}
            jobs = sorted(set(tracker.getJobIdsForGroup()) - before)
        return got, [len(tracker.getJobInfo(j).stageIds) for j in jobs]

    one, one_stages = audited(plan.SINGLE_ROWS, "0000aaaa")
    spread, spread_stages = audited(-1, "0000bbbb")
    assert one_stages and max(one_stages) == 1, one_stages
    assert max(spread_stages) > 1, spread_stages  # the same plan spread: shuffles
    assert sum(one_stages) < sum(spread_stages)
    assert one["findings"].num_rows > 0
    for name, want in spread.items():
        assert one[name].schema == want.schema, name
        assert sorted(map(repr, one[name].to_pylist())) == sorted(map(repr, want.to_pylist())), name


def _node_ids(t):
    """Brokers by node id: a node id several directories share is named with its directory
    (``2@replica_divergence/broker-2``), the only one with it by its id alone (``2``), so a
    copy of some scenarios names some brokers differently from the run over all of them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, f in enumerate(t.schema):
        if pa.types.is_string(f.type):
            t = t.set_column(
                i, f, pc.replace_substring_regex(t.column(i), r"(\d+)@[\w./-]+", r"\1")
            )
    return t
