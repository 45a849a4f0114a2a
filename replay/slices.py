"""What a slice of a dump keeps: the entries one finding (or one transactional id, group or
partition) needs for an audit of the slice alone to say the same thing (docs/extract.md).

Pure: a :class:`Want` is built from a finding's place and evidence (and rows of the audit's
own tables: the coordinator's transactions, the group's commits), and :func:`kept` applies it
to the entries of one replica of one partition (:class:`decoders.rewrite.Entry`). The job at
the edge (jobs/extract.py) reads the dump, writes the slice and audits it to prove the slice
reproduces the finding, widening the want (:func:`widened`) until it does.

Offsets are cut into contiguous runs, never thinned out: a hole inside a producer's run makes
the replay treat what follows as seen after cleaning (docs/compaction.md) and judge it more
leniently, so the finding would not come back.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from decoders.brokers import unlabelled
from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from decoders.errors import DecodeError
from decoders.rewrite import Entry
from replay.remediation import evidence_of

Place = tuple[str, int]  # (topic, partition)
INTERNAL = (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
LEVELS = ("evidence", "covering", "epochs", "ids", "partitions", "internal_partitions")
# around the finding's timestamps, for its producers' batches in the other partitions their
# transaction lists (a clock tolerance, several times over: timestamps are bounds, not order)
WINDOW_SLACK_MS = 10_000
# the coordinator ends a transaction within transaction.max.timeout.ms of its start (default
# 15 minutes; TransactionStateManager.timedOutTransactions): its records of one are that near
COORDINATOR_REACH_MS = 900_000
_TP = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_OPEN = re.compile(r"^(?P<tp>.+-\d+):(?P<pid>-?\d+)@(?P<offset>\d+)$")
# evidence keys naming offsets of another log, not of the finding's partition
_NOT_DATA_OFFSETS = ("commit_log_offset", "effective_log_offset", "first_log_offset")


@dataclass
class Want:
    """What a slice keeps, per kind of log."""

    # user partitions: offset runs kept (every entry overlapping one)
    runs: dict[Place, list[tuple[int, int]]] = field(default_factory=dict)
    # user partitions where the batches of ``pids`` inside ``window`` are kept (as one run)
    pid_places: set[Place] = field(default_factory=set)
    pids: set[int] = field(default_factory=set)
    window: tuple[int, int] | None = None
    # ``window`` widened to every coordinator transaction kept (level ``covering``)
    covering_window: tuple[int, int] | None = None
    # user partitions kept whole
    whole: set[Place] = field(default_factory=set)
    # the last entry and the last marker of every partition kept: they bound its copy's end
    tails: bool = True
    # internal topics: records of these transactional ids and groups, where to look for them
    transactional_ids: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    internal: dict[str, set[int] | None] = field(default_factory=dict)  # None: every partition
    # the coordinator's records kept only inside this window (None: all of the ids' records),
    # or, where the audit placed its transactions, inside these offset runs per partition
    coordinator_window: tuple[int, int] | None = None
    coordinator_runs: dict[int, list[tuple[int, int]]] | None = None
    coordinator_rows: list[dict] = field(default_factory=list)  # its producers' (the audit's)
    whole_internal: bool = False
    # entries copied byte for byte, payloads included: (file in the dump, position)
    verbatim: set[tuple[str, int]] = field(default_factory=set)
    # partitions whose entries in ``runs`` are copied byte for byte (divergent replicas)
    verbatim_places: set[Place] = field(default_factory=set)
    level: str = LEVELS[0]

    def places(self) -> set[Place]:
        return set(self.runs) | self.pid_places | self.whole

    def describe(self) -> dict[str, Any]:
        """The want as manifest.json records it."""
        return {
            "level": self.level,
            "offset_runs": {f"{t}-{p}": r for (t, p), r in sorted(self.runs.items())},
            "whole_partitions": sorted(f"{t}-{p}" for t, p in self.whole),
            "producers": sorted(self.pids),
            "producer_partitions": sorted(f"{t}-{p}" for t, p in self.pid_places),
            "window": list(self.window) if self.window else None,
            "coordinator_window": list(self.coordinator_window)
            if self.coordinator_window
            else None,
            "coordinator_runs": self.coordinator_runs,
            "transactional_ids": sorted(self.transactional_ids),
            "groups": sorted(self.groups),
            "internal_partitions": {
                t: (sorted(ps) if ps is not None else "all") for t, ps in self.internal.items()
            },
        }


def place_of(name: str) -> Place | None:
    """``topic-N`` as (topic, N)."""
    m = _TP.match(name)
    return (m["topic"], int(m["partition"])) if m else None


def _walk(value: Any, key: str = "") -> Iterable[tuple[str, Any]]:
    """Every (key, scalar) of a nested evidence value; JSON text inside it is opened too."""
    if isinstance(value, str) and value[:1] in "{[":
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v, key)
    else:
        yield key, value


def _add_run(want: Want, place: Place, lo: int, hi: int) -> None:
    want.runs.setdefault(place, []).append((min(lo, hi), max(lo, hi)))


def _cited(f: dict, ev: dict, want: Want) -> tuple[list[int], list[int], set[int]]:
    """The offsets, timestamps and producer ids finding ``f`` and its evidence ``ev`` cite;
    the places and file positions they name are added to ``want``."""
    offsets: list[int] = []
    stamps: list[int] = []
    pids = {f["producer_id"]} if f.get("producer_id") is not None else set()
    for k, v in [
        ("first_offset", f.get("first_offset")),
        ("last_offset", f.get("last_offset")),
    ] + list(_walk(ev)):
        if k.endswith("offset") and isinstance(v, int) and k not in _NOT_DATA_OFFSETS:
            offsets.append(v)
        elif k.endswith("timestamp") and isinstance(v, int) and v >= 0:
            stamps.append(v)
        elif k in (
            "producers",
            "commit_producer_ids",
            "producer_id",
            "open_transaction_producer_id",
        ):
            if isinstance(v, int) and v >= 0:
                pids.add(v)
        elif k == "open_transaction" and isinstance(v, str) and (m := _OPEN.match(v)):
            tp = place_of(m["tp"])
            if tp is not None:
                _add_run(want, tp, int(m["offset"]), int(m["offset"]))
        elif k == "output_partitions" and isinstance(v, str) and (tp := place_of(v)):
            want.pid_places.add(tp)
        elif k == "file" and isinstance(v, str) and isinstance(ev.get("position"), int):
            want.verbatim.add((v, ev["position"]))
    return offsets, stamps, pids


def _with_coordinator(want: Want, mine: list[dict]) -> None:
    """``want`` given the coordinator's transactions of its producers (``mine``): their
    transactional ids and log partitions, and the partitions they list near its window, with
    a window that covers every one kept."""
    want.coordinator_rows = mine
    for row in mine:
        want.transactional_ids.add(row["transactional_id"])
        want.internal.setdefault(TRANSACTION_STATE_TOPIC, set()).add(row["log_partition"])
    want.coordinator_runs, kept_rows = _coordinator_runs(mine, want.window)
    for row in (
        kept_rows
        if want.coordinator_runs is not None
        else [r for r in mine if _near(r, want.window)]
    ):
        for tp in row.get("partitions") or []:
            if tp["topic"] not in INTERNAL:
                want.pid_places.add((tp["topic"], int(tp["partition"])))
    # the producers' batches of every coordinator transaction kept: else a transaction kept
    # would list a partition whose marker for it was cut away
    times = [t for r in kept_rows for t in _times(r)]
    if times and want.window is not None:
        want.covering_window = (min(want.window[0], min(times) - WINDOW_SLACK_MS),
                                max(want.window[1], max(times) + WINDOW_SLACK_MS))  # fmt: skip


def for_finding(
    f: dict, coordinator: list[dict] | None = None, commits: list[dict] | None = None
) -> Want:
    """The tightest want for finding ``f`` (a findings row): its offsets and those its evidence
    cites as one run in its partition, its producers' batches near its time in the partitions
    their transactions list, and the records of its transactional ids and group.

    ``coordinator``: rows of the audit's ``coordinator_transactions`` for its producers;
    ``commits``: rows of ``offset_timeline`` for its group (both give the internal partitions
    that hold them)."""
    ev = evidence_of(f)
    want = Want()
    here: Place | None = None
    if f.get("topic") is not None and f.get("partition") is not None:
        here = (unlabelled(f["topic"]), int(f["partition"]))
    offsets, stamps, pids = _cited(f, ev, want)
    if here is not None and here[0] not in INTERNAL and offsets:
        _add_run(want, here, min(offsets), max(offsets))
    want.pids = pids
    if stamps:
        want.window = (min(stamps) - WINDOW_SLACK_MS, max(stamps) + WINDOW_SLACK_MS)
        want.coordinator_window = (min(stamps) - COORDINATOR_REACH_MS,
                                   max(stamps) + COORDINATOR_REACH_MS)  # fmt: skip
    if f.get("kind") == "replica_divergence" and here is not None:
        want.verbatim_places.add(here)
    if f.get("transactional_id"):
        want.transactional_ids.add(f["transactional_id"])
    _with_coordinator(want, [r for r in coordinator or [] if r.get("producer_id") in pids])
    if f.get("group_id"):
        want.groups.add(f["group_id"])
        for row in commits or []:
            if row.get("log_partition") is not None:
                want.internal.setdefault(CONSUMER_OFFSETS_TOPIC, set()).add(row["log_partition"])
    if want.transactional_ids and TRANSACTION_STATE_TOPIC not in want.internal:
        want.internal[TRANSACTION_STATE_TOPIC] = None
    if want.groups and CONSUMER_OFFSETS_TOPIC not in want.internal:
        want.internal[CONSUMER_OFFSETS_TOPIC] = None
    if pids and want.pid_places and want.window is None:
        want.window = (0, 1 << 62)
    if here is not None and here[0] not in INTERNAL and here not in want.runs:
        want.whole.add(here)  # a finding with no offsets: its partition, whole
    return want


def aligned(want: Want, epochs: dict[int, tuple[int, int]]) -> Want:
    """``want`` with the coordinator's records of every transaction whose epoch lies in the
    epochs of the batches kept (``epochs``: producer id -> lowest, highest), by identity, not
    clocks: the coordinator's and the partitions' clocks may disagree by more than the window.
    Only where a producer's epochs differ (transaction version 2: an epoch per transaction);
    under versions 0 and 1 one epoch spans the producer's life and says nothing."""
    varied = {pid: span for pid, span in epochs.items() if span[0] < span[1]}
    if want.coordinator_runs is None or not varied:
        return want
    runs, _ = _coordinator_runs(want.coordinator_rows, want.window, varied)
    return replace(want, coordinator_runs=runs) if runs is not None else want


