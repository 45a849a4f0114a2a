"""Facts read on the driver from a dump's small files: which cluster each broker directory
belongs to, how the layout was read, and how far the log cleaner has been.

Clusters. Replicas, coordinators and consumer groups belong to one cluster: a partition, a
transactional id or a group of the same name in two clusters are unrelated. The layout
(decoders.brokers, docs/layouts.md) groups log directories into brokers and clusters from
their `meta.properties` and `partition.metadata`, splitting where the bytes prove two
deployments or two copies. Configuration may name them: ``audit.clusters`` maps log
directories (a glob on their path as the run shows it) to clusters outright, and
``audit.cluster`` names the cluster of directories without a cluster id.
"""

from __future__ import annotations

import contextlib
import fnmatch
from dataclasses import dataclass, field

from decoders.brokers import UNKNOWN_PREFIX, Layout, unlabelled
from decoders.checkpoints import offset_checkpoint
from decoders.errors import DecodeError
from decoders.layout import DumpFile, discover, dump_layout, shown_log_dir
from replay import coverage as C
from replay.anchors import Anchors, read_anchors
from replay.anchors import described as anchors_described
from replay.findings import finding


@dataclass
class LayoutFacts:
    """How the run read the dump's directories: each broker's cluster (as configured), the
    grouping with its reasons (printed at the start of a run, in summary.json), the
    incarnation counts (the coverage's "incarnations" family), and the stale replicas and the
    directories that could not be read (info findings)."""

    clusters: dict[str, str] = field(default_factory=dict)  # broker label -> cluster
    described: dict = field(default_factory=dict)
    counts: list[dict] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    # where the dump pins alignments (a slice's alignment.json, replay.anchors)
    anchors: Anchors = field(default_factory=dict)


def layout_facts(paths: list[str], explicit: str | None = None,
                 mapping: dict[str, str] | None = None, listed=None) -> LayoutFacts:  # fmt: skip
    """The layout of the dump at ``paths``, with the configuration's cluster names;
    ``listed``: what ``decoders.layout.dump_layout(paths)`` gave, if the caller has it."""
    files, layout = listed if listed is not None else dump_layout(paths)
    renamed = _configured(files, layout, explicit, mapping or {})
    clusters = {f.info.broker: renamed(f) for f in files if f.info.broker is not None}
    described = layout.describe()
    described["clusters"] = {}
    file_of = {f.log_dir: f for f in files}  # one file of each log directory
    for b in layout.brokers:
        name = renamed(file_of[b.dirs[0].path])
        described["clusters"].setdefault(name, {})[b.label] = ["/".join(d.shown) for d in b.dirs]
    anchors = read_anchors(paths)
    if anchors:
        described["alignment_anchors"] = anchors_described(anchors)
    return LayoutFacts(clusters, described, _incarnation_counts(files, layout, renamed),
                       _layout_findings(layout, renamed, files), anchors)  # fmt: skip


def _configured(files: list[DumpFile], layout: Layout, explicit, mapping):
    """A file's cluster as configured: ``audit.clusters``' first glob matching its log
    directory's path (as the run shows it), else the layout's, with clusters of directories
    without an id named by ``audit.cluster`` (``<name>@<path>`` when the layout split them)."""
    unnamed = sorted({f.cluster for f in files if f.cluster.startswith(UNKNOWN_PREFIX)})

    def renamed(f: DumpFile) -> str:
        shown = "/".join(shown_log_dir(f.info))
        for glob, name in mapping.items():
            if fnmatch.fnmatchcase(shown, glob) or fnmatch.fnmatchcase(
                shown, glob.rstrip("/") + "/*"
            ):
                return name
        if explicit and f.cluster.startswith(UNKNOWN_PREFIX):
            if len(unnamed) == 1:
                return explicit
            return f"{explicit}@{f.cluster[len(UNKNOWN_PREFIX) :].rstrip('/').rsplit('/', 1)[-1]}"
        return f.cluster

    return renamed


def _incarnation_counts(files: list[DumpFile], layout: Layout, renamed) -> list[dict]:
    stale = {(s["cluster"], s["topic"], s["partition"], s["broker"]) for s in layout.stale}
    undecided = {(u["cluster"], u["topic"]) for u in layout.undecided}
    seen: dict[tuple, str] = {}
    for f in files:
        if f.info.topic is None or f.kind != "log":
            continue
        name = unlabelled(f.info.topic)
        key = (f.cluster, f.info.topic, f.info.partition, unlabelled(f.info.broker))
        if (f.cluster, name) in undecided:
            check = C.INCARNATION_UNDECIDED
        elif key in stale:
            check = C.INCARNATION_STALE
        else:
            check = C.INCARNATION_LIVE
        seen[(renamed(f), f.info.topic, f.info.partition, f.info.broker)] = check
    counts: dict[tuple, int] = {}
    for (cluster, topic, partition, _), check in seen.items():
        counts[(cluster, topic, partition, check)] = counts.get((cluster, topic, partition, check), 0) + 1  # fmt: skip
    return [{"cluster": c, "topic": t, "partition": p, "check": check, "count": n}
            for (c, t, p, check), n in sorted(counts.items())]  # fmt: skip


def _layout_findings(layout: Layout, renamed, files: list[DumpFile]) -> list[dict]:
    """The layout's info findings, each with its cluster as configured: one per stale replica
    (a topic's other incarnation, audited apart) and one per directory the listing could not
    read (whatever it holds is not in the run, which cannot tell what that is: absence is not
    evidence of a fault)."""
    cluster_of = {f.cluster: renamed(f) for f in files}
    found = [
        (s, "stale_replica", ("directory", "topic_id", "name", "reason"),
         f"{s['directory']} on broker {s['broker']} is kept apart from {s['name']}-"
         f"{s['partition']} as {s['topic']}-{s['partition']}: {s['reason']}")
        for s in layout.stale
    ] + [
        (u, "unlisted_directory", ("directory", "reason"),
         f"{u['directory']} could not be listed ({u['reason']}): the files it holds, if any, "
         "are not in this run")
        for u in layout.unlisted
    ]  # fmt: skip
    out = []
    for entry, kind, evidence, message in found:
        row = finding(kind, message, {k: entry[k] for k in evidence},
                      topic=entry["topic"], partition=entry["partition"])  # fmt: skip
        row["cluster"] = cluster_of.get(entry["cluster"], entry["cluster"])
        out.append(row)
    return out


def cleaner_checkpoints(paths: list[str], files=None,
                        name: str = "cleaner-offset-checkpoint") -> dict[str, int]:  # fmt: skip
    """`cleaner-offset-checkpoint` of every log dir: how far the cleaner has been, per replica
    (docs/formats.md 10.8), as ``"broker|topic|partition" -> offset``. A few short text files;
    ``files``: the dump's files, if the caller has listed them. ``name``: another of the log
    dirs' offset checkpoints read the same way (`replication-offset-checkpoint`: each
    replica's high watermark when the broker last wrote it)."""
    out = {}
    for f in discover(paths) if files is None else files:
        if not f.path.endswith(name):
            continue
        try:
            with contextlib.closing(f.open()) as src:
                parsed = offset_checkpoint(src.read_at(0, min(src.size, 1 << 20)))
        except (OSError, DecodeError):
            continue  # reported as corrupt_bytes by the errors table
        for e in parsed["entries"]:
            out[f"{f.info.broker}|{e['topic']}|{e['partition']}"] = e["offset"]
    return out
