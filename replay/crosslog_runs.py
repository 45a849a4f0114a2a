"""The cross-log stream made from the scan's own rows in sorted runs, merged in Python.

:mod:`replay.crosslog_stream` judges each producer id from a stream in :data:`STREAM_ORDER`:
what each partition's copy covers, then the coordinator's transactions in its log order, then
each partition's entries in offset order. A Spark plan makes that stream by shuffling and
sorting every row (replay.plan.Audit._cross_log): a Kafka Streams thread's week under one
producer id is millions of rows, each read from Parquet into the JVM, keyed, shuffled, sorted
by one task and converted to Arrow again, where the judgement itself reads the same rows in a
fraction of that (docs/benchmarks.md, "Where a long-lived producer's CPU goes"). Where the
scan's rows are files (the jobs' scratch area), they go another way, in two steps:

1. **Runs** (:class:`RunWriter`): each task reads its share of the scratch files once, a batch
   at a time, keeps the chosen replicas' rows, makes each one's stream row of its kind
   (:func:`txn_rows`, :func:`coord_rows`, :func:`side_rows`) with its place as one byte key
   (:data:`KEY`), and, every :data:`RUN_ROWS` rows (or :data:`RUN_BYTES`) held, writes them
   sorted by that key, a run per kind, bucket after bucket (a bucket: the producer ids one
   judging task reads).
2. **Judgement** (:func:`judge_runs`): each task merges its bucket's runs of each kind
   (:func:`merged`: a heap of the runs' heads, taking from one run every row below the next
   head, a slice at once) and feeds each producer id's rows, kind after kind, to its
   :class:`replay.crosslog_stream.ProducerJudge`, exactly as the sorted stream would. A kind
   of more than :data:`MERGE_FAN_IN` runs is first merged in groups into fewer, longer runs
   (:func:`fanned_in`: an external sort's merge passes).

Memory is bounded by the rows a runs task holds and by one batch of each of at most
:data:`MERGE_FAN_IN` runs of each kind being merged, not by a producer's history. The order
is the stream's: a row's key is its cluster (by rank), producer id, then its partition's rank
among the dump's partitions and
its first offset (an entry; a marker-only one's marker offset), or its log partition and
offset (a coordinator transaction). The rows are the scan's rows as its tables hold them, so
the judgement sees the values the Spark plan's stream carries (tests/test_crosslog_runs.py
compares it with each producer judged whole, tests/test_crosslog_scratch.py with the Spark
plan on every scenario).
"""

from __future__ import annotations

import hashlib
import heapq
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders.constants import TRANSACTION_STATE_TOPIC
from replay import tables as T
from replay.crosslog_stream import (
    COORD,
    CROSSLOG_SCHEMA,
    OUT_ROWS,
    SIDE,
    STREAM_FIELDS,
    TXN,
    ProducerJudge,
    _results,
)
from replay.grouped import Facts
from replay.replicas import ReplicaRow, chosen_replicas, kept_mask
from replay.sides import LISTED, TOUCHED
from replay.tables import CLUSTER, greatest_by, int_column, runs

KINDS = (SIDE, COORD, TXN)  # the order each producer id's rows are fed in
# a row's place in the stream, as big-endian unsigned bytes (each int64 with its sign bit
# flipped), so that byte order is the order of (cluster rank, producer id, rank, position)
KEY = "_key"
KEY_PARTS = 4
KEY_WIDTH = 8 * KEY_PARTS
KEY_TYPE = pa.binary(KEY_WIDTH)
PRODUCER = "_kc"  # the row's cluster rank, beside its producer id
# what a runs task holds before it writes it sorted: rows, or bytes of Arrow (a coordinator
# transaction listing a hundred partitions is a few KB)
RUN_ROWS = 131_072
RUN_BYTES = 48 << 20
BATCH_ROWS = 8_192  # rows of a run read at once when merged
MERGE_FAN_IN = 64  # the runs of a kind a judging task merges at once, at most (fanned_in)
NULL_POSITION = np.iinfo(np.int64).min  # an entry with no offset sorts first, as a null does
# the scratch rows each kind is made of: (scratch table, kinds of rows)
SOURCES = {"replayed": ("transaction", TOUCHED), "coordinated": ("coord_txn", LISTED)}
# each kind's columns in a run (its fields as replay.crosslog_stream names them)
TXN_COLUMNS = ("topic", "partition", *STREAM_FIELDS[TXN].values())
# (and whether the coordinator fenced it: the transactions table's lookup, :data:`IDS`)
COORD_COLUMNS = (*(c for c in STREAM_FIELDS[COORD].values() if c != "copy_end_ts"), "fenced")
SIDE_COLUMNS = ("topic", "partition")
SIDE_FIELDS = ("complete_from", "copy_end_timestamp")


