"""The driver JVM's class-data archive (jobs.jvm_archive): claimed by one session, written by
its JVM at exit, checked by a probe JVM before any session maps it, and used from then on.

The lifecycle runs against real JVMs making a tiny archive (``java -version``, a fraction of a
second); the last test makes Spark's own archive with two real sessions, the second mapping
what the first one's JVM wrote."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import jvm_archive as ja

JAVA = shutil.which("java")
# real JVMs (a java -version each, or Spark's sessions): the tier of tests that need Java
pytestmark = [pytest.mark.spark, pytest.mark.skipif(JAVA is None, reason="needs java")]
KEY = "test"


@pytest.fixture
def on(monkeypatch, tmp_path):
    monkeypatch.setenv(ja.ENABLE_ENV, "on")
    monkeypatch.setenv(ja.CACHE_ENV, str(tmp_path / "cache"))
    for name in (ja.CONF_DIR_ENV, *ja.CLASS_PATH_DIR_ENVS, ja.DIST_CLASSPATH_ENV):
        monkeypatch.delenv(name, raising=False)  # the user's own: test_a_conf_directory...
    return tmp_path / "cache"


def _java_home() -> str:
    return str(Path(os.path.realpath(JAVA)).parents[1])


def _dump(archive: str, class_path: str) -> None:
    """What a claiming session's JVM does at its exit, on a JVM that only prints its version."""
    subprocess.run([JAVA, f"-XX:ArchiveClassesAtExit={archive}", *ja.QUIET.split(), "-cp",
                    class_path, "-version"], check=True, capture_output=True)  # fmt: skip


def _claimed(cache: Path, plan: ja.Plan) -> dict:
    assert plan.claim is not None and plan.claim.exists()
    return json.loads(plan.claim.read_text())


def test_a_claimed_archive_is_probed_then_used(on, tmp_path):
    first = ja.plan(key=KEY)
    assert "-XX:ArchiveClassesAtExit=" in first.options and "-Xlog:cds=off" in first.options
    doc = _claimed(on, first)
    # while the claiming session starts (its Python alive, no JVM recorded yet) nobody dumps
    assert ja.plan(key=KEY) == ja.Plan()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ja.record(first.claim, dead.pid, _java_home(), str(tmp_path))
    _dump(doc["archive"], str(tmp_path))
    used = ja.plan(key=KEY)
    final = ja.archive_path(on, KEY)
    assert used.options.startswith(f"-XX:SharedArchiveFile={final} -Xshare:auto")
    assert used.claim is None and final.is_file() and not first.claim.exists()
    assert not list(on.glob("*.tmp"))
    assert ja.plan(key=KEY) == used  # from now on, every session


def _made(on: Path, tmp_path: Path, job: str, classes: int) -> ja.Plan:
    """A claim by a session of ``job`` whose JVM counted ``classes`` as it exited, its archive
    written; settled by the plan returned (the next session of ``job``)."""
    claim = ja.plan(key=KEY, job=job)
    doc = _claimed(on, claim)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ja.record(claim.claim, dead.pid, _java_home(), str(tmp_path))
    ja.extent(claim, classes)
    _dump(doc["archive"], str(tmp_path))
    return ja.plan(key=KEY, job=job)


