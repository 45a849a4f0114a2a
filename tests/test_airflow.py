"""The example DAG under jobs/airflow, loaded by a real Airflow installation (its own virtual
environment, built by ./dev test from jobs/airflow/requirements.txt): task graph, schedule,
and templated arguments that our own command line accepts."""

from __future__ import annotations

import argparse
import json
import os
import subprocess

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


def test_the_templated_arguments_are_run_specific_and_accepted_by_the_jobs(tmp_path):
    dump, out, conf = (
        "s3://dumps/cluster-a",
        "/data/audits",
        os.path.join(REPO, "conf", "default.yaml"),
    )
    tasks = _load(tmp_path, dump_root=dump, out_root=out, conf=conf)["dags"][
        "logreplay_daily_audit"
    ]["tasks"]
    audit = _parse(audit_arguments, tasks["audit"]["application_args"])
    assert audit.inputs == [f"{dump}/2026-11-21"]
    assert audit.out == f"{out}/2026-11-21"  # run-specific: a backfill of another day is apart
    assert audit.run_id == RUN_ID and audit.logical_date == "2026-11-21"
    assert audit.conf == conf
    gate = _parse(gate_arguments, tasks["gate"]["application_args"])
    assert gate.dir == audit.out and gate.run_id == RUN_ID and gate.logical_date == "2026-11-21"
    assert tasks["audit"]["name"] == "logreplay-audit-20261121"