def _of_epochs(row: dict, epochs: dict[int, tuple[int, int]] | None) -> bool:
    span = (epochs or {}).get(row.get("producer_id"))
    if span is None:
        return False
    lo, hi = span
    epoch = row.get("data_epoch")
    return epoch is not None and lo <= epoch <= hi


def _coordinator_runs(
    rows: list[dict],
    window: tuple[int, int] | None,
    epochs: dict[int, tuple[int, int]] | None = None,
):
    """Offset runs of the coordinator's log holding the transactions of ``epochs`` (producer
    id -> lowest, highest kept), or else those near ``window`` and the one before and after
    (the state they start from, what followed), per partition, and those transactions' rows;
    (None, []) where the rows do not place them."""
    if window is None or not rows:
        return None, []
    runs: dict[int, list[tuple[int, int]]] = {}
    by_log: dict[int, list[dict]] = {}
    kept: list[dict] = []
    for r in rows:
        if r.get("first_log_offset") is None or r.get("log_partition") is None:
            return None, []
        by_log.setdefault(r["log_partition"], []).append(r)
    for part, rs in by_log.items():
        rs.sort(key=lambda r: r["first_log_offset"])
        if epochs:  # by identity: exactly the transactions of the epochs kept
            near = [i for i, r in enumerate(rs) if _of_epochs(r, epochs)]
            reach = 0
        else:  # by time: and the one on either side
            near = [i for i, r in enumerate(rs) if _near(r, window)]
            reach = 1
        if not near:
            continue
        first, after = max(near[0] - reach, 0), near[-1] + 1 + reach
        hi = rs[after]["first_log_offset"] - 1 if after < len(rs) else 1 << 62
        runs[part] = [(rs[first]["first_log_offset"], hi)]
        kept += rs[first:after]
    return (runs or None), kept


