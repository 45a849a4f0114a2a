"""A dump as a scheduled audit sees it day after day: copies of the same brokers' directories
taken at later and later moments (tests of incremental audits, replay.previous).

Each partition's log is cut, on each day, at a random batch at or after the day before's cut
(inside transactions, runs of one producer, between segments), the last day holding the whole
log; a cut segment's indexes are not there yet (a broker writes them as the segment grows,
`.txnindex` as aborts come), nor later segments, nor snapshots past the cut. With
``retention``, a partition's oldest segment is deleted from some day on (its log start moves),
as `retention.ms` deletes whole segments, with the producer snapshot named by its base offset.
With ``cleaned`` (each source's twin whose compacted logs the cleaner rewrote: the same seed,
the same records, offsets kept), a compacted replica is the cleaned twin's, cut at the same
offset, from the first day whose cut reaches the twin's cleaned offset (`LogCleaner` never
passes a copy's end; the day before's point may lie inside the rewritten range) or from a
random later day: the cleaner passed between two days' copies, and the log dir's
`cleaner-offset-checkpoint` names how far it went."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import decoders
from decoders.checkpoints import offset_checkpoint
from simulator.writer import offset_checkpoint_text

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
                 churn: random.Random | None = None,
                 cleaned: tuple[list[Path], random.Random] | None = None,
                 ) -> list[list[str]]:  # fmt: skip
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
    twins = _cleaned_twins(sources, cleaned[0], logs) if cleaned else {}
    for key, twin in sorted(twins.items(), key=str):
        # the first day whose copy reaches past the cleaner's offset (a cleaner never passes
        # a copy's end): cleaned from that day on (the day before's point then lies below the
        # rewritten range: records after it may be gone), or from a random later day
        _, batches, cuts, _ = plans[key]
        first = next(day for day in range(1, days + 1)
                     if cuts[day - 1] >= len(batches) or batches[cuts[day - 1]][2] >= twin.upto)  # fmt: skip
        rng = cleaned[1]
        twin.from_day = first if rng.random() < 0.5 else rng.randrange(first, days + 1)
    roots = []
    common = os.path.commonpath([str(s) for s in sources])
    for day in range(1, days + 1):
        day_dir = out / f"day-{day}"
        for s in sources:  # hard links: only the cut segment is written anew
            shutil.copytree(s, day_dir / os.path.relpath(s, common), copy_function=os.link)
        cleaner_points: dict[str, list[tuple[str, int, int]]] = {}

        def mine(path: str, day_dir: Path = day_dir) -> str:
            return str(day_dir / os.path.relpath(path, common))

        for key, (segments, batches, cuts, gone_from) in plans.items():
            if not batches:
                continue
            cut = cuts[day - 1]
            twin = twins.get(key)
            offset = batches[cut][2] if cut < len(batches) else None
            if twin is not None and day >= twin.from_day:
                folder = mine(segments[0].path).rsplit("/", 1)[0]
                shutil.rmtree(folder)  # the cleaned twin's directory, cut at the same offset
                shutil.copytree(os.path.dirname(twin.segments[0].path), folder,
                                copy_function=os.link)  # fmt: skip
                at = len(twin.batches) if offset is None else next(
                    i for i, b in enumerate(twin.batches) if b[2] >= offset)  # fmt: skip

                def theirs(path: str, folder: str = folder) -> str:
                    return os.path.join(folder, os.path.basename(path))

                _cut(theirs, twin.segments, twin.batches, at)
                cleaner_points.setdefault(key[0], []).append((key[1], key[2], twin.upto))
            else:
                _cut(mine, segments, batches, cut)
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
        for log_dir, entries in cleaner_points.items():
            path = os.path.join(mine(log_dir), "cleaner-offset-checkpoint")
            with open(path, "rb") as f:  # the source's entries, the cleaned partitions' replaced
                kept = {(e["topic"], e["partition"]): e["offset"]
                        for e in offset_checkpoint(f.read())["entries"]}  # fmt: skip
            kept.update({(t, p): o for t, p, o in entries})
            os.remove(path)  # a link to the source's: a file of its own
            with open(path, "w") as f:
                f.write(offset_checkpoint_text(sorted((t, p, o) for (t, p), o in kept.items())))
        for folder, (first, last) in present.items():
            if not first <= day <= last:
                shutil.rmtree(day_dir / os.path.relpath(folder, common))
        roots.append([str(day_dir / os.path.relpath(s, common)) for s in sources])
    return roots


def _cut(mine, segments: list, batches: list, cut: int) -> None:
    """A replica's log in a day's copy (``mine``: a source file's path there) cut before batch
    ``cut``: the segment cut, its indexes and later segments not there yet, nor snapshots past
    the cut."""
    if cut >= len(batches):
        return
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


@dataclass
class _Twin:
    """A compacted replica's log in the cleaned twin: its segments and batches, the offset the
    cleaner reached (its log dir's checkpoint), and the day its cleaning shows from."""

    segments: list
    batches: list
    upto: int
    from_day: int = 0


def _cleaned_twins(sources: list[Path], twins: list[Path], logs: dict) -> dict[tuple, _Twin]:
    """The replicas whose log the cleaner rewrote in ``twins`` (one per source, in order), by
    (log dir, topic, partition) of the source."""
    out: dict[tuple, _Twin] = {}
    for source, twin in zip(sources, twins, strict=True):
        theirs: dict[tuple, list] = {}
        for f in decoders.discover([str(twin)]):
            if f.kind == "log" and f.info.topic is not None:
                log_dir = os.path.join(str(source), os.path.relpath(f.log_dir, str(twin)))
                theirs.setdefault((log_dir, f.info.topic, f.info.partition), []).append(f)
        for key, segments in sorted(theirs.items()):
            if key not in logs:
                continue
            path = os.path.join(os.path.dirname(os.path.dirname(segments[0].path)),
                                "cleaner-offset-checkpoint")  # fmt: skip
            with open(path, "rb") as f:
                upto = {(e["topic"], e["partition"]): e["offset"]
                        for e in offset_checkpoint(f.read())["entries"]}.get(key[1:])  # fmt: skip
            if not upto:
                continue
            segments.sort(key=lambda f: f.info.base_offset)
            batches = [(f, p, o) for f in segments for p, o in _positions(f)]
            out[key] = _Twin(segments, batches, upto)
    return out
