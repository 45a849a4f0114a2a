"""Replay `__transaction_state` per transactional id (docs/formats.md 8.4, 8.5).

Each record is a state the coordinator moved to; a transition not allowed by 8.4
(:data:`decoders.transaction_log.VALID_PREVIOUS_STATES`) is a finding.
The walk yields the coordinator's transactions: the producer id and the epoch the data was
written with, the partitions it added, whether it committed or aborted, with which marker epoch,
and when (start, prepare, complete), so :mod:`replay.plan` can check every partition against it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from decoders.transaction_log import DEAD, valid_previous_states
from replay.coordinator_blocks import apply_block
from replay.findings import finding
from replay.tables import emit_rows, slices_apart


def _partitions(value: list[dict] | None) -> set[tuple[str, int]]:
    return {(e["topic"], p) for e in value or [] for p in e["partitions"] or []}


def replay_transactional_id(
    rows: Iterable[dict[str, Any]], complete_from: dict[int, int] | None = None
) -> tuple[list[dict], list[dict]]:
    """rows: one transactional id's txn_log rows in log order; complete_from: per
    `__transaction_state` partition, the offset from which its history is whole (below it the
    log cleaner kept only the latest record of each transactional id). Returns (transactions,
    findings): :class:`CoordinatorReplay` over a list."""
    rows = list(rows)
    txns: list[dict] = []
    findings: list[dict] = []
    out = {"coord_txn": txns, "finding": findings}
    replay = CoordinatorReplay(
        complete_from, latest_epochs(rows), lambda kind, row: out[kind].append(row)
    )
    for r in rows:
        replay.record(r)
    replay.finish()
    return txns, findings


def latest_epochs(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, int], int]:
    """(transactional id, producer id) -> the highest epoch its records give (a record without
    an epoch counts as 0): what every transaction of that producer id reports as
    ``latest_epoch``. :func:`replay.grouped.txn_latest_epochs` gives the same over Arrow."""
    out: dict[tuple[str, int], int] = {}
    for r in rows:
        pid = r["producer_id"]
        if pid is not None and pid >= 0:
            key = (r["transactional_id"], pid)
            out[key] = max(out.get(key, -1), r["producer_epoch"] or 0)
    return out


class _Id:
    """What the coordinator's replay keeps of one transactional id: its state and last record,
    the transaction in progress, and each producer id's first surviving record."""

    __slots__ = ("current", "first_of", "previous", "state")

    def __init__(self) -> None:
        self.state: str | None = None
        self.previous: dict | None = None
        self.current: dict | None = None
        self.first_of: dict[int, dict] = {}


