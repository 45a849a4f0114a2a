"""Arrow schemas of the audit's derived tables, each column documented (field metadata ``doc``).

Timestamps are int64 milliseconds inside the replay functions and become
``timestamp[ms, UTC]`` columns (:data:`TIMESTAMP_COLUMNS`) when the audit writes its tables.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders.columns import as_type, const, nulls
from decoders.schemas import table_of_rows

I32, I64, STR, BOOL = pa.int32(), pa.int64(), pa.string(), pa.bool_()
TYPES: dict[str, pa.DataType] = {
    "i32": I32,
    "i64": I64,
    "str": STR,
    "bool": BOOL,
    "list<str>": pa.list_(STR),
    "list<tp>": pa.list_(pa.struct([pa.field("topic", STR), pa.field("partition", I32)])),
}


def _schema(table: str) -> pa.Schema:
    """A schema written as a table: a column a line, its name, its type (:data:`TYPES`) and
    its documentation (field metadata ``doc``), which may go on over indented lines."""
    fields: list[tuple[str, str, list[str]]] = []
    for line in textwrap.dedent(table).strip("\n").splitlines():
        if line[:1].isspace():
            fields[-1][2].append(line.strip())
        else:
            name, typ, doc = line.split(maxsplit=2)
            fields.append((name, typ, [doc]))
    return pa.schema(
        [pa.field(n, TYPES[t], metadata={"doc": " ".join(doc)}) for n, t, doc in fields]
    )


FINDINGS = _schema(
    """
    kind              str       finding kind (docs/findings.md vocabulary)
    severity          str       info, warning, error or critical
    topic             str       topic of the partition the finding is about
    partition         i32       partition
    producer_id       i64       producer id involved
    producer_epoch    i32       producer epoch involved
    transactional_id  str       transactional id, when the coordinator's log names it
    group_id          str       consumer group involved
    first_offset      i64       first offset concerned
    last_offset       i64       last offset concerned
    record_count      i64       records concerned
    message           str       one readable sentence
    evidence          str       JSON: every fact needed to check the finding by hand
    remediation       str       the next step: a command of Kafka's tools or what to check
                                (docs/remediation.md; filled once the findings are complete)
    fingerprint       str       the finding's identity across runs: a hash of its cluster, kind
                                and place (producer, group, offsets), not of its wording
    """
)

# a finding's status in findings_history (jobs.history), and the table's name
NEW, STILL_PRESENT, GONE = "new", "still present", "gone"
PROVISIONAL = "provisional"  # new, but resting on where the copy ended (findings.ON_COPY_END)
STATUSES = (NEW, PROVISIONAL, STILL_PRESENT, GONE)
HISTORY = "findings_history"
FINDINGS_HISTORY = _schema(
    """
    logical_date      str       the run's day (its logical date, else its day in UTC)
    run_id            str       the run that wrote the row
    fingerprint       str       the finding's identity across runs (findings.fingerprint)
    status            str       new (not found by the previous run), provisional (new, but its
                                proof rests on where the copy ended: a later run confirms it,
                                still present, or withdraws it, gone), still present, or gone
                                (found by the previous run, not by this one)
    first_seen        str       day of the first run of the chain (--since) that found it
    last_seen         str       day of the last run that found it
    kind              str       finding kind
    severity          str       its severity (the previous run's, for one gone)
    topic             str       topic
    partition         i32       partition
    producer_id       i64       producer id
    transactional_id  str       transactional id
    group_id          str       consumer group
    first_offset      i64       first offset concerned
    """
)

TRANSACTIONS = _schema(
    """
    topic              str       topic
    partition          i32       partition
    producer_id        i64       producer id
    producer_epoch     i32       epoch of the transaction's data batches
    marker_epoch       i32       epoch of the marker (data epoch + 1 with TV2 or a fence)
    first_offset       i64       first offset of the transaction's data in this partition
    last_offset        i64       last offset of its data
    marker_offset      i64       offset of its COMMIT/ABORT marker; null when OPEN
    outcome            str       COMMIT, ABORT or OPEN (no marker at the end of the log)
    record_count       i64       data records of the transaction in this partition
    batch_count        i64       data batches
    first_timestamp    i64       max timestamp of its first batch
    marker_timestamp   i64       timestamp of the marker
    coordinator_epoch  i32       coordinator epoch in the marker
    pinned_records     i64       OPEN only: later data records held behind the LSO
    open_ms            i64       OPEN only: from its first batch to the partition's last
                                 timestamp
    in_cleaned_range   bool      starts where the log cleaner has been (not judged)
    bound_timestamp    i64       OPEN only: time of the first marker after its first batch
                                 (leader's clock), an upper bound of when that batch was
                                 appended
    """
)

PRODUCER_STATES = _schema(
    """
    topic                     str       topic
    partition                 i32       partition
    producer_id               i64       producer id
    producer_epoch            i32       epoch at the end of the log
    last_sequence             i32       last sequence of its last retained batch, -1 none
    last_offset               i64       last offset of that batch, -1 none
    offset_delta              i32       last offset - first offset of that batch
    timestamp                 i64       last timestamp of the producer
    coordinator_epoch         i32       coordinator epoch of its last marker, -1 none
    current_txn_first_offset  i64       first offset of its open transaction, -1 none
    snapshot_offset           i64       newest .snapshot of the partition, if any
    snapshot_matches          bool      the replayed state at that offset equals the snapshot
    snapshot_diff             str       JSON of the fields that differ
    """
)

LSO_CHANGES = _schema(
    """
    topic           str       topic
    partition       i32       partition
    timestamp       i64       when the last stable offset changed (batch timestamp)
    log_end_offset  i64       log end offset at that moment
    lso             i64       last stable offset from then on (10.6)
    """
)

PARTITIONS = _schema(
    """
    topic               str       topic
    partition           i32       partition
    broker              str       the replica replayed (the most complete one)
    log_start_offset    i64       first offset in the dump
    log_end_offset      i64       last offset + 1
    lso                 i64       last stable offset at the end of the log
    cleaned_upto        i64       offsets below show log-cleaner leftovers
    data_records        i64       data records replayed
    first_timestamp     i64       smallest batch timestamp of the replica's first segment read
    last_timestamp      i64       largest batch timestamp
    complete_from       i64       offsets from here on are all in the dump (0: the whole history
                                  is; above: retention, cleaning or missing offsets took what is
                                  below)
    copy_end_timestamp  i64       the latest moment this copy is known to reach: its last marker
                                  (leader's clock) or its last batch
    """
)

REPLAY_STATES = _schema(
    """
    topic                str       topic
    partition            i32       partition
    broker               str       the replica replayed (the most complete one)
    topic_id             str       the topic's id (partition.metadata), if the replica has one:
                                   a topic deleted and created again under its name has another
    high_watermark       i64       the replica's high watermark at its broker's last
                                   replication-offset-checkpoint, if its log dir has one:
                                   offsets below it were committed
    log_end_offset       i64       last offset + 1: a later run goes on from here
    last_batch_offset    i64       base offset of the batch that reaches the log end offset
    last_batch_crc       i64       its stored CRC: a later copy holds the same batch there, or
                                   the log changed below the point (truncation, a restore)
    segment_base_offset  i64       base offset of the segment holding that batch (its file name)
    segment_position     i64       the batch's byte position in that segment
    state_version        i32       layout of ``state`` (replay.carried.STATE_VERSION)
    state                str       JSON: what the partition's replay goes on from: per producer
                                   its epoch, last five batches, recent sequence ranges,
                                   coordinator epoch and open transaction; the log's start, end,
                                   holes, cleaned range and latest timestamps (replay.carried)
    records_state        str       JSON, of an internal topic's partition: the coordinator's
                                   state of every transactional id (`__transaction_state`) or
                                   every group's (`__consumer_offsets`); null otherwise
    findings             str       JSON: fingerprints of the findings this partition's replays
                                   judged (carried on from run to run): a run that goes on
                                   from the point hands them on again (replay.previous)
    """
)

COORDINATOR_TXNS = _schema(
    """
    transactional_id     str       transactional id
    producer_id          i64       producer id
    data_epoch           i32       epoch of the Ongoing records (the data's epoch)
    marker_epoch         i32       epoch of the Prepare record (the markers' epoch)
    outcome              str       COMMIT, ABORT, or null while Ongoing
    state_at_end         str       Ongoing, Prepare or Complete at the end of the log
    partitions           list<tp>  partitions added to the transaction
    start_timestamp      i64       TransactionStartTimestampMs
    prepare_timestamp    i64       time of the Prepare record
    complete_timestamp   i64       time of the Complete record
    timeout_ms           i32       transaction timeout
    transaction_version  i32       ClientTransactionVersion tag (0 when absent)
    fenced               bool      aborted by the coordinator with an epoch bump (timeout or
                                   fencing)
    maybe                bool      its partitions are unknown: only records after cleaning
                                   survived (no Prepare)
    log_partition        i32       __transaction_state partition holding it
    first_log_offset     i64       offset of its first surviving record there
    history_from_start   bool      the producer's whole coordinator history is in the dump (not
                                   compacted away)
    latest_epoch         i32       highest epoch the coordinator recorded for the producer id
    """
)

GENERATIONS = _schema(
    """
    group_id       str       consumer group
    generation     i32       generation id
    state          str       Stable (members), Empty (none) or Dead (tombstone)
    protocol_type  str       protocol type, 'consumer' for consumers
    protocol       str       assignor chosen
    leader         str       leader member id
    member_count   i32       members
    members        list<str> member ids
    assignment     str       JSON: topic-partition -> member ids
    broadcast      bool      some partition is assigned to several members
    timestamp      i64       time of the group record
    log_partition  i32       __consumer_offsets partition
    log_offset     i64       offset of the group record
    """
)

TIMELINE = _schema(
    """
    group_id              str       consumer group
    topic                 str       committed topic
    partition             i32       committed partition
    committed_offset      i64       effective committed offset; null after a tombstone
    previous_offset       i64       effective offset before
    is_tombstone          bool      the offset was deleted
    effective_timestamp   i64       when it took effect (the COMMIT marker's for
                                    TxnOffsetCommit)
    commit_timestamp      i64       commit timestamp in the record
    effective_log_offset  i64       offset in __consumer_offsets where it took effect
    commit_log_offset     i64       offset of the commit record
    log_partition         i32       __consumer_offsets partition
    generation            i32       group generation at the time
    group_state           str       Stable, Empty or Dead at the time
    broadcast             bool      the partition was assigned to several members at the time
    committers            i32       members the partition was assigned to
    is_transactional      bool      a TxnOffsetCommit
    producer_id           i64       its producer, for transactional commits
    """
)

CHECK_COUNTS = _schema(
    """
    topic      str       partition the count is about, if any
    partition  i32       partition
    check      str       what was counted: checked, or could not be checked and why
    count      i64       how many
    """
)

COVERAGE = _schema(
    """
    family     str       check family (replay.coverage.FAMILIES)
    topic      str       partition the row is about, if any
    partition  i32       partition
    judged     bool      whether the check could judge what is counted
    reason     str       why not, when not judged (no coordinator history, replica alone, ...)
    unit       str       what is counted: batches, transactions, replicas, snapshots, ...
    count      i64       how many
    bytes      i64       the partition's log bytes (its largest replica), if a partition
    """
)

DERIVED = {
    "findings": FINDINGS,
    "transactions": TRANSACTIONS,
    "producer_states": PRODUCER_STATES,
    "lso_changes": LSO_CHANGES,
    "partitions": PARTITIONS,
    "coordinator_transactions": COORDINATOR_TXNS,
    "group_generations": GENERATIONS,
    "offset_timeline": TIMELINE,
    "replay_states": REPLAY_STATES,
}

TIMESTAMP_COLUMNS = {
    "first_timestamp", "marker_timestamp", "timestamp", "last_timestamp", "start_timestamp",
    "prepare_timestamp", "complete_timestamp", "effective_timestamp", "commit_timestamp",
}  # fmt: skip


# every row of the audit's tables names the cluster it belongs to (replay.dumpinfo)
CLUSTER = "cluster"


def clusters_of(brokers: pa.Array | pa.ChunkedArray, clusters: dict[str, str]) -> pa.Array:
    """Each row's cluster from its broker directory (``clusters``: broker -> cluster, from
    replay.dumpinfo); "" for a broker without one."""
    import pyarrow.compute as pc

    names = sorted(clusters)
    at = pc.index_in(brokers, value_set=pa.array(names, STR))
    found = pc.take(pa.array([clusters[b] for b in names], STR), at)
    return pc.fill_null(found, "")


def with_cluster(t: pa.Table | pa.RecordBatch, cluster: str | pa.Array, first: bool = False):
    """``t`` with the :data:`CLUSTER` column, the one way any row of the audit gets it:
    ``cluster`` names every row's cluster, or gives one per row (:func:`clusters_of`); the
    column comes last, or ``first``."""
    if isinstance(cluster, str):
        cluster = pa.array([cluster] * t.num_rows, STR)
    if first:
        return t.add_column(0, CLUSTER, cluster)
    return t.append_column(CLUSTER, cluster)


def union(*schemas: pa.Schema) -> pa.Schema:
    """One schema holding several tables' columns (first type wins), plus ``out`` naming the
    table of each row: a grouped function returns one table, the audit splits it."""
    fields: dict[str, pa.Field] = {"out": pa.field("out", STR)}
    for s in schemas:
        for f in s:
            fields.setdefault(f.name, f)
    return pa.schema(list(fields.values()))


def rows_table(schema: pa.Schema, out: str, rows: list[dict]) -> pa.Table:
    """Rows of a replay's output, ``out`` naming their table, as Arrow in ``schema``."""
    return table_of_rows(schema, [{**r, "out": out} for r in rows])


BLOCK_ROWS = 8_192  # rows a replay holds as Python objects at a time, in or out
# rows a replay applies at once over columns (replay.coordinator_blocks, replay.group_blocks):
# their numpy and Arrow calls cost per block, ~40 of them, which at BLOCK_ROWS were a third of
# a long-lived producer's coordinator replay; a block outside the usual course goes again as
# BLOCK_ROWS slices (:func:`slices_apart`)
COLUMN_BLOCK_ROWS = 65_536


def column_blocks(pieces: Iterable[pa.Table]) -> Iterator[pa.RecordBatch]:
    """Consecutive pieces (a log's records or events, in order) as blocks of up to
    :data:`COLUMN_BLOCK_ROWS` rows, each one chunk: the pieces are what the decoder's slices and
    the merge of a log's streams give, a few thousand rows each. Pieces of different columns
    (one kind of event's) are never in one block."""
    held: list[pa.Table] = []
    n = 0
    for piece in pieces:
        if not piece.num_rows:
            continue
        if held and piece.schema != held[0].schema:
            yield from _one_chunk(held).to_batches()
            held, n = [], 0
        held.append(piece)
        n += piece.num_rows
        if n >= COLUMN_BLOCK_ROWS:
            t = _one_chunk(held)
            full = n - n % COLUMN_BLOCK_ROWS
            yield from t.slice(0, full).to_batches(max_chunksize=COLUMN_BLOCK_ROWS)
            held, n = ([t.slice(full)] if full < n else []), n - full
    if held:
        yield from _one_chunk(held).to_batches()


def _one_chunk(pieces: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(pieces).combine_chunks()


def slices_apart(block: pa.RecordBatch, apply: Callable[[pa.RecordBatch], None]) -> bool:
    """Whether ``block`` was longer than :data:`BLOCK_ROWS`, and so given to ``apply`` a slice
    of them at a time (a replay whose block over columns failed: only the slices outside the
    usual course go row by row, each holding at most BLOCK_ROWS rows as Python objects)."""
    if block.num_rows <= BLOCK_ROWS:
        return False
    for start in range(0, block.num_rows, BLOCK_ROWS):
        apply(block.slice(start, BLOCK_ROWS))
    return True


def emit_rows(
    emit: Callable[[str, dict], None],
    emit_table: Callable[[str, pa.Table], None] | None,
    kind: str,
    table: pa.Table,
) -> None:
    """A replay's rows of one kind given as a table (a stretch applied over columns): through
    ``emit_table`` at once where the caller takes tables (:meth:`RowBlocks.add_table`), else
    row by row through ``emit`` as the replay's own dicts."""
    if emit_table is not None:
        emit_table(kind, table)
        return
    for row in table.to_pylist():
        emit(kind, row)


def in_union(table: pa.Table, schema: pa.Schema, out: str) -> pa.Table:
    """Rows of one kind (``out``) in a replay's :func:`union` schema: its columns cast to the
    schema's types, the other kinds' columns null, built from buffers (no Python object per
    row)."""
    n, names = table.num_rows, set(table.column_names)
    return pa.table(
        [
            const(out, n, f.type) if f.name == "out"
            else as_type(table.column(f.name), f.type) if f.name in names
            else nulls(n, f.type)
            for f in schema
        ],
        schema=schema,
    )  # fmt: skip


class RowBlocks:
    """A replay's output rows (one :func:`union` schema, ``out`` naming each row's table) handed
    to ``flush`` as Arrow tables of at most ``block`` rows: a replay of a long history holds
    one block of Python rows, never its whole output."""

    def __init__(
        self, schema: pa.Schema, flush: Callable[[pa.Table], None], block: int = BLOCK_ROWS,
        flush_rows: Callable[[list[dict]], None] | None = None,
    ) -> None:  # fmt: skip
        """``flush_rows``: where the rows held are handed as dicts (``out`` naming each one's
        table) instead of converted here, for a caller converting many replays' together."""
        self.schema, self.flush, self.block = schema, flush, block
        self.flush_rows = flush_rows
        self.rows: dict[str, list[dict]] = {}
        self.count = 0

    def _hand(self, rows: list[dict]) -> None:
        if self.flush_rows is not None:
            self.flush_rows(rows)
        else:
            self.flush(table_of_rows(self.schema, rows))

    def add(self, out: str, row: dict) -> None:
        self.rows.setdefault(out, []).append(row)
        self.count += 1
        if self.count >= self.block:
            self.close()

    def add_table(self, out: str, table: pa.Table) -> None:
        """Rows of ``out`` given as columns (a replay applying a stretch at once): handed on
        after the rows of ``out`` held before them, so each table's rows keep their order;
        columns the table lacks are null."""
        held = self.rows.pop(out, None)
        if held:
            self.count -= len(held)
            self._hand([{**r, "out": out} for r in held])
        if table.num_rows:
            self.flush(in_union(table, self.schema, out))

    def close(self) -> None:
        """Hand on the rows held (at the end, or when a block is full), every kind's in one
        table (each kind's rows in their order): a quiet partition's replay ends with a row
        or a few of five kinds, and each table handed on costs a conversion and a cast of
        the union's ~55 columns, more than the rows themselves."""
        rows, self.rows, self.count = self.rows, {}, 0
        if rows:
            self._hand([{**r, "out": out} for out, these in rows.items() for r in these])


# END


# -- columns of a sorted stream, as numpy (replay.crosslog_stream, replay.leakage) -----------------


def int_column(t: pa.Table, name: str) -> np.ndarray:
    """An integer, boolean or timestamp column as int64, null (or absent) as -1: every value the
    streamed judgements compare is a non-negative offset, epoch, count or epoch-millisecond."""
    if name not in t.column_names:
        return np.full(t.num_rows, -1, np.int64)
    c = t.column(name)
    if c.type == pa.int64() and not c.null_count:  # as it is (a copy: callers may write to it)
        out = c.to_numpy()
        return out if out.flags.writeable else out.copy()
    if pa.types.is_timestamp(c.type) or pa.types.is_boolean(c.type):
        c = c.cast(pa.int64())
    return pc.fill_null(c.cast(pa.int64()), -1).to_numpy()


def value_codes(column: pa.Array | pa.ChunkedArray) -> tuple[list, np.ndarray]:
    """A column as (its distinct values, each row's index among them): one Python object per
    distinct value, not per row."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column)
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)


def distinct_rows(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct tuples of integer ``keys`` (columns of equal length), in the order of
    ``np.unique(np.stack(keys), axis=1)``: (the first row of each, each row's index among
    them). The tuples are ranked as one int64 where their spans allow (a sort of integers,
    not numpy's of byte rows: ~20 times faster on a block of 65,536), in one stable argsort:
    a block's keys come mostly in order already (a producer's, a partition's rows in log
    order), which that sort runs through, where ``np.unique`` with its indexes took ~4 times
    as long on a long-lived producer's coordinator block."""
    n = len(keys[0]) if keys else 0
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    columns = [k.astype(np.int64, copy=False) for k in keys]
    lows = [int(c.min()) for c in columns]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(columns, lows, strict=True)]
    if float(np.prod(np.array(spans, np.float64))) >= 2.0**62:
        _, first, inverse = np.unique(np.stack(columns), axis=1, return_index=True,
                                      return_inverse=True)  # fmt: skip
        return first, inverse.ravel()
    flat = columns[0] - lows[0]
    for c, lo, span in zip(columns[1:], lows[1:], spans[1:], strict=True):
        flat = flat * span + (c - lo)
    order = np.argsort(flat, kind="stable")  # equal tuples in row order: the first is first
    ranked = flat[order]
    starts = np.empty(n, bool)
    starts[0] = True
    np.not_equal(ranked[1:], ranked[:-1], out=starts[1:])
    inverse = np.empty(n, np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return order[starts], inverse


def runs(*keys: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of the runs of equal keys (rows sorted by them)."""
    size = len(keys[0]) if keys else 0
    if not size:
        return []
    change = np.zeros(size - 1, bool)
    for k in keys:
        change |= k[1:] != k[:-1]
    cuts = np.flatnonzero(change) + 1
    bounds = np.concatenate(([0], cuts, [size])).tolist()
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def greatest_by(t: pa.Table, keys: tuple[str, ...]) -> pa.Table:
    """One row per distinct ``keys`` of ``t``, each other column its greatest value there
    (nulls left out; null where all are), in ``t``'s schema: Spark's ``groupBy(keys)`` with
    ``max`` of each column (a boolean's max: true if any is), which combines the same way
    whether the rows come whole or as the partial results of several tasks."""
    others = [c for c in t.column_names if c not in keys]
    done = t.group_by(list(keys), use_threads=False).aggregate([(c, "max") for c in others])
    return (
        done.select([*(f"{c}_max" for c in others), *keys])
        .rename_columns([*others, *keys])
        .select(t.column_names)
        .cast(t.schema)
    )
