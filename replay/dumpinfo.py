"""Facts read on the driver from a dump's small files: which cluster each broker directory
belongs to, and how far the log cleaner has been.

Clusters.
Replicas, coordinators and consumer groups belong to one cluster: a partition, a transactional
id or a group of the same name in two clusters are unrelated (a directory may hold an old and a
new cluster side by side, both with broker `node.id=1`). A log directory's cluster is the
`cluster.id` of its `meta.properties` (MetaProperties); a directory without one joins the
cluster of its dump root when that root holds exactly one cluster id, and is otherwise a cluster
of its own, named by its path. ``audit.cluster`` names the cluster of directories without an id
explicitly. Only `meta.properties` files are read, on the driver (a few bytes each).
"""

from __future__ import annotations

import contextlib
import os

from decoders.checkpoints import meta_properties, offset_checkpoint
from decoders.errors import DecodeError
from decoders.layout import discover

UNKNOWN_PREFIX = "dir:"


def broker_clusters(paths: list[str], explicit: str | None = None) -> dict[str, str]:
    """broker (as the decoded tables name it) -> cluster id."""
    out: dict[str, str] = {}
    for root in paths:
        files = discover([root])
        ids: dict[str, str] = {}  # log dir -> cluster.id
        for f in files:
            if f.kind != "meta_properties":
                continue
            try:
                with contextlib.closing(f.open()) as src:
                    props = meta_properties(src.read_at(0, min(src.size, 1 << 16)))
            except (OSError, DecodeError):
                continue
            if props.get("cluster.id"):
                ids[f.log_dir] = props["cluster.id"]
        found = set(ids.values())
        default = explicit or (found.pop() if len(found) == 1 else None)
        for f in files:
            if f.info.broker is None or f.info.broker in out:
                continue
            cluster = ids.get(f.log_dir) or default
            out[f.info.broker] = cluster or UNKNOWN_PREFIX + os.path.normpath(f.log_dir)
    return out


def cleaner_checkpoints(paths: list[str]) -> dict[str, int]:
    """`cleaner-offset-checkpoint` of every log dir: how far the cleaner has been, per replica
    (kafka-formats.md 10.8), as ``"broker|topic|partition" -> offset``. A few short text files."""
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
