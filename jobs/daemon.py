"""The Python worker daemon of logreplay's own local sessions: PySpark's daemon, with the
modules every task imports loaded once, before it forks the workers.

Why: PySpark's daemon forks a fresh worker process for each concurrent task slot (and again
when a worker is replaced), and each worker then imports what its task's functions need:
numpy, pyarrow, pandas, numba, the decoders, the replay. That is ~1.5 CPU seconds per worker;
a 1 GB audit forks four and the imports were a third of its Python workers' CPU. Imported in
the daemon, they are inherited by every fork (copy-on-write) and cost once. The daemon also
imports PySpark from its installed package, whose bytecode is cached, rather than from
``pyspark.zip`` that Spark puts first on the workers' path, whose modules Python compiles again
in every daemon (zip imports cache no bytecode): when both are the same release.

PySpark's own daemon imports the worker module after the fork because pandas and pyarrow may
start threads on import, and only the forking thread survives a fork. What these imports start
is allocator and BLAS housekeeping threads (jemalloc's background thread, OpenBLAS's pool),
both of which re-initialise in the child through their own fork handlers; no thread pool that
runs Python or Arrow work is started before the fork.

Used only where logreplay starts the session itself in local mode (jobs.session: the daemon
must be importable by the executor's Python, which in local mode is the driver's own); any
failure to preload leaves PySpark's daemon to run as usual. Spark starts it as
``python -m jobs.daemon <worker module>``.
"""

from __future__ import annotations

import gc
import os
import sys
import zipfile

# imported by the tasks of `decode` and `audit` (the scan, the writers, the grouped replays)
PRELOAD = (
    "numpy", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "pandas", "numba",
    "pyspark.worker", "pyspark.sql.pandas.serializers", "decoders", "jobs.scan",
    "jobs.output", "replay.plan", "replay.replicas", "replay.grouped",
)  # fmt: skip
DEFAULT_WORKER = "pyspark.worker"


def installed_pyspark_first() -> None:
    """Move ``pyspark.zip`` behind the installed ``pyspark`` package on ``sys.path`` when both
    hold the same release (the zip of a pip-installed PySpark is a copy of the package)."""
    zips = [p for p in sys.path if os.path.basename(p) == "pyspark.zip"]
    if not zips:
        return
    rest = [p for p in sys.path if p not in zips]
    installed = next(
        (p for p in rest if os.path.isfile(os.path.join(p or ".", "pyspark", "version.py"))),
        None,
    )
    if installed is None:
        return
    try:
        with open(os.path.join(installed, "pyspark", "version.py"), "rb") as f:
            mine = f.read()
        for z in zips:
            with zipfile.ZipFile(z) as archive:
                if archive.read("pyspark/version.py") != mine:
                    return
    except (OSError, KeyError, zipfile.BadZipFile):
        return
    sys.path[:] = rest + zips


def preload(modules=PRELOAD) -> None:
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # a missing optional module: the worker imports what it needs
            continue


def warm() -> None:
    """Load the numba kernels the tasks call from numba's cache (~0.5 s a process, mostly
    LLVM's start-up): once here instead of in each worker's first task."""
    try:
        from decoders import kernels
        from replay import crosslog

        kernels.load_cached(kernels, crosslog)
    except Exception:  # noqa: S110 (each worker loads them on first call, as without the daemon)
        pass


def main() -> None:
    installed_pyspark_first()
    worker = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_WORKER
    if worker == DEFAULT_WORKER:  # not the planner's workers (data source lookup and planning)
        preload()
        warm()
        # what the daemon holds now is never garbage: out of the collector's sight, so that the
        # full collection PySpark's worker runs after every task scans only the task's own
        # objects (numba's and pandas' millions otherwise: ~0.4 s a task), and the forks'
        # copy-on-write pages stay shared (Python's gc.freeze, made for pre-fork servers)
        gc.freeze()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
