"""Brokers, clusters and topic incarnations, as Kafka defines them, from a dump's small files.

A dump's directories say more than their names: each log directory's `meta.properties`
(`cluster.id`, `node.id`, `directory.id`) and each partition directory's `partition.metadata`
(its topic id) and name suffix (`.<uuid>-future`, `-delete`, `-stray`). From them, before any
segment is read (docs/layouts.md):

- **Brokers.** Log directories are one broker's JBOD only if they share `cluster.id` and
  `node.id`, have distinct `directory.id`s, and no partition is held by two of them unless one
  copy is a `-future` one (Kafka refuses two current logs of one partition on one broker:
  `LogManager.loadLog`). Log directories claiming one node id that break this are different
  brokers: different deployments, or copies of one broker taken at different moments.
- **Clusters.** Log directories with one `cluster.id`, and those without one under one dump
  root, form one cluster unless the bytes contradict it: one node id held by two different
  brokers, or an internal topic (`__consumer_offsets`, `__transaction_state`, created once per
  cluster) with two topic ids. A contradicted cluster is split by the part of the path that
  tells the contradicting directories apart; every split and merge is stated with its reason.
- **Replicas.** A `-future` copy (a move between log directories, `ReplicaAlterLogDirs`) is a
  replica of its broker that may lag: its broker label is `<broker>~future`.
- **Incarnations.** A topic deleted and re-created under its name gets a new topic id. Where
  topic ids are known, the live incarnation keeps the name; every other one (its `-delete` or
  `-stray` directories, a plain directory with an old id on a broker that missed the deletion,
  a `-delete` directory of the live id left by a reassignment) is labelled
  `<topic>~<first 8 hex digits of its id>`, audited apart and never compared with the live one.
  When the dump cannot tell which incarnation is live, none keeps the name. Where the
  cluster's brokers hold KRaft's `__cluster_metadata`, its topic records say which is live.

Only these small files are read (a few hundred bytes each).
"""

from __future__ import annotations

import os
import posixpath
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property

from decoders.checkpoints import meta_properties, partition_metadata
from decoders.errors import DecodeError

# Topics a cluster creates once and never deletes (GroupCoordinator, TransactionCoordinator):
# two topic ids for one of them prove two clusters.
ONCE_PER_CLUSTER = ("__consumer_offsets", "__transaction_state")
LABEL_MARK = "~"  # never in a Kafka topic name (Topic.validate: [a-zA-Z0-9._-])
FUTURE, DELETE, STRAY = "future", "delete", "stray"


def unlabelled(label: str) -> str:
    """A topic's name, or a broker's id, without the mark of an incarnation or a copy
    (`events~1a2b3c4d` -> `events`, `1~future` -> `1`)."""
    return label.split(LABEL_MARK, 1)[0]


STALE_SUFFIXES = (DELETE, STRAY)
UNKNOWN_PREFIX = "dir:"
MAX_DIR_NAME = 255  # UnifiedLog caps a suffixed directory name, truncating the topic


@dataclass
class PartitionDir:
    """A partition directory: its name's parts and its topic id."""

    path: str
    topic: str  # as the name gives it (truncated, in a long `-delete`/`-stray` name)
    partition: int
    suffix: str  # "", future, delete or stray
    unique: str  # the suffix's 32 hex digits
    topic_id: str | None = None
    label: str = ""  # the topic as the tables name it
    first: tuple[int, bytes] | None = None  # its first segment's base offset and first bytes

    @property
    def current(self) -> bool:
        return not self.suffix


@dataclass
class LogDir:
    """A log directory: where it is, its `meta.properties` and its partition directories."""

    path: str
    shown: list[str]  # its path as the run shows it (components)
    root: int  # the dump root it was found under
    cluster_id: str | None = None
    node: str | None = None
    directory_id: str | None = None
    parts: list[PartitionDir] = field(default_factory=list)

    def held(self) -> set[tuple[str, int]]:
        """The partitions it holds a current (not -future, -delete, -stray) log of."""
        return {(p.topic, p.partition) for p in self.parts if p.current}


