"""`logreplay extract finding OUT ID --to DIR` and `logreplay extract slice DUMP ... --to DIR`:
the smallest re-auditable slice of a dump, to attach to a ticket or a Kafka JIRA.

A slice is a dump: the same directory names, `meta.properties`, `partition.metadata` and
checkpoints as they were, the `.log` segments (under their own names) holding only the entries
kept, whole and with their offsets, and offset and time indexes rebuilt for them. Producer
snapshots and `.txnindex` files are left out (they describe the whole segment; a broker rebuilds
them on recovery). User-topic payloads are replaced by tokens of the same length unless
``--include-payloads`` (decoders.rewrite); internal topics, markers and the entries a finding
is about because of their bytes are copied byte for byte. ``manifest.json`` says what was cut,
from where and why. What to keep is :mod:`replay.slices`'s; for a finding, each candidate slice
is audited in this process (replay.local) and the first that reproduces the finding, within
the size bound, is written (docs/extract.md).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import decoders
from decoders.brokers import unlabelled
from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from decoders.errors import DecodeError
from decoders.layout import DumpFile
from decoders.resync import Resync
from decoders.rewrite import Entry, Tokens, crc_ok, entries, key_values, tokenised
from decoders.source import WindowedSource
from jobs.exits import FAILED, OK, USAGE
from jobs.output import OutputDir
from replay import slices
from replay.anchors import ANCHORS_FILE, anchor_row
from replay.anchors import document as anchors_document
from replay.slices import INTERNAL, LEVELS, Place, Want

MANIFEST = "manifest.json"
MIN_BOUND_BYTES = 1 << 20  # a slice may always be this large
BOUND_SHARE = 0.05  # ... or this share of its dump
METADATA_TOPIC = "__cluster_metadata"
# files of a partition directory copied as they were; segments' own files are rebuilt or left out
KEPT_KINDS = ("partition_metadata", "leader_epoch_checkpoint")
REBUILT_KINDS = ("index", "timeindex")


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="what", required=True)
    f = sub.add_parser("finding", help="the slice behind one finding of an audit")
    f.add_argument("out", metavar="OUT", help="the audit's output directory (local or s3://)")
    f.add_argument("id", metavar="ID",
                   help="the finding's fingerprint (a prefix will do) or row:N (N-th, from 1)")  # fmt: skip
    f.add_argument("--to", required=True, metavar="DIR", help="where to write the slice")
    f.add_argument("--dump", action="append", metavar="PATH",
                   help="the dump, when it moved since the audit (default: the audit's inputs)")  # fmt: skip
    _common(f)
    s = sub.add_parser("slice", help="the logs of a transactional id, a group or a partition")
    s.add_argument("dump", nargs="+", metavar="DUMP", help="the dump (local paths or s3://)")
    which = s.add_mutually_exclusive_group(required=True)
    which.add_argument("--transactional-id", metavar="ID")
    which.add_argument("--group", metavar="G")
    which.add_argument("--topic", metavar="T")
    s.add_argument("--partition", type=int, metavar="P", help="with --topic")
    s.add_argument("--from", dest="since", metavar="TIME", help="ISO 8601 or epoch ms")
    s.add_argument("--until", metavar="TIME", help="ISO 8601 or epoch ms (or a first --to)")
    s.add_argument("--to", action="append", required=True, metavar="DIR",
                   help="where to write the slice; as in `--from T1 --to T2 --to DIR`, a "
                        "first --to before the directory ends the time window")  # fmt: skip
    _common(s)


def _common(p) -> None:
    p.add_argument("--include-payloads", action="store_true",
                   help="keep user keys, values and header values (default: tokens)")  # fmt: skip
    p.add_argument("--max-bytes", type=int, default=None,
                   help="the slice's size bound (default: the larger of 5%% of the dump "
                        "and 1 MiB)")  # fmt: skip


# -- the dump, as partition directories of entries ----------------------------------------------
@dataclass
class Replica:
    """One partition directory of the dump: its segments and their entries, in log order."""

    topic: str
    partition: int
    logs: list[DumpFile] = field(default_factory=list)
    others: list[DumpFile] = field(default_factory=list)
    _entries: list[tuple[Entry, DumpFile]] | None = None

    @property
    def place(self) -> Place:
        """(topic, partition) of every incarnation and copy of the partition alike: a slice
        keeps a re-created topic's old directories, `-delete` and `-stray` ones with the live
        one (the audit routes commits between them, docs/layouts.md)."""
        return (unlabelled(self.topic), self.partition)

    def entries(self) -> list[tuple[Entry, DumpFile]]:
        """Every entry of every segment, heads only (read once, then kept)."""
        if self._entries is None:
            out = []
            for f in sorted(self.logs, key=lambda f: f.info.base_offset or 0):
                with opened(f) as src:
                    resync = Resync(src, src.size)
                    out += [(e, f) for e in entries(src.read_at, src.size, resync.next_valid_entry)]
            self._entries = out
        return self._entries


def opened(f: DumpFile) -> WindowedSource:
    """A dump file read a window at a time (decoders.source.WindowedSource): walking its
    entries, then reading those kept, costs a read per window, not one per entry (one request
    each on an object store)."""
    return WindowedSource(f.open())


class Reads:
    """The files of one replica open while its entries are read (one window-read source per
    file), closed together."""

    def __init__(self) -> None:
        self.sources: dict[str, WindowedSource] = {}

    def records(self, f: DumpFile, e: Entry) -> list[tuple[bytes | None, bytes | None]]:
        """(key, value) of each record of a v2 entry ([] for others or records that do not
        decode)."""
        if e.magic != 2:
            return []
        src = self.sources.get(f.path)
        if src is None:
            src = self.sources[f.path] = opened(f)
        try:
            return key_values(src.read_at(e.position, e.length))
        except DecodeError:
            return []

    def __enter__(self) -> Reads:
        return self

    def __exit__(self, *exc: object) -> None:
        for src in self.sources.values():
            src.close()
        self.sources.clear()


class Dump:
    """The files of a dump (decoders.discover), by partition directory and log directory."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.files = decoders.discover(paths)
        self.bytes = sum(f.size for f in self.files)
        self.replicas: dict[str, Replica] = {}
        self.roots: dict[str, list[DumpFile]] = defaultdict(list)
        for f in self.files:
            if f.info.topic is None:
                self.roots[f.log_dir].append(f)
                continue
            folder = f.info.file.rsplit("/", 1)[0]
            r = self.replicas.setdefault(folder, Replica(f.info.topic, f.info.partition))
            (r.logs if f.kind == "log" else r.others).append(f)

    def of(self, topic: str, partitions: set[int] | None = None) -> list[tuple[str, Replica]]:
        return [
            (k, r) for k, r in sorted(self.replicas.items())
            if unlabelled(r.topic) == topic and (partitions is None or r.partition in partitions)
        ]  # fmt: skip

    def partition_count(self, topic: str) -> int:
        seen = [r.partition for r in self.replicas.values() if r.topic == topic]
        return max(seen) + 1 if seen else 0


