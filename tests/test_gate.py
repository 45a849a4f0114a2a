"""The gate end to end: audits of simulated scenarios with `--gate`, `logreplay gate` with a
policy, idempotent reruns (byte-identical outputs across processes), and the Data Docs
rendered by headless Chromium. `spark-submit jobs/gate.py` runs in tests/test_airflow.py (the
DAG's gate task, on the standalone cluster, passing and failing)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from jobs.cli import main
from replay.findings import at_least

pytestmark = pytest.mark.spark

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = ["--run-id", "scheduled__2026-11-21T00:00:00+00:00", "--logical-date", "2026-11-21"]


@pytest.fixture(autouse=True)
def _release_cache(spark):
    yield
    spark.catalog.clearCache()


@pytest.fixture(scope="module")
def gated(spark, sim_all, tmp_path_factory):
    """scenario -> (exit code, output directory) of `logreplay audit --gate`."""
    done = {}

    def run(scenario: str):
        if scenario not in done:
            out = tmp_path_factory.mktemp("gate") / scenario
            code = main(["audit", str(sim_all / scenario), "--out", str(out), "--gate", *RUN])
            spark.catalog.clearCache()
            done[scenario] = (code, out)
        return done[scenario]

    return run


def _blocking_truth(sim_all, scenario: str) -> set[str]:
    truth = json.loads((sim_all / scenario / "truth.json").read_text())
    return {a["kind"] for a in truth["anomalies"] if at_least(a["severity"], "error")}


@pytest.mark.parametrize("scenario", ["transaction_faults", "idempotence_faults", "aborted_reads"])
def test_the_gate_fails_on_anomalies_and_names_the_findings(sim_all, gated, scenario, capsys):
    code, out = gated(scenario)
    assert code == 1
    result = json.loads((out / "gate" / "result.json").read_text())
    assert result["success"] is False
    failed = {f["description"].split()[1] for f in result["failures"] if f["table"] == "findings"}
    assert failed == _blocking_truth(sim_all, scenario)
    for f in result["failures"]:
        assert f["unexpected_count"] >= 1 and f["behind"], f  # the findings behind it, by name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["gate"]["success"] is False
    assert summary["run_id"] == "scheduled__2026-11-21T00_00_00_00_00"
    assert (out / "gate" / "data_docs" / "index.html").is_file()


@pytest.mark.parametrize("scenario", ["clean_transactions", "clean_eos_pipeline"])
def test_the_gate_passes_clean_scenarios(gated, scenario):
    code, out = gated(scenario)
    assert code == 0
    result = json.loads((out / "gate" / "result.json").read_text())
    assert result["success"] and result["failures"] == [] and result["evaluated"] > 20
    assert json.loads((out / "summary.json").read_text())["gate"]["success"] is True


def test_logreplay_gate_applies_the_policy(sim_all, gated, tmp_path, capsys):
    code, out = gated("transaction_faults")
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "gate")
    assert main(["gate", str(copy), "--set", "gate.data_docs=false"]) == 1
    err = capsys.readouterr().err
    assert "failed [findings] no split_outcome finding of severity error or above" in err
    assert "ledger-split" in err  # the finding behind it
    exempt = [f"--set=gate.kinds.{k}=never" for k in _blocking_truth(sim_all, "transaction_faults")]
    assert main(["gate", str(copy), "--set", "gate.data_docs=false", *exempt]) == 0
    summary = json.loads((copy / "summary.json").read_text())
    assert summary["gate"]["success"] is True


def _findings_of(out) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(out / "findings").to_pylist()


def test_waivers_take_findings_out_of_the_gate_until_they_expire(sim_all, gated, tmp_path, capsys):
    """`gate.waivers`: one blocking finding waived by its fingerprint's prefix, the others by
    kind and a topic pattern: the gate passes, names what it waived, and the waived findings
    stay in the table, the report and the Data Docs. Judged on the logical date after a waiver's
    expiry, it waives nothing and fails the gate naming itself; a waiver matching nothing is
    reported without failing."""
    import yaml

    code, out = gated("transaction_faults")
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "gate")
    findings = _findings_of(copy)
    blocking = [f for f in findings if at_least(f["severity"], "error")]
    first = next(f for f in blocking if [g["kind"] for g in blocking].count(f["kind"]) == 1)
    rest = [f for f in blocking if f is not first]
    assert rest and all(f["topic"].startswith("led") for f in rest)

    def gate(waivers, logical_date="2026-11-21") -> int:
        conf = tmp_path / "waivers.yaml"
        conf.write_text(yaml.safe_dump({"gate": {"waivers": waivers}}))
        return main(["gate", str(copy), "--conf", str(conf), "--run-id", "r",
                     "--logical-date", logical_date])  # fmt: skip

    by_fp = {"fingerprint": first["fingerprint"][:8], "reason": "KAFKA-12671, aborted by hand",
             "owner": "data-platform", "expires": "2026-11-30"}  # fmt: skip
    by_kind = [{"kind": k, "topic": "led*", "reason": "replayed into a fresh topic",
                "owner": "payments", "expires": "2026-12-31"}
               for k in sorted({f["kind"] for f in rest})]  # fmt: skip
    nothing = {"kind": "offset_overwrite", "group": "nobody-*", "reason": "old incident",
               "owner": "ml", "expires": "2026-12-31"}  # fmt: skip
    capsys.readouterr()
    assert gate([by_fp, *by_kind, nothing]) == 0
    err = capsys.readouterr().err
    assert (
        "gate PASS" in err and f"waived 1 finding(s) under waiver 1 ({by_fp['fingerprint']}" in err
    )
    assert "note: waiver" in err and "nobody-*" in err  # the one matching nothing, reported
    result = json.loads((copy / "gate" / "result.json").read_text())
    rows = {r["waiver"].split(" (")[0]: r for r in result["waivers"]}
    assert rows["waiver 1"]["waived"] == 1 and sum(r["waived"] for r in rows.values()) == len(
        blocking
    )
    assert rows[f"waiver {len(by_kind) + 2}"]["matched"] == 0
    summary = json.loads((copy / "summary.json").read_text())
    assert summary["gate"]["success"] and summary["gate"]["waived"] == len(blocking)
    assert len(_findings_of(copy)) == len(findings)  # still there
    docs = "".join(p.read_text() for p in (copy / "gate" / "data_docs").rglob("*.html"))
    assert "waives 1 finding(s) until 2026-11-30" in docs and first["kind"] in docs
    assert main(["report", str(copy)]) == 0
    page = (copy / "report" / "index.html").read_text()
    assert "Waivers (gate.waivers)" in page and "KAFKA-12671" in page
    # the day after the fingerprint waiver expires: its finding blocks again, and it fails
    capsys.readouterr()
    assert gate([by_fp, *by_kind], logical_date="2026-12-01") == 1
    err = capsys.readouterr().err
    assert "failed [waivers] waiver 1 (" in err and "has not expired" in err
    assert f"failed [findings] no {first['kind']} finding" in err
    # a finding's own kind waived where the pattern does not hold: still blocking
    assert gate([{**by_kind[0], "topic": "other-*"}]) == 1


def test_the_driver_and_spark_validate_to_one_verdict(sim_all, gated, tmp_path):
    """`gate.driver_rows`: the same gate over the same output, its tables validated on the
    driver (GE's pandas engine over the columns its expectations read) and by Spark, with a
    waiver in force, an expired one and a minimum coverage: one verdict, the same failures
    with the same counts and findings behind them, expectation by expectation."""
    import yaml

    _, out = gated("transaction_faults")
    blocking = sorted({f["kind"] for f in _findings_of(out) if at_least(f["severity"], "error")})
    waivers = [
        {"kind": blocking[0], "reason": "r", "owner": "o", "expires": "2026-12-31"},
        {"kind": blocking[-1], "reason": "r", "owner": "o", "expires": "2026-11-01"},
    ]
    conf = tmp_path / "gate.yaml"
    conf.write_text(yaml.safe_dump({"gate": {"waivers": waivers, "data_docs": False,
                                             "min_coverage": {"transactions": 0.5}}}))  # fmt: skip
    results = {}
    for rows in (1_000_000, 0):
        copy = tmp_path / f"rows-{rows}"
        shutil.copytree(out, copy)
        shutil.rmtree(copy / "gate")
        main(["gate", str(copy), "--conf", str(conf), "--set", f"gate.driver_rows={rows}", *RUN])
        results[rows] = json.loads((copy / "gate" / "result.json").read_text())
    driver, spark = results[1_000_000], results[0]
    assert set(driver["validated_on"].values()) == {"driver"}
    assert set(spark["validated_on"].values()) == {"spark"}
    assert {"findings", "coverage", "waivers", "segments"} <= set(driver["validated_on"])
    assert driver["success"] is spark["success"] is False
    for key in ("evaluated", "failures", "waivers", "known"):
        assert driver[key] == spark[key], key
    assert any(f["table"] == "waivers" for f in driver["failures"])

    def outcomes(result) -> list:
        return [(e["expectation_type"], json.dumps(e["kwargs"], sort_keys=True), e["success"])
                for suite in result["great_expectations"]
                for v in suite["validation_results"] for e in v["expectations"]]  # fmt: skip

    assert outcomes(driver) == outcomes(spark) and len(outcomes(driver)) == driver["evaluated"]


def test_times_stay_in_spark_and_a_row_count_reads_one_plain_column(spark):
    """What the driver reads of a table (validations.gate._driver_data): a suite of row counts
    reads the first column that is not a time; a suite reading a timestamp is left to Spark
    (a broker's timestamps can lie beyond what pandas holds)."""
    import datetime as dt

    import pyarrow as pa

    from validations.gate import _driver_data
    from validations.suites import Check, Suite, data_suites

    when = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
    df = spark.createDataFrame([(when, 1), (when, 2)], "at timestamp, n long")
    asked = []

    def on_driver(table: str, columns: list[str], most_rows: int):
        asked.append((table, columns))
        return pa.table({"n": [1, 2]}).select(columns)

    (counted,) = data_suites({"t": df.columns}, {"t": 2})
    timed = Suite("u", [Check(None, "a time", reads=("at",))])
    data = _driver_data({"t": df, "u": df}, {}, [counted, timed], on_driver, 10)
    assert asked == [("t", ["n"])] and list(data) == ["t"] and len(data["t"]) == 2


def test_a_stricter_threshold_turns_warnings_into_failures(gated, tmp_path):
    code, out = gated("offset_resets")  # offset_regression: info (resets) and warning (a rewind)
    assert code == 0
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    strict = ["--set", "gate.data_docs=false", "--set", "gate.kinds.offset_regression=warning"]
    assert main(["gate", str(copy), *strict]) == 1
    (failure,) = json.loads((copy / "gate" / "result.json").read_text())["failures"]
    assert (
        failure["unexpected_count"] == 1 and "while members were consuming" in failure["behind"][0]
    )
    assert (
        main(["gate", str(copy), "--set", "gate.data_docs=false", "--set", "gate.fail_at=info"])
        == 1
    )


def test_the_gate_fails_when_the_audit_could_not_look(sim_all, tmp_path, capsys):
    """A copy without `__transaction_state`: its transactions cannot be judged against the
    coordinator. Findings alone pass the gate; a required minimum coverage of transactions
    fails it, naming the family, its share and why."""
    dump = tmp_path / "no-coordinator"
    shutil.copytree(sim_all / "clean_transactions", dump)
    for d in dump.rglob("__transaction_state-*"):
        shutil.rmtree(d)
    out = tmp_path / "out"
    need = ["--set", "gate.min_coverage.transactions=0.9", "--set", "gate.data_docs=false"]
    assert main(["audit", str(dump), "--out", str(out), "--gate", *need, *RUN]) == 1
    err = capsys.readouterr().err
    assert "failed [coverage] the audit judged at least 90% of transactions" in err
    assert "no coordinator history" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["coverage"]["transactions"]["share"] == 0.0
    assert summary["findings"]["by_severity"].get("error") is None
    # the same output passes a gate that asks only about findings
    assert main(["gate", str(out), "--set", "gate.data_docs=false"]) == 0


def test_the_gate_checks_the_decoded_tables(sim_all, tmp_path, capsys):
    out = tmp_path / "decoded"
    dump = str(sim_all / "corrupt_segments")
    assert (
        main(["decode", dump, "--out", str(out), "--tables", "segments", "errors", "batches"]) == 0
    )
    assert main(["gate", str(out), "--set", "gate.data_docs=false"]) == 1
    result = json.loads((out / "gate" / "result.json").read_text())
    failed = {(f["table"], f["description"]) for f in result["failures"]}
    assert ("segments", "no corrupt bytes in any file") in failed
    assert ("errors", "every CRC valid") in failed
    assert all(f["behind"] for f in result["failures"])
    clean = tmp_path / "clean"
    dump = str(sim_all / "clean_idempotent")
    assert (
        main(["decode", dump, "--out", str(clean), "--tables", "segments", "errors", "batches"])
        == 0
    )
    assert main(["gate", str(clean), "--set", "gate.data_docs=false"]) == 0


def _digest(root) -> dict[str, str]:
    out = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.mark.slow  # a determinism rerun (./dev test -m slow); S3's rerun stays in the suite
def test_a_rerun_of_the_same_run_leaves_identical_bytes(gated, sim_all):
    """The retry runs in a new process (a new JVM too), as an Airflow retry would."""
    code, out = gated("broadcast_groups")
    before = _digest(out)
    assert any(p.startswith("findings/") for p in before)
    rerun = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "audit", str(sim_all / "broadcast_groups"),
         "--out", str(out), "--gate", *RUN],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert rerun.returncode == code, rerun.stderr[-3000:]
    assert _digest(out) == before
    assert sorted(os.listdir(out.parent)) == [out.name]  # no staging or replaced copies left


@pytest.mark.cluster
def test_the_data_docs_render_in_headless_chromium_without_network(gated, tmp_path):
    """The index lists every validation result and a result page shows its expectations with
    no network: GE's CDN scripts and styles are the site's own copies (validations/offline)."""
    from browser import Browser

    from validations.offline import remote_loads

    _code, out = gated("transaction_faults")
    site = out / "gate" / "data_docs"
    index = site / "index.html"
    results = sorted((site / "validations").rglob("*.html"))
    pages = [p for p in results if p.name == "findings-findings.html"]
    assert results and pages
    for page in [index, *sorted(site.rglob("*.html"))]:
        assert remote_loads(page.read_text()) == [], page
    with Browser() as b:
        assert b.network_is_blocked()
        for page in sorted(site.rglob("*.html")):  # every page loads all it asks for
            b.open(page.as_uri())
            b.settle(0.3)
            assert b.failed_requests() == [] and b.console_errors() == [], page
        for i, page in enumerate([index, pages[0]]):
            b.open(page.as_uri())
            b.settle(1.0)
            assert b.failed_requests() == [] and b.console_errors() == [], page
            png = b.screenshot(str(tmp_path / f"page{i}.png"), full_page=False)
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # a page, not a blank
            if page == index:
                # bootstrap-table holds one row per validation result and drew its first page
                table = "jQuery('#Validation-Results table[id]')"
                data = f"{table}.bootstrapTable('getData', {{useCurrentPage: false}})"
                assert b.evaluate(f"{data}.length") == len(results)
                page_size = b.evaluate(f"{table}.bootstrapTable('getOptions').pageSize")
                drawn = "#Validation-Results tbody tr[data-index]"
                rows = b.evaluate(f"document.querySelectorAll('{drawn}').length")
                assert rows == min(len(results), page_size) > 0
                names = b.evaluate(f"{data}.map(function(r){{return r.asset_name}}).join(' ')")
                assert "findings" in names.split()
            else:
                text = b.evaluate("document.body.innerText")
                assert "no split_outcome finding of severity error or above" in text


def test_per_run_layout_and_decode_reruns(sim_all, tmp_path):
    """output.layout=per_run puts each run under its id; a decode rerun of the same run id
    leaves the same bytes (the decode keeps its input order instead of sorting)."""
    dump = str(sim_all / "clean_compaction")
    args = ["decode", dump, "--out", str(tmp_path), "--set", "output.layout=per_run",
            "--tables", "batches", "records", "--logical-date", "2026-11-21"]  # fmt: skip
    assert main(args) == 0
    run = tmp_path / "logical-2026-11-21"
    manifest = json.loads((run / "_manifest.json").read_text())
    assert manifest["run_id"] == run.name and manifest["logical_date"] == "2026-11-21"
    before = _digest(run)
    assert any("/topic=" in "/" + p for p in before)  # partitioned by topic, Hive style
    assert main(args) == 0
    assert _digest(run) == before
    assert sorted(os.listdir(tmp_path)) == [run.name]
