"""The rows a previous run published that a run going on from its points hands on again.

A run that goes on from a partition's carried state (:mod:`replay.carried`, found again in its
copy by :mod:`replay.points`) reads and replays only the bytes past the point. The stages
across partitions (each producer against its coordinator's log, aborted reads against every
group's commits, their propagation) still judge the partition's whole history as a full audit
of every day's data would: the rows the previous run's replays handed on for the bytes before
the point are read back from its output and handed on again, beside the new ones, as if
replayed (docs/incremental.md). What is read back, per resumed replica:

- of every partition: its transactions (not those still open at the previous end: the carried
  state holds them and the replay hands them on again) and its LSO changes;
- of a `__transaction_state` partition: the coordinator's transactions of that log partition
  (not those in flight at the previous end, which the carried state holds), each reporting the
  highest epoch of its producer known now (the coordinator's replay looks ahead: a full audit
  reports the latest epoch of the whole log);
- of a `__consumer_offsets` partition: the commit timeline and group generations;
- the findings the partition's replays judged before the point (their fingerprints, carried in
  ``replay_states.findings``) and the decoders' and replicas' findings about its bytes before
  the point (:data:`OLD_BYTES_KINDS`: a run reads those bytes no more).

Rows are read a batch at a time with a filter (pyarrow's dataset scanner: a file's row groups
whose statistics exclude the replica are skipped), never a table at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from replay.findings import INTEGRITY_KINDS
from replay.tables import CLUSTER

# previous output table -> (scratch table, kind of row) it is handed on as
CARRIED_TABLES: dict[str, tuple[str, str]] = {
    "transactions": ("replayed", "transaction"),
    "lso_changes": ("replayed", "lso"),
    "coordinator_transactions": ("coordinated", "coord_txn"),
    "offset_timeline": ("grouped", "timeline"),
    "group_generations": ("grouped", "generation"),
}
# the tables read back of a replica, by its topic: every partition's, then an internal topic's
OF_EVERY_PARTITION = ("transactions", "lso_changes")
OF_INTERNAL = {
    TRANSACTION_STATE_TOPIC: ("coordinator_transactions",),
    CONSUMER_OFFSETS_TOPIC: ("offset_timeline", "group_generations"),
}
# findings about a partition's bytes that a later run no longer reads: the decoders' (the
# errors table's) and the replicas' disagreement
OLD_BYTES_KINDS = (*INTEGRITY_KINDS, "replica_divergence")
OPEN = "OPEN"  # a partition transaction without a marker at the end of the copy
# rows read back and handed on at once: a handed-on row takes every column of its replay's
# union schema (replay.tables.in_union: ~60 columns, most null), so a partition's week of
# rows is handed on a slice at a time: what the hand-on holds does not grow with the days
# carried
HAND_ON_ROWS = 8192


def in_memory(result: dict[str, list[dict]]) -> tuple[dict, PreviousOutput]:
    """(points, previous output) of a one-process audit's result (replay.local.audit_local):
    what a later run of the one-process runner goes on from."""
    from replay import tables as T

    schemas = {"transactions": T.TRANSACTIONS, "lso_changes": T.LSO_CHANGES,
               "coordinator_transactions": T.COORDINATOR_TXNS, "offset_timeline": T.TIMELINE,
               "group_generations": T.GENERATIONS, "findings": T.FINDINGS}  # fmt: skip
    tables = {}
    for name, schema in schemas.items():
        full = pa.schema([pa.field(CLUSTER, pa.string()), *schema])
        rows = [{f.name: r.get(f.name) for f in full} for r in result.get(name, [])]
        tables[name] = pa.Table.from_pylist(rows, schema=full)
    points = {(r[CLUSTER], r["topic"], r["partition"], r["broker"]): r
              for r in result.get("replay_states", [])}  # fmt: skip
    return points, PreviousOutput(tables=tables)


@dataclass
class PreviousOutput:
    """A committed output's tables (its summary's ``tables`` entries: the files of each), read
    where a scan task runs (pyarrow filesystems: a local path or any URI the run's outputs
    reach, S3 included). ``tables``: in memory instead (the one-process runner's chain)."""

    uri: str | None = None
    entries: dict[str, dict] = field(default_factory=dict)
    tables: dict[str, pa.Table] = field(default_factory=dict)
    _opened: dict[str, ds.Dataset] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict:  # a task opens its own datasets
        return {**self.__dict__, "_opened": {}}

    def has(self, name: str) -> bool:
        return name in self.tables or name in self.entries

    def dataset(self, name: str) -> ds.Dataset | None:
        """Table ``name`` as a dataset (None: the output has no rows of it)."""
        if name in self.tables:
            return ds.dataset(self.tables[name])
        entry = self.entries.get(name)
        if entry is None:
            return None
        if name not in self._opened:
            from decoders.filesystems import filesystem

            fs, root = filesystem(self.uri)
            root = root.rstrip("/")
            paths = [f"{root}/{f['path']}" for f in entry["files"] if f.get("rows")]
            self._opened[name] = (
                ds.dataset(paths, format="parquet", filesystem=fs) if paths else None
            )
        return self._opened[name]

    def read(self, name: str, where: ds.Expression) -> Iterator[pa.Table]:
        """The rows of table ``name`` that ``where`` keeps, :data:`HAND_ON_ROWS` at a time: of
        each file, the row groups whose statistics may hold such rows (the others are not
        read), a page at a time. Not the dataset's own scanner: it decodes a whole row group
        ahead (a week's commits of one group partition are one: 28 MB of Arrow memory at its
        peak where reading it a page at a time takes 8)."""
        dataset = self.dataset(name)
        if dataset is None:
            return
        if name in self.tables:  # in memory: nothing to stream
            for batch in dataset.to_batches(filter=where, batch_size=HAND_ON_ROWS):
                if batch.num_rows:
                    yield pa.Table.from_batches([batch])
            return
        import pyarrow.parquet as pq

        for fragment in dataset.get_fragments():
            for piece in fragment.split_by_row_group(where):
                groups = [g.id for g in piece.row_groups]
                with dataset.filesystem.open_input_file(piece.path) as src:
                    pages = pq.ParquetFile(src, pre_buffer=False).iter_batches(
                        batch_size=HAND_ON_ROWS, row_groups=groups, use_threads=False
                    )
                    for batch in pages:
                        t = pa.Table.from_batches([batch]).filter(where)
                        if t.num_rows:
                            yield t


@dataclass(frozen=True)
class Resuming:
    """A replica that goes on from a previous run's point: the point's row (its
    ``replay_states`` row: :data:`replay.points.POINT_COLUMNS`, the states and the findings
    its replays judged), parsed once."""

    point: dict[str, Any]
    state: dict[str, Any]
    records_state: dict[str, Any] | None
    findings: tuple[str, ...]

    @classmethod
    def of(cls, point: dict[str, Any]) -> Resuming | None:
        """None where the row holds no state to go on from (an internal topic's without its
        records' state)."""
        if not point.get("state"):
            return None
        records = point.get("records_state")
        internal = point["topic"] in OF_INTERNAL
        if internal and not records:
            return None
        return cls(point, json.loads(point["state"]), json.loads(records) if records else None,
                   tuple(json.loads(point.get("findings") or "[]")))  # fmt: skip

    @property
    def log_end(self) -> int:
        return self.point["log_end_offset"]

    def in_flight(self) -> set[tuple[str, int]]:
        """(transactional id, first log offset) of the coordinator's transactions in flight at
        the previous end: the carried state holds them, the replay hands them on again."""
        if self.records_state is None:
            return set()
        return {(e["transactional_id"], e["current"]["first_log_offset"])
                for e in self.records_state.get("ids", []) if e.get("current")}  # fmt: skip


def carried_rows(previous: PreviousOutput, cluster: str, topic: str, partition: int,
                 resuming: Resuming, latest_epoch: dict[tuple[str, int], int],
                 cleaned_past: bool = False, trim_below: int | None = None,
                 ) -> Iterator[tuple[str, str, pa.Table]]:  # fmt: skip
    """(scratch table, kind, rows in the kind's output columns, timestamps as epoch ms) of the
    rows the previous run handed on for a resumed replica's bytes before its point (see the
    module's docstring). ``latest_epoch``: (transactional id, producer id) -> the highest epoch
    known now, of the carried state and this run's records (a `__transaction_state`
    replica's). ``cleaned_past``: the cleaner's reach in this copy passes the point (it
    rewrote segments past the previous copy's end, and may have removed records and markers
    after the point): the rows before the point are handed on as a full audit of this copy
    sees those of its cleaned range, which they now lie in: a partition's transactions
    ``in_cleaned_range`` (the cross-log alignment takes the cleaned range for a prefix of the
    partition's history, crosslog.Pair.cleaned), the coordinator's with their partitions maybe
    not all known and the history not whole from them (:func:`_settled_coordinator`).
    ``trim_below``: retention moved a user partition's log start past the carried one, and
    the partition's history is handed on from this offset (:func:`history_start`): its
    transactions starting below it, its LSO changes and the findings about its offsets or its
    deleted segments below it are not handed on, as a full audit of this copy holds none of
    them. So what a chain carries of a partition is bounded by retention, not by the days it
    ran."""
    end = resuming.log_end
    mine = (
        (ds.field(CLUSTER) == cluster)
        & (ds.field("topic") == topic)
        & (ds.field("partition") == partition)
    )
    # by the log partition its records were read from, of an internal topic's
    records = (ds.field(CLUSTER) == cluster) & (ds.field("log_partition") == partition)
    marker = ds.field("marker_offset")
    # the rows handed on below the replica's own point (the previous run's rows are the
    # replica it kept: another broker's, whose log below the point is this one's)
    below = {
        "transactions": mine & (ds.field("outcome") != OPEN) & (
            (marker < end) | (marker.is_null() & (ds.field("last_offset") < end))),
        "lso_changes": mine & (ds.field("log_end_offset") <= end),
        "coordinator_transactions": records & (ds.field("first_log_offset") < end),
        "offset_timeline": records & (ds.field("effective_log_offset") < end),
        "group_generations": records & (ds.field("log_offset") < end),
    }  # fmt: skip
    if trim_below is not None:
        below["transactions"] &= _position() >= trim_below
        below["lso_changes"] &= ds.field("log_end_offset") > trim_below
    names = list(OF_EVERY_PARTITION) + list(OF_INTERNAL.get(topic, ()))
    in_flight = resuming.in_flight()
    for name in names:
        table, kind = CARRIED_TABLES[name]
        for t in previous.read(name, below[name]):
            t = plain_times(t)
            if name == "coordinator_transactions":
                t = _settled_coordinator(t, in_flight, latest_epoch, cleaned_past)
            elif name == "transactions" and cleaned_past:  # below the cleaner's reach now
                t = _set(t, "in_cleaned_range", True)
            if t.num_rows:
                yield table, kind, t
    yield from _carried_findings(previous, cluster, topic, partition, resuming, trim_below)


def history_start(previous: PreviousOutput, cluster: str, topic: str, partition: int,
                  resuming: Resuming, log_start: int) -> int | None:  # fmt: skip
    """Where a resumed user partition's handed-on history starts once retention moved its
    log start to ``log_start`` (past the carried one): the log start, or below it the first
    transaction still to hand on (one whose marker lies past the log start), or the first of
    a producer whose transaction open at the point started below it (retention deleted its
    data while it pins the LSO: a hanging transaction; its producer's history is kept whole,
    as the cross-log alignment needs its earlier entries to tell which coordinator
    transaction the open one belongs to). Every transaction starting below the returned
    offset completed below ``log_start``: what is dropped is a prefix of the partition's
    transactions in log order, never a hole between kept entries. None: nothing to drop."""
    starts, hanging = [log_start], []
    for p in resuming.state.get("producers", ()):
        first = (p.get("txn") or {}).get("first_offset")
        if first is not None and first < log_start:
            starts.append(first)
            hanging.append(p["producer_id"])
    mine = (
        (ds.field(CLUSTER) == cluster)
        & (ds.field("topic") == topic)
        & (ds.field("partition") == partition)
    )
    before = _position() < log_start
    kept = (ds.field("marker_offset") >= log_start) | (ds.field("outcome") == OPEN)
    if hanging:
        kept |= ds.field("producer_id").isin(hanging)
    for t in previous.read("transactions", mine & before & kept):
        starts.append(pc.min(pc.coalesce(t.column("first_offset"),
                                         t.column("marker_offset"))).as_py())  # fmt: skip
    start = min(s for s in starts if s is not None)
    carried = resuming.state.get("log_start")
    return start if carried is None or start > carried else None


def _position() -> ds.Expression:
    """A transaction's place in its partition's log: its first offset, else (markers only:
    its data before the dump) its marker's."""
    return pc.coalesce(ds.field("first_offset"), ds.field("marker_offset"))


def _carried_findings(previous: PreviousOutput, cluster: str, topic: str, partition: int,
                      resuming: Resuming, trim_below: int | None = None,
                      ) -> Iterator[tuple[str, str, pa.Table]]:  # fmt: skip
    """The findings of the replica's bytes before the point: those its replays judged (by
    fingerprint) and those of :data:`OLD_BYTES_KINDS` about its bytes before the point (by
    offset, else by the file and position their evidence names), each once; not those about
    offsets or segments below ``trim_below`` (retention deleted them since)."""
    judged = ds.field("fingerprint").isin(list(resuming.findings)) if resuming.findings else None
    old = (
        (ds.field("topic") == topic)
        & (ds.field("partition") == partition)
        & ds.field("kind").isin(list(OLD_BYTES_KINDS))
        & ((ds.field("first_offset") < resuming.log_end) | ds.field("first_offset").is_null())
    )
    where = (ds.field(CLUSTER) == cluster) & (old if judged is None else (old | judged))
    seen: set[str] = set()
    mine = set(resuming.findings)
    for t in previous.read("findings", where):
        keep = []
        for i, (fp, first, last, evidence) in enumerate(zip(
            *(t.column(c).to_pylist()
              for c in ("fingerprint", "first_offset", "last_offset", "evidence")),
            strict=True,
        )):  # fmt: skip
            if fp in seen or _aged_out(first, last, evidence, trim_below):
                continue
            if fp in mine or first is not None or _before(evidence, resuming.point):
                seen.add(fp)
                keep.append(i)
        t = t.take(pa.array(keep, pa.int64()))
        if t.num_rows:
            yield "replayed", "finding", t  # the audit reads every replay's findings alike


def _aged_out(first: int | None, last: int | None, evidence: str | None,
              below: int | None) -> bool:  # fmt: skip
    """Whether a finding is about offsets wholly below ``below`` (its last, else first
    offset), or, without offsets, about a segment file below it (deleted: no segment of this
    copy starts below its log start)."""
    if below is None:
        return False
    at = last if last is not None else first
    if at is not None:
        return at < below
    segment = _segment_of(evidence)
    return segment is not None and segment[0] < below


def _segment_of(evidence: str | None) -> tuple[int, str, int | None] | None:
    """(base offset, file extension, position) of the segment file a finding's evidence
    names; None where it names none (the partition's metadata, checkpoints: files read again
    each run)."""
    import posixpath

    try:
        ev = json.loads(evidence or "{}")
    except ValueError:
        return None
    name = posixpath.basename(str(ev.get("file") or "")) if isinstance(ev, dict) else ""
    stem, _, ext = name.partition(".")
    return (int(stem), ext, ev.get("position")) if stem.isdigit() else None


def _before(evidence: str | None, point: dict[str, Any]) -> bool:
    """Whether a finding without offsets is about a file's bytes before ``point``: a segment's
    file (its name's base offset) below the point's segment, or the point's segment's own
    bytes before its position (a later run reads neither)."""
    segment = _segment_of(evidence)
    if segment is None or point.get("segment_base_offset") is None:
        return False
    (base, ext, position), at = segment, point["segment_base_offset"]
    if base != at:
        return base < at
    return ext != "log" or (position is not None and position < (point["segment_position"] or 0))


def _settled_coordinator(t: pa.Table, in_flight: set[tuple[str, int]],
                         latest_epoch: dict[tuple[str, int], int],
                         cleaned_past: bool = False) -> pa.Table:  # fmt: skip
    """The coordinator's transactions the previous run handed on as they completed (not those
    in flight at its end), each with its producer's highest epoch known now; ``cleaned_past``:
    as a full audit of this copy sees a transaction of its cleaned range (coordinator.
    _surviving): ``maybe``, partitions unknown, not ``history_from_start``. The cleaner
    removed records after them (whole transactions of an id whose later record survives), so
    the coordinator's history is no longer whole from them: the cross-log checks judge it from
    the first transaction after the cleaned range (crosslog.Coordinator.known_from_ts), and the
    partitions' entries before it stay unjudged, as in a full audit of this copy."""
    tids = t.column("transactional_id").to_pylist()
    firsts = t.column("first_log_offset").to_pylist()
    keep = [i for i, k in enumerate(zip(tids, firsts, strict=True)) if k not in in_flight]
    if len(keep) != t.num_rows:
        t = t.take(pa.array(keep, pa.int64()))
        tids = t.column("transactional_id").to_pylist()
    if latest_epoch and t.num_rows:
        pids = t.column("producer_id").to_pylist()
        had = t.column("latest_epoch").to_pylist()
        now = [max(e if e is not None else -1, latest_epoch.get((tid, pid), -1))
               for tid, pid, e in zip(tids, pids, had, strict=True)]  # fmt: skip
        i = t.schema.get_field_index("latest_epoch")
        t = t.set_column(i, t.schema.field(i), pa.array(now, t.schema.field(i).type))
    if cleaned_past:
        t = _set(_set(_set(t, "maybe", True), "history_from_start", False), "partitions", [])
    return t


def _set(t: pa.Table, name: str, value: Any) -> pa.Table:
    """``t`` with every row's ``name`` set to ``value``."""
    from decoders.columns import const

    i = t.schema.get_field_index(name)
    field_ = t.schema.field(i)
    return t.set_column(i, field_, const(value, t.num_rows, field_.type))


def plain_times(t: pa.Table) -> pa.Table:
    """A written table's timestamps as the replays hold them: epoch milliseconds."""
    for i, f in enumerate(t.schema):
        if pa.types.is_timestamp(f.type):
            ms = pc.cast(t.column(i), pa.timestamp("ms", f.type.tz), safe=False)
            t = t.set_column(i, pa.field(f.name, pa.int64()), ms.cast(pa.int64()))
    return t
