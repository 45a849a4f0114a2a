"""The jobs on a real Spark standalone cluster (tests/standalone.py: a Master and two Workers,
each its own JVM; the project shipped to executors that run their own Python) reading a dump
from S3 (moto's server on 127.0.0.1): the same findings and the same row counts as local mode.

The jobs run under spark-submit on the cluster; their references are the one-process decode
and audit of the same dump (``decoders.read_dump``, ``replay.local``: seconds), which local
mode's Spark jobs equal (tests/test_spark.py, tests/test_audit.py), so a second spark-submit
in local mode would only repeat those comparisons. Wall times are printed (``-s``)."""

from __future__ import annotations

import json
import os
import sys
import time
from unittest import mock

import pyarrow.parquet as pq
import pytest
from pyarrow import fs as pafs
from s3server import ENV, s3  # noqa: F401
from standalone import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

SCENARIO = "transaction_faults"  # holds a critical finding
SEED = 7


@pytest.fixture(scope="session")
def s3_env(s3) -> dict[str, str]:  # noqa: F811
    """The standard AWS variables that point clients at the session's S3 server on 127.0.0.1
    (tests/s3server.py), for the jobs' subprocesses."""
    return {**ENV, "AWS_ENDPOINT_URL": s3.endpoint}


@pytest.fixture(scope="session")
def local_dump(tmp_path_factory):
    """The scenario's dump on the local disk."""
    from simulator import synth

    local = tmp_path_factory.mktemp("dump") / SCENARIO
    synth(SCENARIO, str(local), SEED)
    return local


@pytest.fixture(scope="session")
def s3_dump(local_dump, s3) -> str:  # noqa: F811
    """The scenario's dump, uploaded: ``s3://<bucket>/<scenario>``."""
    return s3.upload(local_dump, SCENARIO)


@pytest.fixture
def out_root(tmp_path, s3) -> str:  # noqa: F811
    """Where the jobs write: S3 too, through pyarrow in the tasks (no Hadoop connector); every
    assertion below reads the outputs through pyarrow's filesystems with the same variables."""
    return s3.uri(f"out/{tmp_path.name}")


def _read_json(uri: str, env: dict) -> dict:
    with mock.patch.dict(os.environ, env):
        filesystem, path = pafs.FileSystem.from_uri(uri)
        with filesystem.open_input_stream(path) as f:
            return json.loads(f.read())


def _read_table(uri: str, env: dict):
    with mock.patch.dict(os.environ, env):
        filesystem, path = pafs.FileSystem.from_uri(uri)
        return pq.read_table(path, filesystem=filesystem)


def _run(standalone, s3_env, job: str, *args: str, master: str | None = None):
    started = time.perf_counter()
    done = standalone.submit(
        str(REPO / "jobs" / job), *args, master=master, env=s3_env, timeout=900
    )
    elapsed = time.perf_counter() - started
    print(f"{job} on {master or 'the standalone cluster'}: {elapsed:.1f} s", file=sys.stderr)
    return done, elapsed


def _tail(done) -> str:
    return f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-6000:]}"


def test_executors_import_the_shipped_package_in_their_own_python(standalone, s3_env, s3_dump):
    done = standalone.submit(
        str(REPO / "tests" / "cluster_probe.py"), str(standalone.workers), s3_dump, env=s3_env
    )
    assert done.returncode == 0, _tail(done)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["executors"] == standalone.workers
    repo = str(REPO)
    for task in seen["tasks"]:
        assert task["python"] == str(standalone.python)
        # no source tree on the executors' path (the test environment itself may live inside
        # the checkout, e.g. pyspark's own zips under .venv/)
        entries = [e for e in task["pythonpath"].split(os.pathsep) if e]
        assert repo not in entries
        assert not any(os.path.isdir(os.path.join(e, "decoders")) for e in entries)
        # imported from the copy of the shipped archive in the executor's own directory
        assert f"{standalone.package.name}/decoders/" in task["decoders"]
        where = os.path.normpath(os.path.join(task["cwd"], task["decoders"]))
        assert not where.startswith(repo + os.sep)
        assert task["cwd"].startswith(str(standalone.root / "work"))
    work = standalone.root / "work"
    workers = {os.path.relpath(t["cwd"], work).split(os.sep)[0] for t in seen["tasks"]}
    assert workers == {f"worker-{i}" for i in range(standalone.workers)}
    # the dump in S3, decoded on the executors: as many batches as a local read finds
    import decoders

    with mock.patch.dict(os.environ, s3_env):
        local = decoders.read_dump([s3_dump], ["batches"])["batches"].num_rows
    assert seen["batches"] == local > 0


def test_audit_on_the_cluster_equals_the_one_process_audit(
    standalone, s3_env, s3_dump, local_dump, out_root
):
    from collections import Counter

    from replay.local import audit_local

    out = f"{out_root}/audit-cluster"
    done, elapsed = _run(
        standalone, s3_env, "audit.py", s3_dump, "--out", out,
        "--run-id", "cluster-test", "--logical-date", "2026-11-21",
    )  # fmt: skip
    # the gate's own runs: on the cluster in tests/test_airflow.py (spark-submit jobs/gate.py),
    # on an S3 output in tests/test_outputs.py
    assert done.returncode == 0, _tail(done)
    summary = _read_json(f"{out}/summary.json", s3_env)
    found = _read_table(f"{out}/findings", s3_env)
    local = audit_local([str(local_dump)])
    assert summary["findings"]["by_kind"] == dict(Counter(f["kind"] for f in local["findings"]))
    assert summary["findings"]["by_severity"] == dict(
        Counter(f["severity"] for f in local["findings"])
    )
    assert summary["findings"]["by_severity"].get("critical", 0) > 0
    for table in ("findings", "transactions", "partitions", "coordinator_transactions",
                  "offset_timeline"):  # fmt: skip
        assert summary["rows"][table] == len(local[table]), table
    assert summary["gate"] is None

    def rows(findings) -> list[tuple]:
        cols = ("kind", "topic", "partition", "first_offset", "message")
        return sorted(tuple("" if r[c] is None else str(r[c]) for c in cols) for r in findings)

    assert rows(found.to_pylist()) == rows(local["findings"])
    print(f"audit: cluster {elapsed:.1f} s", file=sys.stderr)


def test_decode_on_the_cluster_equals_the_one_process_decode(
    standalone, s3_env, s3_dump, local_dump, out_root
):
    import decoders

    out = f"{out_root}/decode-cluster"
    done, elapsed = _run(
        standalone, s3_env, "decode.py", s3_dump, "--out", out, "--run-id", "cluster-test"
    )
    assert done.returncode == 0, _tail(done)
    manifest = _read_json(f"{out}/_manifest.json", s3_env)
    local = decoders.read_dump([str(local_dump)], manifest["rows"])
    assert manifest["rows"] == {t: local[t].num_rows for t in manifest["rows"]}
    assert manifest["rows"]["records"] > 0
    assert _read_table(f"{out}/records", s3_env).num_rows == manifest["rows"]["records"]
    segments = local["segments"].to_pylist()
    assert manifest["bytes"] == {
        "files": len(segments),
        **{k: sum(r[c] for r in segments) for k, c in (
            ("size", "size"), ("valid", "bytes_valid"), ("padding", "bytes_padding"),
            ("corrupt", "bytes_corrupt"), ("errors", "error_count"),
        )},
    }  # fmt: skip
    assert manifest["bytes"]["valid"] > 0
    print(f"decode: cluster {elapsed:.1f} s", file=sys.stderr)
