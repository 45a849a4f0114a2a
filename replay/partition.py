"""Replay one partition's batches the way its leader appended them.

Producer state follows ProducerAppendInfo (docs/formats.md 10.1-10.4): per producer id the
epoch, the last five batches of that epoch, the coordinator epoch and the open transaction.
Transactions are tracked as the broker tracks them (10.5) to give the `transactions` table, the
aborted-transaction index (9.3) and the last stable offset over time (10.6). Pure Python over
Arrow: no Spark here; :mod:`replay.plan` runs it per partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders.constants import (
    CONSUMER_OFFSETS_TOPIC,
    MAX_SEQUENCE,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    TRANSACTION_STATE_TOPIC,
)
from replay.config import default
from replay.findings import finding
from replay.partition_runs import (
    FIRST_WINDOW,
    LAST_WINDOW,
    Runs,
    apply_transactional,
    flags,
)
from replay.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    RECENT_RANGES,
    Producer,
    batch_entry,
    expired,
    keeps_producer_state,
    next_sequence,
)
from replay.tables import BLOCK_ROWS, emit_rows

COORDINATOR_TOPICS = {CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC}

BATCH_COLUMNS = (
    "topic", "partition", "base_offset", "last_offset", "producer_id", "producer_epoch",
    "base_sequence", "last_sequence", "record_count", "is_transactional", "is_control",
    "control_type", "coordinator_epoch", "max_timestamp", "magic", "crc_valid",
    "has_delete_horizon", "file", "position", "crc",
)  # fmt: skip


# (highest offset, file, position, base offset, stored CRC) of the batch that reaches it
Highest = tuple[int, str | None, int | None, int | None, int | None]

# the fields of the batch reaching the highest offset that the replay keeps (replay.carried)
HIGHEST_FIELDS = ("file", "position", "base_offset", "crc")
OVERLAPS_REPORTED = 20  # offset_overlap findings per partition; the rest only counted


def segment_of(path: str | None) -> int | str | None:
    """A segment's base offset from its file's name (else the name): the same in every copy."""
    if path is None:
        return None
    stem = path.rsplit("/", 1)[-1].split(".")[0]
    return int(stem) if stem.isdigit() else stem


def cleaner_leftovers_end(t: pa.Table | pa.RecordBatch) -> int:
    """One past the last offset of the batches only the log cleaner leaves (3.7, 3.8): empty
    batches, delete horizons, data batches with fewer records than offsets (format v2 only);
    0 when there are none. Over several pieces of a log: the largest of theirs."""
    known = np.ones(t.num_rows, bool)  # a row with a null number is no leftover
    numbers = []
    for name in ("magic", "base_offset", "last_offset", "record_count"):
        c = t.column(name)
        if c.null_count:  # none in a decoded batch's numbers: numpy over them as they are
            known &= flags(pc.is_valid(c))
            c = pc.fill_null(c.cast(pa.int64()), 0)
        numbers.append(c.to_numpy())
    magic, base, last, count = numbers
    horizon = None
    if "has_delete_horizon" in t.schema.names:
        horizon = flags(t.column("has_delete_horizon"))
    return leftovers_end(magic, base, last, count, flags(t.column("is_control")), horizon, known)


def leftovers_end(magic: np.ndarray, base: np.ndarray, last: np.ndarray, count: np.ndarray,
                  control: np.ndarray, horizon: np.ndarray | None = None,
                  known: np.ndarray | None = None) -> int:  # fmt: skip
    """:func:`cleaner_leftovers_end` over the batches' numbers (``known``: the rows whose
    numbers are all there, default every row)."""
    short = (count < last - base + 1) & ~control
    if horizon is not None:
        short |= horizon
    leftover = (magic >= 2) & short
    if known is not None:
        leftover &= known
    last = last[leftover]
    return int(last.max()) + 1 if last.size else 0


def _whole_offsets(t: pa.Table) -> bool:
    """Whether every batch of ``t`` has its base and last offset (as decoded ones do)."""
    return not (t.column("base_offset").null_count or t.column("last_offset").null_count)


def _from_segments(files: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Which rows come from a `.log` file (a null file: yes); of a dictionary-encoded column
    (the replay holds it so), each distinct name looked at once."""
    chunks = files.chunks if isinstance(files, pa.ChunkedArray) else [files]
    parts = []
    for c in chunks:
        if pa.types.is_dictionary(c.type) and not c.indices.null_count:
            names = c.dictionary.to_pylist()
            logs = np.array([n is None or n.endswith(".log") for n in names], bool)
            parts.append(logs[c.indices.to_numpy()])
        else:
            ends = pc.fill_null(pc.ends_with(c.cast(pa.string()), ".log"), True)
            parts.append(ends.to_numpy(zero_copy_only=False))
    return np.concatenate(parts) if parts else np.zeros(0, bool)


@dataclass
class Config:
    # producer.id.expiration.ms of the brokers (audit.producer_id_expiration_ms)
    producer_id_expiration_ms: int = field(
        default_factory=lambda: default("audit.producer_id_expiration_ms")
    )


def _ms(v) -> int:
    return -1 if v is None else int(v)


