"""Decode one file in a fresh process and report its peak memory, bytes read, time and
accounting.

Run as ``python -m tests.fuzz.measure FILE [BUDGET_MB]``; prints one JSON line. Peak memory is
``ru_maxrss`` after decoding minus ``ru_maxrss`` after importing and warming the kernels, so it
is what decoding this file added; bytes read likewise (the process's ``rchar``, Linux's count of
bytes its read calls returned). Every table is asked for and every batch is dropped as soon
as it is counted, as a Spark task does. The time is reported, for reading; tests bound memory
and bytes read, not time.
"""

from __future__ import annotations

import inspect
import json
import os
import resource
import subprocess
import sys
import time

TABLES = (
    "batches",
    "records",
    "offset_commits",
    "group_metadata",
    "group_records",
    "txn_log",
    "index_entries",
    "aborted_txns",
    "producer_snapshots",
    "errors",
    "segments",
)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _read_mb() -> float:
    """MB this process's read calls returned so far (/proc/self/io's rchar)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1]) / (1 << 20)
    raise RuntimeError("no rchar in /proc/self/io")


def warm_up() -> None:
    """Compile (or load) every kernel signature decoding uses: plain, decompressed, streamed."""
    import decoders
    from decoders.constants import COMPRESSION_ZSTD
    from tests.fuzz.inputs import batch, empty_records

    has_budget = "memory_budget" in inspect.signature(decoders.iter_file).parameters
    for n, codec, budget in ((10, 0, None), (10, COMPRESSION_ZSTD, None), (3000, 4, 16 << 20)):
        b = batch(empty_records(n), n, codec=codec)
        kwargs = {"memory_budget": budget} if has_budget else {}
        for _ in decoders.iter_file(b, ("records",), **kwargs):
            pass


def measure(path: str, budget_mb: int | None) -> dict:
    import decoders

    # warm up: compile (or load) the kernels and import pyarrow's compute paths
    warm_up()
    base = _rss_mb()
    read = _read_mb()
    t = time.perf_counter()
    rows: dict[str, int] = {}
    seg = None
    errors: list = []
    kwargs = {"memory_budget": budget_mb << 20} if budget_mb else {}
    if "memory_budget" not in inspect.signature(decoders.iter_file).parameters:
        kwargs = {}  # an older decoder without a budget (before/after comparisons)
    for table, b in decoders.iter_file(path, TABLES, **kwargs):
        rows[table] = rows.get(table, 0) + b.num_rows
        if table == "segments":
            seg = b.to_pylist()[0]
        elif table == "errors" and len(errors) < 5:
            errors.extend(b.column("reason").to_pylist()[:5])
    return {
        "peak_mb": round(_rss_mb() - base, 1),
        "read_mb": round(_read_mb() - read, 1),
        "seconds": round(time.perf_counter() - t, 3),
        "rows": rows,
        "segment": {k: seg[k] for k in ("size", "bytes_valid", "bytes_padding", "bytes_corrupt")},
        "errors": errors,
    }


def in_subprocess(path, budget_mb: int | None = None, timeout: float = 600) -> dict:
    """:func:`measure` in a fresh interpreter (peak memory is per process)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    args = [sys.executable, "-m", "tests.fuzz.measure", os.fspath(path)]
    if budget_mb:
        args.append(str(budget_mb))
    out = subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env=env, cwd=root, check=False
    )
    if out.returncode != 0:
        raise AssertionError(f"decoding {path} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)))