class CoordinatorReplay:
    """The coordinator's replay of one `__transaction_state` partition (or of one id's records),
    fed record by record in log order with every transactional id's state at once, as
    TransactionStateManager.loadTransactionsForTxnTopicPartition loads a partition. A
    transaction leaves through ``emit("coord_txn", row)`` as soon as no later record can change
    it (its Complete record, the next transaction's first record, or the end), a finding
    through ``emit("finding", row)`` when it is found: a transactional id that commits every
    100 ms writes millions of records, and neither they nor its transactions are held.

    ``latest_epoch``: (transactional id, producer id) -> the highest epoch of its records over
    the whole log (:func:`latest_epochs`), known before the replay: every transaction reports
    it. A transaction whose Prepare record is gone and whose first surviving record lies in the
    cleaned range has partitions nobody can know (``maybe``): the cross-log checks may align it
    with anything and judge nothing by it (docs/cross-log.md)."""

    # blocks of records in the usual course applied over columns (replay.coordinator_blocks);
    # off, every record goes through record() (the tests compare both)
    fast = True

    def __init__(
        self,
        complete_from: dict[int, int] | None,
        latest_epoch: dict[tuple[str, int], int],
        emit: Callable[[str, dict], None],
        emit_table: Callable[[str, pa.Table], None] | None = None,
    ) -> None:
        self.complete_from = complete_from or {}
        self.latest_epoch = latest_epoch
        self.emit = emit
        self.emit_table = emit_table
        self.ids: dict[str, _Id] = {}

    def block(self, block: pa.RecordBatch) -> None:
        """The next records of the log, in order (timestamps filled with -1): at once where
        they keep to the usual course (:func:`replay.coordinator_blocks.apply_block`), else
        again a slice at a time (:func:`replay.tables.slices_apart`), one by one where a slice
        does not."""
        if (self.fast and apply_block(self, block)) or slices_apart(block, self.block):
            return
        for r in block.to_pylist():
            self.record(r)

    def emit_rows(self, kind: str, table: pa.Table) -> None:
        """Rows of one kind as a table: through ``emit_table`` at once, else row by row."""
        emit_rows(self.emit, self.emit_table, kind, table)

    def state_of(self, tid: str) -> _Id:
        """What the replay keeps of ``tid`` (made at its first record)."""
        s = self.ids.get(tid)
        if s is None:
            s = self.ids[tid] = _Id()
        return s

    def _whole(self, r: dict) -> bool:
        return (r.get("log_offset") or 0) >= self.complete_from.get(r.get("log_partition"), 0)

    def record(self, r: dict[str, Any]) -> None:
        """The next record of the log: its transition judged, then the transaction it belongs
        to started, prepared or completed (and handed on once no later record changes it)."""
        s = self.state_of(r["transactional_id"])
        pid = r["producer_id"]
        if pid is not None and pid >= 0:
            s.first_of.setdefault(pid, r)
        new = DEAD if r["is_tombstone"] else r["state"]
        self._judge_transition(s, r, new)
        ts = r["last_update_timestamp"]
        if new == "Ongoing":
            self._ongoing(s, r, ts)
        elif new in ("PrepareCommit", "PrepareAbort"):
            self._prepare(s, r, ts, "COMMIT" if new == "PrepareCommit" else "ABORT")
        elif new in ("CompleteCommit", "CompleteAbort"):
            self._complete(s, r, ts, "COMMIT" if new == "CompleteCommit" else "ABORT")
        s.state, s.previous = new, r

    def _judge_transition(self, s: _Id, r: dict[str, Any], new: str) -> None:
        """A finding when 8.4 does not allow moving from the id's state to ``new``; across a
        cleaned range the records between two survivors are gone: not judged."""
        tid = r["transactional_id"]
        judged = s.previous is not None and self._whole(s.previous)
        allowed = valid_previous_states(new, r.get("client_transaction_version") or 0)
        if not (judged and allowed is not None and s.state not in allowed):
            return
        self.emit(
            "finding",
            finding(
                "invalid_txn_transition",
                f"transactional id {tid!r} moved from {s.state} to {new}",
                {
                    "from": s.state,
                    "to": new,
                    "log_partition": r.get("log_partition"),
                    "log_offset": r.get("log_offset"),
                    "producer_id": r["producer_id"],
                    "producer_epoch": r["producer_epoch"],
                },  # fmt: skip
                transactional_id=tid,
                producer_id=r["producer_id"],
                producer_epoch=r["producer_epoch"],
                topic="__transaction_state",
                partition=r.get("log_partition"),
                first_offset=r.get("log_offset"),
            ),
        )

    def _ongoing(self, s: _Id, r: dict[str, Any], ts: int) -> None:
        """An Ongoing record: the first starts a transaction (the previous one, if its Complete
        record is not in the log, is handed on), later ones add partitions to it."""
        current = s.current
        if current is None or current.get("outcome"):
            if current is not None:  # its Complete record is not in the log
                self._done(s, current)
            current = s.current = {
                "transactional_id": r["transactional_id"],
                "producer_id": r["producer_id"],
                "data_epoch": r["producer_epoch"],
                "marker_epoch": None,
                "outcome": None,
                "partitions": set(),
                "start_timestamp": r["start_timestamp"] if r["start_timestamp"] >= 0 else ts,
                "prepare_timestamp": None,
                "complete_timestamp": None,
                "timeout_ms": r["timeout_ms"],
                "transaction_version": r.get("client_transaction_version") or 0,
                "fenced": False,
                "maybe": not self._whole(r),
                "log_partition": r.get("log_partition"),
                "first_log_offset": r.get("log_offset"),
            }
        current["partitions"] |= _partitions(r["partitions"])

    def _prepare(self, s: _Id, r: dict[str, Any], ts: int, outcome: str) -> None:
        """A PrepareCommit or PrepareAbort record: the outcome, the marker epoch and every
        partition of the transaction (one whose Ongoing records are gone starts here)."""
        current = s.current
        if current is None:
            current = s.current = _surviving(r, r["transactional_id"], ts, outcome)
            current["partitions"] |= _partitions(r["partitions"])
            current["maybe"] = False  # a Prepare record lists every partition
            current["prepare_timestamp"] = ts
            return
        current["maybe"] = False  # a Prepare record lists every partition
        current["outcome"] = outcome
        current["marker_epoch"] = r["producer_epoch"]
        current["prepare_timestamp"] = ts
        current["partitions"] |= _partitions(r["partitions"])
        # TV0/1: an abort with a bumped epoch is the coordinator fencing or timing out (10.4)
        bumped = (current["data_epoch"] is not None) and r["producer_epoch"] > current["data_epoch"]
        current["fenced"] = outcome == "ABORT" and bumped and current["transaction_version"] < 2

    def _complete(self, s: _Id, r: dict[str, Any], ts: int, outcome: str) -> None:
        """A CompleteCommit or CompleteAbort record: the transaction is handed on."""
        current = s.current
        if current is None:
            # only the Complete record survived (compaction): which partitions, nobody knows
            t = _surviving(r, r["transactional_id"], ts, outcome)
            t["complete_timestamp"] = ts
            self._done(s, t)
            return
        current["complete_timestamp"] = ts
        s.current = None
        self._done(s, current)

    def finish(self) -> None:
        """The transactions still open at the end of the log, by transactional id."""
        for tid in sorted(self.ids):
            s = self.ids[tid]
            if s.current is not None:
                t, s.current = s.current, None
                self._done(s, t)

    def cleaned_past(self) -> None:
        """A replay going on from carried state whose log the cleaner has since rewritten past
        the point (replay.carried.resume_coordinator): records after the carried ones may be
        gone, whole transactions with them, so the next record of an id may belong to a later
        transaction than the one in flight. Every transaction in flight is handed on as it
        stands, as a full audit of this copy sees one of its cleaned range (``maybe``, its
        partitions unknown), and the ids' next records start afresh."""
        for tid in sorted(self.ids):
            s = self.ids[tid]
            if s.current is not None:
                t, s.current = s.current, None
                t["maybe"], t["partitions"] = True, set()
                self._done(s, t)

    def _done(self, s: _Id, t: dict) -> None:
        """A transaction no later record changes, completed and handed on."""
        pid = t["producer_id"]
        t["history_from_start"] = self._history_from_start(s, pid)
        t["latest_epoch"] = self.latest_epoch.get((t["transactional_id"], pid), -1)
        t["state_at_end"] = (
            "Complete" if t["complete_timestamp"] is not None
            else "Prepare" if t["outcome"] else "Ongoing"
        )  # fmt: skip
        t["partitions"] = [{"topic": tp, "partition": p} for tp, p in sorted(t["partitions"])]
        self.emit("coord_txn", t)

    def _history_from_start(self, s: _Id, pid: int) -> bool:
        """The producer's history starts inside the whole part of the log: at its very start,
        at the producer's initialisation (an Empty record at epoch 0), or where the
        coordinator rotated to it (TV2, 8.3: a record at epoch 0 naming the previous id)."""
        first = s.first_of.get(pid)
        return bool(
            first is not None
            and self._whole(first)
            and (
                self.complete_from.get(first.get("log_partition"), 0) == 0
                or (first["producer_epoch"] == 0 and _starts_producer(first))
            )
        )


def _starts_producer(r: dict) -> bool:
    """The record that first gives a producer id to a transactional id: InitProducerId's Empty
    record, or the Complete (or Empty) record of a rotation to a new id (8.3)."""
    previous = r.get("previous_producer_id")
    return r["state"] == "Empty" or previous not in (None, -1, r["producer_id"])


def _surviving(r: dict, tid: str, ts: int, outcome: str) -> dict:
    """A transaction whose earlier records the log cleaner removed."""
    return {
        "transactional_id": tid,
        "producer_id": r["producer_id"],
        "data_epoch": None,
        "marker_epoch": r["producer_epoch"],
        "outcome": outcome,
        "partitions": set(),
        "start_timestamp": r["start_timestamp"] if r["start_timestamp"] >= 0 else None,
        "prepare_timestamp": None,
        "complete_timestamp": None,
        "timeout_ms": r["timeout_ms"],
        "transaction_version": r.get("client_transaction_version") or 0,
        "fenced": False,
        "maybe": True,
        "log_partition": r.get("log_partition"),
        "first_log_offset": r.get("log_offset"),
    }