# -- cutting ------------------------------------------------------------------------------------
@dataclass
class Cut:
    """A slice before it is written: its files' bytes by path, and what it records."""

    files: dict[str, bytes] = field(default_factory=dict)
    logs: list[dict] = field(default_factory=list)
    left_out: list[dict] = field(default_factory=list)
    tokens: int = 0
    anchors: list[dict] = field(default_factory=list)  # alignment.json's (replay.anchors)

    @property
    def bytes(self) -> int:
        return sum(len(b) for b in self.files.values())


def cut(dump: Dump, want: Want, include_payloads: bool) -> Cut:
    """The slice ``want`` describes, in memory (a slice is bounded; see :func:`bound`)."""
    out = Cut()
    tokens = Tokens()
    kept_dirs: set[str] = set()
    keeps: dict[str, list[bool]] = {}
    epochs: dict[int, tuple[int, int]] = {}
    for folder, r in sorted(dump.replicas.items()):  # user partitions first
        if r.topic in INTERNAL or not _involved(r, want):
            continue
        pairs = r.entries()
        keeps[folder] = slices.kept([e for e, _ in pairs], want, r.place,
                                    [f.info.file for _, f in pairs])  # fmt: skip
        for (e, _), k in zip(pairs, keeps[folder], strict=True):
            if k and e.producer_id in want.pids:
                lo, hi = epochs.get(e.producer_id, (e.producer_epoch, e.producer_epoch))
                epochs[e.producer_id] = (min(lo, e.producer_epoch), max(hi, e.producer_epoch))
    if want.level == "epochs":  # then the coordinator's records of those epochs
        want = slices.aligned(want, epochs)
    for folder, r in sorted(dump.replicas.items()):
        if folder not in keeps and not (r.topic in INTERNAL and _involved(r, want)):
            continue
        pairs = r.entries()
        keep = keeps.get(folder) or _internal_kept(r, pairs, want)
        if not any(keep):
            continue
        kept_dirs.add(folder)
        verbatim = include_payloads or r.topic in INTERNAL or r.place in want.verbatim_places
        _write_logs(out, r, pairs, keep, want, verbatim, tokens)
        for f in r.others:
            if f.kind in KEPT_KINDS:
                out.files[f.info.file] = _read(f)
            elif f.kind not in REBUILT_KINDS:
                out.left_out.append({"file": f.info.file, "kind": f.kind, "bytes": f.size})
    for log_dir, files in dump.roots.items():
        if not any(_under(log_dir, d, dump) for d in kept_dirs):
            continue
        for f in files:
            out.files[f.info.file] = _read(f)
        for folder, r in dump.replicas.items():  # topic ids and configs (docs/layouts.md)
            if r.topic == METADATA_TOPIC and _under(log_dir, folder, dump):
                pairs = r.entries()
                _write_logs(out, r, pairs, [True] * len(pairs), want, True, tokens)
                out.files.update({f.info.file: _read(f) for f in r.others if f.kind in KEPT_KINDS})
    out.tokens = tokens.replaced
    return out