def _replay_columns(batches: pa.Table) -> pa.Table:
    """The columns the replay reads, timestamps as epoch milliseconds (int64: garbage ones do
    not fit datetime)."""
    have = set(batches.schema.names)  # (each .names is a fresh list)
    names = [c for c in BATCH_COLUMNS if c in have]
    t = batches.select(names)
    for c in names:
        if pa.types.is_timestamp(t.schema.field(c).type):
            t = t.set_column(t.schema.get_field_index(c), c, t.column(c).cast(pa.int64()))
    return t


class PartitionReplay:
    """Feed a partition's batches in offset order; read findings, transactions, LSO changes and
    the producer states at the end."""

    # runs of plain batches and one producer's transactional stretches applied at once
    # (replay.partition_runs); off, every batch goes through batch() (the tests compare both)
    fast = True
    # pieces of fewer batches than this go one by one: the runs' columns cost more to set up
    # than they save on a few batches (a quiet partition's 8 replay in half the time one by
    # one; the two meet between 128 and 256 batches). The tests set it to 0 to compare both.
    small_piece = 64

    def __init__(
        self,
        topic: str,
        partition: int,
        config: Config | None = None,
        cleaned_upto: int = 0,
        emit: Callable[[str, dict], None] | None = None,
        emit_table: Callable[[str, pa.Table], None] | None = None,
    ) -> None:
        self.topic, self.partition = topic, partition
        self.config = config or Config()
        self.coordinator_topic = topic in COORDINATOR_TOPICS
        self.producers: dict[int, Producer] = {}
        # closed transactions, LSO changes and findings leave through ``emit`` as they happen
        # (kind "transaction", "lso", "finding"): a partition's history is not held; without
        # it they are kept in these lists
        self.findings: list[dict] = []
        self.transactions: list[dict] = []
        self.lso_changes: list[dict] = []
        self.emit = emit or self._keep
        # rows of one kind at once, from stretches applied over columns (replay.partition_runs);
        # without it they go through ``emit`` a row at a time
        self.emit_table = emit_table
        # the ABORTs that closed data outside the cleaned range, for the aborted-transaction
        # index (9.3): (producer id, first offset, marker offset, the marker's log file)
        self.aborted: list[tuple[int, int, int, str | None]] = []
        self.log_start = None
        self.log_end = 0
        self.last_timestamp = -1
        self.data_records = 0
        self.cleaned_upto = cleaned_upto  # below: cleaned (checkpoint or leftovers seen)
        self.hole_end = 0  # first offset after the latest run of missing offsets
        self.last_marker_timestamp: int | None = None  # the leader's clock
        self.last_batch_timestamp: int | None = None  # of the last batch in offset order
        self.snapshot_states: dict[int, dict[int, dict]] = {}
        # producer batches whose sequences were judged, and those in the cleaned range (the
        # coverage's "sequences" family); the coordinators' own topics are not counted
        self.sequence_batches = [0, 0]
        # markers inside the cleaned range: without data (the cleaner removed their
        # transaction's records), and with a delete horizon (so without data too: a later pass
        # removes them); the
        # coverage's "transactions" family counts them as judged by what the cleaner left
        self.cleaned_markers = [0, 0]
        # the earliest timestamp of the log's first segment (its earliest batches), and that
        # segment's base offset (the first batches' file name: a later run's copy of the log
        # names it alike, whatever its path)
        self.first_timestamp: int | None = None
        self.first_segment: int | str | None = None
        # the highest offset of the CRC-valid batches so far (in offset order), and the batch
        # that reaches it: its file, position, base offset and stored CRC (where a later run
        # goes on from: replay.carried)
        self.highest: Highest = (-1, None, None, None, None)
        self.overlaps = 0  # batches reusing offsets a batch before them holds
        # batches the next producer stretch is first tried with (_transactional): where the
        # last try applied all of its window, the next stretch starts from its doubled size (a
        # long-lived producer's stretches, one or two a piece, each from 64 batches up, were ten
        # tries a piece, each handing its rows on as tables of their own)
        self.window = FIRST_WINDOW

    # -- the walk ---------------------------------------------------------------------------------
    def seed(self, entries: list[dict]) -> None:
        """Start from a producer snapshot, as the broker does when it loads a log whose older
        segments are gone (ProducerStateManager.loadFromSnapshot): epoch, last batch, coordinator
        epoch and open transaction per producer."""
        for e in entries:
            p = self.producers[e["producer_id"]] = Producer(
                epoch=e["producer_epoch"],
                coordinator_epoch=e["coordinator_epoch"],
                last_timestamp=e.get("timestamp") or -1,
            )
            if e["last_sequence"] >= 0:
                first = e["last_sequence"] - e.get("offset_delta", 0)
                p.batches.append(
                    (first, e["last_sequence"], e["last_offset"], e.get("offset_delta", 0), -1)
                )
            if e["current_txn_first_offset"] >= 0:
                p.txn = {
                    "producer_epoch": e["producer_epoch"],
                    "first_offset": e["current_txn_first_offset"],
                    "last_offset": e["current_txn_first_offset"],
                    "record_count": 0,
                    "batches": 0,
                    "first_timestamp": -1,
                    "records_before": 0,
                }

    def run(
        self, batches: pa.Table, snapshot_offsets: list[int] = (), seed: list[dict] | None = None
    ) -> PartitionReplay:
        """Replay a partition's batches in any order (sorted here by base offset, stably)."""
        t = _replay_columns(batches)
        t = t.take(pc.sort_indices(t, [("base_offset", "ascending")]))  # stable, as sorted()
        # where the cleaner has been, before judging anything (10.8), over whole columns
        self.cleaned_upto = max(self.cleaned_upto, cleaner_leftovers_end(t))
        return self.run_in_order([t], snapshot_offsets, seed)

    def run_in_order(
        self,
        pieces: Iterable[pa.Table],
        snapshot_offsets: list[int] = (),
        seed: list[dict] | None = None,
    ) -> PartitionReplay:
        """Replay a partition's batches given as consecutive pieces already in offset order
        (what sorting them all would give), one piece at a time: what the replay holds is a
        piece and the producers' state, not the partition. ``cleaned_upto`` must already
        cover the cleaner's leftovers of every piece (:func:`cleaner_leftovers_end`). A piece
        is a table, or a few batches as a replica holds them (``num_rows``, ``rows()`` as
        :meth:`_few` reads them, ``table()``: :class:`replay.replicas.HeldHeaders`)."""
        if seed:
            self.seed(seed)
        pending = sorted(snapshot_offsets)
        for piece in pieces:
            if not isinstance(piece, pa.Table):  # a few batches held as they were decoded
                if self.fast and piece.num_rows < self.small_piece:  # (replicas.HeldHeaders)
                    self._few(piece.rows(), True, pending)
                    continue
                piece = piece.table()
            t = _replay_columns(piece)
            if self.fast and t.num_rows < self.small_piece and _whole_offsets(t):
                self._few(t.to_pylist(), "file" in t.column_names, pending)
                continue
            self._count_sequences(t)
            self._overlapping(t)
            if not self.fast or t.num_rows < self.small_piece:
                self._one_by_one(t, pending)
                continue
            runs = Runs(t, self.config.producer_id_expiration_ms)
            for start, stop, producer in runs.stretches():
                if producer is not None:  # one producer's transactions, stretches at a time
                    self._transactional(runs, start, stop, t, pending)
                    continue
                for s, e, plain in runs.blocks(start, stop):
                    if plain:  # continuations of idempotent writes: whole runs at a time
                        self._plain_run(runs, s, e, t, pending)
                    else:
                        self._one_by_one(t.slice(s, e - s), pending)
        for s in pending:
            self.snapshot_states[s] = self.states()
        return self

    def _overlapping(self, t: pa.Table) -> None:
        """Batches whose offsets a batch before them already holds (in offset order, so also
        batches that go backwards in the file): a log assigns each offset once
        (``UnifiedLog.append`` validates offsets against the log end). Duplicate offsets after a
        failed `.txnindex` append are one known cause (KAFKA-7866). At most
        :data:`OVERLAPS_REPORTED` per partition are findings; all are counted."""
        if not t.num_rows:
            return
        crc = t.column("crc_valid")
        if crc.null_count:
            crc = pc.fill_null(crc, True)  # not checked
        valid = crc.to_numpy(zero_copy_only=False)
        if "file" in t.column_names:  # segments only: a KRaft snapshot's batches repeat them
            valid = valid & _from_segments(t.column("file"))
        rows = np.flatnonzero(valid)
        if not len(rows):
            return
        base = t.column("base_offset").to_numpy()[rows]
        last = t.column("last_offset").to_numpy()[rows]
        reach = np.maximum.accumulate(np.maximum(last, base))
        before = np.concatenate(([self.highest[0]], np.maximum(reach[:-1], self.highest[0])))
        bad = np.flatnonzero(base <= before).tolist()
        if bad:
            self._report_overlaps(lambda i: t.slice(int(rows[i]), 1).to_pylist()[0],
                                  [(i, int(before[i])) for i in bad])  # fmt: skip
        top = int(np.argmax(np.maximum(last, base)))
        if int(reach[-1]) > self.highest[0]:
            i = int(rows[top])  # the row's fields it keeps, not the whole row (~20 columns)
            have = set(t.column_names)
            r = {c: t.column(c)[i].as_py() for c in HIGHEST_FIELDS if c in have}
            self._reaches(int(reach[-1]), r)

    def _reaches(self, offset: int, r: dict) -> None:
        """The highest offset so far is ``offset``, reached by batch ``r`` (of its fields,
        those of :data:`HIGHEST_FIELDS` that its rows have)."""
        self.highest = (offset, r.get("file"), r.get("position"), r["base_offset"], r.get("crc"))

    def _few(self, rows: list[dict], from_files: bool, pending: list[int]) -> None:
        """A piece of a few batches (fewer than :attr:`small_piece`, every base and last
        offset known) as rows: what :meth:`_count_sequences`, :meth:`_overlapping` and
        :meth:`_one_by_one` do over its columns, in that order, over its rows (a quiet
        partition's eight batches cost more in numpy and Arrow calls than in Python)."""
        if not rows:
            return
        self._first_timestamp_of(
            segment_of(rows[0]["file"]) if from_files else None,
            [r["max_timestamp"] for r in rows],
        )
        if not self.coordinator_topic:
            producer = [r for r in rows if (r["producer_id"] is not None
                                            and r["producer_id"] >= 0 and not r["is_control"])]  # fmt: skip
            cleaned = sum(r["base_offset"] < self.cleaned_upto for r in producer)
            self.sequence_batches[0] += len(producer) - cleaned
            self.sequence_batches[1] += cleaned
        # as _overlapping: the CRC-valid batches of segments (a null CRC check: not checked)
        valid = [r for r in rows if r["crc_valid"] is not False and not (
            from_files and r["file"] is not None and not r["file"].endswith(".log"))]  # fmt: skip
        if valid:
            floor = self.highest[0]
            reach, top, bad = None, 0, []
            for k, r in enumerate(valid):
                before = floor if reach is None else max(reach, floor)
                if r["base_offset"] <= before:
                    bad.append((k, before))
                end = max(r["last_offset"], r["base_offset"])
                if reach is None or end > reach:
                    reach, top = end, k
            if bad:
                self._report_overlaps(valid.__getitem__, bad)
            if reach > floor:
                self._reaches(reach, {c: valid[top][c] for c in HIGHEST_FIELDS
                                      if c in valid[top]})  # fmt: skip
        self._each(rows, pending)

    def _report_overlaps(self, batch_at: Callable[[int], dict], bad: list[tuple[int, int]]
                         ) -> None:  # fmt: skip
        """Overlapping batches, each (where it is, the offset the batches before it hold up
        to), ``batch_at`` giving a batch's row by where it is."""
        for i, held in bad:
            self.overlaps += 1
            if self.overlaps > OVERLAPS_REPORTED:
                continue
            b = batch_at(i)
            self.emit(
                "finding",
                finding(
                    "offset_overlap",
                    f"batch at offsets {b['base_offset']}..{b['last_offset']} reuses offsets up "
                    f"to {held} that batches before it in the log already hold",
                    {**self._evidence(b), "offsets_held_up_to": held},
                    **self._where(b["producer_id"], b),
                ),
            )

    def _first_timestamp(self, t: pa.Table) -> None:
        """The first segment's earliest timestamp, over the pieces of that segment (a piece
        is one file's batches: the first segment read whole, or in several runs)."""
        segment = None
        if "file" in t.column_names:
            segment = segment_of(t.column("file")[0].as_py())
        if not self._in_first_segment(segment):
            return
        ts = t.column("max_timestamp")  # epoch milliseconds (_replay_columns)
        if ts.null_count:  # no timestamp, as a negative one is (of any type, null's too)
            ts = pc.fill_null(ts.cast(pa.int64()), -1)
        ts = ts.to_numpy()
        ts = ts[ts >= 0]
        self._earliest(int(ts.min()) if ts.size else None)

    def _first_timestamp_of(self, segment: int | str | None, stamps: list) -> None:
        """:meth:`_first_timestamp` of a piece given as its segment and its batches' max
        timestamps (epoch milliseconds or None)."""
        if self._in_first_segment(segment):
            self._earliest(min((s for s in stamps if s is not None and s >= 0), default=None))

    def _in_first_segment(self, segment: int | str | None) -> bool:
        """Whether a piece of ``segment`` is of the log's first segment (the first piece's)."""
        if self.first_timestamp is None and self.first_segment is None:
            self.first_segment = segment
            return True
        return segment is not None and segment == self.first_segment

    def _earliest(self, low: int | None) -> None:
        if low is not None and (self.first_timestamp is None or low < self.first_timestamp):
            self.first_timestamp = low

    def _count_sequences(self, t: pa.Table) -> None:
        if t.num_rows:
            self._first_timestamp(t)
        if self.coordinator_topic or not t.num_rows:
            return
        pid, control = t.column("producer_id").to_numpy(), t.column("is_control").to_numpy()
        producer = (pid >= 0) & ~control
        cleaned = producer & (t.column("base_offset").to_numpy() < self.cleaned_upto)
        self.sequence_batches[0] += int(producer.sum() - cleaned.sum())
        self.sequence_batches[1] += int(cleaned.sum())

    def _one_by_one(self, t: pa.Table, pending: list[int]) -> None:
        """Each batch of ``t`` through :meth:`batch`; the producer states at the snapshot
        offsets passed on the way. A slice at a time: Python objects for BLOCK_ROWS batches, not
        for the whole partition."""
        for chunk in t.to_batches(max_chunksize=BLOCK_ROWS):
            self._each(chunk.to_pylist(), pending)

    def _each(self, rows: list[dict], pending: list[int]) -> None:
        """Each batch row through :meth:`batch`, the producer states taken at the snapshot
        offsets passed on the way."""
        for b in rows:
            while pending and b["base_offset"] >= pending[0]:
                self.snapshot_states[pending.pop(0)] = self.states()
            self.batch(b)

    def _transactional(self, runs: Runs, start: int, stop: int, t: pa.Table, pending: list[int]):
        """Batches ``start``..``stop``, one producer's stretch (:meth:`Runs.stretches`), applied
        a window at a time where they keep to its shape (:func:`apply_transactional`); where one
        does not, it and the plain run it begins (or it alone) go the usual way. Cut at the
        snapshot offsets: the same state either way."""
        a, window, by_one = start, self.window, 1
        while a < stop:
            while pending and runs.base[a] >= pending[0]:
                self.snapshot_states[pending.pop(0)] = self.states()
            b = min(stop, a + window)
            if pending:
                b = min(b, a + int(np.searchsorted(runs.base[a:b], pending[0], "left")))
            done = apply_transactional(self, runs, a, b)
            if a + done == b:
                a, window, by_one = b, min(2 * window, LAST_WINDOW), 1
                self.window = window
                continue
            # a stretch that keeps breaking: each try costs a window's columns, so the tries
            # thin out (batches one by one in between double) until one applies a window
            a, window = a + done, FIRST_WINDOW
            self.window = FIRST_WINDOW
            by_one = 1 if done >= FIRST_WINDOW // 2 else min(2 * by_one, LAST_WINDOW)
            e = min(stop, a + by_one)
            if runs.plain[a] and by_one == 1:
                e = next(stop_ for _s, stop_, _p in runs.blocks(a, stop))
                self._plain_run(runs, a, e, t, pending)
            else:
                self._one_by_one(t.slice(a, e - a), pending)
            a = e

    def emit_columns(self, kind: str, names: Sequence[str], columns: dict) -> None:
        """Rows of one kind given as columns (numpy or Arrow, ``names`` in the order the
        replay's row dicts have them): through ``emit_table`` at once, else row by row."""
        emit_rows(self.emit, self.emit_table, kind, pa.table({c: columns[c] for c in names}))

    def _plain_run(self, runs: Runs, start: int, stop: int, t: pa.Table, pending: list[int]):
        """Batches ``start``..``stop`` are plain continuations (:class:`_Runs`): cut at the
        snapshot offsets, each piece is applied at once where the state it starts from allows
        (:meth:`_skip_ahead`), else one by one: the same state either way."""
        a = start
        while a < stop:
            while pending and runs.base[a] >= pending[0]:
                self.snapshot_states[pending.pop(0)] = self.states()
            b = stop
            if pending:
                b = min(stop, a + int(np.searchsorted(runs.base[a:stop], pending[0], "left")))
            if not self._skip_ahead(runs, a, b):
                self._one_by_one(t.slice(a, b - a), pending)
            a = b

    def _skip_ahead(self, runs: Runs, a: int, b: int) -> bool:
        """Apply plain batches ``a``..``b`` at once, as :meth:`batch` would one by one; False,
        changing nothing, where the state they start from is not the one that makes them plain
        (a producer fenced or in a transaction; a hole in the offsets; a sequence range seen
        before)."""
        base, last = runs.base[a:b], runs.last[a:b]
        ends = np.maximum.accumulate(last + 1)
        if self.log_start is not None:
            reach = np.maximum(np.concatenate(([self.log_end], ends[:-1])), self.log_end)
            if (base > reach).any():
                return False  # a hole: batch() records where it ends
        elif (base[1:] > ends[:-1]).any():
            return False
        stateful = np.flatnonzero(~runs.stateless[a:b])  # the others have no producer state
        pids = runs.pid[a:b][stateful]
        order = stateful[np.argsort(pids, kind="stable")]
        cuts = np.flatnonzero(np.diff(runs.pid[a:b][order])) + 1
        portions = np.split(order, cuts) if len(order) else []
        for idx in portions:
            i = a + int(idx[0])
            # its previous batch was replayed already: appended (then the state's last batch,
            # sequence and timestamp are that batch's, as _Runs requires) unless fenced; a
            # transaction it did not start may still be open
            p = self.producers.get(int(runs.pid[i]))
            if p is None or p.txn is not None or p.epoch != runs.epoch[i] or not p.batches:
                return False
            if runs.first_seq[i] <= p.recent.highest:
                return False  # may repeat a recent range (sequences only rise in a run)
        for idx in portions:
            rows = a + idx
            p = self.producers[int(runs.pid[rows[0]])]
            for i in rows[-NUM_BATCHES_TO_RETAIN:].tolist():
                p.batches.append(
                    batch_entry(int(runs.first_seq[i]), int(runs.last_seq[i]), int(runs.base[i]),
                                int(runs.last[i]), int(runs.ts[i]))
                )  # fmt: skip
            kept = rows[-RECENT_RANGES:]
            p.recent.add_all(runs.first_seq[kept].tolist(), runs.last_seq[kept].tolist(),
                             runs.base[kept].tolist())  # fmt: skip
            p.last_timestamp = int(runs.ts[rows[-1]])
        if self.log_start is None:
            self.log_start = int(base[0])
        self.log_end = max(self.log_end, int(ends[-1]))
        ts = runs.ts[a:b]
        self.last_timestamp = max(self.last_timestamp, int(ts.max()))
        self.last_batch_timestamp = int(ts[-1])
        self.data_records += int(runs.records[a:b].sum())
        return True

    def batch(self, b: dict[str, Any]) -> None:
        if not b.get("crc_valid", True):
            return  # the integrity finding covers it (keeps_producer_state)
        if self.log_start is None:
            self.log_start = b["base_offset"]
        elif b["base_offset"] > self.log_end:
            self.hole_end = b["base_offset"]  # offsets we never saw: cleaned, corrupt or lost
        self.log_end = max(self.log_end, b["last_offset"] + 1)
        ts = _ms(b["max_timestamp"])
        self.last_timestamp = max(self.last_timestamp, ts)
        self.last_batch_timestamp = ts
        if b["is_control"] and b["record_count"]:
            self.last_marker_timestamp = ts
            self._bound_open_transactions(ts)
        pid = b["producer_id"]
        if pid is None or not keeps_producer_state(True, b["magic"], pid):
            self.data_records += 0 if b["is_control"] else b["record_count"]
            return
        if b["is_control"]:
            self._marker(pid, b, ts)
        else:
            self.data_records += b["record_count"]
            self._data(pid, b, ts)

    # -- data batches (10.2) ----------------------------------------------------------------------
    def _data(self, pid: int, b: dict, ts: int) -> None:
        p = self.producers.get(pid)
        expiry = self.config.producer_id_expiration_ms
        if p is not None and p.txn is None and expired(p.last_timestamp, ts, expiry):
            p = None  # 10.3: expired; the next write is from an unknown producer
            del self.producers[pid]
        epoch, first_seq, last_seq = b["producer_epoch"], b["base_sequence"], b["last_sequence"]
        if p is not None and epoch < p.epoch:
            # 10.2 step 2: the leader rejects an older epoch; on disk it is a zombie's write
            self.emit(
                "finding",
                finding(
                    "fenced_epoch_write",
                    f"producer {pid} wrote with epoch {epoch} after epoch {p.epoch}",
                    {**self._evidence(b), "current_epoch": p.epoch},
                    **self._where(pid, b),
                ),
            )
            return  # the leader appended nothing: the state stays as it was
        # KIP-360: a producer without state may start at any sequence; so may one the log
        # showed only markers of (its batches before them are outside the dump: retention,
        # cleaning or a copy that starts there; a broker would know them from its snapshot)
        fresh = p is None or (not p.sequences_known and epoch == p.epoch)
        if p is None:
            p = self.producers[pid] = Producer()
        p.sequences_known = True
        # cleaned batches leave holes in sequences and epochs (10.8): judge only past them
        unseen = max(self.cleaned_upto, self.hole_end)
        cleaned = b["base_offset"] < self.cleaned_upto or (
            p is not None and bool(p.batches) and p.batches[-1][2] < unseen
        )
        if not (self.coordinator_topic or fresh or first_seq == NO_SEQUENCE):
            if cleaned:
                self._check_cleaned_sequence(pid, p, b)
            else:
                self._check_sequence(pid, p, b)
        if epoch != p.epoch:
            p.batches.clear()
            p.recent.clear()
            p.epoch = epoch
        p.batches.append(batch_entry(first_seq, last_seq, b["base_offset"], b["last_offset"], ts))
        p.recent.add(first_seq, last_seq, b["base_offset"])
        p.last_timestamp = ts
        if b["is_transactional"]:
            if p.txn is None:  # 10.2 step 4: a transactional batch starts a transaction
                p.txn = {
                    "producer_epoch": epoch,
                    "first_offset": b["base_offset"],
                    "last_offset": b["last_offset"],
                    "record_count": 0,
                    "batches": 0,
                    "first_timestamp": ts,
                    "records_before": self.data_records - b["record_count"],
                    "bound_timestamp": None,
                }
                self._lso_changed(ts)
            p.txn["last_offset"] = b["last_offset"]
            p.txn["record_count"] += b["record_count"]
            p.txn["batches"] += 1
        elif p.txn is not None:
            self.emit(
                "finding",
                finding(
                    "non_transactional_write_in_txn",
                    f"producer {pid} wrote a non-transactional batch while its transaction "
                    f"from offset {p.txn['first_offset']} was open",
                    {**self._evidence(b), "txn_first_offset": p.txn["first_offset"]},
                    **self._where(pid, b),
                ),
            )

    def _check_cleaned_sequence(self, pid: int, p: Producer, b: dict) -> None:
        """A producer's next surviving batch after offsets the cleaner removed (or the dump
        lost): the cleaner removes records, each with its offset and its sequence number, and
        never renumbers either (LogCleaner, MemoryRecords.filterTo keeps a batch's base
        offset, base sequence and, partly cleaned, its original last offset). So of one
        producer and epoch, the sequences skipped between two surviving batches cannot
        outnumber the offsets between them: ``B2.baseOffset - B1.lastOffset - 1 >=
        B2.baseSequence - B1.lastSequence - 1`` (sequences modulo 2^31). A gap beyond that is
        a `sequence_gap` the cleaning cannot explain; anything else here (a new epoch, a
        sequence going back) is not judged: the cleaned history lacks what would decide it."""
        if b["producer_epoch"] != p.epoch or not p.batches:
            return
        _, last_seq, last_offset, _, _ = p.batches[-1]
        expected = next_sequence(last_seq)
        skipped = (b["base_sequence"] - expected) % (MAX_SEQUENCE + 1)
        removed = b["base_offset"] - last_offset - 1
        if skipped >= (1 << 30) or skipped <= removed:
            return
        self.emit(
            "finding",
            finding(
                "sequence_gap",
                f"producer {pid} epoch {b['producer_epoch']} skipped {skipped} sequence numbers "
                f"(expected {expected}, got {b['base_sequence']}) across only {removed} removed "
                "offsets: more than the log cleaner could have taken",
                {**self._evidence(b), "expected_sequence": expected,
                 "previous_last_offset": last_offset, "offsets_between": removed},
                **self._where(pid, b),
            ),
        )  # fmt: skip

    def _check_sequence(self, pid: int, p: Producer, b: dict) -> None:
        """10.2 steps 1 and 3 (origin CLIENT)."""
        epoch, first_seq, last_seq = b["producer_epoch"], b["base_sequence"], b["last_sequence"]
        if epoch != p.epoch:
            if first_seq != 0 and p.epoch != NO_PRODUCER_EPOCH:
                self.emit(
                    "finding",
                    finding(
                        "invalid_epoch_start",
                        f"producer {pid} started epoch {epoch} at sequence {first_seq}, not 0",
                        {**self._evidence(b), "previous_epoch": p.epoch},
                        **self._where(pid, b),
                    ),
                )
            return
        original = p.recent.get(first_seq, last_seq)
        if original is not None:
            self.emit(
                "finding",
                finding(
                    "duplicate_sequence",
                    f"producer {pid} epoch {epoch} wrote sequences {first_seq}..{last_seq} "
                    f"again (first at offset {original})",
                    {**self._evidence(b), "original_offset": original},
                    **self._where(pid, b),
                ),
            )
            return
        expected = next_sequence(p.batches[-1][1]) if p.batches else 0
        if first_seq == expected:
            return
        gap = (first_seq - expected) % (MAX_SEQUENCE + 1)
        kind = "sequence_gap" if gap < (1 << 30) else "out_of_order_sequence"
        what = (
            f"skipped {gap} sequence numbers"
            if kind == "sequence_gap"
            else f"went back to sequence {first_seq}"
        )
        self.emit(
            "finding",
            finding(
                kind,
                f"producer {pid} epoch {epoch} {what}: expected {expected}, got {first_seq}",
                {**self._evidence(b), "expected_sequence": expected},
                **self._where(pid, b),
            ),
        )

    # -- markers (10.4) ---------------------------------------------------------------------------
    def _marker(self, pid: int, b: dict, ts: int) -> None:
        if b["record_count"] == 0 or b["control_type"] not in ("COMMIT", "ABORT"):
            return  # a cleaned (empty) control batch is ignored
        p = self.producers.get(pid)
        if p is None:
            p = self.producers[pid] = Producer(sequences_known=False)
        if b["base_offset"] < self.cleaned_upto:  # each counted once: a horizon means no data
            horizon = bool(b.get("has_delete_horizon"))
            self.cleaned_markers[1 if horizon else 0] += horizon or p.txn is None
        epoch, coord = b["producer_epoch"], b["coordinator_epoch"]
        common = self._where(pid, b)
        if coord is not None and coord < p.coordinator_epoch:
            self.emit(
                "finding",
                finding(
                    "fenced_epoch_write",
                    f"marker of producer {pid} from coordinator epoch {coord} after "
                    f"{p.coordinator_epoch}: a zombie transaction coordinator",
                    {**self._evidence(b), "coordinator_epoch_before": p.coordinator_epoch},
                    **common,
                ),
            )
        if p.txn is not None:
            t = p.txn
            self._closed(
                {
                    "topic": self.topic,
                    "partition": self.partition,
                    "producer_id": pid,
                    "producer_epoch": t["producer_epoch"],
                    "marker_epoch": epoch,
                    "first_offset": t["first_offset"],
                    "last_offset": t["last_offset"],
                    "marker_offset": b["base_offset"],
                    "outcome": b["control_type"],
                    "record_count": t["record_count"],
                    "batch_count": t["batches"],
                    "first_timestamp": t["first_timestamp"],
                    "marker_timestamp": ts,
                    "coordinator_epoch": coord,
                    "pinned_records": None,
                    "in_cleaned_range": t["first_offset"] < self.cleaned_upto,
                    "marker_file": b.get("file"),
                }
            )
            p.txn = None
            self._lso_changed(ts)
        else:
            # no open transaction: a partition the coordinator added without data, or a marker
            # written again after a coordinator failover; the coordinator's log decides
            # (replay.crosslog), so it is kept as a transaction without data
            self._closed(
                {
                    "topic": self.topic,
                    "partition": self.partition,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "marker_epoch": epoch,
                    "first_offset": None,
                    "last_offset": None,
                    "marker_offset": b["base_offset"],
                    "outcome": b["control_type"],
                    "record_count": 0,
                    "batch_count": 0,
                    "first_timestamp": None,
                    "marker_timestamp": ts,
                    "coordinator_epoch": coord,
                    "pinned_records": None,
                    "in_cleaned_range": b["base_offset"] < self.cleaned_upto,
                }
            )
        if epoch > p.epoch:
            p.batches.clear()
            p.recent.clear()
        p.epoch = max(p.epoch, epoch)
        p.coordinator_epoch = max(p.coordinator_epoch, coord if coord is not None else -1)
        p.last_timestamp = ts

    def _bound_open_transactions(self, ts: int) -> None:
        """A marker appended after an open transaction's first batch: that batch was appended
        before ``ts`` of the leader's clock (an upper bound for the cross-log checks)."""
        for p in self.producers.values():
            if p.txn is not None and p.txn.get("bound_timestamp") is None:
                p.txn["bound_timestamp"] = ts

    # -- results ----------------------------------------------------------------------------------
    def complete_from(self) -> int:
        """Offsets from here on are all in the dump; 0: the partition's whole history is."""
        return max(self.cleaned_upto, self.hole_end, self.log_start or 0)

    def copy_end_timestamp(self) -> int | None:
        """The latest moment this copy of the log is known to reach (last marker, stamped by
        the leader, or the last batch in offset order)."""
        ts = [t for t in (self.last_marker_timestamp, self.last_batch_timestamp) if t is not None]
        return max(ts) if ts else None

    def lso(self) -> int:
        firsts = [p.txn["first_offset"] for p in self.producers.values() if p.txn]
        return min(firsts, default=self.log_end)

    def _lso_changed(self, ts: int) -> None:
        # every open and close: the LSO value may stay (a transaction opening right at the
        # log end) while whether it lags the log end changes
        self.emit("lso", {"topic": self.topic, "partition": self.partition, "timestamp": ts,
                          "log_end_offset": self.log_end, "lso": self.lso()})  # fmt: skip

    def _keep(self, kind: str, row: dict) -> None:
        {"finding": self.findings, "transaction": self.transactions, "lso": self.lso_changes}[
            kind
        ].append(row)

    def _closed(self, t: dict) -> None:
        """A transaction its marker closed (or a marker without data), out through ``emit``."""
        marker_file = t.pop("marker_file", None)
        if t["outcome"] == "ABORT" and t["record_count"] and not t["in_cleaned_range"]:
            self.aborted.append(
                (t["producer_id"], t["first_offset"], t["marker_offset"], marker_file)
            )
        self.emit("transaction", t)

    def open_transactions(self) -> list[dict]:
        """Transactions without a marker at the end of the log (outcome OPEN), with the data
        records of everyone else that they hold behind the LSO."""
        out = []
        for pid, p in sorted(self.producers.items()):
            if p.txn is None:
                continue
            t = p.txn
            out.append(
                {
                    "topic": self.topic,
                    "partition": self.partition,
                    "producer_id": pid,
                    "producer_epoch": t["producer_epoch"],
                    "marker_epoch": None,
                    "first_offset": t["first_offset"],
                    "last_offset": t["last_offset"],
                    "marker_offset": None,
                    "outcome": "OPEN",
                    "record_count": t["record_count"],
                    "batch_count": t["batches"],
                    "first_timestamp": t["first_timestamp"],
                    "marker_timestamp": None,
                    "coordinator_epoch": None,
                    "pinned_records": self.data_records - t["records_before"] - t["record_count"],
                    "open_ms": self._open_ms(t),
                    "bound_timestamp": t.get("bound_timestamp"),
                    "in_cleaned_range": t["first_offset"] < self.cleaned_upto,
                }
            )
        return out

    def _open_ms(self, t: dict) -> int | None:
        """How long an open transaction has been open at the partition's last timestamp: from
        its first batch's time, or, where that batch is not in the dump (a transaction the
        producer snapshot says was open, its data deleted since), at least from the first
        marker after it (``bound_timestamp``: that batch was appended before it); None where
        neither is known (cannot tell, never judged hanging)."""
        first = t["first_timestamp"]
        if first is not None and first >= 0:
            return self.last_timestamp - first
        bound = t.get("bound_timestamp")
        return None if bound is None else max(0, self.last_timestamp - bound)

    def states(self) -> dict[int, dict]:
        out = {}
        for pid, p in self.producers.items():
            last = p.batches[-1] if p.batches else (NO_SEQUENCE, NO_SEQUENCE, -1, 0, -1)
            out[pid] = {
                "producer_epoch": p.epoch,
                "last_sequence": last[1],
                "last_offset": last[2],
                "offset_delta": last[3],
                "timestamp": p.last_timestamp,
                "coordinator_epoch": p.coordinator_epoch,
                "current_txn_first_offset": p.txn["first_offset"] if p.txn else -1,
            }
        return out

    def _where(self, pid: int, b: dict) -> dict:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "producer_id": pid,
            "producer_epoch": b["producer_epoch"],
            "first_offset": b["base_offset"],
            "last_offset": b["last_offset"],
            "record_count": b["record_count"],
        }

    @staticmethod
    def _evidence(b: dict) -> dict:
        keys = ("file", "position", "base_offset", "last_offset", "producer_id",
                "producer_epoch", "base_sequence", "last_sequence", "record_count",
                "is_transactional", "control_type", "coordinator_epoch", "max_timestamp")  # fmt: skip
        return {k: b.get(k) for k in keys if b.get(k) is not None}
