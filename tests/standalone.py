"""A Spark standalone cluster on this machine, for the cluster tests: a Master and Workers, each
its own JVM started from the installed pyspark with `spark-class`, bound to 127.0.0.1.

The project reaches the executors the way it reaches a real cluster: shipped. It is built into
a wheel from pyproject.toml and passed to spark-submit with ``--py-files``; the executors run
a Python environment of their own (a venv that sees the third-party packages of the driver's
environment but not the project's source tree nor its editable install). A job that works here
therefore does not depend on the driver's checkout being importable on the workers.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"
# the environment variables that would let a Spark process find the project or another Spark
UNSHARED = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "SPARK_CONF_DIR")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    """The installed pyspark's package directory: it holds bin/spark-class and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def build_package(dest: Path) -> Path:
    """The project as executors get it: a wheel built from pyproject.toml, returned as a copy
    named ``.zip``. A wheel is a zip archive with the packages at its root, but Spark puts only
    ``.zip``/``.egg``/``.jar`` files of ``--py-files`` on the executors' path, and numba caches
    the kernels of a zip-imported module only when the archive's name ends in ``.zip``.

    The sources the wheel's package list names are copied apart first, so the build writes
    nothing into the checkout."""
    dest.mkdir(parents=True, exist_ok=True)
    src = dest / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir()
    with open(REPO / "pyproject.toml", "rb") as f:
        include = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["include"]
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for top in sorted(REPO.iterdir()):
        if top.is_dir() and any(fnmatch.fnmatch(top.name, p) for p in include):
            shutil.copytree(top, src / top.name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(dest), str(src)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = dest.glob("logreplay-*.whl")
    shipped = wheel.with_suffix(".zip")
    shutil.copyfile(wheel, shipped)
    return shipped


def executor_python(dest: Path) -> Path:
    """A venv for the executors: no project, no editable install, no source tree. It reuses
    the third-party packages of the driver's environment through a .pth file naming that
    environment's site-packages (lines of a .pth add a directory to sys.path without
    processing the .pth files inside it, so the editable install there stays inert)."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(dest)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    python = dest / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, env=_clean_env(), timeout=60,
    ).stdout.strip()  # fmt: skip
    paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    Path(site, "logreplay-thirdparty.pth").write_text("".join(f"{p}\n" for p in paths))
    return python


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSHARED}
    env.update(extra)
    return env


@dataclass
class Cluster:
    """A running standalone cluster and how to submit to it."""

    url: str
    ui: str
    root: Path
    python: Path  # the executors' (and submitted drivers') interpreter
    package: Path  # the shipped project
    workers: int
    env: dict[str, str] = field(default_factory=dict)  # for drivers and executors alike

    def spark_conf(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """What every application on this cluster is given (spark-submit --conf); ``env``:
        environment variables for the executors (and, in :meth:`submit`, the driver)."""
        conf = {
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.executor.memory": "1g",
            "spark.pyspark.python": str(self.python),
            "spark.executorEnv.NUMBA_CACHE_DIR": str(self.root / "numba-cache"),
        }
        conf.update({f"spark.executorEnv.{k}": v for k, v in {**self.env, **(env or {})}.items()})
        return conf

    def conf_dir(self, env: dict[str, str] | None = None, **extra: str) -> Path:
        """A SPARK_CONF_DIR whose spark-defaults.conf holds :meth:`spark_conf` and ``extra``
        (Spark keys), for clients that take a cluster's settings from their environment
        (Airflow's SparkSubmitHook)."""
        conf = self.root / "conf"
        conf.mkdir(exist_ok=True)
        lines = (f"{key} {value}\n" for key, value in {**self.spark_conf(env), **extra}.items())
        (conf / "spark-defaults.conf").write_text("".join(lines))
        return conf

    def submit_env(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of spark-submit: no PYTHONPATH (a submitted job finds the project
        beside its own file on the driver and in the shipped package on the executors)."""
        return _clean_env(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP=LOOPBACK,
            PYSPARK_PYTHON=str(self.python),
            **{**self.env, **(env or {})},
        )

    def submit(
        self,
        job: str,
        *args: str,
        master: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 900,
    ) -> subprocess.CompletedProcess:
        """spark-submit a job file (client mode) to this cluster, or to ``master`` (e.g.
        ``local[2]`` for the same job in local mode, same interpreter, same package)."""
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", master or self.url]
        if master is None:
            cmd += ["--deploy-mode", "client"]
        for key, value in self.spark_conf(env).items():
            cmd += ["--conf", f"{key}={value}"]
        cmd += ["--py-files", str(self.package), job, *args]
        return subprocess.run(
            cmd, capture_output=True, text=True, env=self.submit_env(env), timeout=timeout
        )

    def state(self) -> dict:
        """The Master's own view (its web UI's JSON)."""
        with urllib.request.urlopen(self.ui + "/json/", timeout=10) as r:
            return json.load(r)


@contextlib.contextmanager
def standalone_cluster(
    root: Path, workers: int = 2, cores: int = 1, memory: str = "1536m", env: dict | None = None
) -> Iterator[Cluster]:
    """Start a Master and ``workers`` Workers (``cores`` and ``memory`` each) under ``root``
    (logs, work directories, the package, the executors' venv); kill them all on exit, even
    when starting failed halfway."""
    root.mkdir(parents=True, exist_ok=True)
    package = build_package(root / "package")
    python = executor_python(root / "executor-venv")
    home = spark_home()
    daemon_env = _clean_env(
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_LOG_DIR=str(root / "logs"),
        SPARK_DAEMON_MEMORY="256m",
        SPARK_WORKER_DIR=str(root / "work"),
        **(env or {}),
    )
    port, ui_port = free_port(), free_port()
    url, ui = f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{ui_port}"
    procs: list[subprocess.Popen] = []
    (root / "logs").mkdir(exist_ok=True)

    def daemon(name: str, cls: str, *args: str) -> None:
        with open(root / "logs" / f"{name}.out", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [str(home / "bin" / "spark-class"), cls, *args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=daemon_env,
                    start_new_session=True,  # its own process group: killed whole
                )  # fmt: skip
            )

    try:
        daemon(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui_port),
        )  # fmt: skip
        cluster = Cluster(url, ui, root, python, package, workers, dict(env or {}))
        _wait(lambda: cluster.state().get("status") == "ALIVE", procs, root, "master")
        for i in range(workers):
            work = root / "work" / f"worker-{i}"
            work.mkdir(parents=True, exist_ok=True)
            daemon(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker",
                "--host", LOOPBACK, "--port", str(free_port()), "--webui-port", str(free_port()),
                "--cores", str(cores), "--memory", memory, "--work-dir", str(work), url,
            )  # fmt: skip
        _wait(lambda: _alive(cluster) == workers, procs, root, "workers")
        yield cluster
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=20)


def _alive(cluster: Cluster) -> int:
    return sum(w.get("state") == "ALIVE" for w in cluster.state().get("workers", []))


def _wait(ready, procs: list[subprocess.Popen], root: Path, what: str, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            break
        with contextlib.suppress(OSError, ValueError):
            if ready():
                return
        time.sleep(1)
    logs = "\n".join(
        f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
        for f in sorted((root / "logs").glob("*.out"))
    )
    raise RuntimeError(f"the standalone cluster's {what} did not come up:\n{logs}")