def _under(log_dir: str, folder: str, dump: Dump) -> bool:
    r = dump.replicas[folder]
    return any(f.log_dir == log_dir for f in r.logs + r.others)


def _involved(r: Replica, want: Want) -> bool:
    if r.topic == METADATA_TOPIC:
        return False  # copied after the partitions, where one of its log directory's is kept
    if r.topic in INTERNAL:
        if r.topic not in want.internal:
            return False
        parts = want.internal[r.topic]
        return parts is None or r.partition in parts
    return r.place in want.places()


def _internal_kept(r: Replica, pairs: list[tuple[Entry, DumpFile]], want: Want) -> list[bool]:
    """Internal entries about the wanted ids or by the wanted producers, and the markers that
    end the transactions of the transactional ones kept."""
    keep = [False] * len(pairs)
    if want.whole_internal:
        return [e.readable for e, _ in pairs]
    open_pids: set[int] = set()
    with Reads() as reads:
        for i, (e, f) in enumerate(pairs):
            if not e.readable:
                continue
            if e.is_control:
                keep[i] = e.producer_id in open_pids or e.producer_id in want.pids
                open_pids.discard(e.producer_id)
                continue
            ids = slices.internal_ids(r.topic, [k for k, _ in reads.records(f, e)])
            keep[i] = slices.internal_wanted(r.topic, r.partition, ids, e, want)
            if keep[i] and e.is_transactional:
                open_pids.add(e.producer_id)
    return keep


def _read(f: DumpFile, position: int = 0, length: int | None = None) -> bytes:
    with f.open() as src:
        return src.read_at(position, f.size if length is None else length)


def _write_logs(out: Cut, r: Replica, pairs, keep, want: Want, verbatim: bool, tokens) -> None:
    """The kept entries of each segment into a segment of the same name, indexes rebuilt."""
    from simulator.writer import SegmentIndexer

    by_file: dict[str, list[int]] = defaultdict(list)
    for i, (_, f) in enumerate(pairs):
        if keep[i]:
            by_file[f.info.file].append(i)
    for name, idx in by_file.items():
        f = pairs[idx[0]][1]
        indexer = SegmentIndexer(f.info.base_offset or 0)
        body = bytearray()
        kept_runs: list[list[int]] = []
        copied = tokened = 0
        with opened(f) as src:
            for i in idx:
                e = pairs[i][0]
                data = src.read_at(e.position, e.length)
                as_is = verbatim or not e.readable or e.is_control or not crc_ok(data)
                as_is = as_is or (f.info.file, e.position) in want.verbatim
                if not as_is:
                    try:
                        data = tokenised(data, tokens)
                        tokened += 1
                    except DecodeError:
                        as_is = True  # records that do not decode: the bytes are the evidence
                copied += as_is
                if e.readable:
                    indexer.append(len(body), len(data), e.last_offset, e.max_timestamp)
                    if kept_runs and kept_runs[-1][1] + 1 >= e.base_offset:
                        kept_runs[-1][1] = max(kept_runs[-1][1], e.last_offset)
                    else:
                        kept_runs.append([e.base_offset, e.last_offset])
                body += data
        out.files[name] = bytes(body)
        index, timeindex = indexer.close()
        stem = name[: -len(".log")]
        out.files[f"{stem}.index"] = index
        out.files[f"{stem}.timeindex"] = timeindex
        out.logs.append({
            "file": name, "source_bytes": f.size, "bytes": len(body), "entries": len(idx),
            "copied_as_is": copied, "tokenised": tokened, "offsets": kept_runs,
        })  # fmt: skip