def _times(row: dict) -> list[int]:
    times = [row.get(k) for k in ("start_timestamp", "prepare_timestamp", "complete_timestamp")]
    return [t for t in times if t is not None]


def _near(row: dict, window: tuple[int, int] | None) -> bool:
    """Whether a coordinator transaction's time overlaps ``window`` (bounds, not order)."""
    if window is None:
        return True
    times = _times(row)
    return not times or (min(times) <= window[1] and max(times) >= window[0])


def widened(want: Want, level: str) -> Want:
    """The want at a wider ``level``: ``covering`` keeps its producers' batches over the time
    of every coordinator transaction kept (so none lists a partition whose marker was cut
    away); ``epochs`` keeps the coordinator's records by the epochs of the batches kept, not by
    time (:func:`aligned`); ``ids`` keeps every record of its ids in the coordinator's
    log; ``partitions`` also keeps every involved user partition whole; ``internal_partitions``
    also keeps the internal partitions holding its ids whole."""
    if level == "covering":
        return replace(want, window=want.covering_window or want.window, level=level)
    if level == "epochs":  # the job aligns the coordinator's records by the epochs it keeps
        return replace(want, level=level)
    every = {"coordinator_window": None, "coordinator_runs": None, "level": level}
    if level == "ids":
        return replace(want, **every)
    if level == "partitions":
        return replace(want, whole=want.places(), **every)
    if level == "internal_partitions":
        return replace(want, whole=want.places(), whole_internal=True, **every)
    return want


