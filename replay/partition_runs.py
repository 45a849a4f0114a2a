"""A partition's batches as numpy columns, and the stretches of them the replay applies at once.

:class:`replay.partition.PartitionReplay` is the reference: one batch at a time, every rule of
the broker (docs/formats.md 10.1-10.6). Two shapes of traffic make up nearly all of a real log
and pass those rules by construction, so they are applied a stretch at a time here, over
columns, giving exactly the state, rows and order the batch-by-batch replay gives:

- **plain runs** (:class:`Runs`): idempotent writes that continue their producer's previous
  batch, and batches without producer state (what the coordinators write);
- **one transactional producer's stretch** (:func:`apply_transactional`): a Kafka Streams
  exactly-once thread under transaction versions 0 and 1 keeps one producer id and one epoch for
  life and writes, every commit interval, a transactional batch or a few to each partition it
  owns and then the markers: about 860,000 transactions a day, each of which the batch-by-batch
  replay would turn into Python objects (docs/architecture.md, "Memory over a producer's life").

Anything else (another producer's batch in between, a new epoch, a gap or repeat in sequences, a
hole, a marker of an older coordinator, a clock past the producer-id expiration, a snapshot
offset) ends a stretch, and the batch there goes through the reference replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders.constants import MAX_SEQUENCE, NO_SEQUENCE
from replay.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    RECENT_RANGES,
    batch_entry,
    expired,
    keeps_producer_state,
    next_sequence,
)

if TYPE_CHECKING:
    from replay.partition import PartitionReplay

# batches of one producer in a row (stateless ones between them not counted) below which a
# stretch is left to the batch-by-batch replay: setting up the columns costs more
MIN_STRETCH = 32
# rows tried at once: the first try is short (a stretch may end soon), each full one doubles it
FIRST_WINDOW, LAST_WINDOW = 64, 1 << 16

# the columns of a transaction its marker closed, as the replay emits it (PartitionReplay._closed)
CLOSED_COLUMNS = (
    "topic", "partition", "producer_id", "producer_epoch", "marker_epoch", "first_offset",
    "last_offset", "marker_offset", "outcome", "record_count", "batch_count", "first_timestamp",
    "marker_timestamp", "coordinator_epoch", "pinned_records", "in_cleaned_range",
)  # fmt: skip
LSO_COLUMNS = ("topic", "partition", "timestamp", "log_end_offset", "lso")


def flags(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean column as numpy, null as False."""
    if column.null_count:
        column = pc.fill_null(column, False)
    return column.to_numpy(zero_copy_only=False)