def anchored(c: Cut, dump: Dump, want: Want, anchoring: slices.Anchoring | None) -> Cut:
    """The slice with ``alignment.json`` (replay.anchors) where an aligned finding's producer
    has pairs the slice holds whole (:func:`replay.slices.anchor_in`): its audit then aligns
    that producer's partitions from and to pairs the whole dump's audit matched, as that audit
    did from the histories' start (replay.crosslog.Anchor)."""
    if anchoring is None:
        return c
    runs: dict[str, list[tuple[int, int]]] = defaultdict(list)  # by replica
    for log in c.logs:
        runs[log["file"].rsplit("/", 1)[0]] += [tuple(r) for r in log["offsets"]]
    spans = want.coordinator_runs
    if spans is None:  # kept by time, or whole: what the slice holds of each partition
        spans = {}
        for folder, rs in runs.items():
            r = dump.replicas[folder]
            if r.topic == TRANSACTION_STATE_TOPIC and rs:
                spans.setdefault(r.partition, []).append((min(a for a, _ in rs), max(b for _, b in rs)))  # fmt: skip
    rows = []
    for place in sorted(anchoring.pairs):
        replicas = [sorted(rs) for folder, rs in sorted(runs.items())
                    if dump.replicas[folder].place == place]  # fmt: skip
        anchor = slices.anchor_in(anchoring, place, replicas, spans)
        if anchor is not None:
            rows.append(anchor_row(anchoring.cluster, anchoring.producer_id, *place, anchor))
    if rows:
        c.files[ANCHORS_FILE] = anchors_document(rows)
        c.anchors = rows
    return c


def bound(dump_bytes: int, max_bytes: int | None = None) -> int:
    """The largest slice written: the larger of 5% of the dump and 1 MiB, unless given."""
    if max_bytes is not None:
        return max_bytes
    return max(int(dump_bytes * BOUND_SHARE), MIN_BOUND_BYTES)


def write(cut_: Cut, to: str) -> None:
    """The slice's files under ``to`` (a local path or a URI), each written whole."""
    dest = OutputDir(to)
    for rel, data in sorted(cut_.files.items()):
        dest.write_bytes(rel, data)


def write_manifest(to: str, doc: dict) -> None:
    OutputDir(to).write_json(MANIFEST, doc)


def _manifest(dump: Dump, cut_: Cut, want: Want, limit: int, include_payloads: bool) -> dict:
    return {
        "written_by": "logreplay extract",
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "dump": dump.paths,
        "dump_bytes": dump.bytes,
        "bytes": cut_.bytes,
        "bound_bytes": limit,
        "payloads": "included" if include_payloads else "tokens of the same length",
        "payload_fields_replaced": cut_.tokens,
        "kept": want.describe(),
        "logs": cut_.logs,
        "rebuilt": "offset and time indexes of every segment written",
        "alignment_anchors": cut_.anchors,
        "left_out": cut_.left_out,
    }


