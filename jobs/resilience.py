"""Finish a run when one file's decoding fails the Spark job.

Decoding catches what it can per file (decoders.iter_file turns an exception into an error row),
but some failures end the Python worker or the executor itself: the kernel's OOM killer, a
segfault in a native library, a lost machine. Spark retries the task and then fails the whole
job, and without this module the run is lost for one file.

:func:`run_resilient` runs the job; when it fails with a task failure, it finds the files whose
decoding fails on their own (bisection over the files still in the run: each probe is one small
Spark job decoding a subset fully, so k failing files among n cost about 2k log2(n) probes) and
runs the job again without them. Each left-out file is reported by the data source as an
``errors`` row of kind ``decode_failed`` naming the file and the reason, and as a ``segments``
row counting its bytes corrupt; the audit turns the row into an error finding, so the gate
fails. A failure no single file reproduces is raised as it was.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa

import decoders
from decoders.layout import DumpFile
from decoders.schemas import TABLES

T = TypeVar("T")

# Spark's words for a job that failed because its tasks did (classic and Connect alike).
TASK_FAILURE = re.compile(r"stage failure|Lost task|Python worker exited|ExecutorLostFailure")
# The line of a task failure that says why, most specific first.
CAUSES = (
    re.compile(r"Python worker exited unexpectedly[^\n]*"),
    re.compile(r"ExecutorLostFailure[^\n]*"),
    re.compile(r"java\.lang\.OutOfMemoryError[^\n]*"),
    re.compile(r"MemoryError[^\n]*"),
    re.compile(r"most recent failure: ([^\n]*)"),
)
MAX_REASON = 300


def is_task_failure(e: BaseException) -> bool:
    return bool(TASK_FAILURE.search(str(e)))


def failure_reason(e: BaseException) -> str:
    """One line a human can act on, from Spark's multi-page failure text."""
    text = str(e)
    for pattern in CAUSES:
        m = pattern.search(text)
        if m:
            line = (m.group(1) if m.groups() else m.group(0)).strip()
            return line[:MAX_REASON]
    return (text.strip().splitlines() or [type(e).__name__])[0][:MAX_REASON]


def run_resilient(
    spark,
    files: list[DumpFile],
    attempt: Callable[[dict[str, str]], T],
    *,
    decode_options: dict | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[T, dict[str, str]]:
    """``attempt(skip)`` runs the job leaving out the files of ``skip`` (path -> reason, for the
    data source's ``skip_files`` option). Returns its result and the files left out."""
    log = log or (lambda m: print(m, file=sys.stderr))
    skip: dict[str, str] = {}
    while True:
        try:
            return attempt(dict(skip)), skip
        except Exception as e:  # noqa: BLE001 - only task failures are handled, others re-raised
            if not is_task_failure(e):
                raise
            cause = failure_reason(e)
            log(f"a Spark task failed ({cause}); looking for the files that fail on their own")
            rest = [f for f in files if f.path not in skip]
            failing = isolate(spark, rest, decode_options or {})
            if not failing:
                log("no single file reproduces the failure; the run stops")
                raise
            for path, why in failing.items():
                skip[path] = (
                    f"the Spark task decoding this file failed after every attempt ({why}); "
                    "the run went on without the file"
                )
                log(f"leaving out {path}: {why}")


def isolate(spark, files: list[DumpFile], decode_options: dict) -> dict[str, str]:
    """Files whose full decoding fails a Spark job on its own: path -> reason (bisection)."""
    found: dict[str, str] = {}
    # the job over all of them just failed: start from the halves
    mid = len(files) // 2
    pending = [files[mid:], files[:mid]] if len(files) > 1 else [files] if files else []
    while pending:
        group = pending.pop()
        error = _probe(spark, group, decode_options)
        if error is None:
            continue
        if len(group) == 1:
            found[group[0].path] = failure_reason(error)
            continue
        mid = len(group) // 2
        pending.extend((group[mid:], group[:mid]))
    return found


def _probe(spark, group: list[DumpFile], decode_options: dict) -> BaseException | None:
    """Decode every table of every file of ``group`` in Spark tasks; the job's error, if any."""
    window = decode_options.get("window_bytes")
    budget = decode_options.get("memory_budget_mb")
    kwargs = {
        **({"window_bytes": int(window)} if window else {}),
        **({"memory_budget": int(budget) << 20} if budget else {}),
    }

    def decode(batches):
        for b in batches:
            for i in b.column(0).to_pylist():
                for _ in decoders.iter_file(group[i], TABLES, **kwargs):
                    pass
            yield pa.RecordBatch.from_pydict({"id": b.column(0)})

    tasks = max(1, min(len(group), spark.sparkContext.defaultParallelism if _classic(spark) else 2))
    try:
        spark.range(0, len(group), 1, tasks).mapInArrow(decode, "id long").collect()
    except Exception as e:  # noqa: BLE001 - the probe's outcome is the error itself
        if not is_task_failure(e):
            raise
        return e
    return None


def _classic(spark) -> bool:
    return not type(spark).__module__.startswith("pyspark.sql.connect")
