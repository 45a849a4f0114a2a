"""A class-data archive of the driver JVM (Java's AppCDS), made once per Java and Spark
installation and mapped by every later session that logreplay starts itself.

Why: a local-mode job's JVM loads some 20,000 of Spark's classes from its jars, parsing,
verifying and linking each one; that is most of Spark's start-up and a large share of a small
job's JVM CPU (class loading, then the planning that waits for it). A dynamic archive stores
those classes already parsed and verified, and a JVM maps it. benchmarks/bench_startup.py
(fresh processes, alternating, medians of 5 on 2 shared cores): a session's start, its first
action and its first Python job took 4.5-5.3 s of wall time with the archive against 8.3-8.6 s
without on JDK 17 (two runs), the JVM's CPU 3.1 s against 5.8 s; on JDK 25 with its own
mechanism 5.9 s against 10.7 s. A 1 GB audit's JVM CPU drops by about a quarter (README,
Benchmarks).

How, on JDK 19 and later: the JDK's own ``-XX:+AutoCreateSharedArchive
-XX:SharedArchiveFile=...``, which maps the archive when it matches, and otherwise runs
without it and writes a new one as the JVM exits (a damaged or stale archive is checked and
replaced by the JVM itself). The version is read from the JDK's ``release`` file, else from
``java -version``.

How on JDK 17 and 18 (Spark 4 runs on 17), which have only ``-XX:ArchiveClassesAtExit``:

1. A session that finds no archive for its installation *claims* the dump (a ``.pending.json``
   file created exclusively, so concurrent runs do not all dump) and starts its JVM with
   ``-XX:ArchiveClassesAtExit``: the JVM writes the archive when it exits, after the job is
   done (the Python process does not wait for it). The claim records the JVM's pid, its
   ``java.home`` and its class path once the session is up (jobs.driver_jvm).
2. A later session finds the claim. While that JVM lives, the archive is not ready: nothing is
   used. Once it has exited, the archive is checked by a probe JVM with ``-Xshare:on`` (which
   refuses an archive it cannot map): a JVM handed a truncated archive crashes rather than
   falling back, so an archive is used only once a probe has accepted it. Accepted, it is
   renamed into place; refused, it is deleted and the next session claims again.
3. Sessions then start with ``-XX:SharedArchiveFile``. A JVM whose class path no longer
   matches the archive (a jar changed) ignores it and loads its classes as before.
4. An archive holds the classes of the work its session did: Spark's start and two small
   jobs (the benchmarks' floor) load ~19,000, a ``decode`` of the demo ~18,000, an ``audit``
   with its gate and report ~25,000, and a class the archive lacks is read from its jar,
   parsed and verified in every run (the audit of the README's demo ran ~1 s longer on the
   floor's archive than on its own). So each session counts its JVM's loaded classes as it exits (the claiming one
   records its count with the archive); a session that loaded more than
   :data:`OUTGROWN_SHARE` above the archive's count marks it outgrown, naming its job, and the
   next session of that same job dumps a new one (running once without the archive: Java 17
   cannot map one dynamic archive while dumping another), which replaces it once probed. Only
   the job that outgrew it re-dumps, and each new archive holds more classes than the last:
   a decode and an audit taking turns do not dump in turn.

Only where logreplay launches the JVM itself (a plain Python process, any master), never under
``spark-submit`` or in a session that already exists. ``LOGREPLAY_JVM_ARCHIVE=off`` turns it
off; the archive lives under ``LOGREPLAY_CACHE_DIR`` (default ``$XDG_CACHE_HOME/logreplay`` or
``~/.cache/logreplay``), ~190 MB per installation. Nor where the driver's class path holds
a non-empty directory (a ``SPARK_CONF_DIR`` with its ``spark-defaults.conf``, Hadoop's conf):
Java cannot archive such a class path (:func:`class_path_directories`). Any failure here
means: no archive, never a failed job.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OFF = ("0", "off", "false", "no")
ENABLE_ENV = "LOGREPLAY_JVM_ARCHIVE"
CACHE_ENV = "LOGREPLAY_CACHE_DIR"
# the JVM's own messages about archives (signed jars it skips when dumping, a class path that
# no longer matches) would land on the job's stdout, some after the job has returned
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# a claim whose session never recorded its JVM (it failed to start) is given up after this
UNRECORDED_CLAIM_SECONDS = 600
PROBE_SECONDS = 60
# a session whose JVM loaded this share more classes than the archive's own JVM had outgrew it
# (the module's step 4): an audit loads ~35% more than a decode, the audit of the README's demo
# ~2% more with its gate and report than without
OUTGROWN_SHARE = 0.10
# the first JDK whose JVM makes and checks its own dynamic archive (-XX:+AutoCreateSharedArchive)
AUTO_ARCHIVE_JDK = 19


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "logreplay"


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "on").strip().lower() not in OFF


@dataclass(frozen=True)
class Plan:
    """What a new session does about the archive: its extra JVM options, and the claim it
    must complete once its JVM runs (:func:`record`), if it is the one dumping."""

    options: str = ""
    claim: Path | None = None
    mapped: Path | None = None  # the archive the session maps, whose extent it checks at exit
    job: str | None = None  # the session's job (its app name): who re-dumps an outgrown archive


def installation_key(java: str | None = None, spark_home: str | None = None) -> str | None:
    """Which Java and which Spark jars an archive belongs to (None when either is unknown):
    the java executable's real path and the jar files' names, sizes and times."""
    java = java or _java()
    spark_home = spark_home or _spark_home()
    if not java or not spark_home:
        return None
    jars = Path(spark_home) / "jars"
    try:
        listing = sorted(
            (p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in jars.glob("*.jar")
        )
        java_stat = os.stat(java)
    except OSError:
        return None
    if not listing:
        return None
    ident = [os.path.realpath(java), java_stat.st_size, int(java_stat.st_mtime), listing]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:20]


def _java() -> str | None:
    """The java Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    return os.path.realpath(found) if found else None