# -- extract finding -----------------------------------------------------------------------------
def _finding(args) -> int:
    import pyarrow.dataset as ds

    from jobs.findings import Output, find
    from replay.remediation import IDENTITY

    src = Output(args.out)
    try:
        f = _row(src, args.id) if args.id.startswith("row:") else find(src, args.id)
    except LookupError as e:
        print(f"logreplay extract: {e}", file=sys.stderr)
        return USAGE
    paths = args.dump or src.summary.get("inputs") or []
    if not paths:
        print("logreplay extract: the audit names no dump; give it with --dump", file=sys.stderr)
        return USAGE
    conf = src.summary.get("conf")
    conf = conf if isinstance(conf, dict) else None  # runs before 2026-11 kept its text only
    dump = Dump(paths)
    want = slices.for_finding(f, *_context(src, f))
    limit = bound(dump.bytes, args.max_bytes)
    known = src.rows("findings", ds.field("cluster") == f["cluster"], list(IDENTITY) + ["severity"])
    result = choose(dump, want, f, conf, limit, args.include_payloads, known,
                    _anchoring(src, f, conf))  # fmt: skip
    doc = {**_manifest(dump, result.cut, result.want, limit, args.include_payloads),
           "finding": _described(f), "audit_output": args.out,
           "reproduced": result.reproduced, "attempts": result.attempts}  # fmt: skip
    if result.cut.bytes > limit:
        print(f"logreplay extract: no slice of {limit} bytes or less reproduces the finding "
              f"(smallest tried: {result.cut.bytes}); give --max-bytes to allow more",
              file=sys.stderr)  # fmt: skip
        return FAILED
    write(result.cut, args.to)
    write_manifest(args.to, doc)
    _say(args.to, result.cut, result.want, limit, result.reproduced)
    return OK if result.reproduced.get("fingerprint") else FAILED


def _row(src, ref: str) -> dict:
    try:
        n = int(ref.split(":", 1)[1])
    except ValueError:
        raise LookupError(f"{ref!r}: row:N takes a number") from None
    seen = 0
    for batch in src.batches("findings"):
        if seen + batch.num_rows >= n >= 1:
            return batch.slice(n - 1 - seen, 1).to_pylist()[0]
        seen += batch.num_rows
    raise LookupError(f"no finding {ref} (the run has {seen})")


def _context(src, f: dict) -> tuple[list[dict], list[dict]]:
    """The audit's rows that say where a finding's ids live: coordinator transactions of its
    producers, commits of its group."""
    import pyarrow.dataset as ds

    pids = {p for k, p in slices._walk(slices.evidence_of(f))
            if k in ("producers", "commit_producer_ids") and isinstance(p, int)}  # fmt: skip
    if f.get("producer_id") is not None:
        pids.add(f["producer_id"])
    coordinator, commits = [], []
    same = ds.field("cluster") == f["cluster"]
    if pids:
        coordinator = src.rows("coordinator_transactions",
                               same & ds.field("producer_id").isin(sorted(pids)))  # fmt: skip
    if f.get("transactional_id"):
        coordinator += src.rows("coordinator_transactions",
                                same & (ds.field("transactional_id") == f["transactional_id"]))  # fmt: skip
    if f.get("group_id"):
        commits = src.rows("offset_timeline", same & (ds.field("group_id") == f["group_id"]),
                           ["log_partition"])  # fmt: skip
    return [_millis(r) for r in coordinator], commits


def _anchoring(src, f: dict, conf) -> slices.Anchoring | None:
    """Where a slice of a finding may pin its producer's alignments: the whole dump's
    alignment of the producer, again from the audit's rows (its transactions and coordinator
    transactions, the cluster's partitions)."""
    import pyarrow.dataset as ds

    from replay.settings import AuditConfig

    if f.get("producer_id") is None or not f.get("topic") or f["topic"] in slices.INTERNAL:
        return None
    same = ds.field("cluster") == f["cluster"]
    pid = ds.field("producer_id") == f["producer_id"]
    txns = [_millis(r) for r in src.rows("transactions", same & pid)]
    coord = [_millis(r) for r in src.rows("coordinator_transactions", same & pid)]
    parts = [_millis(r) for r in src.rows("partitions", same)]
    return slices.anchoring(f, txns, coord, parts, AuditConfig.of(conf).facts())


def _millis(row: dict) -> dict:
    """A row read from the output's Parquet with its timestamps as epoch milliseconds, as the
    replay's rows and the findings' evidence carry them."""
    return {k: int(v.timestamp() * 1000) if isinstance(v, datetime) else v for k, v in row.items()}


def _described(f: dict) -> dict:
    keys = ("fingerprint", "kind", "severity", "cluster", "topic", "partition", "producer_id",
            "producer_epoch", "transactional_id", "group_id", "first_offset", "last_offset")  # fmt: skip
    return {k: f.get(k) for k in keys}


@dataclass
class Choice:
    cut: Cut
    want: Want
    reproduced: dict[str, Any]
    attempts: list[dict]


