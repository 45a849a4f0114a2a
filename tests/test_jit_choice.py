"""Which JIT the driver JVM of an audit runs (jobs.session.full_jit): C1 only by default, for
start-up; full tiered compilation where the dump's internal topics hold enough records that
the audit's Spark stages carry millions of rows. No JVM is started."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from jobs import jvm_archive as ja
from jobs import session as session_module
from jobs.session import C1_ONLY, DRIVER_JAVA_OPTIONS, full_jit, spark_session, without_option
from replay.config import load

MB = 1 << 20


def _file(topic: str | None, size: int, kind: str = "log"):
    return SimpleNamespace(kind=kind, size=size, info=SimpleNamespace(topic=topic))


def test_internal_topics_log_segments_decide():
    conf = load(None, [f"spark.full_jit_from_mb={100}"])
    few = [_file(TRANSACTION_STATE_TOPIC, 60 * MB), _file("orders", 5000 * MB)]
    assert not full_jit(conf, few)  # user data carries no row per record through Spark
    assert full_jit(conf, [*few, _file(CONSUMER_OFFSETS_TOPIC, 40 * MB)])
    # indexes and snapshots of the same topics are not records
    assert not full_jit(conf, [*few, _file(CONSUMER_OFFSETS_TOPIC, 40 * MB, "index")])
    assert full_jit(load(None, ["spark.full_jit_from_mb=0"]), [])
    assert not full_jit(load(None), few)  # the default: a long-lived producer's week, not this


class _Launched(Exception):
    """Raised where the builder would start the JVM: its options are what the test checks."""


@pytest.mark.parametrize("full", [False, True])
def test_the_session_drops_c1_only_for_a_full_jit(monkeypatch, full):
    from pyspark.sql import SparkSession

    seen: dict[str, str] = {}

    def launch(builder):
        seen.update(builder._options)
        raise _Launched

    def context(app_name, master, config):  # a local session's context comes first
        seen.update(config)
        raise _Launched

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", launch)
    monkeypatch.setattr(session_module, "_context_with_workers", context)
    monkeypatch.setenv(ja.ENABLE_ENV, "off")
    monkeypatch.delenv("SPARK_ENV_LOADED", raising=False)
    with pytest.raises(_Launched):
        spark_session("local[1]", conf=load(None), source=False, full_jit=full)
    options = seen[DRIVER_JAVA_OPTIONS].split()
    assert (C1_ONLY in options) is not full
    assert "-XX:+UseSerialGC" in options  # the other options stay


def test_without_option_removes_only_that_option():
    assert without_option(f"-Xa {C1_ONLY}  -Xb", C1_ONLY) == "-Xa -Xb"
    assert without_option("-Xa", C1_ONLY) == "-Xa"
