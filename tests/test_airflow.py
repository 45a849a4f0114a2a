"""The example DAG under jobs/airflow, loaded by a real Airflow installation (its own virtual
environment, built by ./dev test from jobs/airflow/requirements.txt): task graph, schedule,
and templated arguments that our own command line accepts; then run whole with `airflow dags
test`, its SparkSubmitOperator tasks submitting to the standalone cluster of
tests/standalone.py with the project shipped as a package."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess

import pytest
from standalone import spark_home as installed_spark_home

from jobs.audit import add_arguments as audit_arguments
from jobs.gate import add_arguments as gate_arguments

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.environ.get("LOGREPLAY_AIRFLOW_VENV", os.path.join(REPO, ".venv-airflow"))
RUN_ID = "scheduled__2026-11-21T00:00:00+00:00"


def _load(tmp_path, **params) -> dict:
    python = os.path.join(VENV, "bin", "python")
    assert os.path.exists(python), f"no Airflow environment at {VENV}: run ./dev test"
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    probe = subprocess.run(
        [python, os.path.join(REPO, "tests", "airflow_probe.py"),
         os.path.join(REPO, "jobs", "airflow"), "2026-11-21", RUN_ID, json.dumps(params)],
        capture_output=True, text=True, env=env, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(probe.stdout.strip().splitlines()[-1])


def _parse(add, args: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(exit_on_error=False)
    add(p)
    return p.parse_args(args)


@pytest.mark.cluster  # starts Airflow (its own environment) in a subprocess
def test_the_dag_loads_with_audit_then_gate_daily(tmp_path):
    shape = _load(tmp_path)
    assert shape["import_errors"] == {}
    dag = shape["dags"]["logreplay_daily_audit"]
    assert dag["schedule"] == "@daily" and dag["max_active_runs"] == 1
    tasks = dag["tasks"]
    assert set(tasks) == {"audit", "gate"}
    assert tasks["audit"]["operator"] == tasks["gate"]["operator"] == "SparkSubmitOperator"
    assert tasks["audit"]["upstream"] == [] and tasks["gate"]["upstream"] == ["audit"]
    assert tasks["audit"]["application"] == os.path.join(REPO, "jobs", "audit.py")
    assert tasks["gate"]["application"] == os.path.join(REPO, "jobs", "gate.py")
    assert tasks["gate"]["retries"] == 0 and tasks["audit"]["retries"] == 2


@pytest.mark.cluster
def test_the_templated_arguments_are_run_specific_and_accepted_by_the_jobs(tmp_path):
    dump, out, conf = (
        "s3://dumps/cluster-a",
        "/data/audits",
        os.path.join(REPO, "conf", "default.yaml"),
    )
    tasks = _load(tmp_path, dump_root=dump, out_root=out, conf=conf, package="/pkgs/logreplay.zip")[
        "dags"
    ]["logreplay_daily_audit"]["tasks"]
    audit = _parse(audit_arguments, tasks["audit"]["application_args"])
    assert audit.inputs == [f"{dump}/2026-11-21"]
    assert audit.out == f"{out}/2026-11-21"  # run-specific: a backfill of another day is apart
    assert audit.run_id == RUN_ID and audit.logical_date == "2026-11-21"
    assert audit.conf == conf and audit.since == "auto"
    gate = _parse(gate_arguments, tasks["gate"]["application_args"])
    assert gate.dir == audit.out and gate.run_id == RUN_ID and gate.logical_date == "2026-11-21"
    assert tasks["audit"]["name"] == "logreplay-audit-20261121"
    # the project reaches the executors as the package the run names, never from a checkout
    assert tasks["audit"]["py_files"] == tasks["gate"]["py_files"] == "/pkgs/logreplay.zip"


DAG_ID = "logreplay_daily_audit"
DAYS = ("2026-11-20", "2026-11-21", "2026-11-22")
SUBMIT = "deploy-mode=client&spark-binary=spark-submit"  # the spark_default connection's extras


@pytest.fixture(scope="module")
def airflow_runs(tmp_path_factory, standalone) -> dict:
    """Three days of one cluster's dumps run whole by `airflow dags test`, one after the other,
    each audit going on from the day before's output (`--since auto`): day -> (the CLI's
    completed process, what Airflow recorded, the day's output directory). Day 1 is an early
    copy of transaction_faults (each log cut at a third of its batches: clean), day 2 the same
    logs whole (its anomalies appear), day 3 the same again, its conf waiving day 2's findings
    by fingerprint and counting every finding (``gate.on: all``).

    Each day has an Airflow home of its own (a copy of one migrated SQLite database). Day 1
    runs on the standalone cluster, its connection written as a user writes it (the package
    shipped to executors in their own JVM and Python); days 2 and 3 in Spark's local mode
    (``local[2]``): what they prove (going on from the day before, waivers, the gate's
    verdicts) does not depend on the master, and each cluster application costs ~10 s more
    to start (tests/test_cluster.py runs the jobs' spark-submit on the cluster)."""
    import yaml

    from simulator import synth
    from tests.daily_copies import daily_copies

    root = tmp_path_factory.mktemp("airflow")
    synth("transaction_faults", str(root / "whole"), 7)
    early, whole = daily_copies([root / "whole"], root / "copies", 2, shares=(0.3, 1.0))
    for day, copy in zip(DAYS, (early, whole, whole), strict=True):
        shutil.copytree(copy[0], root / "dumps" / day)
    # spark-submit of the installed pyspark, alone on a directory put first on PATH: the
    # Airflow environment has only pyspark's Connect client
    binaries = root / "bin"
    binaries.mkdir()
    spark_home = installed_spark_home()
    os.symlink(spark_home / "bin" / "spark-submit", binaries / "spark-submit")
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME"}
        and not k.startswith("AIRFLOW")
    }
    base.update(
        PATH=os.pathsep.join([str(binaries), os.path.join(VENV, "bin"), base.get("PATH", "")]),
        AIRFLOW__CORE__DAGS_FOLDER=os.path.join(REPO, "jobs", "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW_CONN_SPARK_DEFAULT=f"{standalone.url}?{SUBMIT}",
        SPARK_HOME=str(spark_home),
        SPARK_CONF_DIR=str(standalone.conf_dir(**{"spark.cores.max": "1"})),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=str(standalone.python),
    )
    airflow = os.path.join(VENV, "bin", "airflow")
    assert os.path.exists(airflow), f"no Airflow environment at {VENV}: run ./dev test"
    migrated = root / "migrated"
    migrate = subprocess.run(
        [airflow, "db", "migrate"], env=dict(base, AIRFLOW_HOME=str(migrated)),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert migrate.returncode == 0, migrate.stderr[-4000:]
    params = {
        "dump_root": str(root / "dumps"),
        "out_root": str(root / "out"),
        "package": str(standalone.package),
    }

    def dags_test(day: str):
        home = root / "homes" / day
        home.mkdir(parents=True)
        shutil.copyfile(migrated / "airflow.db", home / "airflow.db")
        env = dict(base, AIRFLOW_HOME=str(home))
        if day != DAYS[0]:  # the days after: Spark in local mode (see the docstring)
            env["AIRFLOW_CONN_SPARK_DEFAULT"] = f"spark://local%5B2%5D?{SUBMIT}"

        def cli(*args: str, **kw) -> subprocess.CompletedProcess:
            return subprocess.run([airflow, *args], env=env, capture_output=True, text=True, **kw)

        # the gate's Data Docs are tested by tests/test_gate.py: left out here, for time
        gate = {"data_docs": False}
        if day == DAYS[-1]:  # every finding the day before had, waived; every finding counted
            gate |= {"on": "all", "waivers": _waivers(root / "out" / DAYS[-2])}
        conf = dict(params, conf=str(root / f"conf-{day}.yaml"))
        (root / f"conf-{day}.yaml").write_text(yaml.safe_dump({"gate": gate}))
        run = cli("dags", "test", DAG_ID, day, "--conf", json.dumps(conf), timeout=1500)
        dag_run, tasks = _recorded(home / "airflow.db")
        assert dag_run["logical_date"].startswith(day), dag_run
        return run, {"run": dag_run, "tasks": tasks, "out": root / "out" / day}

    return {day: dags_test(day) for day in DAYS}  # in order: each goes on from the one before


def _waivers(out) -> list[dict]:
    """Waivers of every finding of the output ``out``, by fingerprint."""
    import pyarrow.parquet as pq

    prints = sorted({r["fingerprint"] for r in pq.read_table(out / "findings").to_pylist()})
    return [{"fingerprint": fp, "reason": "known since the day it appeared",
             "owner": "data-platform", "expires": "2027-01-31"} for fp in prints]  # fmt: skip


def _recorded(db) -> tuple[dict, dict]:
    """What Airflow recorded of the home's one DAG run, read from its metadata database (the
    `dag_run` and `task_instance` tables): the run, and its tasks' states. Two more Airflow
    commands (`dags list-runs`, `tasks states-for-dag-run`) would show the same rows, each
    after ~10 s of Airflow's start-up."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as c:
        c.row_factory = sqlite3.Row
        (dag_run,) = [
            dict(r)
            for r in c.execute(
                "SELECT run_id, state, logical_date FROM dag_run WHERE dag_id = ?", (DAG_ID,)
            )
        ]
        tasks = {
            r["task_id"]: r["state"]
            for r in c.execute(
                "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                (DAG_ID, dag_run["run_id"]),
            )
        }
    return dag_run, tasks


def _summary(out) -> dict:
    with open(out / "summary.json") as f:
        return json.load(f)


@pytest.mark.cluster
def test_the_dag_run_succeeds_on_a_clean_dump(airflow_runs):
    run, seen = airflow_runs["2026-11-20"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    assert seen["run"]["state"] == "success"
    assert seen["tasks"] == {"audit": "success", "gate": "success"}
    summary = _summary(seen["out"])
    assert summary["gate"]["success"] is True
    assert summary["logical_date"] == "2026-11-20" and summary["files"] > 0
    assert summary["findings"]["by_severity"].get("critical", 0) == 0


@pytest.mark.cluster
def test_the_dag_run_fails_at_the_gate_on_a_critical_finding(airflow_runs):
    run, seen = airflow_runs["2026-11-21"]
    assert run.returncode != 0 and "DagRun failed" in run.stdout + run.stderr
    assert seen["run"]["state"] == "failed"
    assert seen["tasks"] == {"audit": "success", "gate": "failed"}
    summary = _summary(seen["out"])
    assert summary["findings"]["by_severity"].get("critical", 0) > 0
    assert summary["findings"]["by_status"]["new"] > 0  # the anomalies appeared today
    assert summary["gate"]["success"] is False  # recorded by the failed gate task
    # it went on from the day before: every replica from its point, reading what was new
    since = summary["since_points"]
    assert since["went_on"] == since["points"] > 0 and summary["since"].endswith("2026-11-20")
    assert 0 < since["bytes_after"] < 0.8 * since["log_bytes"]
    assert summary["bytes_read"] < summary["bytes"]


@pytest.mark.cluster
def test_the_next_day_passes_once_the_findings_are_waived(airflow_runs):
    run, seen = airflow_runs["2026-11-22"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    assert seen["tasks"] == {"audit": "success", "gate": "success"}
    summary = _summary(seen["out"])
    before = _summary(airflow_runs["2026-11-21"][1]["out"])
    # the same findings, every one still present and waived: counted (gate.on: all), not failing
    assert summary["findings"]["by_status"] == {
        "new": 0, "provisional": 0, "still present": before["rows"]["findings"], "gone": 0,
    }  # fmt: skip
    assert summary["gate"]["success"] is True
    # nothing new in the logs: none of their bytes read, only the directories' small files
    since = summary["since_points"]
    assert since["bytes_after"] == 0 and since["went_on"] == since["points"] > 0
    assert summary["bytes_read"] <= summary["bytes"] - since["log_bytes"]
