"""Which Python the jobs' workers run (jobs.session.worker_python): in local mode this
interpreter, the one that imports logreplay at this version, whatever ``PYSPARK_PYTHON`` the
environment exports for a cluster's executors; elsewhere the environment's choice. No JVM is
started."""

from __future__ import annotations

import sys

import pytest

from jobs import jvm_archive as ja
from jobs import session as session_module
from jobs.session import spark_session
from replay.config import load

CLUSTER_PYTHON = "/opt/cluster/bin/python3"  # an executors' Python this machine lacks


class _Launched(Exception):
    pass


def _session(monkeypatch, master: str, submitted: bool = False) -> None:
    from pyspark.sql import SparkSession

    def launch(*_args, **_kwargs):
        raise _Launched

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", launch)
    monkeypatch.setattr(session_module, "_context_with_workers", launch)
    monkeypatch.setenv(ja.ENABLE_ENV, "off")
    if submitted:
        monkeypatch.setenv("SPARK_ENV_LOADED", "1")
    else:
        monkeypatch.delenv("SPARK_ENV_LOADED", raising=False)
    with pytest.raises(_Launched):
        spark_session(master, conf=load(None), source=False)


@pytest.mark.parametrize("master", ["local[2]", "local", "local-cluster[2,1,1024]"])
def test_local_mode_runs_its_workers_with_this_interpreter(monkeypatch, capsys, master):
    monkeypatch.setenv("PYSPARK_PYTHON", CLUSTER_PYTHON)
    _session(monkeypatch, master)
    assert session_module.os.environ["PYSPARK_PYTHON"] == sys.executable
    said = capsys.readouterr().err
    assert CLUSTER_PYTHON in said and sys.executable in said


def test_this_interpreter_named_again_is_not_remarked_on(monkeypatch, capsys):
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    _session(monkeypatch, "local[2]")
    assert session_module.os.environ["PYSPARK_PYTHON"] == sys.executable
    assert "PYSPARK_PYTHON" not in capsys.readouterr().err


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "yarn"])
def test_a_cluster_keeps_the_executors_python(monkeypatch, master):
    monkeypatch.setenv("PYSPARK_PYTHON", CLUSTER_PYTHON)
    _session(monkeypatch, master)
    assert session_module.os.environ["PYSPARK_PYTHON"] == CLUSTER_PYTHON


def test_spark_submit_keeps_what_it_was_given(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", CLUSTER_PYTHON)
    _session(monkeypatch, None, submitted=True)
    assert session_module.os.environ["PYSPARK_PYTHON"] == CLUSTER_PYTHON


def test_without_a_choice_the_workers_run_this_interpreter(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "")  # (restored after the test, whatever it was)
    monkeypatch.delenv("PYSPARK_PYTHON")
    _session(monkeypatch, "spark://127.0.0.1:7077")
    assert session_module.os.environ["PYSPARK_PYTHON"] == sys.executable