class Runs:
    """A partition's batches (in offset order) as numpy columns, with the runs of **plain**
    ones: a CRC-valid, non-transactional data batch of format v2 from an idempotent producer
    that continues that producer's previous batch here (same epoch, the next sequence without
    wrapping, a timestamp within the producer-id expiration of the previous one), or a
    CRC-valid data batch without producer state (no producer id, or format v0/v1: what the
    coordinators write to `__transaction_state` and `__consumer_offsets`, a transaction's
    every state change and every group commit). For such a batch the broker's checks (10.2)
    pass by construction, or there are none, and the replay only records it:
    :meth:`PartitionReplay._skip_ahead` does that for a whole run at once. Whether a run's
    first batch of each producer continues the state the replay holds is checked there, at
    run time."""

    def __init__(self, t: pa.Table, expiry_ms: int) -> None:
        def col(name: str, null: int) -> np.ndarray:
            c = t.column(name)
            if not pa.types.is_integer(c.type):
                c = c.cast(pa.int64())
            if c.null_count:
                c = pc.fill_null(c, null)
            return c.to_numpy().astype(np.int64, copy=False)  # most: no Arrow call per column

        def flag(name: str) -> np.ndarray:
            return flags(t.column(name).cast(pa.bool_()))

        control_types = t.column("control_type")
        no_control = control_types.null_count == len(control_types)

        def is_type(name: str) -> np.ndarray:
            if no_control:  # a partition without markers: no comparison of every row
                return np.zeros(len(control_types), bool)
            return flags(pc.equal(control_types, name))

        self.table = t
        self.base, self.last = col("base_offset", -1), col("last_offset", -1)
        self.pid, self.epoch = col("producer_id", -1), col("producer_epoch", -1)
        self.first_seq, self.last_seq = col("base_sequence", -1), col("last_sequence", -1)
        self.records, self.ts = col("record_count", 0), col("max_timestamp", -1)
        self.coord = col("coordinator_epoch", -1)
        coord_known = pc.is_valid(t.column("coordinator_epoch")).to_numpy(zero_copy_only=False)
        self.ts_known = pc.is_valid(t.column("max_timestamp")).to_numpy(zero_copy_only=False)
        crc = flag("crc_valid") if "crc_valid" in t.schema.names else np.ones(len(self.base), bool)
        self.producer = keeps_producer_state(crc, col("magic", 0), self.pid)
        self.control = flag("is_control")
        self.transactional = flag("is_transactional")
        self.commit = is_type("COMMIT")
        # a marker the replay acts on: COMMIT or ABORT, with its record and coordinator epoch
        self.marker = (
            self.producer & self.control & (self.records > 0) & coord_known
            & (self.commit | is_type("ABORT"))
        )  # fmt: skip
        data = self.producer & ~self.control
        # each one's previous batch of the same producer (markers included: they break runs)
        rows = np.flatnonzero(self.producer)
        order = rows[np.argsort(self.pid[rows], kind="stable")]
        prev = np.full(len(self.base), -1, np.int64)
        same = self.pid[order[1:]] == self.pid[order[:-1]]
        prev[order[1:][same]] = order[:-1][same]
        has = prev >= 0
        p = np.where(has, prev, 0)
        follows = (
            has & data[p] & ~self.transactional[p] & (self.epoch == self.epoch[p])
            & (self.first_seq == next_sequence(self.last_seq[p]))
            & (self.last_seq[p] < MAX_SEQUENCE)  # no wrap: MAX_SEQUENCE ends a run
            & (self.ts[p] >= 0) & ~expired(self.ts[p], self.ts, expiry_ms)
        )  # fmt: skip
        # no producer state: the broker appends it unchecked, the replay only records it
        self.stateless = crc & ~self.producer & ~self.control & self.ts_known
        self.plain = self.stateless | (
            data & ~self.transactional & self.ts_known & (self.first_seq >= 0)
            & (self.last_seq >= self.first_seq) & follows
        )  # fmt: skip

    def blocks(self, start: int, stop: int):
        """(start, stop, plain) of the alternating runs of plain and other batches between
        ``start`` and ``stop``."""
        if stop <= start:
            return
        edges = start + np.flatnonzero(np.diff(self.plain[start:stop].astype(np.int8))) + 1
        starts = np.concatenate(([start], edges))
        stops = np.concatenate((edges, [stop]))
        for s, e in zip(starts.tolist(), stops.tolist(), strict=True):
            yield s, e, bool(self.plain[s])

    def stretches(self):
        """(start, stop, producer id or None) covering every batch in order: a producer id
        where, from start to stop, every batch with producer state is that producer's and at
        least :data:`MIN_STRETCH` of them are not plain (its transactions, for
        :func:`apply_transactional`), the others between them without producer state; None for
        the rest."""
        n = len(self.base)
        if not n:
            return
        # each batch's producer; one without producer state takes the producer before it (the
        # first after it at the start); any other (CRC-invalid, a control batch without a
        # producer) is a stretch of its own
        key = np.where(self.producer, self.pid, -1)
        odd = ~self.producer & ~self.stateless
        key[odd] = -2 - np.flatnonzero(odd)
        keyed_rows = np.flatnonzero(key != -1)
        if not len(keyed_rows):
            yield 0, n, None
            return
        before = np.maximum.accumulate(np.where(key != -1, np.arange(n), -1))
        keyed = key[np.where(before >= 0, before, keyed_rows[0])]
        cuts = np.flatnonzero(keyed[1:] != keyed[:-1]) + 1
        busy = np.concatenate(([0], np.cumsum(self.producer & ~self.plain)))
        held: tuple[int, int] | None = None  # rest not yet handed on, joined with the next
        bounds = np.concatenate(([0], cuts, [n])).tolist()
        for s, e in zip(bounds[:-1], bounds[1:], strict=True):
            k = int(keyed[s])
            if k >= 0 and busy[e] - busy[s] >= MIN_STRETCH:
                if held is not None:
                    yield held[0], held[1], None
                    held = None
                yield s, e, k
            else:
                held = (held[0] if held else s, e)
        if held is not None:
            yield held[0], held[1], None