@dataclass(frozen=True)
class StreamFacts:
    """What a task needs to make and judge the stream (pickled into the tasks): the dump's
    clusters and (topic, partition)s in order (a row's ranks), the chosen replicas (which
    rows are kept: replay.replicas.replica_filter) and what each chosen copy covers (its
    ``partitions`` row: the sides, and where each `__transaction_state` copy ends), and the
    number of buckets producer ids are spread over."""

    clusters: tuple[str, ...]
    partitions: tuple[tuple[str, int], ...]
    kept: tuple[tuple[str, ...], bool] | None
    covers: dict[tuple[str, str, int], tuple[int | None, int | None]]
    buckets: int

    @classmethod
    def of(cls, replicas: list[ReplicaRow], kept, buckets: int) -> StreamFacts:
        chosen = chosen_replicas(replicas)
        covers = {
            r.partition_key: (r.complete_from, r.copy_end_timestamp)
            for r in replicas
            if r.key in chosen
        }
        return cls(
            tuple(sorted({r.cluster for r in replicas})),
            tuple(sorted({(r.topic, r.partition) for r in replicas})),
            kept, covers, max(1, buckets),
        )  # fmt: skip

    def cluster_codes(self, clusters) -> np.ndarray:
        codes = pc.index_in(clusters, value_set=pa.array(self.clusters, pa.string()))
        if codes.null_count:  # every row comes from a replica the scan replayed
            raise ValueError("a replayed row of a cluster the scan did not replay")
        return codes.to_numpy(zero_copy_only=False).astype(np.int64)

    @cached_property
    def _names(self) -> pa.Array:
        return pa.array([f"{t}\0{p}" for t, p in self.partitions], pa.string())

    def ranks(self, topics, partitions) -> np.ndarray:
        """Each (topic, partition)'s rank among the dump's. One not among them (none is
        expected: every row comes from a replica the scan replayed) gets a negative rank of
        its own, from a hash of its name: its rows stay together, before the dump's, as the
        Spark plan's sort keeps them (replay.plan._with_sort_keys)."""
        keys = pc.binary_join_element_wise(topics, pc.cast(partitions, pa.string()), "\0")
        at = pc.index_in(keys, value_set=self._names)
        out = pc.fill_null(at, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        if at.null_count:
            for name in pc.unique(keys.filter(pc.is_null(at))).to_pylist():
                digest = hashlib.blake2b(str(name).encode(), digest_size=8).digest()
                code = -1 - (int.from_bytes(digest, "big") & ((1 << 62) - 1))
                out[pc.equal(keys, name).to_numpy(zero_copy_only=False)] = code
        return out

    @cached_property
    def _log_ends(self) -> dict[tuple[int, int], int]:
        return {(self.clusters.index(c), p): end for (c, topic, p), (_, end) in self.covers.items()
                if topic == TRANSACTION_STATE_TOPIC and end is not None}  # fmt: skip

    def log_ends(self, codes: np.ndarray, log_partitions: np.ndarray) -> pa.Array:
        """Where the chosen copy of each (cluster code, `__transaction_state` partition) ends
        (its ``copy_end_timestamp``); null where the dump has none."""
        out = np.zeros(len(codes), np.int64)
        known = np.zeros(len(codes), bool)
        for (code, p), end in self._log_ends.items():
            at = (codes == code) & (log_partitions == p)
            out[at], known[at] = end, True
        return pa.array(out, pa.int64(), mask=~known)

    def buckets_of(self, codes: np.ndarray, pids: np.ndarray) -> np.ndarray:
        return np.mod(np.mod(pids, self.buckets) + codes, self.buckets)


def stream_key(parts: list[np.ndarray]) -> pa.Array:
    """The rows' :data:`KEY` from its int64 parts, most significant first."""
    n = len(parts[0])
    out = np.empty((n, KEY_PARTS), ">u8")
    for i, part in enumerate(parts):
        out[:, i] = part.astype(np.int64).view(np.uint64) ^ np.uint64(1 << 63)
    return pa.FixedSizeBinaryArray.from_buffers(KEY_TYPE, n, [None, pa.py_buffer(out.tobytes())])


def key_bytes(keys: pa.Array) -> np.ndarray:
    """A :data:`KEY` column as numpy fixed-width bytes (no copy), ordered as the keys are."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    data = keys.buffers()[1]
    return np.frombuffer(data, f"S{KEY_WIDTH}", len(keys), keys.offset * KEY_WIDTH)


def _keyed(t: pa.Table, codes: np.ndarray, pids: np.ndarray, rank: np.ndarray,
           position: np.ndarray) -> pa.Table:  # fmt: skip
    t = t.append_column(PRODUCER, pa.array(codes, pa.int64()))
    return t.append_column(KEY, stream_key([codes, pids, rank, position]))


def txn_rows(rows: pa.Table, facts: StreamFacts) -> pa.Table:
    """The stream's entries (TXN) of the scan's ``transaction`` rows."""
    t = rows.select([CLUSTER, "producer_id", *TXN_COLUMNS])
    first, marker = int_column(t, "first_offset"), int_column(t, "marker_offset")
    position = np.where(first >= 0, first, marker)
    position = np.where(position >= 0, position, NULL_POSITION)
    return _keyed(t, facts.cluster_codes(t.column(CLUSTER)), int_column(t, "producer_id"),
                  facts.ranks(t.column("topic"), t.column("partition")), position)  # fmt: skip


def coord_rows(rows: pa.Table, facts: StreamFacts) -> pa.Table:
    """The stream's coordinator transactions (COORD) of the scan's ``coord_txn`` rows, each
    with where its log's copy ends (``copy_end_ts``)."""
    t = rows.select([CLUSTER, "producer_id", *COORD_COLUMNS])
    codes = facts.cluster_codes(t.column(CLUSTER))
    log_partition = pc.fill_null(t.column("log_partition").cast(pa.int64()), 0).to_numpy()
    t = t.append_column("copy_end_ts", facts.log_ends(codes, log_partition))
    offset = pc.fill_null(t.column("first_log_offset").cast(pa.int64()), 0)
    return _keyed(t, codes, int_column(t, "producer_id"), log_partition,
                  offset.to_numpy())  # fmt: skip


def side_rows(rows: pa.Table, facts: StreamFacts) -> pa.Table:
    """The stream's sides (SIDE) of the scan's pairs (replay.sides): what the chosen copy of
    each partition a producer id touched or had listed covers; a pair of a partition the
    dump has no copy of is none. The same pair from several replicas (a partition's and its
    coordinator's) is the same side twice, which the judge takes once."""
    t = rows.select([CLUSTER, "producer_id", *SIDE_COLUMNS])
    covered = [facts.covers.get(k) for k in zip(*(t.column(c).to_pylist()
                                                  for c in (CLUSTER, *SIDE_COLUMNS)),
                                                strict=True)]  # fmt: skip
    has = np.array([c is not None for c in covered], bool)
    if not has.all():
        t = t.filter(pa.array(has))
        covered = [c for c in covered if c is not None]
    for i, name in enumerate(SIDE_FIELDS):
        t = t.append_column(name, pa.array([c[i] for c in covered], pa.int64()))
    zeros = np.zeros(t.num_rows, np.int64)
    return _keyed(t, facts.cluster_codes(t.column(CLUSTER)), int_column(t, "producer_id"),
                  facts.ranks(t.column("topic"), t.column("partition")), zeros)  # fmt: skip


def stream_rows(table: str, kind: str, rows: pa.Table, facts: StreamFacts
                ) -> tuple[int, pa.Table] | None:  # fmt: skip
    """The stream rows (its kind, the rows) of a scratch table's rows of one ``kind``, of the
    chosen replicas only; None where there are none."""
    keep = kept_mask(rows, facts.kept)
    if keep is not None and not pc.all(keep).as_py():
        rows = rows.filter(keep)
    if not rows.num_rows:
        return None
    if kind == "transaction":
        return TXN, txn_rows(rows, facts)
    if kind == "coord_txn":
        return COORD, coord_rows(rows, facts)
    made = side_rows(rows, facts)
    return (SIDE, made) if made.num_rows else None


class RunWriter:
    """A runs task's stream rows, held until :data:`RUN_ROWS` and written sorted: for each
    kind one run of every bucket (``write(kind, bucket, table)`` stores it and says where)."""

    def __init__(self, facts: StreamFacts, write: Callable[[int, int, pa.Table], None],
                 limit: int = RUN_ROWS, limit_bytes: int = RUN_BYTES) -> None:  # fmt: skip
        self.facts, self.write = facts, write
        self.limit, self.limit_bytes = limit, limit_bytes
        self.held: dict[int, list[pa.Table]] = {}
        self.rows = self.bytes = 0

    def add(self, kind: int, t: pa.Table) -> None:
        self.held.setdefault(kind, []).append(t)
        self.rows += t.num_rows
        self.bytes += t.get_total_buffer_size()
        if self.rows >= self.limit or self.bytes >= self.limit_bytes:
            self.flush()

    def flush(self) -> None:
        """What is held written: each kind's rows sorted by bucket and key in one take (a
        copy of them, the only one), each bucket's a slice of it."""
        held, self.held, self.rows, self.bytes = self.held, {}, 0, 0
        for kind in sorted(held):
            t = pa.concat_tables(held[kind])
            keys = key_bytes(t.column(KEY))
            bucket = self.facts.buckets_of(int_column(t, PRODUCER), int_column(t, "producer_id"))
            # rows already in order (a long-lived producer's, as its partitions' replays gave
            # them: every flush of its 1 M transactions) are written as they are, not copied
            order = None if keys_ascending(keys) else np.argsort(keys, kind="stable")
            if self.facts.buckets > 1:
                in_order = bucket if order is None else bucket[order]
                if not _ascending(in_order):
                    by_bucket = np.argsort(in_order, kind="stable")
                    order = by_bucket if order is None else order[by_bucket]
            if order is not None:
                t = t.take(pa.array(order))
            ends = np.cumsum(np.bincount(bucket, minlength=self.facts.buckets)).tolist()
            for b, (start, stop) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
                if stop > start:
                    self.write(kind, b, t.slice(start, stop - start))


def _ascending(values: np.ndarray) -> bool:
    """Whether ``values`` never decrease (a sort would leave them as they are)."""
    return bool(len(values) < 2 or (values[1:] >= values[:-1]).all())


def keys_ascending(keys: np.ndarray) -> bool:
    """:func:`_ascending` of :func:`key_bytes` keys, compared as their :data:`KEY_PARTS`
    unsigned integers, most significant first (numpy compares fixed-width bytes ~10 times
    slower: a third of a second over a long-lived producer's 6 M stream rows)."""
    if len(keys) < 2:
        return True
    parts = keys.view(">u8").reshape(-1, KEY_PARTS).astype(np.uint64)
    before, after = parts[:-1], parts[1:]
    down = after < before
    up = after > before
    falls, decided = down[:, 0].copy(), down[:, 0] | up[:, 0]
    for i in range(1, KEY_PARTS):  # the first part that differs decides
        falls |= ~decided & down[:, i]
        decided |= down[:, i] | up[:, i]
    return not falls.any()


class _Run:
    """One sorted run being merged: its current batch, its keys, and where the merge is."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self.batches = batches
        self.batch: pa.RecordBatch | None = None
        self.keys = np.zeros(0, f"S{KEY_WIDTH}")
        self.at = 0
        self._next()

    def _next(self) -> None:
        self.batch, self.at = None, 0
        for batch in self.batches:
            if batch.num_rows:
                self.batch = batch
                self.keys = key_bytes(batch.column(KEY))
                return

    @property
    def head(self) -> bytes:
        return bytes(self.keys[self.at])

    def take(self, below: bytes | None) -> pa.RecordBatch:
        """Its rows from the merge's place up to the first whose key is not below ``below``
        (at least one), its next batch loaded once this one is taken."""
        end = len(self.keys)
        if below is not None and self.keys[end - 1] >= below:
            end = self.at + max(1, int(np.searchsorted(self.keys[self.at :], below)))
        out = self.batch.slice(self.at, end - self.at)
        self.at = end
        if self.at >= len(self.keys):
            self._next()
        return out


def merged(runs: Iterable[Iterator[pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
    """Sorted runs (each batches in :data:`KEY` order) as one sequence in that order, a slice
    of one run at a time: every row of the run with the lowest head below the next run's head
    (runs of one producer's partitions, read by different tasks, seldom overlap: the slices
    are long)."""
    live = [r for r in (_Run(b) for b in runs) if r.batch is not None]
    heap = [(r.head, i) for i, r in enumerate(live)]
    heapq.heapify(heap)
    while heap:
        _, i = heapq.heappop(heap)
        run = live[i]
        yield run.take(heap[0][0] if heap else None)
        if run.batch is not None:
            heapq.heappush(heap, (run.head, i))


def fanned_in(runs: Iterable[Iterator[pa.RecordBatch]],
              store: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
              fan_in: int = MERGE_FAN_IN) -> list[Iterator[pa.RecordBatch]]:  # fmt: skip
    """``runs`` (each its batches in key order) to be merged, at most ``fan_in`` of them: past
    that, each ``fan_in`` of them merged into one run that ``store`` writes (given its batches,
    :data:`BATCH_ROWS` rows or more each) and gives back to be read, pass after pass, as an
    external sort's merge passes. A judging task merges a batch of each run at once, and a
    producer's runs grow with its history (one per runs task's flush: a week of a Streams
    thread's transactions, ~230): only a history of more than ``fan_in`` runs pays a pass."""
    runs = list(runs)
    while len(runs) > fan_in:
        runs = [store(_rebatched(merged(runs[i : i + fan_in])))
                for i in range(0, len(runs), fan_in)]  # fmt: skip
    return runs


def _rebatched(batches: Iterator[pa.RecordBatch], rows: int = BATCH_ROWS
               ) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The merge's slices (a few rows each where runs interleave) gathered into batches of at
    least ``rows`` rows (the last one fewer), in order; each a copy, holding no run's batch."""
    held: list[pa.RecordBatch] = []
    n = 0
    for b in batches:
        held.append(b)
        n += b.num_rows
        if n >= rows:
            yield pa.Table.from_batches(held).combine_chunks().to_batches()[0]
            held, n = [], 0
    if n:
        yield pa.Table.from_batches(held).combine_chunks().to_batches()[0]


class _Producers:
    """One kind's merged rows as (producer, rows) pieces, producer by producer, each piece one
    producer's rows in order."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self.batches = batches
        self.pieces: deque[tuple[tuple[int, int], pa.RecordBatch]] = deque()

    def head(self) -> tuple[int, int] | None:
        while not self.pieces:
            batch = next(self.batches, None)
            if batch is None:
                return None
            codes, pids = int_column(batch, PRODUCER), int_column(batch, "producer_id")
            for a, b in runs(codes, pids):
                self.pieces.append(((int(codes[a]), int(pids[a])), batch.slice(a, b - a)))
        return self.pieces[0][0]

    def take(self, producer: tuple[int, int]) -> Iterator[pa.Table]:
        while self.head() == producer:
            yield pa.Table.from_batches([self.pieces.popleft()[1]])


def judge_runs(runs_of: dict[int, Iterable[Iterator[pa.RecordBatch]]], facts: Facts,
               clusters: tuple[str, ...]) -> Iterator[pa.Table]:  # fmt: skip
    """Every producer id of a bucket judged from its runs of each kind (``runs_of``: kind ->
    runs, each a run's batches in key order): findings and counts with the cluster first
    (:data:`CROSSLOG_SCHEMA`), as :func:`replay.crosslog_stream.judge_stream` gives them."""
    streams = {k: _Producers(merged(runs_of.get(k, ()))) for k in KINDS}
    out: list[pa.Table] = []
    held = 0
    while True:
        heads = [h for h in (s.head() for s in streams.values()) if h is not None]
        if not heads:
            break
        code, pid = min(heads)
        cluster = clusters[code]
        judge = ProducerJudge(pid, facts.bounds, facts, anchors=facts.anchors.get((cluster, pid)))
        for kind in KINDS:
            feed = {SIDE: judge.sides, COORD: judge.coordinator, TXN: judge.entries}[kind]
            for piece in streams[kind].take((code, pid)):
                feed(piece)
        out.append(T.with_cluster(_results(judge), cluster, first=True))
        held += out[-1].num_rows
        if held >= OUT_ROWS:
            yield pa.concat_tables(out)
            out, held = [], 0
    if out:
        yield pa.concat_tables(out)


OUTPUT = pa.schema([pa.field(CLUSTER, pa.string()), *CROSSLOG_SCHEMA])
# one row per producer id with coordinator transactions: its transactional id and whether the
# coordinator fenced it, as replay.plan._txn_ids gives them (the greatest of each; the lookup
# the transactions table is copied with: replay.plan.Copied.lookup)
IDS = pa.schema([
    pa.field(CLUSTER, pa.string()), pa.field("producer_id", pa.int64()),
    pa.field("transactional_id", pa.string()), pa.field("coordinator_fenced", pa.bool_()),
])  # fmt: skip


IDS_KEYS = (CLUSTER, "producer_id")
# how many tables of IDS rows a task holds before it combines them into one
IDS_PARTS = 64


def producer_ids(coord: pa.Table) -> pa.Table:
    """The :data:`IDS` rows of coordinator transactions (COORD stream rows): one per producer
    id, the greatest transactional id and fenced if any says so (replay.tables.greatest_by,
    as replay.plan._txn_ids aggregates them)."""
    t = coord.select([CLUSTER, "producer_id", "transactional_id", "fenced"])
    return greatest_by(t.rename_columns(IDS.names).cast(IDS), IDS_KEYS)


class ProducerIds:
    """The :data:`IDS` rows of the coordinator transactions a task reads, as they pass: one
    per producer id it saw. Where a producer id's rows are read by several tasks each has a
    row of it, which combine as the whole would (greatest_by, where the lookup is read:
    jobs.copies.Lookup). Holds a row per producer id, not per transaction."""

    def __init__(self) -> None:
        self.parts: list[pa.Table] = []

    def add(self, coord: pa.Table) -> None:
        self.parts.append(producer_ids(coord))
        if len(self.parts) >= IDS_PARTS:
            self.parts = [self.table()]

    def table(self) -> pa.Table:
        if not self.parts:
            return IDS.empty_table()
        return greatest_by(pa.concat_tables(self.parts), IDS_KEYS)