def _spark_home() -> str | None:
    """The Spark installation a session will run, as PySpark's launcher finds it:
    ``$SPARK_HOME``, else the one inside the installed ``pyspark`` package (pip's layout, or
    the distribution it downloaded beside it); None when there is none."""
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    spec = importlib.util.find_spec("pyspark")  # finds the package without importing it
    if spec is None or not spec.origin:
        return None
    package = os.path.dirname(os.path.realpath(spec.origin))
    for home in (os.path.join(package, "spark-distribution"), package):
        if os.path.isdir(os.path.join(home, "jars")):
            return home
    return None


def java_major(java: str | None = None) -> int | None:
    """The major version of ``java`` (default: the one Spark's launcher runs), from its JDK's
    ``release`` file, else from ``java -version``; None when neither says."""
    java = java or _java()
    if not java:
        return None
    release = Path(os.path.realpath(java)).parents[1] / "release"
    with contextlib.suppress(OSError):
        for line in release.read_text().splitlines():
            if line.startswith("JAVA_VERSION="):
                return _major(line.partition("=")[2].strip().strip('"'))
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=PROBE_SECONDS, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r'version "([^"]+)"', done.stderr)
    return _major(found.group(1)) if found else None


def _major(version: str) -> int | None:
    """17 of ``17.0.15``, 8 of ``1.8.0_392``, 25 of ``25-ea``."""
    found = re.match(r"(\d+)(?:\.(\d+))?", version)
    if not found:
        return None
    first = int(found.group(1))
    return int(found.group(2)) if first == 1 and found.group(2) else first


def plan(directory: Path | None = None, key: str | None = None, major: int | None = None,
         job: str | None = None) -> Plan:  # fmt: skip
    """The archive options for a session about to start its JVM (see the module's docstring);
    ``major``: the JDK's major version (default: that of the java Spark's launcher runs);
    ``job``: the session's job, which re-dumps an archive a session of that job outgrew."""
    if not enabled():
        return Plan()
    directory = directory or cache_dir()
    key = key or installation_key()
    if key is None or class_path_directories():
        return Plan()
    major = major or java_major()
    try:
        if major is not None and major >= AUTO_ARCHIVE_JDK:
            return _auto_plan(directory, key)
        return _plan(directory, key, job)
    except OSError:  # an unwritable or vanished cache: run without
        return Plan()


# the environment that puts directories on the driver JVM's class path, as Spark's launcher
# builds it (org.apache.spark.launcher.AbstractCommandBuilder.buildClassPath): the conf
# directory (SPARK_CONF_DIR, else $SPARK_HOME/conf), Hadoop's and YARN's, the distribution's
CONF_DIR_ENV = "SPARK_CONF_DIR"
CLASS_PATH_DIR_ENVS = ("HADOOP_CONF_DIR", "YARN_CONF_DIR")
DIST_CLASSPATH_ENV = "SPARK_DIST_CLASSPATH"