def apply_transactional(r: PartitionReplay, runs: Runs, a: int, b: int) -> int:
    """Apply batches ``a``..``b`` of one producer's stretch (:meth:`Runs.stretches`) as
    :meth:`PartitionReplay.batch` would one by one, as far as they keep to the shape that passes
    the broker's rules: the producer known with this epoch and its sequences known; its data
    batches transactional, CRC-valid, with timestamps, each continuing the sequence (no wrap, no
    range seen before, nothing cleaned or lost before it); its markers COMMIT or ABORT from a
    coordinator epoch no older than the last; no hole in the offsets; no clock jump past the
    producer-id expiration; nothing in the cleaned range. Returns how many batches from ``a``
    it applied (0: none, the state untouched)."""
    sl = slice(a, b)
    mine = runs.producer[sl]
    if not mine.any():
        return 0
    pid = int(runs.pid[a + int(np.argmax(mine))])
    p = r.producers.get(pid)
    if p is None or not p.sequences_known:
        return 0
    control = runs.control[sl]
    data = mine & ~control
    ok = (
        (runs.stateless[sl] | (mine & (runs.pid[sl] == pid) & (runs.epoch[sl] == p.epoch)))
        & runs.ts_known[sl] & (runs.base[sl] >= r.cleaned_upto)
        & (~data | runs.transactional[sl]) & (~(mine & control) | runs.marker[sl])
    )  # fmt: skip
    n = int(np.argmin(ok)) if not ok.all() else b - a
    if n == 0:
        return 0
    n = min(n, _keeps_rules(r, p, runs, a, a + n))
    if n == 0:
        return 0
    _apply(r, pid, p, runs, a, a + n)
    return n


def _keeps_rules(r: PartitionReplay, p, runs: Runs, a: int, b: int) -> int:
    """How many batches from ``a`` (all of one producer's shape, up to ``b``) keep the rules
    that depend on what came before them: no hole, continuing sequences, nothing cleaned or
    lost behind them, no expiry, coordinator epochs not going back."""
    bad = np.zeros(b - a, bool)
    base, last = runs.base[a:b], runs.last[a:b]
    ends = np.maximum.accumulate(last + 1)
    if r.log_start is not None:
        bad |= base > np.maximum(np.concatenate(([r.log_end], ends[:-1])), r.log_end)
    else:
        bad[1:] |= base[1:] > ends[:-1]
    mine = runs.producer[a:b]
    data = np.flatnonzero(mine & ~runs.control[a:b])
    if len(data):
        first, lastseq = runs.first_seq[a:b][data], runs.last_seq[a:b][data]
        # where the broker checks sequences (10.2): not in the coordinators' own topics (their
        # transactional offset commits carry none), not for a batch without one
        checked = (first != NO_SEQUENCE) & (not r.coordinator_topic)
        expected = np.empty(len(data), np.int64)
        expected[0] = next_sequence(p.batches[-1][1]) if p.batches else 0
        expected[1:] = next_sequence(lastseq[:-1])
        unseen = max(r.cleaned_upto, r.hole_end)
        behind = np.empty(len(data), np.int64)  # the last offset of each one's previous batch
        behind[0] = p.batches[-1][2] if p.batches else unseen
        behind[1:] = last[data][:-1]
        bad[data] |= checked & (
            (first != expected) | (first < 0) | (lastseq < first) | (lastseq >= MAX_SEQUENCE)
            | (behind < unseen)
        )  # fmt: skip
        at = np.flatnonzero(checked)[:1]
        if len(at) and first[at[0]] <= p.recent.highest:  # may repeat a recent range
            bad[data[at[0]]] = True  # (checked sequences only rise from there)
    rows = np.flatnonzero(mine)
    ts = runs.ts[a:b][rows]
    before = np.concatenate(([p.last_timestamp], ts[:-1]))
    gone = expired(before, ts, r.config.producer_id_expiration_ms) & ~runs.control[a:b][rows]
    bad[rows[gone]] = True
    markers = np.flatnonzero(runs.marker[a:b])
    if len(markers):
        coord = runs.coord[a:b][markers]
        held = np.maximum.accumulate(np.concatenate(([p.coordinator_epoch], coord)))[:-1]
        bad[markers[coord < held]] = True
    return int(np.argmax(bad)) if bad.any() else b - a