def kept(entries: list[Entry], want: Want, place: Place, file_of: list[str]) -> list[bool]:
    """Which entries of one replica of a user partition (in log order, ``file_of[i]`` naming
    each one's file) the slice keeps."""
    n = len(entries)
    keep = [False] * n
    whole = place in want.whole
    runs = list(want.runs.get(place, []))
    if not whole and place in want.pid_places and want.pids:
        lo, hi = want.window or (0, 1 << 62)
        mine = [
            e for e in entries
            if e.producer_id in want.pids and lo <= e.max_timestamp <= hi
        ]  # fmt: skip
        if mine:
            runs.append((min(e.base_offset for e in mine), max(e.last_offset for e in mine)))
    runs = _with_context(entries, runs, want.pids)
    for i, e in enumerate(entries):
        in_run = e.readable and any(e.last_offset >= lo and e.base_offset <= hi for lo, hi in runs)
        keep[i] = whole or in_run or (file_of[i], e.position) in want.verbatim
    if want.tails and any(keep):
        for i in witnesses(entries):
            keep[i] = True
    _keep_runs_between(entries, keep, file_of)
    return keep


def witnesses(entries: list[Entry]) -> set[int]:
    """The entries that say where and when a partition's copy ends: its last entry, last data
    batch and last marker, and the one with its largest timestamp (what an open transaction's
    age and the records it pins are measured against)."""
    readable = [i for i, e in enumerate(entries) if e.readable]
    if not readable:
        return set()
    out = {readable[-1], max(readable, key=lambda i: entries[i].max_timestamp)}
    for want_control in (True, False):
        last = next((i for i in reversed(readable) if entries[i].is_control == want_control), None)
        if last is not None:
            out.add(last)
    return out


