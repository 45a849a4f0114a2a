"""Shared fixtures: the real broker corpus beside the repository, decoded once per session."""

from __future__ import annotations

import os
import pathlib
import shutil
import sys

import pytest

# the driver JVM's class-data archive (jobs.jvm_archive) is made by a session's JVM when it
# exits: a test run would make it at its end, for nothing, in the user's cache. Off for the
# tests and the jobs they start; tests/test_jvm_archive.py turns it on in a directory of its own
os.environ.setdefault("LOGREPLAY_JVM_ARCHIVE", "off")

# Bytecode caches are written even where the environment asks not to (PYTHONDONTWRITEBYTECODE:
# container images often set it). Without them each pytest worker rewrites every test module's
# asserts again on each run (13-18 s of a worker's collection on a 2-core machine, against
# 2-3 s read from the cache) and every process the tests start (Spark's Python workers, the
# command's subprocesses) compiles the project again. The caches live in `__pycache__`
# directories, which git ignores; a changed source is compiled again by its timestamp.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import decoders  # noqa: E402 (after the settings above: its modules are cached too)

REPO = pathlib.Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "real"


@pytest.fixture(scope="session")
def corpus() -> pathlib.Path:
    assert CORPUS.is_dir(), (
        f"the real corpus is expected at {CORPUS} (../shared beside the repository)"
    )
    return CORPUS


@pytest.fixture(scope="session")
def corpus_tables(corpus):
    return decoders.read_dump([str(corpus)], tables=list(decoders.TABLES))


@pytest.fixture(scope="session")
def corpus_logs(corpus) -> list[pathlib.Path]:
    logs = sorted(corpus.rglob("*.log"))
    assert len(logs) > 1000
    return logs


@pytest.fixture
def sample_dump(tmp_path):
    from jobs.sample import write_sample_dump

    out = tmp_path / "sample"
    facts = write_sample_dump(str(out))
    return out, facts


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every Spark test module of this pytest worker."""
    from jobs.session import spark_session

    s = spark_session("local[2]", "logreplay-tests")
    yield s
    s.stop()


SIM_SEED = 7


def shared_dir(tmp_path_factory, name: str, make) -> pathlib.Path:
    """A directory ``make(path)`` writes once for the whole test run: under pytest-xdist every
    worker is a session of its own, so the first one to take the lock writes it and the others
    read it (tests only read it; one that changes a dump copies it first)."""
    import fcntl

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's base, shared by the workers
    target = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / f"{name}.done").exists():
            shutil.rmtree(target, ignore_errors=True)
            make(target)
            (root / f"{name}.done").touch()
    return target


@pytest.fixture(scope="session")
def sim_all(tmp_path_factory):
    """Every simulator scenario, written once per test run through the CLI."""
    from jobs.cli import main

    def make(out: pathlib.Path) -> None:
        args = ["synth", "--scenario", "all", "--out", str(out), "--seed", str(SIM_SEED)]
        assert main(args) == 0

    return shared_dir(tmp_path_factory, "sim-all", make)


@pytest.fixture(scope="session")
def scenario_audit(spark, sim_all):
    """scenario -> its Spark audit's tables as Arrow tables. Every scenario is audited in one
    run over ``sim_all`` (``replay.audit_session``, its cache released at once): each scenario
    is a cluster of its own (``simulator.cluster_id_for``), and every table carries its
    cluster, so a scenario's rows are those of its cluster (the one-process audit of the
    scenario alone, ``scenario_local``, is what tests compare them with). Brokers are named
    as in a run over the whole root (``1@<scenario>/broker-1``: several directories there
    share node id 1). :func:`frames` makes
    DataFrames of them again."""
    import pyarrow.compute as pc

    from replay import audit_session
    from simulator.cluster import cluster_id_for

    whole: dict[str, object] = {}

    def get(scenario: str) -> dict:
        if not whole:
            # one dump root per scenario: broker directories without a cluster.id form one
            # cluster per dump root (decoders.brokers), so the scenarios' stay apart
            roots = sorted(str(p) for p in sim_all.iterdir() if p.is_dir())
            with audit_session(spark, roots) as tables:
                whole.update({name: df.toArrow() for name, df in tables.items()})

        # broker directories without a cluster.id (the .log-only scenario) are one cluster,
        # named by their common path (decoders.brokers)
        def mine(t):
            c = t["cluster"]
            cid, path = cluster_id_for(scenario), f"dir:{sim_all / scenario}"
            return pc.or_(
                pc.or_(pc.equal(c, cid), pc.starts_with(c, f"{cid}@")),
                pc.or_(pc.equal(c, path), pc.starts_with(c, f"{path}/")),
            )

        return {name: t.filter(mine(t)) for name, t in whole.items()}

    return get


@pytest.fixture(scope="session")
def scenario_local(sim_all):
    """scenario -> the one-process audit's rows (``replay.local.audit_local``), once a session."""
    from replay.local import audit_local

    done: dict[str, dict] = {}

    def get(scenario: str) -> dict:
        if scenario not in done:
            done[scenario] = audit_local([str(sim_all / scenario)])
        return done[scenario]

    return get


def denied(monkeypatch, call: str, path) -> None:
    """``os.<call>`` (``open`` a file, ``scandir`` a directory) of ``path`` fails as it does for
    a user without read permission: a broker's log directories are often its own user's alone.
    The tests run as root, which reads anything, so the refusal is simulated."""
    real = getattr(os, call)

    def fake(p=".", *a, **k):  # (shutil.rmtree lists by file descriptor: an int)
        if isinstance(p, (str, os.PathLike)) and os.fspath(p) == os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(p))
        return real(p, *a, **k)

    monkeypatch.setattr(os, call, fake)


def frames(spark, tables: dict) -> dict:
    """DataFrames of a shared audit's Arrow tables (:func:`scenario_audit`)."""
    return {name: spark.createDataFrame(t) for name, t in tables.items()}


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    """One Spark standalone cluster (a Master and two Workers, tests/standalone.py) for every
    cluster test of the session; killed at its end."""
    from standalone import standalone_cluster

    with standalone_cluster(tmp_path_factory.mktemp("standalone")) as cluster:
        yield cluster


def pytest_collection_modifyitems(items) -> None:
    """Tiers: a test that uses a Spark session (directly or through a fixture) is `spark`; one
    that uses the standalone cluster is `cluster`. Run the Spark-free tier with
    `pytest -m "not spark and not cluster and not fuzz and not sweep and not slow"`."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "spark" in names:
            item.add_marker(pytest.mark.spark)
        if "standalone" in names:
            item.add_marker(pytest.mark.cluster)