def _apply(r: PartitionReplay, pid: int, p, runs: Runs, a: int, b: int) -> None:
    """The state, rows and order :meth:`PartitionReplay.batch` gives for batches ``a``..``b``,
    which :func:`_keeps_rules` found in shape."""
    base, last, ts = runs.base[a:b], runs.last[a:b], runs.ts[a:b]
    counted = np.where(runs.control[a:b], 0, runs.records[a:b])  # data records, everyone's
    records_after = r.data_records + np.cumsum(counted)
    log_end = np.maximum(r.log_end, np.maximum.accumulate(last + 1))
    mine = np.flatnonzero(runs.producer[a:b])  # this producer's batches; the rest stateless
    if len(mine):
        _producer_stretch(r, pid, p, runs, a, b, mine, records_after, log_end)
    # the partition's
    if r.log_start is None:
        r.log_start = int(base[0])
    r.log_end = int(log_end[-1])
    r.last_timestamp = max(r.last_timestamp, int(ts.max()))
    r.last_batch_timestamp = int(ts[-1])
    r.data_records = int(records_after[-1])


def _producer_stretch(r, pid, p, runs, a, b, mine, records_after, log_end) -> None:
    """The producer's part of :func:`_apply`: its transactions closed and opened, the LSO
    changes, the bound on everyone else's open transactions, its state at the end."""
    base, last, ts = runs.base[a:b], runs.last[a:b], runs.ts[a:b]
    records = runs.records[a:b]
    is_marker = runs.control[a:b][mine]
    # whether a transaction is open before each of its batches: after a data batch, yes; after
    # a marker, no; before the first, as the state holds
    open_before = np.concatenate(([p.txn is not None], ~is_marker[:-1]))
    opens = ~is_marker & ~open_before
    closes = is_marker & open_before
    # every transaction of the stretch: 0 the one open before it (if any), then one per opening
    label = np.cumsum(opens)
    carried = p.txn
    data_rows = np.flatnonzero(~is_marker)
    label_of_data = label[data_rows]
    n_txn = int(label[-1]) + 1 if len(label) else 1
    txn_records = np.bincount(label_of_data, weights=records[mine][data_rows], minlength=n_txn)
    txn_records = txn_records.astype(np.int64)
    txn_batches = np.bincount(label_of_data, minlength=n_txn).astype(np.int64)
    at = np.searchsorted(label_of_data, np.arange(n_txn), "right") - 1  # last data of each
    txn_last = np.full(n_txn, -1, np.int64)
    txn_last[at >= 0] = last[mine][data_rows][at[at >= 0]]
    open_rows = mine[opens]  # stretch row opening each transaction 1..
    txn_first = np.concatenate(([carried["first_offset"] if carried else -1], base[open_rows]))
    txn_first_ts = np.concatenate(([carried["first_timestamp"] if carried else -1], ts[open_rows]))
    if carried is not None:
        txn_records[0] += carried["record_count"]
        txn_batches[0] += carried["batches"]
        if not txn_batches[0] - carried["batches"]:  # no data of it in the stretch
            txn_last[0] = carried["last_offset"]
    others = [q.txn["first_offset"] for k, q in r.producers.items() if k != pid and q.txn]
    others_first = min(others) if others else None
    _emit_closed(r, pid, p, runs, a, mine, closes, is_marker, label, carried,
                 (txn_first, txn_last, txn_records, txn_batches, txn_first_ts))  # fmt: skip
    _emit_lso(r, mine, opens, closes, base, ts, log_end, others_first)
    _bound_others(r, pid, p, runs.coord[a:b], mine[is_marker], ts)
    # the producer's state after its last batch of the stretch
    if len(data_rows):
        rows = mine[data_rows]
        first_seq, last_seq = runs.first_seq[a:b][rows], runs.last_seq[a:b][rows]
        for i in range(max(0, len(rows) - NUM_BATCHES_TO_RETAIN), len(rows)):
            j = int(rows[i])
            p.batches.append(batch_entry(int(first_seq[i]), int(last_seq[i]), int(base[j]),
                                         int(last[j]), int(ts[j])))  # fmt: skip
        keep = slice(max(0, len(rows) - RECENT_RANGES), len(rows))
        p.recent.add_all(first_seq[keep].tolist(), last_seq[keep].tolist(),
                         base[rows[keep]].tolist())  # fmt: skip
    p.last_timestamp = int(ts[mine[-1]])
    if is_marker[-1]:
        p.txn = None
    else:
        k = int(label[-1])
        if k == 0:  # the one it held goes on
            carried["last_offset"] = int(txn_last[0])
            carried["record_count"] = int(txn_records[0])
            carried["batches"] = int(txn_batches[0])
        else:
            j = int(open_rows[k - 1])
            p.txn = {
                "producer_epoch": p.epoch,
                "first_offset": int(base[j]),
                "last_offset": int(txn_last[k]),
                "record_count": int(txn_records[k]),
                "batches": int(txn_batches[k]),
                "first_timestamp": int(ts[j]),
                "records_before": int(records_after[j] - records[j]),
                "bound_timestamp": None,
            }