def choose(
    dump: Dump,
    want: Want,
    f: dict,
    conf,
    limit: int,
    include_payloads: bool,
    known: list[dict] | None = None,
    anchoring: slices.Anchoring | None = None,
) -> Choice:
    """The first slice, from the tightest want to the widest (:data:`replay.slices.LEVELS`),
    that fits ``limit`` and whose audit reproduces ``f`` and, given the dump's findings
    (``known``), finds nothing at warning or above the dump does not show; else the first that
    reproduces ``f``; else the smallest tried. ``anchoring``: where the slice may pin its
    alignment (:func:`anchored`)."""
    attempts: list[dict] = []
    smallest: Choice | None = None
    reproducing: Choice | None = None
    for level in LEVELS:
        w = slices.widened(want, level)
        if w.level == "covering" and w.window == want.window:
            continue  # nothing to widen
        if w.level == "epochs" and w.coordinator_runs is None:
            continue
        c = anchored(cut(dump, w, include_payloads), dump, w, anchoring)
        att: dict[str, Any] = {"level": level, "bytes": c.bytes}
        if c.bytes > limit:
            att["result"] = "over the bound"
            attempts.append(att)
            smallest = smallest or Choice(c, w, {}, attempts)
            continue
        t0 = time.monotonic()
        rep = reaudit(
            c,
            f,
            conf,
            known=known,
            roots=[os.path.abspath(p) if "://" not in p else p for p in dump.paths],
        )
        att.update(result="reproduces" if rep.get("fingerprint") else "does not reproduce",
                   audit_seconds=round(time.monotonic() - t0, 2))  # fmt: skip
        attempts.append(att)
        choice = Choice(c, w, rep, attempts)
        if rep.get("fingerprint") and not rep.get("not_in_the_dump"):
            return choice
        if rep.get("fingerprint") and reproducing is None:
            reproducing = choice
        if smallest is None or smallest.cut.bytes > limit:
            smallest = choice
    best = reproducing or smallest
    assert best is not None
    best.attempts = attempts
    return best


