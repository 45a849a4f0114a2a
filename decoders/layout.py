"""Find the files of a dump: log directories, `<topic>-<partition>` directories, segments.

A dump root may be one broker log directory, several (one per broker), a directory holding
those at any depth, one partition directory or a single file; local paths and URIs
(`file://`, `s3://`, `hdfs://`, `gs://` through pyarrow, other schemes through fsspec) alike.
Only names are listed here, and a few small files read: `meta.properties` and
`partition.metadata` (which broker, cluster and topic incarnation a directory is:
decoders.brokers, docs/layouts.md), the first bytes of a partition's first segment where no
cluster id says whose it is, `__cluster_metadata` where a cluster's topic incarnations are in
question, and a file named explicitly (the root itself) whose name says nothing: see
:func:`explicit_kind`. The broker of a log directory is its `broker.id`/`node.id` from
meta.properties (JBOD directories of one node are one broker), else its path inside the dump.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections import defaultdict
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from decoders.accounting import FileInfo
from decoders.brokers import (
    FUTURE,
    LABEL_MARK,
    Broker,
    Layout,
    LogDir,
    PartitionDir,
    read_ids,
    resolve_layout,
)
from decoders.checkpoints import OFFSET_CHECKPOINT_FILES, broker_id
from decoders.constants import (
    CLUSTER_METADATA_TOPIC,
    CONSUMER_OFFSETS_TOPIC,
    LEGACY_COMPRESSION_CODEC_MASK,
    LEGACY_ENTRY_ATTRIBUTES_OFFSET,
    LEGACY_HEADER_SIZE_V0,
    LEGACY_KEY_SIZE_LENGTH,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V0,
    MAGIC_VALUE_V1,
    MAGIC_VALUE_V2,
    MIN_BATCH_LENGTH_V2,
    MIN_LEGACY_ENTRY_SIZE,
    TRANSACTION_STATE_TOPIC,
)
from decoders.filesystems import resolve
from decoders.framing import crc_holds, entry_offset, entry_size

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
    """A file of the dump: its place (``info``), its path and the filesystem holding it
    (``None`` for the local disk, read with positional reads)."""

    path: str
    info: FileInfo
    size: int
    log_dir: str
    filesystem: pafs.FileSystem | None = None
    cluster: str = ""  # its broker's cluster, from the layout (decoders.brokers)
    # a partition.metadata's topic id as the listing read it (None: unreadable, or no id),
    # where ``id_listed`` says it was read: its partition's replay reads it from here
    topic_id: str | None = None
    id_listed: bool = False

    def open(self):
        from decoders.source import FileObjectSource, LocalFile

        if self.filesystem is None:
            return LocalFile(self.path, self.info.file)
        f = self.filesystem.open_input_file(self.path)
        return FileObjectSource(f, self.info.file, f.size())

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


# A file the user names explicitly is decoded as what its extension says when its name is not a
# Kafka file name (`suspect.log`, `copy-of.index`); checkpoints are known by their exact names.
EXTENSION_KINDS = {
    ".log": "log",
    ".index": "index",
    ".timeindex": "timeindex",
    ".txnindex": "txnindex",
    ".snapshot": "snapshot",
    ".checkpoint": "kraft_snapshot",
}
# The largest first entry read to check its CRC when sniffing (Kafka's message.max.bytes is
# 1 MiB by default; brokers allow more, and a batch beyond this is not worth guessing on).
SNIFF_MAX_BYTES = 64 << 20
NOT_RECOGNISED = (
    "not recognised: the name is not a Kafka file name, its extension names no Kafka file "
    "kind, and no record batch or legacy message with a valid CRC starts at byte 0"
)


def explicit_kind(name: str, read_at, size: int) -> tuple[str, int | None]:
    """(kind, base offset) of a file the user named: by its name (:func:`classify`), else by
    its extension (:data:`EXTENSION_KINDS`), else by its content (a record batch or legacy
    message at byte 0 whose CRC holds makes a segment); ``other`` when nothing says.
    ``read_at(position, length)`` reads the file. A segment's base offset, when the name does
    not give it, is the first entry's offset (a compressed legacy wrapper's offset is its last
    inner offset, so none then)."""
    kind, base = classify(name)
    if kind != "other":
        return kind, base
    stem, suffix = name, ""
    for s in SCHEDULED_SUFFIXES:
        if stem.endswith(s):
            stem, suffix = stem[: -len(s)], s
            break
    ext = os.path.splitext(stem)[1]
    first = sniff_entry(read_at, size)
    if ext in EXTENSION_KINDS:
        kind = EXTENSION_KINDS[ext] + suffix
    elif first is not None:
        kind = "log" + suffix
    return kind, first if kind.split(".")[0] in LOG_KINDS else None


# Bytes read first to sniff an entry: the framing, a v0 message's head and its key length
# (fewer than any whole entry has).
_SNIFFED_HEAD = LOG_OVERHEAD + LEGACY_HEADER_SIZE_V0 + LEGACY_KEY_SIZE_LENGTH


def sniff_entry(read_at, size: int) -> int | None:
    """The offset of the entry at byte 0 when it is a whole record batch (magic 2, CRC-32C
    over attributes..end, DefaultRecordBatch) or legacy message (magic 0/1, CRC-32 over
    magic..end, LegacyRecord) whose CRC holds; else None. A compressed legacy wrapper holds
    its last inner offset, not its first: None too."""
    head = read_at(0, _SNIFFED_HEAD)
    if len(head) < _SNIFFED_HEAD or size < _SNIFFED_HEAD:
        return None
    offset, length = entry_offset(head), entry_size(head)
    magic = head[MAGIC_OFFSET]
    if not MIN_LEGACY_ENTRY_SIZE <= length <= min(size - LOG_OVERHEAD, SNIFF_MAX_BYTES):
        return None
    entry = read_at(0, LOG_OVERHEAD + length)
    if len(entry) < LOG_OVERHEAD + length:
        return None
    if magic == MAGIC_VALUE_V2:
        if length < MIN_BATCH_LENGTH_V2:
            return None
        return offset if crc_holds(entry, magic) else None
    if magic in (MAGIC_VALUE_V0, MAGIC_VALUE_V1):
        compressed = entry[LEGACY_ENTRY_ATTRIBUTES_OFFSET] & LEGACY_COMPRESSION_CODEC_MASK
        return offset if crc_holds(entry, magic) and not compressed else None
    return None


def _listing(fs: pafs.FileSystem | None, root: str
             ) -> tuple[list[tuple[str, int]], bool, list[tuple[str, str]]]:  # fmt: skip
    """(files under root with sizes, whether root is itself a file, the directories under it
    that could not be read with why: :func:`_local_files`)."""
    if fs is None:
        if os.path.isfile(root):
            return [(root, _size_now(root))], True, []
        unlisted: list[tuple[str, str]] = []
        return _local_files(root, unlisted), False, unlisted
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.File:
        return [(root, info.size)], True, []
    if info.type == pafs.FileType.NotFound:
        return [], False, []
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    return [(i.path, i.size) for i in infos if i.type == pafs.FileType.File], False, []


def _local_files(root: str, unlisted: list[tuple[str, str]]) -> list[tuple[str, int]]:
    """Every file under a local directory with its size, as ``os.walk`` finds them (top down,
    subdirectories in name order, a symlinked directory not entered), from each directory's
    entries (``os.scandir``: no path joined, no second lookup). A directory that cannot be read
    (a broker's log directories are its user's alone, often mode 0700; an I/O error) goes to
    ``unlisted`` with why, for the run to report (``unlisted_directory`` findings), where
    ``os.walk`` leaves it out in silence.

    A file listed but gone before its size is read (a live broker's retention deleting a
    segment while its directory is copied or listed; a dangling symlink left by a copy) is
    listed with size 0: its decoding then fails to open it and reports it (an ``errors`` row,
    its reason the system's), rather than the listing ending the run."""
    out: list[tuple[str, int]] = []
    stack = [root]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError as e:
            unlisted.append((top, e.strerror or str(e)))
            continue
        subdirs = []
        for e in entries:
            try:
                is_dir = e.is_dir()
            except OSError:
                is_dir = False
            if not is_dir:
                out.append((e.path, _size_now(e)))
            elif not e.is_symlink():
                subdirs.append(e.path)
        stack.extend(sorted(subdirs, reverse=True))  # popped in name order
    return out


def _size_now(f: os.DirEntry | str) -> int:
    """A listed file's size (its target's, for a symlink); 0 where it is gone."""
    try:
        return f.stat().st_size if isinstance(f, os.DirEntry) else os.path.getsize(f)
    except OSError:
        return 0


GLOB_CHARS = "*?["


def _expand(fs, path: str) -> list[str]:
    """A path with glob characters (`dump/broker-*`, `s3://b/dumps/2026-*/`) as the paths it
    matches; a plain path as itself."""
    if not any(c in path for c in GLOB_CHARS):
        return [path]
    if fs is None:
        import glob

        return sorted(glob.glob(path))
    import fnmatch

    parts = path.split("/")
    fixed = "/".join(
        p for p in parts[: next(i for i, p in enumerate(parts) if any(c in p for c in GLOB_CHARS))]
    )
    depth = path.count("/")
    infos = fs.get_file_info(pafs.FileSelector(fixed or "/", recursive=True, allow_not_found=True))
    return sorted(
        i.path for i in infos if i.path.count("/") == depth and fnmatch.fnmatchcase(i.path, path)
    )


def _is_file(fs, path: str) -> bool:
    return os.path.isfile(path) if fs is None else fs.get_file_info(path).type == pafs.FileType.File


def _join(fs, a: str, b: str) -> str:
    return os.path.join(a, b) if fs is None else posixpath.join(a, b)


def _dirname(fs, p: str) -> str:
    if fs is None and os.sep == "/":  # os.path.dirname's rule, without its calls (~3 a file)
        head = p[: p.rfind("/") + 1]
        return head.rstrip("/") or head
    return os.path.dirname(p) if fs is None else posixpath.dirname(p.rstrip("/"))


def _basename(fs, p: str) -> str:
    if fs is None and os.sep == "/":
        p = p.rstrip("/")
        return p[p.rfind("/") + 1 :]
    return os.path.basename(p.rstrip("/")) if fs is None else posixpath.basename(p.rstrip("/"))


def _relpath(fs, p: str, start: str) -> str:
    """``p`` relative to ``start``, as ``os.path.relpath`` (``posixpath.relpath`` on a
    filesystem) gives it. A listing's paths are its root joined with normalised names: their
    remainder is the answer, without relpath's two absolute paths per call (43,000 files of a
    dump took 0.8 s)."""
    sep = os.sep if fs is None else "/"
    if start and p.startswith(start) and p[len(start) : len(start) + 1] == sep:
        rest = p[len(start) + 1 :]
        norm = os.path.normpath(rest) if fs is None else posixpath.normpath(rest)
        if rest and norm == rest and rest != ".." and not rest.startswith(".." + sep):
            return rest
    return os.path.relpath(p, start) if fs is None else posixpath.relpath(p, start or "/")


def _partition(dirname: str) -> tuple[str, int] | None:
    m = PARTITION_DIR.match(dirname)
    return (m["topic"], int(m["partition"])) if m else None


def discover(roots: list[str] | str) -> list[DumpFile]:
    """Every file of the dump(s), partitions grouped, segments in base-offset order, each
    labelled with its broker, topic incarnation and cluster (:func:`dump_layout`)."""
    return dump_layout(roots)[0]


def dump_layout(roots: list[str] | str) -> tuple[list[DumpFile], Layout]:
    """Every file of the dump(s) (as :func:`discover`) and how its directories were read as
    brokers, clusters and topic incarnations (decoders.brokers)."""
    return laid_out(walked(roots))


# A root's walk: (filesystem key, filesystem, matched root, its files with sizes, whether it
# is a file, the directories under it that could not be read)
Walked = tuple[str, pafs.FileSystem | None, str, list[tuple[str, int]], bool,
               list[tuple[str, str]]]  # fmt: skip


def walked(roots: list[str] | str) -> list[Walked]:
    """The first half of :func:`dump_layout`: every root's files with their sizes, by name, no
    file read (what a job decides its Spark session's options by, :func:`internal_log_bytes`,
    while :func:`laid_out` reads the small files that say whose they are)."""
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    found = []
    for root in roots:
        fs, path = resolve(os.fspath(root))
        for match in _expand(fs, path):
            found.append((root_key(os.fspath(root)), fs, match, *_listing(fs, match)))
    return found


def internal_log_bytes(found: list[Walked]) -> int:
    """The bytes of the internal topics' log segments among walked files (:func:`walked`), by
    their names: a `.log` segment in a `__consumer_offsets` or `__transaction_state` partition
    directory, as :func:`dump_layout` would list it."""
    internal = (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
    held = 0
    for _, fs, _, listing, _, _ in found:
        for p, size in listing:
            if not p.endswith(".log") or classify(_basename(fs, p))[0] != "log":
                continue
            tp = _partition(_basename(fs, _dirname(fs, p)))
            if tp is not None and tp[0] in internal:
                held += size
    return held


def laid_out(found: list[Walked]) -> tuple[list[DumpFile], Layout]:
    """The second half of :func:`dump_layout`: the walked files as a dump's, their brokers,
    clusters and topic incarnations read."""
    shown = _shared_display_roots(
        [
            (key, fs, _display_root(fs, match, is_file, listing))
            for key, fs, match, listing, is_file, _ in found
        ]  # fmt: skip
    )
    files: list[DumpFile] = []
    dirs: list[LogDir] = []
    unread = []  # (filesystem, a directory that could not be read, display root, why)
    for i, ((_, fs, _match, listing, is_file, unlisted), display_root) in enumerate(
        zip(found, shown, strict=True)
    ):
        mine = _discover_one(fs, listing, is_file, display_root)
        dirs.extend(_log_dirs(fs, mine, i))
        files.extend(mine)
        unread += [(fs, path, display_root, why) for path, why in unlisted]
    layout = resolve_layout(dirs, lambda brokers: _metadata_authority(files, brokers))
    _label(files, layout)
    layout.unlisted = _unlisted(files, unread)
    files.sort(
        key=lambda f: (
            f.info.topic or "",
            f.info.partition if f.info.partition is not None else -1,
            f.info.broker or "",
            f.info.base_offset if f.info.base_offset is not None else 1 << 63,
            KIND_ORDER.get(f.info.kind, 99),
            f.info.kind,
            f.info.file,
        )
    )
    return files, layout


def _metadata_authority(files: list[DumpFile], brokers: list[Broker]):
    """What a cluster's `__cluster_metadata-0` says of its topics (KRaft; the replica with the
    most bytes of it), or None where its brokers hold none."""
    from decoders.cluster_metadata import read_authority

    mine = {d.path for b in brokers for d in b.dirs}
    replicas: dict[str, list[DumpFile]] = defaultdict(list)
    for f in files:
        if f.log_dir in mine and f.info.topic == CLUSTER_METADATA_TOPIC:
            replicas[f.log_dir].append(f)
    if not replicas:
        return None
    best = max(replicas.values(), key=lambda fs: sum(f.size for f in fs))
    return read_authority(best)


def _log_dirs(fs, files: list[DumpFile], root: int) -> list[LogDir]:
    """The log directories of one root's files, their `meta.properties` and partition
    directories (with `partition.metadata`) read."""
    dirs: dict[str, LogDir] = {}
    parts: dict[str, PartitionDir] = {}
    first_log: dict[str, DumpFile] = {}  # partition dir -> its first segment
    jobs = []
    metadata: list[DumpFile] = []  # the partition.metadata files
    for f in files:
        d = dirs.get(f.log_dir)
        if d is None:
            d = dirs[f.log_dir] = LogDir(f.log_dir, shown_log_dir(f.info), root)
            props = _join(fs, f.log_dir, "meta.properties")
            if _is_file(fs, props):
                jobs.append(("meta", props))
        if f.info.topic is None:
            continue
        pdir = _dirname(fs, f.path)
        if pdir not in parts:
            m = PARTITION_DIR.match(_basename(fs, pdir))
            suffix = (m["suffix"] or "") if m else ""
            parts[pdir] = PartitionDir(
                pdir, f.info.topic, f.info.partition, suffix.rsplit("-", 1)[-1] if suffix else "",
                suffix[1:33] if suffix else "",
            )  # fmt: skip
            d.parts.append(parts[pdir])
        if f.kind == "partition_metadata":
            jobs.append(("id", f.path))
            metadata.append(f)
        if f.kind == "log" and f.info.base_offset is not None:
            now = first_log.get(pdir)
            if now is None or f.info.base_offset < now.info.base_offset:
                first_log[pdir] = f
    got = read_ids(fs, jobs)
    for d in dirs.values():
        props = got.get(_join(fs, d.path, "meta.properties")) or {}
        d.cluster_id = props.get("cluster.id") or None
        d.node = broker_id(props)
        d.directory_id = props.get("directory.id") or None
    for pdir, p in parts.items():
        p.topic_id = got.get(_join(fs, pdir, "partition.metadata"))
    for f in metadata:
        f.topic_id, f.id_listed = got.get(f.path), True
    # without a cluster id, replicas' first batches are what can tell two clusters apart
    heads = [("head", f.path) for pdir, f in first_log.items() if not dirs[f.log_dir].cluster_id]
    got = read_ids(fs, heads)
    for pdir, f in first_log.items():
        if f.path in got:
            parts[pdir].first = (f.info.base_offset, got[f.path])
    return list(dirs.values())


def _label(files: list[DumpFile], layout: Layout) -> None:
    """Each file's broker, topic and cluster as the layout reads them."""
    broker_of: dict[str, Broker] = {d.path: b for b in layout.brokers for d in b.dirs}
    part_of = {p.path: p for b in layout.brokers for d in b.dirs for p in d.parts}
    for f in files:
        b = broker_of[f.log_dir]
        f.cluster = b.cluster
        f.info.broker = b.label
        if f.info.topic is None:
            continue
        p = part_of.get(_dirname(f.filesystem, f.path))
        if p is None:
            continue
        f.info.topic = p.label or p.topic
        if p.suffix == FUTURE:
            f.info.broker = f"{b.label}{LABEL_MARK}{FUTURE}"


def root_key(root: str) -> str:
    """The filesystem a dump root is on, as a key: '' for the local disk, else the URI's
    scheme and authority (its bucket, or its name node)."""
    if "://" not in root or root.startswith("file://"):
        return ""
    split = urlsplit(root)
    return f"{split.scheme.replace('s3a', 's3')}://{split.netloc}"


def _display_root(fs, root: str, is_file: bool, listing: list[tuple[str, int]]) -> str:
    """What a root's file paths are shown relative to: the directory above the broker's log
    directory when the root is a partition directory or a file in one, else the root. A
    directory is a partition directory by its name and by holding files only: a dump root
    named like one (a day's copy under `day-1` or `2026-11-20`, a broker's `kafka-1`) holds
    directories, and its paths are shown from it (so that a broker without `meta.properties`,
    named by its path, is named alike in each day's copy)."""
    top = _dirname(fs, root) if is_file else root
    if _partition(_basename(fs, top)) and (is_file or _files_only(fs, top, listing)):
        return _dirname(fs, _dirname(fs, top))
    return _dirname(fs, top) if is_file else top


def _files_only(fs, directory: str, listing: list[tuple[str, int]]) -> bool:
    """Whether every listed file lies directly in ``directory`` (none in a directory below)."""
    top = directory.rstrip("/" if fs is not None else os.sep)
    return all(_dirname(fs, p).rstrip("/" if fs is not None else os.sep) == top for p, _ in listing)


def _shared_display_roots(roots: list[tuple[str, object, str]]) -> list[str]:
    """One display root for every root on the same filesystem, their common directory, when a
    run has several (``roots``: filesystem key, filesystem, own display root): each root's
    paths relative to itself would repeat one another (two copies of a cluster each hold
    `broker-1/events-0/...`), and the `file` evidence must name one file, and its broker one
    log directory. A root alone keeps its own."""
    common: dict[str, str] = {}
    for key, fs, own in roots:
        if key in common:
            paths = [common[key], own]
            common[key] = os.path.commonpath(paths) if fs is None else posixpath.commonpath(paths)
        else:
            common[key] = own
    return [common[key] for key, _, _ in roots]


def common_display_root(roots: list[str]) -> str | None:
    """The path or URI the files of a run over ``roots`` (dump roots given as directories) are
    shown relative to (:func:`discover`): the root itself, or the common directory of roots on
    one filesystem. None when they are on different filesystems."""
    if len(roots) == 1:
        return roots[0]
    keys = {root_key(r) for r in roots}
    if len(keys) != 1:
        return None
    (key,) = keys
    if not key:
        return os.path.commonpath(
            [os.path.abspath(r[len("file://") :] if r.startswith("file://") else r) for r in roots]
        )
    rest = posixpath.commonpath([urlsplit(r).path or "/" for r in roots])
    return f"{key}{rest.rstrip('/')}"


def _discover_one(fs, listing, is_file: bool, display_root: str) -> list[DumpFile]:
    by_dir: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for p, size in listing:
        by_dir[_dirname(fs, p)].append((p, size))
    if is_file:
        ((p, size),) = listing
        return [_explicit_file(fs, p, size, display_root)]
    out: list[DumpFile] = []
    for d in sorted(by_dir):
        names = [_basename(fs, p) for p, _ in by_dir[d]]
        tp = _partition(_basename(fs, d))
        # A log directory may itself be called `broker-1`: only partition-level files
        # (segments, leader-epoch-checkpoint, partition.metadata) make a partition directory.
        if tp is not None and any(
            classify(n)[0] in PARTITION_KINDS and n != "bootstrap.checkpoint" for n in names
        ):
            log_dir = _dirname(fs, d)
            broker = None  # the layout names it (dump_layout)
            for (p, size), name in zip(by_dir[d], names, strict=True):
                kind, base_offset = classify(name)
                info = FileInfo(
                    _relpath(fs, p, display_root), broker, tp[0], tp[1], base_offset, kind
                )
                out.append(DumpFile(p, info, size, log_dir, fs))
        elif any(n == "meta.properties" or n in OFFSET_CHECKPOINT_FILES for n in names):
            broker = None
            for (p, size), name in zip(by_dir[d], names, strict=True):
                kind, base_offset = classify(name)
                if kind in ("meta_properties", "offset_checkpoint", "kraft_snapshot"):
                    info = FileInfo(
                        _relpath(fs, p, display_root), broker, None, None, base_offset, kind
                    )
                    out.append(DumpFile(p, info, size, d, fs))
    return out


def _unlisted(files: list[DumpFile], unread: list[tuple]) -> list[dict]:
    """The directories the listing could not read, as the run shows them, with why; a
    partition directory's topic and partition from its name, and its cluster (a log
    directory's own) where other files of its log directory were read."""
    cluster_of = {f.log_dir: f.cluster for f in files}
    out = []
    for fs, path, display_root, why in unread:
        tp = _partition(_basename(fs, path))
        log_dir = _dirname(fs, path) if tp else path
        out.append({
            "directory": _relpath(fs, path, display_root),
            "reason": why,
            "cluster": cluster_of.get(log_dir),
            "topic": tp[0] if tp else None,
            "partition": tp[1] if tp else None,
        })  # fmt: skip
    return out


def _explicit_file(fs, path: str, size: int, display_root: str) -> DumpFile:
    """A file named as the root: decoded as what its name, extension or content says
    (:func:`explicit_kind`); its topic and partition are those of its directory when that is
    named `<topic>-<partition>` and the file is a partition's kind, else null."""
    name = _basename(fs, path)
    try:
        src = _open(fs, path, name)
    except OSError:
        kind, base_offset = classify(name)
    else:
        try:
            kind, base_offset = explicit_kind(name, src.read_at, size)
        finally:
            src.close()
    d = _dirname(fs, path)
    tp = _partition(_basename(fs, d))
    if kind.split(".")[0] not in PARTITION_KINDS or name == "bootstrap.checkpoint":
        tp = None
    log_dir = _dirname(fs, d) if tp else d
    info = FileInfo(
        _relpath(fs, path, display_root),
        None,
        tp[0] if tp else None,
        tp[1] if tp else None,
        base_offset,
        kind,
    )
    return DumpFile(path, info, size, log_dir, fs)


def _open(fs, path: str, name: str):
    from decoders.source import FileObjectSource, LocalFile

    if fs is None:
        return LocalFile(path, name)
    f = fs.open_input_file(path)
    return FileObjectSource(f, name, f.size())


def shown_log_dir(info: FileInfo) -> list[str]:
    """The components of a file's log directory as the run shows its paths (relative to the
    root, or to the roots' common directory: :func:`discover`); ``["."]`` for the root."""
    depth = 2 if info.topic is not None else 1  # <partition dir>/<file> or <file>
    return info.file.split("/")[:-depth] or ["."]


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
