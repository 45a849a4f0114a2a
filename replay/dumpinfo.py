"""Facts read on the driver from a dump's small files: which cluster each broker directory
belongs to, and how far the log cleaner has been.

Clusters. Replicas, coordinators and consumer groups belong to one cluster: a partition, a
transactional id or a group of the same name in two clusters are unrelated (a directory may hold
an old and a new cluster side by side, both with broker `node.id=1`). A log directory's cluster
is the `cluster.id` of its `meta.properties` (MetaProperties); a directory without one joins
the cluster of its dump root when that root holds exactly one cluster id, and is otherwise a
cluster of its own, named by its path; ``audit.cluster`` names the cluster of directories
without an id explicitly. A cluster id is not proof of identity: container images ship a
default one (many independent single-broker clusters say `MkU3OEVBNTcwNTJENDM2Qk`). Node ids
are unique inside a cluster, so two log directories with one node id that hold the same
partition cannot both be brokers of one running cluster (a broker's log directories split its
partitions between them): they are two deployments, or two copies taken at different times, and
the cluster id is split by the path that tells them apart. Only `meta.properties` files are
read, on the driver (a few bytes each).
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict

from decoders.checkpoints import broker_id, meta_properties, offset_checkpoint
from decoders.errors import DecodeError
from decoders.layout import discover, resolve, shown_log_dir

UNKNOWN_PREFIX = "dir:"


def broker_clusters(paths: list[str], explicit: str | None = None) -> dict[str, str]:
    """broker (as the decoded tables name it) -> cluster id."""
    files = discover(paths)
    roots = [resolve(os.fspath(p))[1].rstrip("/") for p in paths]
    ids: dict[str, str] = {}  # log dir -> cluster.id
    nodes: dict[str, str] = {}  # log dir -> node id
    held: dict[str, set] = defaultdict(set)  # log dir -> partitions it holds
    shown: dict[str, list[str]] = {}  # log dir -> its path as the run shows it (layout)
    for f in files:
        shown.setdefault(f.log_dir, shown_log_dir(f.info))
        if f.info.topic is not None:
            held[f.log_dir].add((f.info.topic, f.info.partition))
        if f.kind != "meta_properties":
            continue
        try:
            with contextlib.closing(f.open()) as src:
                props = meta_properties(src.read_at(0, min(src.size, 1 << 16)))
        except (OSError, DecodeError):
            continue
        if props.get("cluster.id"):
            ids[f.log_dir] = props["cluster.id"]
        if broker_id(props) is not None:
            nodes[f.log_dir] = broker_id(props)

    def root_of(log_dir: str) -> str:
        return max((r for r in roots if log_dir.startswith(r)), key=len, default="")

    per_root: dict[str, set[str]] = defaultdict(set)
    for d, cid in ids.items():
        per_root[root_of(d)].add(cid)
    named = _split_shared_ids(ids, nodes, held, shown)
    out: dict[str, str] = {}
    for f in files:
        if f.info.broker is None or f.info.broker in out:
            continue
        found = per_root.get(root_of(f.log_dir), set())
        default = explicit or (next(iter(found)) if len(found) == 1 else None)
        cluster = named.get(f.log_dir) or default
        out[f.info.broker] = cluster or UNKNOWN_PREFIX + os.path.normpath(f.log_dir)
    return out


def _split_shared_ids(ids, nodes, held, shown) -> dict[str, str]:
    """log dir -> cluster name: its cluster id, suffixed with the part of its path (as the
    run shows it: relative to the root, or to the roots' common directory) that tells apart
    log directories claiming one node id of one cluster id over the same partitions."""
    by_id: dict[str, list[str]] = defaultdict(list)
    for d, cid in ids.items():
        by_id[cid].append(d)
    out = {}
    for cid, dirs in by_id.items():
        rel = {d: shown.get(d, ["."]) for d in dirs}
        clashes = [
            (a, b)
            for i, a in enumerate(dirs)
            for b in dirs[i + 1 :]
            if nodes.get(a) is not None and nodes.get(a) == nodes.get(b) and held[a] & held[b]
        ]
        if not clashes:
            out.update(dict.fromkeys(dirs, cid))
            continue
        depth = 1
        while any(rel[a][:depth] == rel[b][:depth] for a, b in clashes) and depth < 64:
            depth += 1
        for d in dirs:
            out[d] = f"{cid}@{'/'.join(rel[d][:depth])}"
    return out


def cleaner_checkpoints(paths: list[str]) -> dict[str, int]:
    """`cleaner-offset-checkpoint` of every log dir: how far the cleaner has been, per replica
    (docs/formats.md 10.8), as ``"broker|topic|partition" -> offset``. A few short text files."""
    out = {}
    for f in discover(paths):
        if not f.path.endswith("cleaner-offset-checkpoint"):
            continue
        try:
            with contextlib.closing(f.open()) as src:
                parsed = offset_checkpoint(src.read_at(0, min(src.size, 1 << 20)))
        except (OSError, DecodeError):
            continue  # reported as corrupt_bytes by the errors table
        for e in parsed["entries"]:
            out[f"{f.info.broker}|{e['topic']}|{e['partition']}"] = e["offset"]
    return out
