"""The (producer id, partition) pairs the cross-log's sides are made of, gathered by each
replica's replay as its rows go out.

A side (replay.crosslog_stream, ``SIDE``) says what a copy of a partition covers, for each
producer id that touched the partition: wrote a transaction into it, or had a coordinator
list it in one. Made from the scan's transaction and coordinator rows, the pairs were a
distinct over every transaction and over every partition of every coordinator listing: for a
Kafka Streams thread's 1 M transactions over 4 partitions, 5 M rows and 5 M exploded
listings read, shuffled and grouped to find 5 pairs (docs/benchmarks.md, "The leakage
counts' commits by a lookup, the sides gathered by the replays"). A replay sees every row it
gives, so it keeps the pairs as it goes: a few rows a replica (``touched`` of a partition's
replay, ``listed`` of a `__transaction_state` partition's), which the plan makes distinct
across replicas.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from replay import tables as T

TOUCHED = "touched"  # a partition's replay: a producer id with a transaction in it
LISTED = "listed"  # a coordinator's replay: a partition it listed in a producer id's transaction
# the rows of both kinds (each replay's union gives the columns their place)
PAIRS = pa.schema([T.TRANSACTIONS.field(n) for n in ("topic", "partition", "producer_id")])
_TRANSACTION, _COORD_TXN = "transaction", "coord_txn"  # the kinds of rows the pairs come from
_READ = {_TRANSACTION: ["producer_id"], _COORD_TXN: ["producer_id", "partitions"]}


class Pairs:
    """One replica's pairs, from the rows its replay gives (as tables of its union schema, or
    as dicts, ``out`` naming each row's kind), whether they come from its log or are handed
    on from a previous run (replay.previous): the pairs of every transaction row the scan
    writes."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.touched: set[int | None] = set()
        self.listed: set[tuple[int | None, str | None, int | None]] = set()

    def saw(self, table: str, rows: pa.Table) -> None:
        """Rows of a replay's union table (a scan table: ``replayed``, ``coordinated``...)
        going out."""
        kind, add = {"replayed": (_TRANSACTION, self._touched),
                     "coordinated": (_COORD_TXN, self._listed)}.get(table, (None, None))  # fmt: skip
        if kind is None or not rows.num_rows:
            return
        mask = pc.equal(rows.column("out"), kind)
        if pc.any(mask).as_py():  # (the few columns read, not the union's ~55, filtered)
            add(rows.select(_READ[kind]).filter(mask))

    def saw_rows(self, rows: list[dict]) -> None:
        """Rows of a partition's replay going out as dicts."""
        self.touched.update(r.get("producer_id") for r in rows if r.get("out") == _TRANSACTION)

    def _touched(self, t: pa.Table) -> None:
        self.touched.update(pc.unique(t.column("producer_id")).to_pylist())

    def _listed(self, t: pa.Table) -> None:
        # each listing's partitions beside its producer id, distinct within the block (a
        # long-lived producer lists the same few in every transaction)
        lists = t.column("partitions").combine_chunks()
        flat = pc.list_flatten(lists)
        if not len(flat):
            return
        producers = t.column("producer_id").combine_chunks().take(pc.list_parent_indices(lists))
        pairs = pa.table({
            "producer_id": producers,
            "topic": pc.struct_field(flat, "topic"),
            "partition": pc.struct_field(flat, "partition"),
        })  # fmt: skip
        distinct = pairs.group_by(list(pairs.column_names), use_threads=False).aggregate([])
        self.listed.update(zip(*(distinct.column(c).to_pylist() for c in pairs.column_names),
                               strict=True))  # fmt: skip

    def touched_rows(self) -> list[dict]:
        """The ``touched`` rows (the replica's partition, each producer id), in id order."""
        return [{"topic": self.topic, "partition": self.partition, "producer_id": p}
                for p in sorted(self.touched, key=_order)]  # fmt: skip

    def listed_rows(self) -> list[dict]:
        """The ``listed`` rows (each producer id and partition), in order."""
        return [{"producer_id": p, "topic": t, "partition": n}
                for p, t, n in sorted(self.listed, key=lambda x: tuple(map(_order, x)))]  # fmt: skip


def _order(value) -> tuple:
    """A sort key where a value may be missing (null last)."""
    return (value is None, value if value is not None else 0)
