"""The data source and the audit from a Spark Connect client.

The fixture starts pyspark's own Spark Connect server (the SparkConnectServer class through
spark-submit, in local mode) on 127.0.0.1 and a free port, its Python workers running this
interpreter with the project importable, and always stops it. The client registers the source
with `decoders.spark.register(spark)` exactly as a classic session does.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pyarrow as pa
import pytest

import decoders

pytestmark = pytest.mark.cluster

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    pytest.importorskip("grpc", reason="the Spark Connect client needs grpcio (dev extra)")
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    port = _free_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(
        SPARK_HOME=home,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p),
    )
    cmd = [
        os.path.join(home, "bin", "spark-submit"),
        "--class", SERVER_CLASS,
        "--master", "local[2]",
        "--name", "logreplay-connect-test",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.driver.memory=2g",
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Connect server did not start:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        yield f"sc://127.0.0.1:{port}"
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """The server and its Python workers: the process group this fixture started."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def remote(connect_url):
    from pyspark.sql import SparkSession

    from decoders.spark import register

    # The test process may already run a classic session (other test modules share one); a user's
    # Connect client has none. `create()` opens a Connect session beside it, and the mode flag pyspark
    # sets in the environment is restored afterwards so later classic sessions still work.
    flag = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    spark = SparkSession.builder.remote(connect_url).create()
    assert spark.__class__.__module__.startswith("pyspark.sql.connect")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    spark.conf.set("spark.sql.shuffle.partitions", "4")  # a tiny dump: few shuffle tasks
    register(spark)
    try:
        yield spark
    finally:
        spark.stop()
        if flag is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
        else:
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = flag


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    from jobs.sample import write_sample_dump

    root = tmp_path_factory.mktemp("connect-dump") / "sample"
    write_sample_dump(str(root))
    return root, decoders.read_dump([str(root)], list(decoders.TABLES))


def _micros(t: pa.Table) -> dict[str, list[int]]:
    return {
        f.name: sorted(
            v
            for v in t.column(f.name).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
            .to_pylist()
            if v is not None
        )
        for f in t.schema
        if pa.types.is_timestamp(f.type)
    }  # fmt: skip


def test_every_table_over_connect(remote, dump):
    root, want = dump
    timings = {}
    for table in decoders.TABLES:
        t0 = time.perf_counter()
        got = remote.read.format("kafka-segments").option("table", table).load(str(root)).toArrow()
        timings[table] = (got.num_rows, round(time.perf_counter() - t0, 2))
        assert got.num_rows == want[table].num_rows, table
        assert _micros(got) == _micros(want[table]), table
    # filters pushed down over Connect prune the same way
    one = (
        remote.read.format("kafka-segments")
        .option("table", "records")
        .load(str(root))
        .where("topic = 'orders' AND partition = 0")
        .count()
    )
    records = want["records"]
    assert one == sum(
        1
        for t, p in zip(records["topic"].to_pylist(), records["partition"].to_pylist(), strict=True)
        if (t, p) == ("orders", 0)
    )
    print(f"\nConnect reads: {timings}")


def test_audit_over_connect(remote, dump):
    """replay.audit through a Connect client: every output table evaluates, with the findings
    the sample dump holds and instants equal to the decoders'."""
    from replay import audit

    root, want = dump
    t0 = time.perf_counter()
    tables = audit(remote, [str(root)])
    # the same work as tests/test_sessions.py's audit: every replay table to the client
    out = {n: df.toArrow() for n, df in tables.items() if n not in ("segments", "errors")}
    print(
        f"\nConnect audit: {time.perf_counter() - t0:.1f} s, rows",
        {n: t.num_rows for n, t in out.items()},
    )
    assert tables["segments"].count() == want["segments"].num_rows
    assert tables["errors"].count() == want["errors"].num_rows
    assert out["partitions"].num_rows > 0 and out["findings"].num_rows > 0
    assert out["transactions"].num_rows > 0
    batch_ts = set(_micros(want["batches"])["max_timestamp"])
    last = _micros(out["partitions"])["last_timestamp"]
    assert last and set(last) <= batch_ts
    firsts = _micros(out["transactions"])["first_timestamp"]
    assert firsts and set(firsts) <= batch_ts
    remote.catalog.clearCache()
