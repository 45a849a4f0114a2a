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

A task failure is recognised from what Spark says in structure first: PySpark's exception
classes and error conditions (``pyspark.errors``, ``getCondition()``), and for a job failure
PySpark leaves as py4j's ``Py4JJavaError``, the Java exception and its causes by class (py4j's
``java_exception``): a Python worker that died is a ``SparkException`` caused by the
``EOFException`` of its closed socket, an executor out of memory an ``OutOfMemoryError`` under
one. Spark 4.3 gives a job aborted by its scheduler no error condition ("Job aborted due to
stage failure", a lost executor), and Spark Connect's exceptions carry no Java classes: what the
structure leaves open is read from Spark's message, in one place (:func:`_from_message`).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa

import decoders
from decoders.layout import DumpFile
from decoders.schemas import TABLES

T = TypeVar("T")

MAX_REASON = 300
MAX_CAUSES = 20  # a Java exception's causes followed at most (a cycle stops earlier)
SPARK_EXCEPTION = "org.apache.spark.SparkException"
WORKER_EOF = "java.io.EOFException"  # a Python worker's socket closed under its runner
OUT_OF_MEMORY = "java.lang.OutOfMemoryError"
JOB_CANCELLED = "SPARK_JOB_CANCELLED"
TASK_WRITE_FAILED = "TASK_WRITE_FAILED"


@dataclass(frozen=True)
class Failure:
    """What a Spark job's exception says: whether the job failed because a task did (every
    attempt of it), one line a human can act on, and what told (``condition``, ``class``,
    ``java`` or ``message``: the last is Spark's words, see :func:`_from_message`)."""

    task: bool
    reason: str
    source: str


@dataclass(frozen=True)
class JavaCause:
    """One Java exception of a chain: its class, its Spark error condition (None when it has
    none or is not Spark's), the first line of its message."""

    name: str
    condition: str | None
    message: str


def is_task_failure(e: BaseException) -> bool:
    return classify(e).task


def failure_reason(e: BaseException) -> str:
    """One line a human can act on, from Spark's multi-page failure text."""
    return classify(e).reason


def classify(e: BaseException) -> Failure:
    """Whether ``e`` is a job's task failure, and why: from Spark's structure where it says,
    else from its message."""
    from pyspark.errors import PythonException

    if isinstance(e, PythonException):  # a task's Python code raised, the worker lived on:
        # decoding turns each file's exceptions into error rows, so this is no file's doing
        return Failure(False, _first_line(str(e)) or type(e).__name__, "class")
    chain = java_causes(e)
    condition = _condition(e) or (chain[0].condition if chain else None)
    if condition == JOB_CANCELLED:
        return Failure(False, _first_line(str(e)), "condition")
    if chain:
        found = _task_failure_in(chain)
        if found is not None:
            return Failure(True, found, "java")
        if not any(c.name == SPARK_EXCEPTION for c in chain):  # not a Spark job's failure
            return Failure(False, f"{chain[0].name}: {chain[0].message}"[:MAX_REASON], "java")
    return _from_message(e)


def java_causes(e: BaseException) -> list[JavaCause]:
    """The Java exception behind ``e`` and its causes, outermost first ([] when ``e`` has none:
    py4j's ``Py4JJavaError.java_exception``, read through Java's own ``Throwable`` API)."""
    from py4j.protocol import Py4JError

    chain: list[JavaCause] = []
    java = getattr(e, "java_exception", None)
    seen: set[tuple[str, str]] = set()
    with contextlib.suppress(Py4JError):  # a gateway gone: what was read so far
        while java is not None and len(chain) < MAX_CAUSES:
            name = str(java.getClass().getName())
            message = _first_line(str(java.getMessage() or ""))
            if (name, message) in seen:
                break
            seen.add((name, message))
            condition = None
            with contextlib.suppress(Py4JError):  # only Spark's exceptions have one
                condition = java.getCondition()
            chain.append(JavaCause(name, str(condition) if condition else None, message))
            java = java.getCause()
    return chain


def _task_failure_in(chain: list[JavaCause]) -> str | None:
    """Why the chain's task failed, when its classes or conditions say it did."""
    for outer, inner in itertools.pairwise(chain):
        if outer.name == SPARK_EXCEPTION and inner.name == WORKER_EOF:  # the worker died
            return outer.message[:MAX_REASON]
    if chain[0].name == SPARK_EXCEPTION:  # below the job's failure: an executor out of memory
        for cause in chain[1:]:
            if cause.name == OUT_OF_MEMORY:
                return f"{cause.name}: {cause.message}"[:MAX_REASON]
    for i, cause in enumerate(chain):
        if cause.condition == TASK_WRITE_FAILED:  # a writing task failed: its cause says why
            below = chain[i + 1] if i + 1 < len(chain) else cause
            return (below.message or below.name)[:MAX_REASON]
    return None


def _condition(e: BaseException) -> str | None:
    from pyspark.errors import PySparkException

    if not isinstance(e, PySparkException):
        return None
    try:
        return e.getCondition()
    except Exception:  # noqa: BLE001 - a classic exception whose JVM is gone: no condition
        return None


# Spark's words for a job that failed because its tasks did (classic and Connect alike), and
# the lines that say why, most specific first: read by _from_message only.
_TASK_FAILURE_WORDS = re.compile(
    r"stage failure|Lost task|Python worker exited|ExecutorLostFailure"
)
_CAUSE_LINES = (
    re.compile(r"Python worker exited unexpectedly[^\n]*"),
    re.compile(r"ExecutorLostFailure[^\n]*"),
    re.compile(r"java\.lang\.OutOfMemoryError[^\n]*"),
    re.compile(r"MemoryError[^\n]*"),
    re.compile(r"most recent failure: ([^\n]*)"),
)


def _from_message(e: BaseException) -> Failure:
    """The fallback, where Spark's structure leaves it open: its message. Spark 4.3's job
    aborts (a stage failure, a lost executor) carry no error condition, a Spark Connect client
    gets no Java classes, and a task's own exception may be any class: their text names what
    happened. The one place logreplay reads Spark's messages."""
    text = str(e)
    if not _TASK_FAILURE_WORDS.search(text):
        return Failure(False, _first_line(text) or type(e).__name__, "message")
    for pattern in _CAUSE_LINES:
        m = pattern.search(text)
        if m:
            line = (m.group(1) if m.groups() else m.group(0)).strip()
            return Failure(True, line[:MAX_REASON], "message")
    return Failure(True, _first_line(text) or type(e).__name__, "message")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:MAX_REASON]


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