@dataclass
class Broker:
    """One broker's log directories (several: JBOD) and its label in the tables."""

    node: str | None
    dirs: list[LogDir]
    label: str = ""
    cluster: str = ""

    @cached_property
    def held(self) -> set[tuple[str, int]]:
        """The partitions it holds a current log of."""
        return set().union(*(d.held() for d in self.dirs))

    @cached_property
    def directory_ids(self) -> set[str]:
        return {d.directory_id for d in self.dirs if d.directory_id}

    @cached_property
    def once_ids(self) -> dict[str, set[str]]:
        """The topic ids of its internal topics (ONCE_PER_CLUSTER)."""
        out: dict[str, set[str]] = defaultdict(set)
        for d in self.dirs:
            for p in d.parts:
                if p.topic in ONCE_PER_CLUSTER and p.current and p.topic_id:
                    out[p.topic].add(p.topic_id)
        return out

    @cached_property
    def firsts(self) -> dict[tuple[str, int], tuple[int, bytes]]:
        """Its current replicas' first segments (base offset, first bytes), where read."""
        return {(p.topic, p.partition): p.first for d in self.dirs for p in d.parts
                if p.current and p.first and p.first[1]}  # fmt: skip

    @property
    def shown(self) -> list[str]:
        """Its path as the run shows it: its log directory's, or what its log dirs share."""
        first = self.dirs[0].shown
        return first[: _prefix_len(*(d.shown for d in self.dirs))] if len(self.dirs) > 1 else first


@dataclass
class Layout:
    """How a dump's directories were read: its brokers, their clusters, the reasons."""

    brokers: list[Broker]
    reasons: list[str]
    stale: list[dict]  # replicas of a topic's other incarnations (info findings)
    undecided: list[dict]  # topics whose live incarnation the dump cannot tell
    # directories the listing could not read (decoders.layout: info findings)
    unlisted: list[dict] = field(default_factory=list)

    def clusters(self) -> dict[str, list[Broker]]:
        out: dict[str, list[Broker]] = defaultdict(list)
        for b in self.brokers:
            out[b.cluster].append(b)
        return dict(out)

    def describe(self) -> dict:
        """The grouping as summary.json and the console print it."""
        return {
            "clusters": {
                c: {b.label: ["/".join(d.shown) for d in b.dirs] for b in bs}
                for c, bs in sorted(self.clusters().items())
            },
            "reasons": self.reasons,
            "stale_replicas": self.stale,
            "undecided_topics": self.undecided,
            "unlisted_directories": [
                {k: u[k] for k in ("directory", "reason")} for u in self.unlisted
            ],
        }


def read_small(fs, path: str, limit: int = 1 << 16) -> bytes:
    if fs is None:
        with open(path, "rb") as f:
            return f.read(limit)
    with fs.open_input_file(path) as f:
        return f.read(min(limit, f.size()))


def _meta(fs, path: str) -> dict:
    try:
        return meta_properties(read_small(fs, path))
    except (OSError, DecodeError):
        return {}


def _topic_id(fs, path: str) -> str | None:
    try:
        return partition_metadata(read_small(fs, path))["topic_uuid"]
    except (OSError, DecodeError):
        return None


# The bytes of a segment's first entry compared between replicas: its framing and header,
# which a follower copies from the leader byte for byte (base offset, length, leader epoch,
# magic, CRC).
HEAD_BYTES = 64


def _head(fs, path: str) -> bytes | None:
    try:
        return read_small(fs, path, HEAD_BYTES)
    except OSError:
        return None


def read_ids(fs, jobs: list[tuple[str, str]]) -> dict[str, dict | str | bytes | None]:
    """The small files (or heads) of ``jobs`` ((kind, path): ``meta`` for meta.properties,
    ``id`` for partition.metadata, ``head`` for a segment's first bytes), read at once: a
    remote filesystem in parallel (one request each)."""

    def one(job):
        kind, path = job
        if kind == "meta":
            return _meta(fs, path)
        return _topic_id(fs, path) if kind == "id" else _head(fs, path)

    if fs is None or len(jobs) < 4:
        return {p: one((k, p)) for k, p in jobs}
    with ThreadPoolExecutor(16) as pool:
        return dict(zip((p for _, p in jobs), pool.map(one, jobs), strict=True))


# -- brokers ---------------------------------------------------------------------------------------


def _compatible(a: LogDir, group: list[LogDir]) -> bool:
    """Whether ``a`` may be another log directory of the broker ``group`` is (LogManager):
    distinct directory ids, and no partition held current twice."""
    for b in group:
        if a.directory_id and a.directory_id == b.directory_id:
            return False
        if a.held() & b.held():
            return False
    return True