def _with_context(entries: list[Entry], runs: list[tuple[int, int]], pids: set[int]):
    """Runs reaching back to the previous batch of each producer written in them (the batch its
    sequence and epoch are judged against) and on to the marker that ends its transaction, or,
    where none does (a transaction left open), to the next marker of any producer (the bound
    the replay puts on when the open data was appended: partition.py's bound_timestamp): one
    pass over the partition per run, whatever the number of producers."""
    out = []
    for lo, hi in runs:
        inside: set[int] = set()
        before: dict[int, int] = {}  # producer -> base offset of its last batch before the run
        after: dict[int, int] = {}  # producer -> last offset of its first marker after it
        any_after: int | None = None  # ... of any producer's
        for e in entries:
            if not e.readable:
                continue
            if e.base_offset > hi and e.is_control and any_after is None:
                any_after = e.last_offset
            if e.producer_id not in pids:
                continue
            if e.last_offset < lo:
                before[e.producer_id] = max(before.get(e.producer_id, -1), e.base_offset)
            elif e.base_offset > hi:
                if e.is_control and e.producer_id not in after:
                    after[e.producer_id] = e.last_offset
            else:
                inside.add(e.producer_id)
        start = min([lo] + [before[p] for p in inside if p in before])
        end = max([hi] + [after[p] for p in inside if p in after])
        if any_after is not None and any(p not in after for p in inside):
            end = max(end, any_after)
        out.append((start, end))
    return out


def _keep_runs_between(entries: list[Entry], keep: list[bool], file_of: list[str]) -> None:
    """Unreadable bytes between two kept entries of one file are kept too: decoding the slice
    meets them where it met them in the dump."""
    for i, e in enumerate(entries):
        if e.readable or keep[i]:
            continue
        prev = next((j for j in range(i - 1, -1, -1) if file_of[j] == file_of[i]), None)
        nxt = next((j for j in range(i + 1, len(entries)) if file_of[j] == file_of[i]), None)
        if prev is not None and nxt is not None and keep[prev] and keep[nxt]:
            keep[i] = True


def internal_ids(topic: str, keys: list[bytes]) -> set[str]:
    """The groups or transactional ids an internal-topic batch's records are about (keys that
    do not decode name nothing)."""
    from decoders import consumer_offsets, transaction_log

    out: set[str] = set()
    for key in keys:
        try:
            if topic == TRANSACTION_STATE_TOPIC:
                out.add(transaction_log.decode_key(key))
            else:
                group = consumer_offsets.decode_key(key).get("group_id")
                if group is not None:
                    out.add(group)
        except DecodeError:  # a key we cannot read is about no id we want
            continue
    return out


def internal_wanted(topic: str, partition: int, ids: set[str], entry: Entry, want: Want) -> bool:
    """Whether an internal-topic batch about ``ids`` is kept: it is about a wanted group or
    transactional id, or one of the wanted producers wrote it (transactional offset commits and
    their markers)."""
    if want.whole_internal:
        return True
    if topic == TRANSACTION_STATE_TOPIC and want.coordinator_runs is not None:
        runs = want.coordinator_runs.get(partition, [])
        if not any(lo <= entry.base_offset <= hi for lo, hi in runs):
            return False
    elif topic == TRANSACTION_STATE_TOPIC and want.coordinator_window is not None:
        lo, hi = want.coordinator_window
        if not lo <= entry.max_timestamp <= hi:
            return False
    wanted = want.transactional_ids if topic == TRANSACTION_STATE_TOPIC else want.groups
    return bool(ids & wanted) or (entry.producer_id >= 0 and entry.producer_id in want.pids)


