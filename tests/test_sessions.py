"""The data source in sessions the user builds, not the project's own: any session time zone,
any Arrow batch setting, Spark's default configuration, `register(spark)` the only call.

One JVM hosts one SparkContext, so the zones are switched on one plain session (the session
time zone is a runtime SQL conf) and one more plain session, with no configuration at all and a
non-UTC machine zone, runs in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pyarrow as pa
import pytest

import decoders

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZONES = ("UTC", "Etc/UTC", "America/Los_Angeles", "Asia/Kolkata")
TABLES = tuple(decoders.TABLES)


def canonical(table: pa.Table) -> list[str]:
    """A table's rows as sorted JSON lines, timestamps as UTC epoch microseconds (the instant,
    whatever zone or unit the table carries), so a Spark read and the decoders compare whole."""
    columns = {}
    for f in table.schema:
        col = table.column(f.name)
        if pa.types.is_timestamp(f.type):
            col = col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        columns[f.name] = col.to_pylist()
    names = sorted(columns)
    rows = zip(*(columns[n] for n in names), strict=True) if names else []
    return sorted(json.dumps(dict(zip(names, r, strict=True)), default=repr) for r in rows)


def instants(table: pa.Table) -> dict[str, list[int]]:
    """Every timestamp column as sorted epoch microseconds (nulls left out)."""
    return {
        f.name: sorted(
            v
            for v in table.column(f.name).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
            .to_pylist()
            if v is not None
        )
        for f in table.schema
        if pa.types.is_timestamp(f.type)
    }  # fmt: skip


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    from jobs.sample import write_sample_dump

    root = tmp_path_factory.mktemp("sessions") / "sample"
    write_sample_dump(str(root))
    want = decoders.read_dump([str(root)], list(TABLES))
    # the sample holds rows of every table but group_records (no KIP-848 group in it)
    assert all(want[t].num_rows for t in TABLES if t != "group_records")
    return root, want


@pytest.fixture(scope="module")
def plain():
    """A session built as a user would, not through jobs.session: only the workers' Python
    is named (a user's activated virtualenv does the same through PATH)."""
    from pyspark.sql import SparkSession

    from decoders.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    before = {
        k: spark.conf.get(k, None)
        for k in (
            "spark.sql.session.timeZone",
            "spark.sql.execution.arrow.maxRecordsPerBatch",
            "spark.sql.execution.arrow.useLargeVarTypes",
            "spark.sql.shuffle.partitions",
        )
    }
    register(spark)
    yield spark
    for k, v in before.items():  # the session may be shared with later test modules
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def _read(spark, root, table: str):
    return spark.read.format("kafka-segments").option("table", table).load(str(root))


@pytest.mark.spark
@pytest.mark.parametrize("zone", ZONES)
def test_every_table_in_any_session_time_zone(plain, dump, zone):
    root, want = dump
    plain.conf.set("spark.sql.session.timeZone", zone)
    timings = {}
    for table in TABLES:
        t0 = time.perf_counter()
        got = _read(plain, root, table).toArrow()
        timings[table] = (got.num_rows, round(time.perf_counter() - t0, 2))
        assert got.num_rows == want[table].num_rows, (zone, table)
        assert instants(got) == instants(want[table]), (zone, table)
        assert canonical(got) == canonical(want[table]), (zone, table)
    print(f"\n{zone}: {timings}")


@pytest.mark.spark
def test_arrow_batch_settings_do_not_matter(plain, dump):
    root, want = dump
    plain.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    plain.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    plain.conf.set("spark.sql.execution.arrow.useLargeVarTypes", "true")
    try:
        for table in ("records", "batches", "offset_commits", "txn_log", "index_entries"):
            got = _read(plain, root, table).toArrow()
            assert canonical(got) == canonical(want[table]), table
    finally:
        plain.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        plain.conf.unset("spark.sql.execution.arrow.useLargeVarTypes")


@pytest.mark.spark
def test_session_zone_changes_how_instants_show_not_what_they_are(plain, dump):
    """Spark shows a timestamp in the session zone: the same instant, a different wall clock."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    root, want = dump
    first = want["records"].column("timestamp").cast(pa.int64()).to_pylist()
    first_ms = min(v for v in first if v is not None)
    for zone in ("America/Los_Angeles", "Asia/Kolkata"):
        plain.conf.set("spark.sql.session.timeZone", zone)
        row = (
            _read(plain, root, "records")
            .selectExpr("min(unix_millis(timestamp)) AS ms", "cast(min(timestamp) AS string) AS s")
            .first()
        )
        assert row.ms == first_ms
        wall = datetime.fromtimestamp(first_ms / 1000, ZoneInfo(zone)).replace(tzinfo=None)
        assert row.s == wall.isoformat(sep=" ")


def _audit_tables(spark, root) -> dict[str, list[str]]:
    from replay import audit

    try:
        return {
            name: canonical(df.toArrow())
            for name, df in audit(spark, [str(root)]).items()
            if name not in ("segments", "errors")  # the decoder's tables, compared above
        }
    finally:
        spark.catalog.clearCache()


@pytest.mark.spark
def test_audit_in_a_non_utc_session(plain, dump):
    """replay.audit in Asia/Kolkata: its instants are the ones the decoders read (a zone
    slip would move them by 5.5 hours)."""
    root, want = dump
    plain.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    t0 = time.perf_counter()
    out = {k: [json.loads(r) for r in v] for k, v in _audit_tables(plain, root).items()}
    print(f"\naudit in Asia/Kolkata: {time.perf_counter() - t0:.1f} s")
    batch_ts: dict[tuple, set[int]] = {}
    b = want["batches"]
    for t, p, ts in zip(
        b["topic"].to_pylist(),
        b["partition"].to_pylist(),
        b["max_timestamp"].cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist(),
        strict=True,
    ):
        batch_ts.setdefault((t, p), set()).add(ts)
    checked = 0
    for table, column in (
        ("partitions", "last_timestamp"),
        ("transactions", "first_timestamp"),
        ("transactions", "marker_timestamp"),
        ("lso_changes", "timestamp"),
    ):
        for r in out[table]:
            if r[column] is not None:
                assert r[column] in batch_ts[(r["topic"], r["partition"])], (table, r)
                checked += 1
    commits = set(instants(want["offset_commits"])["commit_timestamp"])
    timeline = [r["commit_timestamp"] for r in out["offset_timeline"] if r["commit_timestamp"]]
    assert timeline and set(timeline) <= commits
    assert checked >= 5


def _stage_tasks(spark, shuffle_partitions: int, root) -> list[int]:
    """The tasks of every stage of an audit in ``spark`` with that many shuffle partitions,
    every table read."""
    from replay import audit_session

    sc = spark.sparkContext
    group = f"stages-{shuffle_partitions}"
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    sc.setJobGroup(group, "an audit's stages")
    try:
        with audit_session(spark, [str(root)]) as tables:
            for df in tables.values():
                df.count()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        spark.conf.unset("spark.sql.shuffle.partitions")
    tracker = sc.statusTracker()
    stages = [s for j in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(j).stageIds]
    return [tracker.getStageInfo(s).numTasks for s in stages if tracker.getStageInfo(s)]


@pytest.mark.spark
def test_the_audit_s_stages_follow_the_dump_not_the_shuffle_partitions(plain, dump):
    """replay.audit in a user's session keeps Spark's default of 200 shuffle partitions (a
    plan that caches its grouped replays cannot have them coalesced): no stage, the ones the
    audit runs in the background included (they carry the caller's job group), may run more
    tasks than the dump calls for, whatever the session's setting."""
    from replay.plan import stage_tasks
    from replay.scan_task import replica_tasks
    from replay.session_scan import parallelism

    root, _ = dump
    files = decoders.discover([str(root)])
    scan = len(replica_tasks(files, 128 << 20, 2 * parallelism(plain)))
    grouped = stage_tasks(plain, sum(f.size for f in files))
    # a stage reads at most every input of the widest union (the findings': 8 stages' rows)
    bound = 8 * max(scan, grouped)
    assert bound < 200
    for shuffle_partitions in (200, 1000):
        tasks = _stage_tasks(plain, shuffle_partitions, root)
        assert tasks and max(tasks) <= bound, (shuffle_partitions, tasks)


@pytest.mark.spark
def test_counting_the_findings_opens_only_the_kinds_of_rows_they_read(plain, dump):
    """A session's audit opens a replay table's rows a kind at a time, when the plan asks
    for them (replay.session_scan): the findings read the transactions, the partitions, the
    coordinators' transactions, the groups' timelines and the replays' (producer id, partition)
    pairs (replay.sides), never the LSO changes, the producer states or the generations; the
    checks' counts only once the checks table is asked for."""
    from replay.plan import Audit, _cached_scan, _config
    from replay.session_scan import KIND_MARK

    root, _ = dump
    config = _config(None)
    scan = _cached_scan(plain, [str(root)], config, None)
    try:
        tables = Audit(plain, config, scan).run()
        assert tables["findings"].count() > 0
        read = {(*k.split(KIND_MARK),) for k in scan.opened}
        assert read == {
            ("replayed", "transaction"), ("replayed", "partition"), ("replayed", "finding"),
            ("replayed", "touched"), ("coordinated", "coord_txn"), ("coordinated", "finding"),
            ("coordinated", "listed"), ("grouped", "timeline"), ("grouped", "finding"),
        }  # fmt: skip
        tables["checks"].count()
        assert ("replayed" + KIND_MARK + "count") in scan.opened
        assert ("replayed" + KIND_MARK + "lso") not in scan.opened
    finally:
        scan.release()


PLAIN_SCRIPT = """
import json, sys, time
from pyspark.sql import SparkSession
from decoders.spark import register
import decoders
t0 = time.perf_counter()
spark = SparkSession.builder.master("local[2]").getOrCreate()
started = time.perf_counter() - t0
register(spark)
out = {"zone": spark.conf.get("spark.sql.session.timeZone"), "start_s": started, "tables": {}}
for table in decoders.TABLES:
    t0 = time.perf_counter()
    got = spark.read.format("kafka-segments").option("table", table).load(sys.argv[1]).toArrow()
    out["tables"][table] = {"rows": got.num_rows, "seconds": time.perf_counter() - t0,
                            "instants": INSTANTS(got)}
spark.stop()
print("RESULT " + json.dumps(out))
"""


@pytest.mark.spark
def test_a_fresh_default_session_on_a_non_utc_machine(dump):
    """A new JVM with Spark's default configuration: its session zone is the machine's, here
    America/Los_Angeles through TZ, and nothing is set but register(spark)."""
    import inspect

    root, want = dump
    script = PLAIN_SCRIPT.replace("INSTANTS(got)", "instants(got)")
    script = (
        "import pyarrow as pa\n" + inspect.getsource(instants) + script
    )  # the same digest both sides
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPARK_", "PYSPARK_")) and k != "TZ"
    }
    env.update(
        TZ="America/Los_Angeles",
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p),
    )
    res = subprocess.run(
        [sys.executable, "-c", script, str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=REPO,
    )
    lines = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
    assert res.returncode == 0 and lines, res.stderr[-3000:]
    out = json.loads(lines[0][len("RESULT ") :])
    assert out["zone"] == "America/Los_Angeles"
    for table in TABLES:
        got = out["tables"][table]
        assert got["rows"] == want[table].num_rows, table
        assert got["instants"] == instants(want[table]), table
    print(
        "\nfresh session:",
        {t: (v["rows"], round(v["seconds"], 2)) for t, v in out["tables"].items()},
    )


# -- jobs.session: SPARK_LOCAL_IP only for local masters, never over the user's ---------------


class _Builder:
    def __init__(self, calls):
        self.calls = calls

    def appName(self, name):  # noqa: N802 (Spark's name)
        return self

    def master(self, m):
        self.calls["master"] = m
        return self

    def config(self, k, v):
        self.calls.setdefault("config", {})[k] = v
        return self

    @staticmethod
    def faked(monkeypatch) -> dict:
        """The builder, the early context and the running-session check replaced (the tests'
        own session may run in this process): what ``spark_session`` asked of them."""
        from pyspark.sql import SparkSession

        from jobs import session

        calls: dict = {}
        monkeypatch.setattr(SparkSession, "builder", _Builder(calls))
        monkeypatch.setattr(session, "_context_with_workers", _Builder.context(calls))
        monkeypatch.setattr(session, "_session_running", lambda: False)
        return calls

    @staticmethod
    def context(calls):
        """jobs.session._context_with_workers: a local session's context, made first."""

        def make(app_name, master, config):
            calls["context"] = (master, dict(config))

        return make

    def getOrCreate(self):  # noqa: N802
        self.calls["SPARK_LOCAL_IP"] = os.environ.get("SPARK_LOCAL_IP")
        pools = self.calls.get("config", {}).get("spark.scheduler.allocation.file")
        if pools and os.path.exists(pools):  # Spark reads it as its context starts
            with open(pools) as f:
                self.calls["pools"] = (pools, f.read())
        return SimpleNamespace(
            sparkContext=SimpleNamespace(setLogLevel=lambda level: None),
            conf=SimpleNamespace(set=lambda k, v: None),
            dataSource=SimpleNamespace(register=lambda cls: None),
        )


@pytest.mark.parametrize(
    ("master", "user_ip", "submitted", "want"),
    [
        ("local[2]", None, False, "127.0.0.1"),
        ("local", None, False, "127.0.0.1"),
        ("local-cluster[2,1,1024]", None, False, "127.0.0.1"),
        (None, None, False, "127.0.0.1"),  # the embedded default master is local[2]
        ("spark://10.0.0.5:7077", None, False, None),
        ("yarn", None, False, None),
        ("k8s://https://10.0.0.1:6443", None, False, None),
        (None, None, True, None),  # under spark-submit the submitted master rules
        ("local[2]", "10.1.2.3", False, "10.1.2.3"),  # the user's setting stays
        ("spark://10.0.0.5:7077", "10.1.2.3", False, "10.1.2.3"),
    ],
)
def test_spark_local_ip_only_in_local_mode(monkeypatch, master, user_ip, submitted, want):

    from jobs import session

    calls = _Builder.faked(monkeypatch)
    for name in ("SPARK_LOCAL_IP", "SPARK_ENV_LOADED", "PYSPARK_PYTHON"):
        monkeypatch.setenv(name, "x")  # recorded, so whatever the call sets is undone after
        monkeypatch.delenv(name)
    if user_ip:
        monkeypatch.setenv("SPARK_LOCAL_IP", user_ip)
    if submitted:
        monkeypatch.setenv("SPARK_ENV_LOADED", "1")
    session.spark_session(master)
    assert calls["SPARK_LOCAL_IP"] == want
    assert calls.get("master") == (None if submitted else master or "local[2]")
    # a local session's context is made first, its Python workers' daemon started at once
    # under the environment Spark SQL's tasks ask for (tests/test_worker_daemon.py)
    local = not submitted and session.is_local(master or "local[2]")
    assert ("context" in calls) is local
    if local:
        given, config = calls["context"]
        assert given == (master or "local[2]")
        assert config[session.DAEMON_MODULE] == "jobs.daemon"
        assert config[session.SIMPLIFIED_TRACEBACK_ENV] == "1"
    else:
        assert session.SIMPLIFIED_TRACEBACK_ENV not in calls.get("config", {})


@pytest.mark.parametrize(
    ("env", "settings"),
    [({"SPARK_REMOTE": "sc://127.0.0.1:15002"}, {}), ({}, {"spark.remote": "sc://127.0.0.1"}),
     ({}, {"spark.api.mode": "connect"})],
)  # fmt: skip
def test_no_context_is_made_first_for_a_connect_session(monkeypatch, env, settings):
    """Where the builder will make a Spark Connect session (which it refuses to where a
    classic context runs), the early context and its workers' job are left out."""

    from jobs import session

    calls = _Builder.faked(monkeypatch)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    monkeypatch.delenv("SPARK_ENV_LOADED", raising=False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    session.spark_session("local[2]", conf={"spark": {"config": settings}})
    assert "context" not in calls and calls["master"] == "local[2]"


@pytest.mark.spark
def test_the_source_reads_an_explicitly_named_file(plain, dump, tmp_path):
    """A renamed segment loaded by path: decoded by its content, topic and partition null."""
    import shutil

    root, _ = dump
    original = max(root.rglob("*.log"), key=lambda p: p.stat().st_size)
    copy = tmp_path / "evidence.bin"
    shutil.copyfile(original, copy)
    want = decoders.read_segment(str(original), "records")
    got = _read(plain, copy, "records").toArrow()
    assert got.num_rows == want.num_rows > 0
    assert got.column("topic").null_count == got.num_rows
    assert instants(got) == instants(want)


@pytest.mark.parametrize(
    ("settings", "written"),
    [({}, True), ({"spark.scheduler.mode": "FIFO"}, False),
     ({"spark.scheduler.allocation.file": "their-pools.xml"}, False)],
)  # fmt: skip
def test_the_job_s_session_gives_the_cross_log_stage_the_first_pool(monkeypatch, settings, written):
    """The job's session (FAIR by its embedded configuration) gets the pools of the audit's
    intermediate stages in an allocation file of its own, there while Spark starts and gone
    after; a user's own scheduler mode or allocation file stays theirs."""
    import xml.etree.ElementTree as ET

    from jobs import session

    calls = _Builder.faked(monkeypatch)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    session.spark_session(None, conf={"spark": {"config": settings}})
    config = calls["config"]
    assert config["spark.scheduler.mode"] == settings.get("spark.scheduler.mode", "FAIR")
    if not written:
        assert "pools" not in calls
        assert config.get("spark.scheduler.allocation.file") == settings.get(
            "spark.scheduler.allocation.file"
        )
        return
    path, text = calls["pools"]
    assert not os.path.exists(path)
    pools = {p.get("name"): p for p in ET.fromstring(text).iter("pool")}
    assert set(pools) == {session.FIRST_POOL, session.STASH_POOL}
    first = int(pools[session.FIRST_POOL].findtext("minShare"))
    assert first > os.cpu_count() and int(pools[session.STASH_POOL].findtext("minShare")) == 0


def test_the_copies_wait_for_the_first_pool_s_plan_not_for_its_job():
    """jobs.scan.Scratch.first_planned: the output tables' copies start once the first pool's
    intermediate table is planned (its stages then take each free core first), whether its
    plan was made or failed, not before; never longer than told; at once with none such."""
    import threading

    from jobs.scan import Scratch

    scanned = SimpleNamespace(tables={}, replicas=[], accounting={}, written=None)
    opts = SimpleNamespace(decode=SimpleNamespace(replay=None))
    scratch = Scratch(SimpleNamespace(), None, "key", scanned, opts, 0)
    started = time.perf_counter()
    scratch.first_planned(5.0)  # nothing in the first pool
    assert time.perf_counter() - started < 1.0
    for fails in (False, True):
        planning = threading.Event()

        def build(fails=fails, planning=planning):
            planning.wait(10)
            if fails:
                raise RuntimeError("the plan failed")
            return "a plan"  # written next: not a DataFrame, so that write fails (unasked)

        scratch.later(f"cross{int(fails)}", build, first=True)
        scratch.later("other", lambda planning=planning: planning.wait(10), first=False)
        waiter = threading.Thread(target=scratch.first_planned, args=(10.0,))
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive()  # planning
        scratch.first_planned(0.05)  # a bound, not a wait for the plan
        planning.set()
        waiter.join(5)
        assert not waiter.is_alive()
    scratch.release()


class _Conf:
    """A session's runtime settings, as ``spark.conf`` holds them."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value) -> None:
        self.values[key] = value

    def unset(self, key) -> None:
        self.values.pop(key, None)


@pytest.mark.parametrize("single", [True, False])
def test_a_small_run_s_queries_are_interpreted_and_the_session_s_settings_come_back(
    single, tmp_path
):
    """jobs.session.interpreted_if_small: told its run is small, the session's queries are
    interpreted (every setting of INTERPRETED) until the block ends, then the session has the
    settings it had (one it had set, one it had not); told it is not, nothing changes; a
    setting the job's configuration gives is left as given."""
    from types import SimpleNamespace

    from jobs.session import INTERPRETED, interpreted_if_small
    from replay.config import load

    whole, factory = INTERPRETED
    spark = SimpleNamespace(conf=_Conf({whole: "true"}))
    with interpreted_if_small(spark, load(None)) as small:
        small(single)
        small(single)  # a retried attempt: the settings before the first are what come back
        assert spark.conf.values == (INTERPRETED if single else {whole: "true"})
    assert spark.conf.values == {whole: "true"}
    (tmp_path / "mine.yaml").write_text(f"spark:\n  config:\n    {factory}: CODEGEN_ONLY\n")
    given = load(str(tmp_path / "mine.yaml"))
    with interpreted_if_small(spark, given) as small:
        small(True)
        assert spark.conf.values == {whole: "false"}
    assert spark.conf.values == {whole: "true"}
