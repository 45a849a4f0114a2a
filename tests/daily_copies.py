"""A dump as a scheduled audit sees it day after day: copies of the same brokers' directories
taken at later and later moments (tests of incremental audits, replay.previous).

Each partition's log is cut, on each day, at a random batch at or after the day before's cut
(inside transactions, runs of one producer, between segments), the last day holding the whole
log; a cut segment's indexes are not there yet (a broker writes them as the segment grows,
`.txnindex` as aborts come), nor later segments, nor snapshots past the cut. With
``retention``, a partition's oldest segment is deleted from some day on (its log start moves),
as `retention.ms` deletes whole segments, with the producer snapshot named by its base offset."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
from pathlib import Path

import decoders

INDEXES = (".index", ".timeindex", ".txnindex")


def _positions(f) -> list[tuple[int, int]]:
    """(position, base offset) of every batch of a segment."""
    out = []
    for table, b in decoders.iter_file(f, ["batches"], deep=False):
        if table == "batches":
            out += list(zip(*(b.column(c).to_pylist() for c in ("position", "base_offset")),
                            strict=True))  # fmt: skip
    return out


def daily_copies(sources: list[Path], out: Path, days: int, rng: random.Random | None = None,
                 retention: random.Random | None = None,
                 shares: tuple[float, ...] | None = None,
                 churn: random.Random | None = None) -> list[list[str]]:  # fmt: skip
    """The roots of each day's copy of ``sources`` (dump roots), under ``out/day-N``; the
    same ``rng`` cuts the logs the same way with ``retention`` (its own draws: on which day
    each partition's oldest segment goes) or without; ``shares`` instead: each day's copy holds
    that share of every log's batches. With ``churn``, one replica directory in eight appears
    only from a random day on (a reassignment adding a replica, a new log dir) and another
    is gone from a random day on (a broker or log dir removed)."""
    logs: dict[tuple, list] = {}
    for f in decoders.discover([str(s) for s in sources]):
        if f.kind == "log" and f.info.topic is not None:
            logs.setdefault((f.log_dir, f.info.topic, f.info.partition), []).append(f)
    plans = {}
    for key, segments in logs.items():
        segments.sort(key=lambda f: f.info.base_offset)
        batches = [(f, p, o) for f in segments for p, o in _positions(f)]
        n = len(batches)
        if shares is not None:
            cuts = [int(n * share) for share in shares] if n else []
        else:
            cuts = sorted(rng.randrange(n // 4, n + 1) for _ in range(days - 1)) + [n] if n else []
        gone_from = None
        if retention is not None and len(segments) > 2:
            gone_from = retention.randrange(2, days + 1)
        plans[key] = (segments, batches, cuts, gone_from)
    present: dict[str, tuple[int, int]] = {}  # a replica directory -> (first day, last day)
    if churn is not None:
        for key in sorted(plans, key=str):
            folder = os.path.dirname(plans[key][0][0].path)
            pick = churn.randrange(8)
            if pick == 0:
                present[folder] = (churn.randrange(2, days + 1), days)
            elif pick == 1:
                present[folder] = (1, churn.randrange(1, days))
    roots = []
    common = os.path.commonpath([str(s) for s in sources])
    for day in range(1, days + 1):
        day_dir = out / f"day-{day}"
        for s in sources:  # hard links: only the cut segment is written anew
            shutil.copytree(s, day_dir / os.path.relpath(s, common), copy_function=os.link)
        for segments, batches, cuts, gone_from in plans.values():
            if not batches:
                continue

            def mine(path: str, day_dir: Path = day_dir) -> str:
                return str(day_dir / os.path.relpath(path, common))

            cut = cuts[day - 1]
            if cut < len(batches):
                f, position, end = batches[cut]
                with open(f.path, "rb") as src:
                    head = src.read(position)
                os.remove(mine(f.path))  # a link to the source: a file of its own, cut
                with open(mine(f.path), "wb") as dst:
                    dst.write(head)
                for ext in INDEXES:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(mine(f.path)[: -len(".log")] + ext)
                for g in segments:
                    if g.info.base_offset > f.info.base_offset:
                        for ext in (".log", *INDEXES):
                            with contextlib.suppress(FileNotFoundError):
                                os.remove(mine(g.path)[: -len(".log")] + ext)
                folder = os.path.dirname(mine(f.path))
                for name in os.listdir(folder):
                    stem, _, ext = name.partition(".")
                    if ext == "snapshot" and stem.isdigit() and int(stem) > end:
                        os.remove(os.path.join(folder, name))
            if gone_from is not None and day >= gone_from:
                oldest = segments[0]
                if (
                    cut >= len(batches)
                    or batches[cut][0].info.base_offset > oldest.info.base_offset
                ):
                    # the segment's producer snapshot goes with it (UnifiedLog.deleteSegments:
                    # deleteProducerSnapshots)
                    for ext in (".log", *INDEXES, ".snapshot"):
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(mine(oldest.path)[: -len(".log")] + ext)
        for folder, (first, last) in present.items():
            if not first <= day <= last:
                shutil.rmtree(day_dir / os.path.relpath(folder, common))
        roots.append([str(day_dir / os.path.relpath(s, common)) for s in sources])
    return roots
