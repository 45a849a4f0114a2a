"""Dumps as people take them (production-shape.md "How people take dumps").

A broker's copy of a partition taken while it runs is the log as it stood at that moment: a
prefix of the final log, cut at a batch boundary, whose active segment's indexes hold only the
entries below the cut and whose clean-shutdown snapshot does not exist yet. Copies also lose
files: only the `.log` files, or the index or snapshot files of some segments.
"""

from __future__ import annotations

import os
import shutil
import struct

from decoders.constants import (
    ABORTED_TXN_ENTRY_SIZE,
    ABORTED_TXN_LAST_OFFSET_OFFSET,
    OFFSET_INDEX_ENTRY_SIZE,
    OFFSET_INDEX_POSITION_OFFSET,
    OFFSET_INDEX_RELATIVE_OFFSET_OFFSET,
    TIME_INDEX_ENTRY_SIZE,
    TIME_INDEX_RELATIVE_OFFSET_OFFSET,
)
from decoders.framing import iter_entries

INDEX_FILES = (".index", ".timeindex", ".txnindex")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


def _base(name: str) -> int:
    return int(name[:20])


def log_position(path: str, cut: int) -> int:
    """Byte position of the first batch whose base offset is >= ``cut`` (else the file size)."""
    with open(path, "rb") as f:
        data = f.read()
    for pos, base, _ in iter_entries(data):
        if base >= cut:
            return pos
    return len(data)


def truncate_dir(d: str, cut: int) -> None:
    """Cut partition directory ``d`` in place to the offsets below ``cut``."""
    names = sorted(os.listdir(d))
    logs = [n for n in names if n.endswith(".log")]
    if not logs:
        return
    for n in names:
        ext = os.path.splitext(n)[1]
        later_segment = ext in (".log", *INDEX_FILES) and _base(logs[0]) != _base(n) >= cut
        later_snapshot = ext == ".snapshot" and _base(n) > cut
        if later_segment or later_snapshot:
            os.remove(os.path.join(d, n))
    logs = [n for n in logs if _base(n) < cut or n == logs[0]]
    last = logs[-1]
    base = _base(last)
    path = os.path.join(d, last)
    size = log_position(path, cut)
    if size == os.path.getsize(path):
        return
    with open(path, "r+b") as f:
        f.truncate(size)
    stem = os.path.join(d, last[:20])
    _filter(stem + ".index", OFFSET_INDEX_ENTRY_SIZE,
            lambda e: base + _INT.unpack_from(e, OFFSET_INDEX_RELATIVE_OFFSET_OFFSET)[0] < cut
            and _INT.unpack_from(e, OFFSET_INDEX_POSITION_OFFSET)[0] < size)  # fmt: skip
    _filter(stem + ".timeindex", TIME_INDEX_ENTRY_SIZE,
            lambda e: base + _INT.unpack_from(e, TIME_INDEX_RELATIVE_OFFSET_OFFSET)[0] < cut)  # fmt: skip
    _filter(stem + ".txnindex", ABORTED_TXN_ENTRY_SIZE,
            lambda e: _LONG.unpack_from(e, ABORTED_TXN_LAST_OFFSET_OFFSET)[0] < cut)  # fmt: skip
    ckpt = os.path.join(d, "leader-epoch-checkpoint")
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            lines = f.read().split("\n")
        entries = [ln for ln in lines[2:] if ln and int(ln.split()[1]) < cut]
        with open(ckpt, "w") as f:
            f.write(f"0\n{len(entries)}\n" + "".join(e + "\n" for e in entries))


def _filter(path: str, size: int, keep) -> None:
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        data = f.read()
    out = b"".join(
        data[i : i + size] for i in range(0, len(data) - size + 1, size) if keep(data[i : i + size])
    )
    if not out and path.endswith(".txnindex"):
        os.remove(path)
        return
    with open(path, "wb") as f:
        f.write(out)


def delete_before(d: str, start: int) -> None:
    """Retention: remove the segments (and their indexes and snapshots) below ``start``, a
    segment base offset."""
    for n in sorted(os.listdir(d)):
        if n[:20].isdigit() and _base(n) < start:
            os.remove(os.path.join(d, n))


def copy_dir(src: str, dst: str, cut: int) -> None:
    """A follower's copy of ``src`` taken when its log ended at ``cut``."""
    shutil.copytree(src, dst, dirs_exist_ok=True)
    truncate_dir(dst, cut)


def drop_some_files(root: str, rng, share: float = 0.2) -> list[str]:
    """Lose the index and snapshot files of about ``share`` of the segments (a partial copy);
    returns the removed paths (relative to ``root``)."""
    removed = []
    for d, _, files in sorted(os.walk(root)):
        for n in sorted(files):
            if n.endswith((*INDEX_FILES, ".snapshot")) and rng.random() < share:
                os.remove(os.path.join(d, n))
                removed.append(os.path.relpath(os.path.join(d, n), root))
    return removed


def logs_only(root: str) -> int:
    """Keep only the `.log` files (the copy `kafka-dump-log` needs); returns files removed."""
    n = 0
    for d, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".log") and f != "truth.json":
                os.remove(os.path.join(d, f))
                n += 1
    return n