def reaudit(
    c: Cut, f: dict, conf, roots: list[str], known: list[dict] | None = None
) -> dict[str, Any]:
    """Audit the slice in this process; what of ``f`` (found in the dump at ``roots``) it
    finds again."""
    from replay.local import audit_local

    with tempfile.TemporaryDirectory(prefix="logreplay-slice-") as tmp:
        for rel, data in c.files.items():
            path = os.path.join(tmp, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(data)
        found = audit_local([tmp], conf)["findings"]
    return compared(f, found, (roots, tmp), known)


def compared(
    f: dict, found: list[dict], roots: tuple[list[str], str], known: list[dict] | None = None
) -> dict[str, Any]:
    """Whether ``found`` holds ``f`` again: the same fingerprint (cluster, kind, place), the
    same severity, and which evidence keys differ (file positions are the slice's own)."""
    from replay.findings import at_least

    same = [g for g in found
            if g.get("fingerprint") == f.get("fingerprint") or _same_place(f, g, roots)]  # fmt: skip
    if not same:
        return {"fingerprint": False, "kinds_found": sorted({g["kind"] for g in found})}
    g = same[0]
    a, b = slices.evidence_of(f), slices.evidence_of(g)
    differs = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    out = {"fingerprint": True, "severity": g.get("severity") == f.get("severity"),
           "evidence_differs": differs}  # fmt: skip
    if known is not None:  # what the cut made up: found in the slice, not in the dump
        out["not_in_the_dump"] = sorted(
            f"{g['kind']} {g.get('topic')}-{g.get('partition')}@{g.get('first_offset')}"
            for g in found
            if at_least(g["severity"], "warning")
            and not any(_same_place(k, g, roots) for k in known)
        )
    return out


def _same_place(f: dict, g: dict, roots: tuple[list[str], str]) -> bool:
    """Same kind and place, in the same cluster. The slice holds fewer clusters, so one the
    dump's several copies of a cluster.id named ``id@directory`` may be ``id`` in it, and a
    cluster without an id is named by its directory (``dir:<path>``), under the slice's root
    there (``roots``: the dump's roots, the slice's)."""
    from decoders.brokers import UNKNOWN_PREFIX
    from replay.remediation import identity_of

    def cid(x: dict, bases: list[str]) -> str:
        c = str(x.get("cluster") or "")
        if not c.startswith(UNKNOWN_PREFIX):
            return c.split("@", 1)[0]
        path = c[len(UNKNOWN_PREFIX) :]
        for base in bases:
            base = base.rstrip("/")
            if path == base or path.startswith(base + "/"):
                return UNKNOWN_PREFIX + path[len(base) :]
        return c

    same = cid(f, roots[0]) == cid(g, [roots[1]])
    return same and all(f.get(k) == g.get(k) for k in identity_of(f) if k != "cluster")


def _say(to: str, c: Cut, want: Want, limit: int, reproduced: dict) -> None:
    share = f"{c.bytes} bytes ({100 * c.bytes / max(limit, 1):.0f}% of the {limit}-byte bound)"
    print(f"logreplay extract: wrote {to}: {share}, level {want.level}", file=sys.stderr)
    if reproduced:
        verdict = (
            "reproduces the finding" if reproduced.get("fingerprint") else "does NOT reproduce it"
        )
        print(f"logreplay extract: auditing the slice {verdict}; see {MANIFEST}", file=sys.stderr)
    if reproduced.get("not_in_the_dump"):
        print("logreplay extract: the slice's audit also finds what the dump's does not (the "
              "cut took away what bounded it, e.g. another partition's order): "
              + ", ".join(reproduced["not_in_the_dump"][:5]), file=sys.stderr)  # fmt: skip


# -- extract slice -------------------------------------------------------------------------------
def parse_time(text: str | None) -> int | None:
    """Epoch milliseconds from epoch ms or ISO 8601 (UTC unless it names a zone)."""
    if text is None:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


def _slice(args) -> int:
    dest = args.to[-1]
    until = args.until if args.until is not None else (args.to[0] if len(args.to) > 1 else None)
    if len(args.to) > 2 or (args.topic is None) != (args.partition is None):
        print("logreplay extract slice: give --to DIR once (after --from/--to times), and "
              "--partition with --topic", file=sys.stderr)  # fmt: skip
        return USAGE
    try:
        window = (parse_time(args.since), parse_time(until))
    except ValueError as e:
        print(f"logreplay extract slice: {e}", file=sys.stderr)
        return USAGE
    dump = Dump(args.dump)
    want = slice_want(dump, args.transactional_id, args.group,
                      (args.topic, args.partition) if args.topic else None, window)  # fmt: skip
    limit = bound(dump.bytes, args.max_bytes)
    c = cut(dump, want, args.include_payloads)
    if c.bytes > limit:
        print(f"logreplay extract slice: the slice is {c.bytes} bytes, over the {limit}-byte "
              "bound; narrow it with --from/--until or give --max-bytes", file=sys.stderr)  # fmt: skip
        return FAILED
    if not c.files:
        print("logreplay extract slice: nothing in the dump matches", file=sys.stderr)
        return FAILED
    write(c, dest)
    write_manifest(dest, {**_manifest(dump, c, want, limit, args.include_payloads),
                          "selection": {"transactional_id": args.transactional_id,
                                        "group": args.group, "topic": args.topic,
                                        "partition": args.partition, "from_ms": window[0],
                                        "until_ms": window[1]}})  # fmt: skip
    _say(dest, c, want, limit, {})
    return OK


def _in(ts: int | None, window: tuple[int | None, int | None]) -> bool:
    lo, hi = window
    return ts is None or ((lo is None or ts >= lo) and (hi is None or ts <= hi))


def slice_want(dump: Dump, txn_id: str | None, group: str | None, place: Place | None,
               window: tuple[int | None, int | None]) -> Want:  # fmt: skip
    """The want of `extract slice`: the coordinator's records of a transactional id and its
    producers' batches in the partitions it lists; a group's records and the offsets it
    committed; a partition's batches, its writers' coordinator records and the commits of the
    groups that read it; each inside the time window (timestamps as bounds)."""
    lo, hi = window
    want = Want(window=(lo if lo is not None else 0, hi if hi is not None else 1 << 62),
                level="selection")  # fmt: skip
    if txn_id is not None:
        want.transactional_ids.add(txn_id)
        want.internal[TRANSACTION_STATE_TOPIC] = _home(dump, TRANSACTION_STATE_TOPIC, txn_id)
        want.internal[CONSUMER_OFFSETS_TOPIC] = None
        home = dump.of(TRANSACTION_STATE_TOPIC, want.internal[TRANSACTION_STATE_TOPIC])
        for reads, e, f in _each(home, window):
            _coordinator_facts(reads, f, e, txn_id, want)
    if group is not None:
        want.groups.add(group)
        want.internal[CONSUMER_OFFSETS_TOPIC] = _home(dump, CONSUMER_OFFSETS_TOPIC, group)
        home = dump.of(CONSUMER_OFFSETS_TOPIC, want.internal[CONSUMER_OFFSETS_TOPIC])
        for reads, e, f in _each(home, window):
            _commit_facts(reads, f, e, lambda k: k.get("group_id") == group, want)
    if place is not None:
        want.runs[place] = []
        if lo is None and hi is None:
            want.whole.add(place)
        for _, r in dump.of(*_one(place)):
            mine = [e for e, _ in r.entries() if e.readable and _in(e.max_timestamp, window)]
            if mine:
                want.runs[place].append((mine[0].base_offset, mine[-1].last_offset))
                want.pids |= {e.producer_id for e in mine if e.is_transactional}
        want.internal[CONSUMER_OFFSETS_TOPIC] = None
        for reads, e, f in _each(dump.of(CONSUMER_OFFSETS_TOPIC), window):
            _commit_facts(reads, f, e, lambda k: (k.get("topic"), k.get("partition")) == place,
                          want, groups_only=True)  # fmt: skip
        if want.pids:
            want.internal[TRANSACTION_STATE_TOPIC] = None
            for reads, e, f in _each(dump.of(TRANSACTION_STATE_TOPIC)):
                _coordinator_facts(reads, f, e, None, want)
    return want


def _each(replicas: list[tuple[str, Replica]], window=(None, None)):
    """(reader, entry, file) of each readable data entry of ``replicas`` inside ``window``, a
    replica's files open while its entries are read."""
    for _, r in replicas:
        with Reads() as reads:
            for e, f in r.entries():
                if e.readable and not e.is_control and _in(e.max_timestamp, window):
                    yield reads, e, f


def _one(place: Place) -> tuple[str, set[int]]:
    return place[0], {place[1]}


def _home(dump: Dump, topic: str, key: str) -> set[int] | None:
    """The partitions of an internal topic that may hold ``key`` (Utils.abs(hashCode) modulo
    the partition count): by the count the dump shows and the default; None: look in all."""
    from decoders.partitioning import DEFAULT_OFFSETS_TOPIC_PARTITIONS, partition_for

    counts = {dump.partition_count(topic), DEFAULT_OFFSETS_TOPIC_PARTITIONS} - {0}
    return {partition_for(key, n) for n in counts} or None


def _coordinator_facts(reads: Reads, f: DumpFile, e: Entry, txn_id: str | None, want: Want) -> None:
    """From a __transaction_state batch: the producers of ``txn_id`` (or, with None, the ids of
    the wanted producers) and the partitions their transactions list."""
    from decoders import transaction_log as tl

    for k, v in reads.records(f, e):
        if k is None or v is None:
            continue
        try:
            tid, value = tl.decode_key(k), tl.decode_value(v)
        except DecodeError:
            continue
        pids = {value.get(k) for k in ("producer_id", "next_producer_id")} - {None, -1}
        if txn_id is not None and tid == txn_id:
            want.pids |= pids
        elif txn_id is None and pids & want.pids:
            want.transactional_ids.add(tid)
        else:
            continue
        for tp in value.get("partitions") or []:
            if tp.get("topic") not in INTERNAL:
                want.pid_places |= {(tp["topic"], int(p)) for p in tp.get("partitions") or []}


def _commit_facts(
    reads: Reads, f: DumpFile, e: Entry, match, want: Want, groups_only: bool = False
) -> None:
    """From a __consumer_offsets batch: the groups whose commits ``match``, and (unless
    ``groups_only``) the offsets they committed, as runs of the partitions committed."""
    from decoders import consumer_offsets as co

    for k, v in reads.records(f, e):
        if k is None:
            continue
        try:
            key = co.decode_key(k)
        except DecodeError:
            continue
        if key.get("topic") is None or not match(key):
            continue
        want.groups.add(key["group_id"])
        if groups_only or v is None:
            continue
        try:
            offset = co.decode_offset_commit(v).get("committed_offset")
        except DecodeError:
            continue
        if isinstance(offset, int) and offset >= 0:
            place = (key["topic"], int(key["partition"]))
            runs = want.runs.setdefault(place, [])
            runs.append((offset, offset))
            want.runs[place] = [(min(r[0] for r in runs), max(r[1] for r in runs))]


def run(args) -> int:
    return _finding(args) if args.what == "finding" else _slice(args)