# -- where a slice's alignment starts ----------------------------------------------------------
@dataclass
class Anchoring:
    """Where a slice of one finding may pin its producer's alignments: the finding's
    producer, partition and entry, and per partition of the producer the entries every
    cheapest alignment of the whole dump matched, as rows (entry position, log partition,
    offset of the coordinator transaction's first record) in offset order
    (replay.crosslog_stream.matched_entries)."""

    cluster: str
    producer_id: int
    place: Place
    position: int  # the finding's entry
    pairs: dict[Place, Any]  # numpy int64 rows


def anchoring(f: dict, transactions: list[dict], coordinator: list[dict],
              partitions: list[dict], facts) -> Anchoring | None:  # fmt: skip
    """What pins the alignments of a finding's producer in a slice (the slice's audit aligns
    it with the coordinator whatever the finding's kind), from the audit's rows of the
    producer (its ``transactions``, ``coordinator`` transactions) and its cluster's
    ``partitions``; None for findings of no transactional producer in a user partition."""
    from replay.crosslog_stream import matched_entries, producer_inputs

    pid, place = f.get("producer_id"), (f.get("topic"), f.get("partition"))
    if pid is None or place[0] is None or place[0] in INTERNAL:
        return None
    if f.get("first_offset") is None:  # a coordinator transaction with nothing in the partition
        return None
    mine = [r for r in coordinator if r.get("producer_id") == pid]
    txns = [r for r in transactions if r.get("producer_id") == pid]
    if not mine or not txns:
        return None
    left, coord = producer_inputs(txns, mine, partitions)
    tps = {(r["topic"], r["partition"]) for r in txns}
    pairs = matched_entries(pid, left, coord, facts, tps)
    return Anchoring(f["cluster"], pid, place, int(f["first_offset"]), pairs)


def anchor_in(a: Anchoring, place: Place, replicas: list[list[tuple[int, int]]],
              spans: dict[int, list[tuple[int, int]]]):  # fmt: skip
    """The pairs a slice holds whole in one partition of the producer, as an anchor (None if
    there are none).

    ``replicas``: each replica's kept offset runs of the partition; ``spans``: per
    `__transaction_state` partition, the offset runs inside which the slice keeps every
    record of the producer's transactional id. The run used is, in the finding's partition,
    the one reaching the finding, elsewhere the first; in every replica. Its start: the
    earliest pair whose entry lies in that run (at or before the finding) and whose
    coordinator transaction's first record lies in a span. Its end: the last pair (after the
    finding) whose next pair lies in the same run and the same span: the next transaction of
    a producer under transaction version 0/1 begins in a partition after the marker of its
    last one, and in the coordinator's log after its Complete record, so the end pair is
    whole; what the slice keeps after it (the edges of its windows) is left unjudged."""
    from replay.crosslog import Anchor

    pairs = a.pairs.get(place)
    if pairs is None or not len(pairs) or not replicas:
        return None
    finding = place == a.place
    bounds = []
    for runs in replicas:
        if finding:
            run = next(((lo, hi) for lo, hi in sorted(runs) if lo <= a.position <= hi), None)
        else:
            run = min(runs, default=None)
        if run is None:
            return None
        bounds.append(run)
    lo, hi = max(b[0] for b in bounds), min(b[1] for b in bounds)
    upto = a.position if finding else hi

    def span(log_partition: int, log_offset: int) -> tuple[int, int] | None:
        return next(((s, e) for s, e in spans.get(log_partition, []) if s <= log_offset <= e),
                    None)  # fmt: skip

    rows = pairs.tolist()
    start = next((x for x in rows if lo <= x[0] <= upto and span(x[1], x[2])), None)
    if start is None:
        return None
    home = span(start[1], start[2])
    after_of = a.position if finding else start[0]  # the end pair lies after this entry
    end = None
    for x, after in zip(rows, rows[1:], strict=False):
        if x[0] <= after_of or after[0] > hi:
            continue
        if x[1] == after[1] == start[1] and span(after[1], after[2]) == home:
            end = x
    return Anchor(*start, *((end[0], end[2]) if end else (None, None)))