def _emit_lso(r, mine, opens, closes, base, ts, log_end, others_first) -> None:
    """The LSO at every opening and closing of the producer's transactions in the stretch
    (10.6), as PartitionReplay._lso_changed gives it; ``others_first``: the first offset of
    everyone else's open transactions."""
    events = np.flatnonzero(opens | closes)
    if not len(events):
        return
    rows = mine[events]
    ends = log_end[rows]
    if others_first is None:
        lso = np.where(opens[events], base[rows], ends)
    else:
        lso = np.where(opens[events], np.minimum(base[rows], others_first), others_first)
    r.emit_columns("lso", LSO_COLUMNS, {
        "topic": _same(r.topic, len(rows)), "partition": _same(r.partition, len(rows)),
        "timestamp": ts[rows], "log_end_offset": ends, "lso": lso,
    })  # fmt: skip


def _bound_others(r, pid, p, coord, marker_rows, ts) -> None:
    """The producer's markers (``marker_rows`` of the stretch) bound the append time of
    everyone else's open transactions (their first marker); its coordinator epoch is the
    highest its markers carry (``coord``: the stretch's)."""
    if not len(marker_rows):
        return
    r.last_marker_timestamp = int(ts[marker_rows[-1]])
    first_marker = int(ts[marker_rows[0]])
    for k, q in r.producers.items():
        if k != pid and q.txn is not None and q.txn.get("bound_timestamp") is None:
            q.txn["bound_timestamp"] = first_marker
    p.coordinator_epoch = max(p.coordinator_epoch, int(coord[marker_rows].max()))


def _emit_closed(r, pid, p, runs, a, mine, closes, is_marker, label, carried, txns) -> None:
    """The transaction rows of the stretch's markers, in their order: the transaction each
    closed, or a marker without data (PartitionReplay._marker)."""
    markers = np.flatnonzero(is_marker)
    if not len(markers):
        return
    txn_first, txn_last, txn_records, txn_batches, txn_first_ts = txns
    rows = mine[markers]
    closing = closes[markers]
    k = label[markers]
    n = len(rows)
    outcome = np.where(runs.commit[a + rows], "COMMIT", "ABORT")
    carried_epoch = carried["producer_epoch"] if carried else p.epoch
    epoch = np.where(closing & (k == 0), carried_epoch, p.epoch)
    first = np.where(closing, txn_first[k], -1)
    in_cleaned = np.where(closing, first < r.cleaned_upto, runs.base[a + rows] < r.cleaned_upto)
    first_ts = np.where(closing, txn_first_ts[k], -1)
    none = ~closing
    columns = {
        "topic": _same(r.topic, n),
        "partition": _same(r.partition, n),
        "producer_id": _same(pid, n),
        "producer_epoch": epoch,
        "marker_epoch": _same(p.epoch, n),
        "first_offset": pa.array(first, pa.int64(), mask=none),
        "last_offset": pa.array(np.where(closing, txn_last[k], -1), pa.int64(), mask=none),
        "marker_offset": runs.base[a + rows],
        "outcome": outcome,
        "record_count": np.where(closing, txn_records[k], 0),
        "batch_count": np.where(closing, txn_batches[k], 0),
        "first_timestamp": pa.array(first_ts, pa.int64(), mask=none),
        "marker_timestamp": runs.ts[a + rows],
        "coordinator_epoch": runs.coord[a + rows],
        "pinned_records": pa.nulls(n, pa.int64()),
        "in_cleaned_range": in_cleaned,
    }
    r.emit_columns("transaction", CLOSED_COLUMNS, columns)
    aborted = np.flatnonzero(closing & ~runs.commit[a + rows] & (columns["record_count"] > 0)
                             & ~in_cleaned)  # fmt: skip
    if len(aborted):
        files = (
            runs.table.column("file").take(pa.array(a + rows[aborted])).to_pylist()
            if "file" in runs.table.column_names
            else [None] * len(aborted)
        )
        for i, f in zip(aborted.tolist(), files, strict=True):
            r.aborted.append((pid, int(first[i]), int(runs.base[a + rows[i]]), f))


def _same(value, n: int) -> pa.Array:
    return pa.repeat(value, n)