def test_an_archive_a_job_outgrew_is_dumped_again_by_that_job(on, tmp_path):
    """An archive made by a narrow session (a decode) lacks the classes a wider one (an audit)
    loads: the wider job marks it as it exits, its next session dumps a new one (without
    mapping the old: Java 17 cannot do both), and the new one, once probed, replaces it. Other
    jobs keep mapping the old archive meanwhile and never re-dump it; a session within
    OUTGROWN_SHARE of the archive's count marks nothing."""
    final = ja.archive_path(on, KEY)
    decode = _made(on, tmp_path, "decode", 18_000)
    assert decode.mapped == final and decode.claim is None
    assert json.loads(ja.extent_path(final).read_text()) == {"classes": 18_000}
    ja.extent(decode, 19_500)  # within 10%: nothing to mark
    assert not ja.outgrown_path(final).exists()
    ja.extent(ja.plan(key=KEY, job="audit"), 25_000)
    assert json.loads(ja.outgrown_path(final).read_text()) == {"job": "audit", "classes": 25_000}
    assert ja.plan(key=KEY, job="decode") == decode  # another job maps it still
    again = _made(on, tmp_path, "audit", 25_200)  # the audit's next session re-dumps
    assert again.mapped == final and again.options == decode.options.replace("decode", "audit")
    assert json.loads(ja.extent_path(final).read_text()) == {"classes": 25_200}
    assert not ja.outgrown_path(final).exists() and not list(on.glob("*.pending.json"))
    ja.extent(ja.plan(key=KEY, job="decode"), 18_000)  # a narrower job: nothing to mark
    assert not ja.outgrown_path(final).exists()


def test_the_re_dump_leaves_the_archive_in_use_until_it_is_probed(on, tmp_path):
    """While the outgrowing job's new archive is pending, every session (its own job's too)
    maps the old one; an archive without a record (made before records were kept) is
    outgrown by the first job that maps it."""
    final = ja.archive_path(on, KEY)
    old = _made(on, tmp_path, "decode", 18_000)
    ja.extent_path(final).unlink()
    ja.extent(old, 18_000)  # no record: its extent unknown
    assert json.loads(ja.outgrown_path(final).read_text())["job"] == "decode"
    claim = ja.plan(key=KEY, job="decode")
    assert "-XX:ArchiveClassesAtExit=" in claim.options and "SharedArchiveFile" not in claim.options
    assert claim.mapped is None
    ja.record(claim.claim, os.getpid(), _java_home(), str(tmp_path))  # its JVM still runs
    for job in ("decode", "audit"):
        assert ja.plan(key=KEY, job=job).mapped == final


def test_a_live_jvm_keeps_its_claim(on, tmp_path):
    first = ja.plan(key=KEY)
    ja.record(first.claim, os.getpid(), _java_home(), str(tmp_path))  # "its JVM" still runs
    assert ja.plan(key=KEY) == ja.Plan()
    assert first.claim.exists()