def _prefix_len(*paths: list[str]) -> int:
    """How many leading components the paths share."""
    n = 0
    for parts in zip(*paths, strict=False):
        if len(set(parts)) != 1:
            break
        n += 1
    return n


def group_brokers(dirs: list[LogDir], reasons: list[str]) -> list[Broker]:
    """Log directories as brokers: those claiming one node id of one cluster id (without one:
    under one dump root) that can be one broker's JBOD are one; each other is a broker of its
    own (its node id then held by two brokers: two clusters, split later)."""
    keyed: dict[tuple, list[LogDir]] = defaultdict(list)
    brokers: list[Broker] = []
    for d in dirs:
        if d.node is None:
            brokers.append(Broker(None, [d]))
        else:
            keyed[(d.cluster_id, d.root if d.cluster_id is None else -1, d.node)].append(d)
    for (cid, _, node), ds in keyed.items():
        groups: list[list[LogDir]] = []
        for d in sorted(ds, key=lambda d: d.shown):
            fits = [g for g in groups if _compatible(d, g)]
            if fits:
                max(fits, key=lambda g: _prefix_len(g[0].shown, d.shown)).append(d)
            else:
                groups.append([d])
        for g in groups:
            brokers.append(Broker(node, g))
            if len(g) > 1:
                reasons.append(
                    f"node {node} of cluster {cid or '(no cluster.id)'}: log directories "
                    f"{', '.join('/'.join(d.shown) for d in g)} are one broker's (JBOD): "
                    "distinct directory.ids, no partition held twice but as a -future copy"
                )
    return brokers


def _label_brokers(brokers: list[Broker]) -> None:
    """Each broker's label: its node id, unless two brokers of the run claim it (two clusters,
    or copies): then `<id>@<its path>`; a log directory without a node id is named by its path."""
    count: dict[str, int] = defaultdict(int)
    for b in brokers:
        if b.node is not None:
            count[b.node] += 1
    for b in brokers:
        path = "/".join(b.shown) or "."
        if b.node is None:
            b.label = path if path != "." else posixpath.basename(b.dirs[0].path.rstrip("/"))
        else:
            b.label = b.node if count[b.node] == 1 else f"{b.node}@{path}"


# -- clusters --------------------------------------------------------------------------------------


def _conflict(a: Broker, b: Broker) -> str | None:
    """Why two brokers cannot be of one cluster, or None."""
    if a.node is not None and a.node == b.node:
        held = sorted(a.held & b.held)
        same_dir = a.directory_ids & b.directory_ids
        if held:
            t, p = held[0]
            return f"both claim node {a.node} and hold {t}-{p}"
        if same_dir:
            return f"both claim node {a.node} and directory.id {sorted(same_dir)[0]}"
        return f"both claim node {a.node}"
    ia, ib = a.once_ids, b.once_ids
    for topic in sorted(set(ia) & set(ib)):
        if ia[topic] != ib[topic]:
            return f"{topic} has topic id {sorted(ia[topic])[0]} in one, {sorted(ib[topic])[0]} in the other"  # fmt: skip
    for tp in sorted(set(a.firsts) & set(b.firsts)):
        (at, mine), (bt, theirs) = a.firsts[tp], b.firsts[tp]
        if at == bt and mine != theirs:
            return f"hold replicas of {tp[0]}-{tp[1]} that disagree from their first batch (offset {at})"  # fmt: skip
    return None