def class_path_directories(spark_home: str | None = None) -> list[str]:
    """The non-empty directories Spark's launcher will put on the driver JVM's class path.

    Why: Java's class-data sharing cannot archive a class path that holds a non-empty
    directory. A session with one (a user's ``SPARK_CONF_DIR`` holding ``spark-defaults.conf``
    is the common case) dumped no archive at its JVM's exit, printed "Error occurred during
    initialization of VM: Cannot have non-empty directory in paths" on the user's terminal,
    and left the next session to claim and fail again. Such a session runs without the archive,
    as with ``LOGREPLAY_JVM_ARCHIVE=off``."""
    conf = os.environ.get(CONF_DIR_ENV)
    if not conf:
        home = spark_home or _spark_home()
        conf = os.path.join(home, "conf") if home else None
    listed = [conf, *(os.environ.get(name) for name in CLASS_PATH_DIR_ENVS)]
    listed += os.environ.get(DIST_CLASSPATH_ENV, "").split(os.pathsep)
    found = []
    for entry in filter(None, listed):
        with contextlib.suppress(OSError):
            if os.path.isdir(entry):
                with os.scandir(entry) as listing:
                    if any(listing):
                        found.append(entry)
    return found


def archive_path(directory: Path, key: str) -> Path:
    return directory / f"spark-{key}.jsa"


def extent_path(archive: Path) -> Path:
    """The archive's record: the classes its JVM had loaded when it was written."""
    return archive.with_suffix(".json")


def outgrown_path(archive: Path) -> Path:
    """The mark of a session that loaded more than the archive holds (its job, its count)."""
    return archive.with_suffix(".outgrown.json")


def _auto_plan(directory: Path, key: str) -> Plan:
    """JDK 19+: the JVM maps the archive when it can, else writes a new one as it exits."""
    directory.mkdir(parents=True, exist_ok=True)
    final = archive_path(directory, key)
    return Plan(f"-XX:+AutoCreateSharedArchive -XX:SharedArchiveFile={final} {QUIET}")


def _plan(directory: Path, key: str, job: str | None = None) -> Plan:
    """JDK 17 and 18: claim, dump at exit, probe, then map (the module's steps)."""
    final = archive_path(directory, key)
    pending = directory / f"spark-{key}.pending.json"
    if pending.exists():
        _settle(pending, final)
    mapped = Plan(f"-XX:SharedArchiveFile={final} -Xshare:auto {QUIET}", None, final, job)
    if pending.exists():  # another session's JVM is still to write it (or a new one of it)
        return mapped if final.exists() else Plan()
    if final.exists() and (job is None or _read(outgrown_path(final)).get("job") != job):
        return mapped
    directory.mkdir(parents=True, exist_ok=True)
    dumped = directory / f"spark-{key}.{os.getpid()}.jsa.tmp"
    try:
        fd = os.open(pending, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:  # claimed by a concurrent session a moment ago
        return mapped if final.exists() else Plan()
    with os.fdopen(fd, "w") as f:
        json.dump({"archive": str(dumped), "claimed": time.time(), "python_pid": os.getpid()}, f)
    return Plan(f"-XX:ArchiveClassesAtExit={dumped} {QUIET}", pending, None, job)


def record(claim: Path, jvm_pid: int, java_home: str, class_path: str) -> None:
    """Complete a claim once its session's JVM runs: which process will write the archive,
    and what a probe needs to check it."""
    _update(claim, jvm_pid=jvm_pid, java_home=java_home, class_path=class_path)


def _update(path: Path, **facts) -> None:
    """``path``'s JSON document with ``facts`` laid over it (written whole, then renamed)."""
    with contextlib.suppress(OSError, ValueError):
        doc = _read(path)
        doc.update(facts)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)


