"""Which JIT the driver JVM of an audit runs (jobs.session.full_jit): C1 only by default, for
start-up; full tiered compilation where the dump's internal topics hold enough records that
the audit's Spark stages carry millions of rows. No JVM is started."""

from __future__ import annotations

import pytest

from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from decoders.layout import internal_log_bytes, laid_out, walked
from jobs import jvm_archive as ja
from jobs import session as session_module
from jobs.session import C1_ONLY, DRIVER_JAVA_OPTIONS, full_jit, spark_session, without_option
from replay.config import load

MB = 1 << 20


def _walked(tmp_path, *files: tuple[str, int, str]):
    """A dump's walk (decoders.layout.walked) over sparse files: (partition directory, size,
    file name)."""
    for pdir, size, name in files:
        (tmp_path / "broker-1" / pdir).mkdir(parents=True, exist_ok=True)
        with open(tmp_path / "broker-1" / pdir / name, "wb") as f:
            f.truncate(size)
    return walked([str(tmp_path)])


LOG = "00000000000000000000.log"


def test_internal_topics_log_segments_decide(tmp_path):
    conf = load(None, [f"spark.full_jit_from_mb={100}"])
    few = [(f"{TRANSACTION_STATE_TOPIC}-3", 60 * MB, LOG), ("orders-0", 5000 * MB, LOG)]
    assert not full_jit(conf, _walked(tmp_path / "a", *few))  # user data: no row per record
    more = [*few, (f"{CONSUMER_OFFSETS_TOPIC}-7", 40 * MB, LOG)]
    assert full_jit(conf, _walked(tmp_path / "b", *more))
    # indexes, snapshots and files moved aside of the same topics are not records
    others = [(f"{CONSUMER_OFFSETS_TOPIC}-7", 40 * MB, n) for n in
              ("00000000000000000000.index", "00000000000000000000.log.deleted", "x.log")]  # fmt: skip
    assert not full_jit(conf, _walked(tmp_path / "c", *few, *others))
    assert full_jit(load(None, ["spark.full_jit_from_mb=0"]), [])
    assert not full_jit(load(None), _walked(tmp_path / "d", *few))  # the default: a week's


def test_the_walk_counts_what_the_layout_lists(sim_all, corpus):
    """The bytes the JVM's choice is made by, from names alone, are those of the internal
    topics' log segments as the layout lists them, on every scenario's dump and the real
    brokers' (where their partitions hold some)."""
    internal = (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
    seen = 0
    for path in [*sorted(sim_all.iterdir()), corpus]:
        found = walked([str(path)])
        files, _ = laid_out(found)
        listed = sum(f.size for f in files if f.kind == "log" and f.info.topic in internal)
        assert internal_log_bytes(found) == listed, path
        seen += listed > 0
    assert seen > 5


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
