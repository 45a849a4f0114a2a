"""A dump as it is when one partition directory was copied long before the rest: the copy of a
long-lived producer's output partition, or of its coordinator's `__transaction_state`
partition, ending early (``./dev bench-production --long-lived N --copies-apart F``).

Why: copies of a live broker's directories are taken at different moments (a `tar` of a large
log dir, a restore from backups of different days), and the cross-log judgement of a producer
that keeps one id for life aligns each partition's history with the coordinator's: one copy
shorter by an hour is a difference of 36,000 transactions of a Streams thread committing every
100 ms (docs/cross-log.md, "After the other copy's end").

The copy is the source's files hard-linked, except the one partition: its log segments up to
``fraction`` of its bytes, the last one cut at a batch boundary, later segments absent, and its
index, time index and producer snapshots absent (a copy of that moment would not hold these
later ones; absent, they are files the audit cannot check, not findings).

``compacted_and_copied_early`` also takes away what lies before ``start`` of its bytes, as the
log cleaner leaves a long-lived producer's `__transaction_state`: below the cleaner's point only
each transactional id's latest record survives, so of one id hours survive of a week (``./dev
bench-production --long-lived N --copies-apart F --compacted-from S``)."""

from __future__ import annotations

import os
import shutil
import subprocess

from decoders.constants import LOG_OVERHEAD
from decoders.framing import entry_offset, iter_entries

LEFT_OUT = (".index", ".timeindex", ".snapshot")


def largest_partition(dump: str, topic: str) -> str:
    """The directory of ``topic``'s partition holding most bytes (a producer's
    `__transaction_state` partition is the one its transactional id hashes to)."""
    dirs = [
        os.path.join(root, d)
        for root, subdirs, _ in os.walk(dump)
        for d in subdirs
        if d.rsplit("-", 1)[0] == topic
    ]

    def size(d: str) -> int:
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))

    return max(dirs, key=size)


def batch_end_after(data: bytes, at: int) -> int:
    """The end of the first log entry (a batch: its offset, then its size) ending past ``at``."""
    ends = (pos + length for pos, _, length in iter_entries(data))
    return min(next((end for end in ends if end > at), len(data)), len(data))


def batch_start_from(data: bytes, at: int) -> int:
    """The start of the first log entry starting at or after ``at``."""
    return next((pos for pos, _, _ in iter_entries(data) if pos >= at), len(data))


def copied_early(source: str, target: str, partition: str, fraction: float) -> str:
    """``source`` copied to ``target`` with ``partition`` (a directory under it) ending at
    ``fraction`` of its log bytes. Returns ``target``."""
    return _kept(source, target, partition, 0.0, fraction)


def compacted_and_copied_early(source: str, target: str, partition: str, start: float,
                               fraction: float) -> str:  # fmt: skip
    """``source`` copied to ``target`` with ``partition`` keeping only what lies from ``start``
    to ``fraction`` of its log bytes, its first segment under the name of the log's first (the
    cleaner's groups of cleaned segments keep the first one's base offset) and its broker's
    `cleaner-offset-checkpoint` at the first offset kept. Returns ``target``."""
    _kept(source, target, partition, start, fraction)
    part = os.path.join(target, os.path.relpath(partition, source))
    logs = sorted(f for f in os.listdir(part) if f.endswith(".log"))
    with open(os.path.join(part, logs[0]), "rb") as f:
        first_offset = entry_offset(f.read(LOG_OVERHEAD), 0)
    topic, number = os.path.basename(part).rsplit("-", 1)
    checkpoint = os.path.join(os.path.dirname(part), "cleaner-offset-checkpoint")
    lines = []
    if os.path.exists(checkpoint):
        with open(checkpoint) as f:
            lines = [ln.split() for ln in f.read().splitlines()[2:] if ln.strip()]
        os.remove(checkpoint)  # a hard link to the source's file
    lines = [ln for ln in lines if ln[:2] != [topic, number]] + [[topic, number, str(first_offset)]]
    with open(checkpoint, "w") as f:
        f.write("0\n" + f"{len(lines)}\n" + "".join(" ".join(ln) + "\n" for ln in lines))
    return target


def _kept(source: str, target: str, partition: str, start: float, fraction: float) -> str:
    """``source`` copied to ``target`` with ``partition``'s log keeping the batches from
    ``start`` to ``fraction`` of its bytes (at batch boundaries), its first segment kept under
    the log's first name."""
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-al", source, target], check=True)
    truth = os.path.join(target, "truth.json")  # the simulator's faults: the cut may lose some
    if os.path.exists(truth):
        os.remove(truth)
    part = os.path.join(target, os.path.relpath(partition, source))
    logs = sorted(f for f in os.listdir(part) if f.endswith(".log"))
    total = sum(os.path.getsize(os.path.join(part, f)) for f in logs)
    lo, hi = start * total, fraction * total
    for name in os.listdir(part):
        if name.endswith(LEFT_OUT):
            os.remove(os.path.join(part, name))
    seen, kept = 0, []
    for name in logs:
        path = os.path.join(part, name)
        size = os.path.getsize(path)
        if seen >= hi or seen + size <= lo:
            os.remove(path)  # written after this copy was taken, or cleaned away
        elif seen < lo or seen + size > hi:
            with open(path, "rb") as f:
                data = f.read()
            os.remove(path)  # a hard link to the source's file: write a file of its own
            begin = batch_start_from(data, int(lo - seen)) if seen < lo else 0
            with open(path, "wb") as f:
                f.write(data[begin : batch_end_after(data, int(hi - seen))])
            kept.append(name)
        else:
            kept.append(name)
        seen += size
    if kept and kept[0] != logs[0]:
        os.rename(os.path.join(part, kept[0]), os.path.join(part, logs[0]))
    return target