@pytest.mark.parametrize("damage", ["truncated", "missing", "no such java"])
def test_an_archive_the_probe_refuses_is_never_used(on, tmp_path, damage):
    """A JVM handed a truncated archive crashes instead of falling back (seen with Java 17):
    the probe takes that crash, no crash report is left behind, and the next session claims a
    new dump."""
    first = ja.plan(key=KEY)
    doc = _claimed(on, first)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ja.record(first.claim, dead.pid, _java_home(), str(tmp_path))
    _dump(doc["archive"], str(tmp_path))
    archive = Path(doc["archive"])
    if damage == "truncated":
        data = archive.read_bytes()
        archive.chmod(0o644)
        archive.write_bytes(data[: len(data) // 2])
    elif damage == "missing":
        archive.unlink()
    else:
        ja.record(first.claim, dead.pid, str(tmp_path / "no-jdk"), str(tmp_path))
    cwd = os.getcwd()
    again = ja.plan(key=KEY)
    assert "-XX:ArchiveClassesAtExit=" in again.options  # claimed anew
    assert not ja.archive_path(on, KEY).exists() and not archive.exists()
    assert not list(Path(cwd).glob("hs_err_pid*.log"))


def test_an_abandoned_claim_is_given_up(on):
    """A session that claimed and died before its JVM ran (nothing recorded): its claim goes
    once its Python process is gone."""
    first = ja.plan(key=KEY)
    doc = _claimed(on, first)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    first.claim.write_text(json.dumps({**doc, "python_pid": dead.pid}))
    assert "-XX:ArchiveClassesAtExit=" in ja.plan(key=KEY).options


def test_off_unknown_or_unwritable_means_no_archive(monkeypatch, tmp_path):
    monkeypatch.setenv(ja.ENABLE_ENV, "off")
    assert ja.plan(tmp_path, KEY) == ja.Plan()
    monkeypatch.setenv(ja.ENABLE_ENV, "on")
    assert ja.installation_key(java=str(tmp_path / "no-java"), spark_home=str(tmp_path)) is None
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert ja.plan(blocked / "cache", KEY) == ja.Plan()


@pytest.mark.parametrize("env", [ja.CONF_DIR_ENV, "HADOOP_CONF_DIR", ja.DIST_CLASSPATH_ENV])
def test_a_conf_directory_on_the_class_path_means_no_archive(on, tmp_path, monkeypatch, env):
    """A user's ``SPARK_CONF_DIR`` (or Hadoop's conf) holding files is a non-empty directory on
    the driver's class path, which Java cannot archive: its JVM printed "Cannot have non-empty
    directory in paths" at exit and every later session claimed again. No claim, no options;
    an empty one (or none) leaves the archive as it was."""
    conf = tmp_path / "conf"
    conf.mkdir()
    value = (
        str(conf) if env != ja.DIST_CLASSPATH_ENV else os.pathsep.join(["/no/such.jar", str(conf)])
    )
    monkeypatch.setenv(env, value)
    claimed = ja.plan(key=KEY)  # empty: archived as before
    assert "-XX:ArchiveClassesAtExit=" in claimed.options
    claimed.claim.unlink()
    (conf / "spark-defaults.conf").write_text("spark.eventLog.enabled false\n")
    assert ja.class_path_directories() == [str(conf)]
    assert ja.plan(key=KEY) == ja.Plan()
    assert not list(on.glob("*.pending.json"))


def test_the_key_follows_the_installation(tmp_path):
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    (jars / "a.jar").write_bytes(b"1")
    one = ja.installation_key(JAVA, str(tmp_path / "spark"))
    assert one == ja.installation_key(JAVA, str(tmp_path / "spark"))
    (jars / "b.jar").write_bytes(b"2")
    assert ja.installation_key(JAVA, str(tmp_path / "spark")) not in (None, one)


SESSION = """
import json, sys
from jobs.session import spark_session
spark = spark_session("local[1]", "archive-test", source=False)
assert spark.range(100).count() == 100
print(json.dumps(spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")))
"""


@pytest.mark.spark
def test_spark_sessions_make_then_map_the_archive(tmp_path):
    """Two sessions as the CLI starts them: the first claims and its JVM writes Spark's
    archive as it exits, after the Python process has returned; the second maps it (the probe
    having accepted it) and runs its job."""
    env = {**os.environ, ja.ENABLE_ENV: "on", ja.CACHE_ENV: str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")])

    def session() -> str:
        done = subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True,
                              text=True, timeout=300, check=True)  # fmt: skip
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert "-XX:ArchiveClassesAtExit=" in session()
    (claim,) = tmp_path.glob("*.pending.json")
    jvm = json.loads(claim.read_text())["jvm_pid"]
    deadline = time.monotonic() + 240
    while ja._alive(jvm) and time.monotonic() < deadline:  # the JVM writes it as it exits
        time.sleep(0.5)
    second = session()
    (final,) = tmp_path.glob("spark-*.jsa")
    assert f"-XX:SharedArchiveFile={final}" in second
    assert final.stat().st_size > 10 << 20  # Spark's classes, not an empty archive
    # the first session counted its JVM's classes as it exited (its gateway still up), and the
    # archive's record holds that count; the second, doing the same work, did not outgrow it
    assert json.loads(ja.extent_path(final).read_text())["classes"] > 10_000
    assert not ja.outgrown_path(final).exists()


def test_the_driver_jvm_answers(spark):
    """jobs.driver_jvm, the one reach into PySpark's private py4j view: a PySpark that renames
    or drops it fails here, not by the archive silently never being recorded."""
    from jobs.driver_jvm import driver_jvm

    jvm = driver_jvm(spark)
    assert jvm.pid != os.getpid() and ja._alive(jvm.pid)
    assert (Path(jvm.java_home) / "bin" / "java").is_file()
    assert any("spark-core" in Path(p).name for p in jvm.class_path.split(os.pathsep))
    if Path(f"/proc/{jvm.pid}/exe").exists():  # Linux: the process is that java
        assert (
            Path(f"/proc/{jvm.pid}/exe").resolve()
            == (Path(jvm.java_home) / "bin" / "java").resolve()
        )


def test_spark_home_is_where_pysparks_launcher_finds_it(monkeypatch, tmp_path):
    from pyspark.find_spark_home import _find_spark_home  # PySpark's own rule, read by the test

    monkeypatch.delenv("SPARK_HOME", raising=False)
    found = ja._spark_home()
    assert found and Path(found, "jars").is_dir()
    assert os.path.realpath(found) == os.path.realpath(_find_spark_home())
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert ja._spark_home() == str(tmp_path)


def test_the_java_version_is_read_from_the_jdk(tmp_path):
    done = subprocess.run([JAVA, "-version"], capture_output=True, text=True, check=True)
    assert f'version "{ja.java_major(JAVA)}' in done.stderr or (
        f'version "1.{ja.java_major(JAVA)}' in done.stderr
    )
    assert [ja._major(v) for v in ("17.0.15", "1.8.0_392", "25-ea", "21", "x")] == [
        17,
        8,
        25,
        21,
        None,
    ]
    # a JDK without a release file: its `java -version`
    fake = tmp_path / "jdk" / "bin" / "java"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'openjdk version \"21.0.2\" 2024-01-16' >&2\n")
    fake.chmod(0o755)
    assert ja.java_major(str(fake)) == 21
    (tmp_path / "jdk" / "release").write_text('JAVA_VERSION="19.0.1"\n')
    assert ja.java_major(str(fake)) == 19


def test_jdk_19_and_later_use_their_own_archive_mechanism(on):
    """No claim, no probe: the JVM maps the archive when it can, else writes one as it exits."""
    auto = ja.plan(key=KEY, major=21)
    final = ja.archive_path(on, KEY)
    assert auto.options == f"-XX:+AutoCreateSharedArchive -XX:SharedArchiveFile={final} {ja.QUIET}"
    assert auto.claim is None and on.is_dir() and not list(on.glob("*.pending.json"))
    assert "-XX:ArchiveClassesAtExit=" in ja.plan(key=KEY, major=17).options


def _new_jdk() -> str | None:
    """A java of JDK 19 or later: ``LOGREPLAY_TEST_NEW_JDK`` (a JDK's home), else the default
    java when it is one."""
    home = os.environ.get("LOGREPLAY_TEST_NEW_JDK")
    java = os.path.join(home, "bin", "java") if home else JAVA
    major = ja.java_major(java) if java and os.path.exists(java) else None
    return java if major and major >= ja.AUTO_ARCHIVE_JDK else None


@pytest.mark.skipif(_new_jdk() is None, reason="needs JDK 19+ (LOGREPLAY_TEST_NEW_JDK)")
def test_a_new_jdk_makes_the_archive_then_maps_it(on, tmp_path):
    java = _new_jdk()
    options = ja.plan(key=KEY, major=ja.java_major(java)).options.split()
    run = [java, *options, "-cp", str(tmp_path), "-version"]
    subprocess.run(run, check=True, capture_output=True)
    final = ja.archive_path(on, KEY)
    assert final.is_file() and final.stat().st_size > 0
    mapped = subprocess.run([*run[:-1], "-Xlog:cds", "-version"], capture_output=True, text=True)
    assert mapped.returncode == 0 and "Mapped dynamic region" in mapped.stdout


def test_no_archive_for_a_process_whose_session_runs(spark, on):
    """The builder reuses a running session's JVM: the options would be ignored, and a claim
    recorded from that JVM would never be written."""
    from jobs.session import _class_archive

    assert _class_archive(False, "local[1]", "logreplay") == ja.Plan()
    assert not list(on.glob("*"))