def group_clusters(brokers: list[Broker], reasons: list[str]) -> None:
    """Each broker's cluster: its cluster id, or (without one) its dump root's only cluster id,
    else the dump root's brokers without one together; split where the bytes contradict it."""
    by_root: dict[int, set[str]] = defaultdict(set)
    for b in brokers:
        for d in b.dirs:
            if d.cluster_id:
                by_root[d.root].add(d.cluster_id)
    candidates: dict[tuple, list[Broker]] = defaultdict(list)
    for b in brokers:
        cid = next((d.cluster_id for d in b.dirs if d.cluster_id), None)
        root = b.dirs[0].root
        if cid is None and len(by_root[root]) == 1:
            cid = next(iter(by_root[root]))
            reasons.append(
                f"{'/'.join(b.shown)}: no cluster.id; joins {cid}, the only one under its dump root"
            )
        candidates[(cid, None if cid else root)].append(b)
    for (cid, _), bs in candidates.items():
        clashes = []
        for i, a in enumerate(bs):
            for b in bs[i + 1 :]:
                why = _conflict(a, b)
                if why:
                    clashes.append((a, b, why))
        base = cid or UNKNOWN_PREFIX + _common_path([d.path for b in bs for d in b.dirs])
        if cid is None and len(bs) > 1 and not clashes:
            reasons.append(
                f"{base}: {len(bs)} brokers without a cluster.id under one dump root, one "
                "cluster (nothing in their files contradicts it)"
            )
        if not clashes:
            for b in bs:
                b.cluster = base
            continue
        depth = 1
        while depth < 64 and any(a.shown[:depth] == b.shown[:depth] for a, b, _ in clashes):
            depth += 1
        parts: dict[tuple, list[Broker]] = defaultdict(list)
        for b in bs:
            parts[tuple(b.shown[:depth])].append(b)
        # named by what tells them apart: the path below what all of them share, so that a
        # run over a directory above them names them as a run over them alone
        common = _prefix_len(*[list(p) for p in parts]) if len(parts) > 1 else 0
        for prefix, members in parts.items():
            carries = any(d.cluster_id for m in members for d in m.dirs)
            name = (
                f"{cid}@{'/'.join(prefix[common:])}"
                if cid and carries
                else UNKNOWN_PREFIX + _common_path([d.path for m in members for d in m.dirs])
            )
            for m in members:
                m.cluster = name
        a, b, why = clashes[0]
        reasons.append(
            f"{cid or 'brokers without a cluster.id'}: split into {len(parts)} clusters by "
            f"path ({', '.join('/'.join(p) for p in sorted(parts))}): {'/'.join(a.shown)} and "
            f"{'/'.join(b.shown)} {why}"
            + (f" (and {len(clashes) - 1} more such pairs)" if len(clashes) > 1 else "")
        )


def _common_path(paths: list[str]) -> str:
    if len(paths) == 1:
        return os.path.normpath(paths[0]) if "://" not in paths[0] else paths[0]
    try:
        return os.path.commonpath(paths)
    except ValueError:
        return paths[0]


# -- incarnations ----------------------------------------------------------------------------------


def _full_names(parts: list[PartitionDir]) -> None:
    """A suffixed directory's topic name, truncated to keep the directory name within 255
    characters (UnifiedLog.logDirNameWithSuffixCappedLength), completed from the directory
    with its topic id, or else the only topic name it begins."""
    by_id = {p.topic_id: p.topic for p in parts if p.current and p.topic_id}
    names = {p.topic for p in parts if p.current}
    for p in parts:
        if p.current or p.topic in names:
            continue
        if p.topic_id in by_id:
            p.topic = by_id[p.topic_id]
            continue
        longer = [n for n in names if n.startswith(p.topic)]
        if len(longer) == 1 and len(posixpath.basename(p.path.rstrip("/"))) >= MAX_DIR_NAME - 1:
            p.topic = longer[0]


def _needs_authority(held: list[tuple[Broker, PartitionDir]]) -> bool:
    """Whether a cluster's incarnations are in question: a -delete or -stray directory, or a
    name held with two topic ids."""
    ids: dict[str, set[str]] = defaultdict(set)
    for _, p in held:
        if p.suffix in STALE_SUFFIXES:
            return True
        if p.topic_id:
            ids[p.topic].add(p.topic_id)
    return any(len(v) > 1 for v in ids.values())