def _read(path: Path) -> dict:
    """``path``'s JSON document; empty when it is missing or unreadable."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def record_session(plan: Plan, spark: Any) -> None:
    """:func:`record` from a started session's JVM (jobs.driver_jvm), when this session
    claimed; and, when it claimed or maps an archive, its classes counted as the process
    exits (:func:`extent`)."""
    if plan.claim is None and plan.mapped is None:
        return
    import atexit

    from jobs.driver_jvm import driver_jvm, loaded_classes

    with contextlib.suppress(Exception):  # a session without a JVM gateway: the claim expires
        if plan.claim is not None:
            jvm = driver_jvm(spark)
            record(plan.claim, jvm.pid, jvm.java_home, jvm.class_path)
        # after the job, before the JVM goes (Python's exit hooks run before its gateway closes)
        atexit.register(_at_exit, plan, spark, loaded_classes)


def _at_exit(plan: Plan, spark: Any, count) -> None:
    with contextlib.suppress(Exception):  # a JVM already gone: nothing learnt, nothing marked
        extent(plan, count(spark))


def extent(plan: Plan, classes: int) -> None:
    """What a session's JVM loaded (``classes``, counted as it exits): the claiming session's
    count goes with its claim to the archive's record; a mapping session that loaded more
    than :data:`OUTGROWN_SHARE` above the record's count (or mapped an archive without one)
    marks the archive outgrown for its job (the module's step 4)."""
    if plan.claim is not None:
        _update(plan.claim, classes=classes)
        return
    if plan.mapped is None or plan.job is None:
        return
    held = _read(extent_path(plan.mapped)).get("classes")
    if isinstance(held, int) and classes <= held * (1 + OUTGROWN_SHARE):
        return
    marked = outgrown_path(plan.mapped)
    if _read(marked).get("classes", 0) < classes:
        _update(marked, job=plan.job, classes=classes)


def _settle(pending: Path, final: Path) -> None:
    """Decide a claim whose JVM may have written its archive: promote it when a probe maps it,
    drop it when it cannot be mapped; leave it while its JVM or its session still runs."""
    doc = _read(pending)
    dumped = Path(doc.get("archive", ""))
    if "jvm_pid" not in doc:
        claimed = float(doc.get("claimed", 0))
        starting = (
            _alive(doc.get("python_pid")) and time.time() - claimed < UNRECORDED_CLAIM_SECONDS
        )
        if not starting:
            _drop(pending, dumped)
        return
    if _alive(doc["jvm_pid"]):
        return
    if dumped.is_file() and probe(doc["java_home"], doc["class_path"], dumped):
        os.replace(dumped, final)
        record = extent_path(final)
        record.unlink(missing_ok=True)  # a record without a count: an extent unknown
        if isinstance(doc.get("classes"), int):
            _update(record, classes=doc["classes"])
        outgrown_path(final).unlink(missing_ok=True)
        pending.unlink(missing_ok=True)
    else:
        _drop(pending, dumped)


def _drop(pending: Path, dumped: Path) -> None:
    with contextlib.suppress(OSError):
        if dumped.name.endswith(".jsa.tmp"):
            dumped.unlink(missing_ok=True)
    pending.unlink(missing_ok=True)


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process of that number
        return True
    return True


def probe(java_home: str, class_path: str, archive: Path) -> bool:
    """Whether a JVM of that installation maps ``archive`` (``-Xshare:on`` fails otherwise;
    a damaged archive crashes the probe, not a job)."""
    import tempfile

    java = os.path.join(java_home, "bin", "java")
    with tempfile.TemporaryDirectory(prefix="logreplay-jvm-probe-") as scratch:
        # a crash report (hs_err) goes to the scratch directory, and no core dump is written
        cmd = [java, "-Xshare:on", f"-XX:SharedArchiveFile={archive}", *QUIET.split(),
               f"-XX:ErrorFile={scratch}/hs_err_%p.log", "-XX:-CreateCoredumpOnCrash",
               "-cp", class_path, "-version"]  # fmt: skip
        try:
            done = subprocess.run(
                cmd, capture_output=True, timeout=PROBE_SECONDS, check=False, cwd=scratch
            )
        except (OSError, subprocess.SubprocessError):
            return False
    return done.returncode == 0


def with_options(existing: str | None, extra: str) -> str:
    """``spark.driver.extraJavaOptions`` with ``extra`` appended."""
    return " ".join(x for x in ((existing or "").strip(), extra) if x)


if __name__ == "__main__":  # python -m jobs.jvm_archive: where the archive is, and its state
    k = installation_key()
    d = cache_dir()
    print(json.dumps({"enabled": enabled(), "directory": str(d), "key": k,
                      "archive": str(archive_path(d, k)) if k else None,
                      "ready": bool(k) and archive_path(d, k).exists(),
                      "classes": _read(extent_path(archive_path(d, k))).get("classes") if k else None,
                      "outgrown": _read(outgrown_path(archive_path(d, k))) if k else {}}))  # fmt: skip
    sys.exit(0)
