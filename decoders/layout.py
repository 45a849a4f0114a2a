"""Find the files of a dump: log directories, `<topic>-<partition>` directories, segments.

A dump root may be one broker log directory, several (one per broker), a directory holding
those at any depth, one partition directory or a single file. The broker of a log directory is
its `broker.id`/`node.id` from meta.properties, else its path inside the dump.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass

from decoders.checkpoints import OFFSET_CHECKPOINT_FILES, broker_id, meta_properties
from decoders.errors import DecodeError
from decoders.segment import FileInfo

PARTITION_DIR = re.compile(
    r"^(?P<topic>.+)-(?P<partition>\d+)(?P<suffix>\.[0-9a-f]{32}-(delete|future|stray))?$"
)
SEGMENT_FILE = re.compile(r"^(?P<offset>\d{20})\.(?P<ext>log|index|timeindex|txnindex|snapshot)$")
KRAFT_SNAPSHOT = re.compile(r"^(?P<offset>\d{20})-(?P<epoch>\d{10})\.checkpoint$")
LOG_KINDS = ("log", "kraft_snapshot")
PARTITION_KINDS = {
    "log",
    "index",
    "timeindex",
    "txnindex",
    "snapshot",
    "kraft_snapshot",
    "leader_epoch_checkpoint",
    "partition_metadata",
    "quorum_state",
}
KIND_ORDER = {
    k: i
    for i, k in enumerate(("log", "index", "timeindex", "txnindex", "snapshot", "kraft_snapshot"))
}


@dataclass(slots=True)
class DumpFile:
    """A file of the dump with its place (``info``) and local path."""

    path: str
    info: FileInfo
    size: int
    log_dir: str

    @property
    def kind(self) -> str:
        return self.info.kind


SCHEDULED_SUFFIXES = (
    ".deleted",
    ".cleaned",
    ".swap",
)  # LogFileUtils: deletion and cleaner temporaries


def classify(name: str) -> tuple[str, int | None]:
    """(kind, base offset) from a file name; `x.log.deleted` is kind `log.deleted`."""
    for suffix in SCHEDULED_SUFFIXES:
        if name.endswith(suffix):
            kind, base = classify(name[: -len(suffix)])
            return (f"{kind}{suffix}" if kind != "other" else "other"), base
    m = SEGMENT_FILE.match(name)
    if m:
        return m["ext"], int(m["offset"])
    m = KRAFT_SNAPSHOT.match(name)
    if m:
        return "kraft_snapshot", int(m["offset"])
    if name == "leader-epoch-checkpoint":
        return "leader_epoch_checkpoint", None
    if name == "partition.metadata":
        return "partition_metadata", None
    if name == "meta.properties":
        return "meta_properties", None
    if name in OFFSET_CHECKPOINT_FILES:
        return "offset_checkpoint", None
    if name == "bootstrap.checkpoint":
        return "kraft_snapshot", None
    if name == "quorum-state":
        return "quorum_state", None
    return "other", None


def _broker_of(log_dir: str, root: str) -> str:
    props_path = os.path.join(log_dir, "meta.properties")
    if os.path.isfile(props_path):
        try:
            with open(props_path, "rb") as f:
                bid = broker_id(meta_properties(f.read(1 << 20)))
            if bid is not None:
                return bid
        except (OSError, DecodeError):
            pass
    rel = os.path.relpath(log_dir, root)
    return rel if rel != "." else os.path.basename(os.path.abspath(log_dir))


def _partition(dirname: str) -> tuple[str, int] | None:
    m = PARTITION_DIR.match(dirname)
    return (m["topic"], int(m["partition"])) if m else None


def discover(roots: list[str] | str) -> list[DumpFile]:
    """Every file of the dump(s), partitions grouped, segments in base-offset order."""
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    files: list[DumpFile] = []
    for root in roots:
        root = os.fspath(root)
        if os.path.isfile(root):
            files.append(_single_file(root))
            continue
        display_root = (
            os.path.dirname(os.path.abspath(root))
            if _partition(os.path.basename(os.path.abspath(root)))
            else root
        )
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            tp = _partition(os.path.basename(dirpath))
            # A log directory may itself be called `broker-1`: only partition-level files
            # (segments, leader-epoch-checkpoint, partition.metadata) make a partition directory.
            if tp is not None and any(
                classify(f)[0] in PARTITION_KINDS and f != "bootstrap.checkpoint" for f in filenames
            ):
                log_dir = os.path.dirname(dirpath)
                broker = _broker_of(log_dir, display_root)
                for name in filenames:
                    kind, base = classify(name)
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, display_root)
                    info = FileInfo(rel, broker, tp[0], tp[1], base, kind)
                    files.append(DumpFile(path, info, os.path.getsize(path), log_dir))
                dirnames[:] = []
                continue
            if any(f == "meta.properties" or f in OFFSET_CHECKPOINT_FILES for f in filenames):
                broker = _broker_of(dirpath, display_root)
                for name in filenames:
                    kind, base = classify(name)
                    if kind in ("meta_properties", "offset_checkpoint", "kraft_snapshot"):
                        path = os.path.join(dirpath, name)
                        info = FileInfo(
                            os.path.relpath(path, display_root), broker, None, None, base, kind
                        )
                        files.append(DumpFile(path, info, os.path.getsize(path), dirpath))
    _disambiguate_brokers(files, roots)
    files.sort(
        key=lambda f: (
            f.info.topic or "",
            f.info.partition if f.info.partition is not None else -1,
            f.info.broker or "",
            f.info.base_offset if f.info.base_offset is not None else 1 << 63,
            KIND_ORDER.get(f.info.kind, 99),
            f.info.kind,
            f.info.base_offset if f.info.base_offset is not None else -1,
            f.info.file,
        )
    )
    return files


def _disambiguate_brokers(files: list[DumpFile], roots) -> None:
    """Two log directories with the same broker id (two clusters, or a copied directory) must
    not merge: name them `<id>@<log dir path>`."""
    dirs: dict[str, set[str]] = defaultdict(set)
    for f in files:
        dirs[f.info.broker].add(f.log_dir)
    for f in files:
        if len(dirs[f.info.broker]) > 1:
            base = next(
                (
                    os.fspath(r)
                    for r in roots
                    if os.path.abspath(f.log_dir).startswith(os.path.abspath(os.fspath(r)))
                ),
                None,
            )
            rel = os.path.relpath(f.log_dir, base) if base else f.log_dir
            f.info.broker = f"{f.info.broker}@{rel}"


def _single_file(path: str) -> DumpFile:
    path = os.path.abspath(path)
    pdir = os.path.dirname(path)
    kind, base = classify(os.path.basename(path))
    tp = _partition(os.path.basename(pdir))
    if tp is None:
        broker = _broker_of(pdir, os.path.dirname(pdir))
        info = FileInfo(os.path.basename(path), broker, None, None, base, kind)
        return DumpFile(path, info, os.path.getsize(path), pdir)
    log_dir = os.path.dirname(pdir)
    broker = _broker_of(log_dir, os.path.dirname(log_dir))
    info = FileInfo(
        os.path.join(os.path.basename(pdir), os.path.basename(path)),
        broker,
        tp[0],
        tp[1],
        base,
        kind,
    )
    return DumpFile(path, info, os.path.getsize(path), log_dir)


def replicas(files: list[DumpFile]) -> dict[tuple[str, int], dict[str, list[DumpFile]]]:
    """(topic, partition) -> broker -> its log segments in base-offset order."""
    out: dict[tuple[str, int], dict[str, list[DumpFile]]] = defaultdict(lambda: defaultdict(list))
    for f in files:
        if f.kind == "log" and f.info.topic is not None:
            out[(f.info.topic, f.info.partition)][f.info.broker].append(f)
    for brokers in out.values():
        for segs in brokers.values():
            segs.sort(key=lambda f: f.info.base_offset)
    return {k: dict(v) for k, v in out.items()}