def incarnations(brokers: list[Broker], authority_of=None) -> tuple[list[dict], list[dict]]:
    """Every partition directory's topic label (see the module's docstring); the stale
    replicas (other incarnations, left-over copies) and the topics whose live incarnation
    cannot be told. ``authority_of(brokers)`` gives what a cluster's `__cluster_metadata`
    says of its topics (decoders.cluster_metadata.TopicAuthority), or None; it is asked only
    where incarnations are in question, and wins over what the directories suggest."""
    stale, undecided = [], []
    by_cluster: dict[str, list[tuple[Broker, PartitionDir]]] = defaultdict(list)
    for b in brokers:
        for d in b.dirs:
            for p in d.parts:
                by_cluster[b.cluster].append((b, p))
    for cluster, held in by_cluster.items():
        _full_names([p for _, p in held])
        authority = None
        if authority_of is not None and _needs_authority(held):
            authority = authority_of([b for b in brokers if b.cluster == cluster])
        by_name: dict[str, list[tuple[Broker, PartitionDir]]] = defaultdict(list)
        for b, p in held:
            by_name[p.topic].append((b, p))
        for name, ps in by_name.items():
            said = _said(authority, name, ps)
            live_ids = _live_ids(ps) if said is None else said
            live = next(iter(live_ids)) if len(live_ids) == 1 else None
            if len(live_ids) > 1:
                undecided.append({"cluster": cluster, "topic": name, "topic_ids": sorted(live_ids)})
            for b, p in ps:
                is_live = p.topic_id == live or (
                    p.topic_id is None and (live is not None or not live_ids)
                )
                if p.suffix in STALE_SUFFIXES or not is_live:
                    tag = (p.topic_id or p.unique or "noid").replace("-", "")[:8]
                    p.label = f"{name}{LABEL_MARK}{tag}"
                    why = (cluster, b, p, name, live, len(live_ids) > 1, said is not None)
                    stale.append(why)
                else:
                    p.label = name
    _apart(brokers)  # before the findings name the labels
    return [_stale(*why) for why in stale], undecided


def _apart(brokers: list[Broker]) -> None:
    """Two directories of one broker that would carry one label (a -stray and a -delete
    directory of one old incarnation) stay two replicas: the later ones get their suffix's
    first 8 hex digits too."""
    seen: set[tuple] = set()
    for b in brokers:
        for d in b.dirs:
            for p in sorted(d.parts, key=lambda p: p.path):
                key = (b.label, p.suffix == FUTURE, p.label, p.partition)
                if key in seen and p.unique:
                    p.label = f"{p.label}.{p.unique[:8]}"
                seen.add((b.label, p.suffix == FUTURE, p.label, p.partition))


def _said(authority, name: str, ps) -> set[str] | None:
    """The live topic id of ``name`` as the metadata log says ({id}, or {} when it removed
    the name's ids), or None when it says nothing of them."""
    if authority is None:
        return None
    if name in authority.live:
        return {authority.live[name]}
    if any(p.topic_id in authority.removed for _, p in ps):
        return set()
    return None


def _live_ids(ps: list[tuple[Broker, PartitionDir]]) -> set[str]:
    """The topic ids that may be the live incarnation's: those of current (or -future)
    directories, less, when several, those also seen in -delete or -stray directories
    (a deletion's leftovers). One id: the live one; none: the directories without an id are
    live, if any; several: the dump cannot tell."""
    current = {p.topic_id for _, p in ps if p.suffix not in STALE_SUFFIXES and p.topic_id}
    if len(current) > 1:
        dead = {p.topic_id for _, p in ps if p.suffix in STALE_SUFFIXES and p.topic_id}
        if len(current - dead) >= 1:
            current -= dead
    return current


def _stale(cluster: str, b: Broker, p: PartitionDir, name: str, live, undecided,
           authority: bool = False) -> dict:  # fmt: skip
    if authority and p.suffix not in STALE_SUFFIXES:
        why = (f"the cluster's metadata log says {name} is now topic id {live}" if live
               else f"the cluster's metadata log removed topic id {p.topic_id}")  # fmt: skip
    elif p.suffix == DELETE:
        why = "a -delete directory: the broker was deleting it"
    elif p.suffix == STRAY:
        why = "a -stray directory: the broker found it assigned to no replica of its"
    elif undecided:
        why = "the dump holds several incarnations of the topic and nothing tells the live one"
    else:
        why = f"its topic id {p.topic_id} is not the live incarnation's ({live}): the broker missed the deletion"  # fmt: skip
    return {"cluster": cluster, "topic": p.label, "name": name, "partition": p.partition,
            "broker": b.label, "topic_id": p.topic_id, "directory": posixpath.basename(p.path.rstrip("/")),
            "reason": why}  # fmt: skip


def resolve_layout(dirs: list[LogDir], authority_of=None) -> Layout:
    """Brokers, clusters and incarnations of a dump's log directories (module docstring);
    ``authority_of``: see :func:`incarnations`."""
    reasons: list[str] = []
    brokers = group_brokers(dirs, reasons)
    _label_brokers(brokers)
    group_clusters(brokers, reasons)
    stale, undecided = incarnations(brokers, authority_of)
    brokers.sort(key=lambda b: (b.cluster, b.label))
    return Layout(brokers, reasons, stale, undecided)
