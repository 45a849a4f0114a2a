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
later ones; absent, they are files the audit cannot check, not findings)."""

from __future__ import annotations

import os
import shutil
import subprocess

from decoders.constants import LOG_OVERHEAD, SIZE_OFFSET

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
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):
        end = pos + LOG_OVERHEAD + int.from_bytes(data[pos + SIZE_OFFSET : pos + LOG_OVERHEAD], "big")  # fmt: skip
        if end > at:
            return min(end, len(data))
        pos = end
    return len(data)


def copied_early(source: str, target: str, partition: str, fraction: float) -> str:
    """``source`` copied to ``target`` with ``partition`` (a directory under it) ending at
    ``fraction`` of its log bytes. Returns ``target``."""
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-al", source, target], check=True)
    truth = os.path.join(target, "truth.json")  # the simulator's faults: the cut may lose some
    if os.path.exists(truth):
        os.remove(truth)
    part = os.path.join(target, os.path.relpath(partition, source))
    logs = sorted(f for f in os.listdir(part) if f.endswith(".log"))
    cut = fraction * sum(os.path.getsize(os.path.join(part, f)) for f in logs)
    for name in os.listdir(part):
        if name.endswith(LEFT_OUT):
            os.remove(os.path.join(part, name))
    seen = 0
    for name in logs:
        path = os.path.join(part, name)
        size = os.path.getsize(path)
        if seen >= cut:
            os.remove(path)  # a later segment: not yet written when this copy was taken
        elif seen + size > cut:
            with open(path, "rb") as f:
                data = f.read()
            os.remove(path)  # a hard link to the source's file: write a file of its own
            with open(path, "wb") as f:
                f.write(data[: batch_end_after(data, int(cut - seen))])
        seen += size
    return target
