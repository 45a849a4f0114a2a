"""Aborted-read leakage in one partition: which groups' committed offsets passed over records
of aborted (or still open) transactions, and which of them provably read uncommitted.

docs/formats.md 10.7: a read_committed consumer is bounded by the LSO, so a commit beyond the
first offset of a transaction that was still open at commit time proves the group read
uncommitted; so does a declared isolation level. The commit is stamped by the group
coordinator's clock and the marker by the partition leader's: the commit must precede the
marker (or, with no marker in the copy, the end of the partition's copy) by more than the clock
tolerance (docs/cross-log.md).
A group that passed aborted records without such proof is only exposed (info).

A partition's history is read once, in offset order, a batch at a time (:class:`PartitionLeakage`):
a long-lived producer writes millions of transactions to a partition and its consumers commit
as often, so neither sequence is held. What is kept is a running bound, one small state per
group, and the partition's transactions in a bounded store (:mod:`replay.spill`) read again
only for a group that passed an aborted one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.findings import finding
from replay.spill import SpilledRows
from replay.tables import int_column, runs, value_codes

# the outcomes of transactions whose records a read_committed consumer never returns
NOT_COMMITTED = ("ABORT", "OPEN")
OUTCOMES = ("COMMIT", "ABORT", "OPEN")  # codes 1, 2, 3; 0 none

# a transaction of the partition, as a row of int64 columns (null -1)
(T_FIRST, T_LAST, T_MARKER_OFFSET, T_MARKER_TS, T_STOP_TS, T_OUTCOME, T_RECORDS, T_PRODUCER,
 T_EPOCH) = range(9)  # fmt: skip
T_COLUMNS = 9
TXN_FIELDS = {
    T_FIRST: "first_offset", T_LAST: "last_offset", T_MARKER_OFFSET: "marker_offset",
    T_MARKER_TS: "marker_timestamp", T_RECORDS: "record_count", T_PRODUCER: "producer_id",
    T_EPOCH: "producer_epoch",
}  # fmt: skip
COMMIT_COLUMNS = ("group_id", "committed_offset", "effective_timestamp", "effective_log_offset",
                  "producer_id")  # fmt: skip
NONE = -(1 << 62)  # no bound yet
SCAN_ROWS = 8_192  # transactions read at once (~0.6 MB)


def _value(v) -> int | None:
    return None if v < 0 else int(v)


class _Group:
    """One group's commits on the partition: the highest, which producers committed them, and
    the first (in time, then in the coordinator's log) made past an open transaction."""

    def __init__(self) -> None:
        self.top: int | None = None
        self.producers: set[int] = set()
        self.proof: tuple[int, int, int] | None = None  # (timestamp, log offset, offset)


class PartitionLeakage:
    """Aborted reads in one partition, from its transactions and its groups' effective commits
    fed in one order: by offset (a transaction's first offset, a commit's committed offset), a
    commit before a transaction at the same offset (it is past only transactions starting
    below it). :meth:`transactions` and :meth:`commits` take any pieces in that order;
    :meth:`finish` gives the findings."""

    def __init__(self, topic: str, partition: int, declared: dict[str, str], skew_ms: int) -> None:
        self.topic, self.partition, self.declared, self.skew = topic, partition, declared, skew_ms
        self.all = SpilledRows(T_COLUMNS)  # every transaction, for a proof's
        self.bad = SpilledRows(T_COLUMNS)  # the aborted and open ones
        self.bound = NONE  # latest (end of openness - tolerance) of the transactions so far
        self.groups: dict[str, _Group] = {}

    def transactions(self, t: pa.Table) -> None:
        """Rows of the `transactions` table (with ``copy_end_timestamp``), by first offset."""
        if not t.num_rows:
            return
        rows = np.zeros((t.num_rows, T_COLUMNS), np.int64)
        for col, name in TXN_FIELDS.items():
            rows[:, col] = int_column(t, name)
        codes = pc.add(pc.index_in(t.column("outcome"), pa.array(OUTCOMES)), 1)
        rows[:, T_OUTCOME] = pc.fill_null(codes, 0).to_numpy()
        # when it stopped being open: its marker, or with no marker in this copy the copy's
        # end (if one comes, it comes after); unknown: -1
        end = int_column(t, "copy_end_timestamp")
        rows[:, T_STOP_TS] = np.where(rows[:, T_MARKER_TS] >= 0, rows[:, T_MARKER_TS], end)
        known = rows[:, T_STOP_TS] >= 0
        if known.any():
            self.bound = max(self.bound, int(rows[known, T_STOP_TS].max()) - self.skew)
        self.all.append(rows)
        self.bad.append(rows[rows[:, T_OUTCOME] >= 2])

    def commits(self, t: pa.Table) -> None:
        """Effective commit rows (:data:`COMMIT_COLUMNS`) of any groups, by committed offset:
        a commit made before the marker (less the tolerance) of a transaction starting below
        it was past the LSO then."""
        offsets = int_column(t, "committed_offset")
        keep = np.flatnonzero(offsets >= 0)
        if not len(keep):
            return
        ts, log = (
            int_column(t, "effective_timestamp")[keep],
            int_column(t, "effective_log_offset")[keep],
        )
        offsets = offsets[keep]
        pids = int_column(t, "producer_id")[keep]
        names, codes = value_codes(t.column("group_id"))
        codes = codes[keep]
        for code in np.unique(codes).tolist():
            g, at = names[code], codes == code
            state = self.groups.setdefault(g, _Group())
            top = int(offsets[at].max())
            state.top = top if state.top is None else max(state.top, top)
            state.producers.update(int(p) for p in np.unique(pids[at]) if p >= 0)
            past = at & (ts < self.bound)
            if past.any():
                i = np.flatnonzero(past)[np.lexsort((log[past], ts[past]))[0]]
                found = (int(ts[i]), int(log[i]), int(offsets[i]))
                if state.proof is None or found[:2] < state.proof[:2]:
                    state.proof = found

    def finish(self) -> list[dict]:
        out = []
        if len(self.bad):
            for group, state in sorted(self.groups.items()):
                passed = _rows_below(self.bad, state.top)
                if not len(passed):
                    continue
                isolation = self.declared.get(group)
                if isolation == "read_committed":
                    continue  # declared read_committed: it skipped them
                proof = self._proof(state.proof)
                out.append(self._finding(group, state, passed, proof, isolation))
        self.all.close()
        self.bad.close()
        return out

    def _proof(self, commit: tuple[int, int, int] | None) -> dict | None:
        """The first transaction (by offset) the proving commit was past while it was open."""
        if commit is None:
            return None
        ts, log, offset = commit
        for start in range(0, len(self.all), SCAN_ROWS):
            rows = self.all.rows(start, start + SCAN_ROWS)
            hit = (
                (rows[:, T_STOP_TS] >= 0)
                & (rows[:, T_FIRST] < offset)
                & (ts < rows[:, T_STOP_TS] - self.skew)
            )
            if hit.any():
                t = rows[int(np.argmax(hit))]
                return {
                    "commit_offset": offset,
                    "commit_timestamp": ts,
                    "commit_log_offset": log,
                    "open_transaction_first_offset": int(t[T_FIRST]),
                    "open_transaction_producer_id": int(t[T_PRODUCER]),
                    "marker_timestamp": _value(t[T_MARKER_TS]),
                }
        return None  # pragma: no cover (the commit was chosen because one exists)

    def _finding(self, group: str, state: _Group, passed: np.ndarray, proof: dict | None,
                 isolation: str | None) -> dict:  # fmt: skip
        """The finding of a group whose commits (up to ``top``) passed over aborted or open
        transactions: a leak when proved (a commit past the LSO, or read_uncommitted
        declared), else only an exposure, since a read_committed consumer would have skipped
        them."""
        topic, partition = self.topic, self.partition
        leaked = int(passed[:, T_RECORDS].clip(0).sum())
        producers = sorted(int(p) for p in np.unique(passed[:, T_PRODUCER]))
        where = {
            "topic": topic,
            "partition": partition,
            "group_id": group,
            "producer_id": producers[0],
            "first_offset": int(passed[:, T_FIRST].min()),
            "last_offset": int(passed[:, T_LAST].max()),
            "record_count": leaked,
        }
        evidence = {
            "max_committed_offset": state.top,
            "transactions": [_evidence(r) for r in passed[:20]],
            "producers": producers,
            "declared_isolation": isolation,
            "commit_producer_ids": sorted(state.producers),
        }
        if proof is None and isolation != "read_uncommitted":
            return finding(
                "aborted_read_exposure",
                f"group {group!r} committed past {leaked} records of aborted or open "
                f"transactions in {topic}-{partition}; they leaked if it read uncommitted",
                evidence,
                **where,
            )
        evidence["proof"] = proof or {"declared": "read_uncommitted"}
        return finding(
            "aborted_read_leak",
            f"group {group!r} read uncommitted and consumed {leaked} records of aborted or "
            f"open transactions in {topic}-{partition}",
            evidence,
            **where,
        )


def _rows_below(store: SpilledRows, top: int | None) -> np.ndarray:
    """The transactions of ``store`` starting below ``top``."""
    if top is None:
        return np.zeros((0, T_COLUMNS), np.int64)
    parts = []
    for start in range(0, len(store), SCAN_ROWS):
        rows = store.rows(start, start + SCAN_ROWS)
        parts.append(rows[rows[:, T_FIRST] < top])
    return np.concatenate(parts) if parts else np.zeros((0, T_COLUMNS), np.int64)


def _evidence(r: np.ndarray) -> dict:
    """A passed-over transaction as the finding's evidence shows it."""
    out = {name: _value(r[col]) for col, name in TXN_FIELDS.items()}
    out["outcome"] = OUTCOMES[int(r[T_OUTCOME]) - 1] if r[T_OUTCOME] > 0 else None
    return {k: out[k] for k in _EVIDENCE_FIELDS}


# The fields of a passed-over transaction the finding's evidence shows.
_EVIDENCE_FIELDS = (
    "producer_id", "producer_epoch", "first_offset", "last_offset", "marker_offset", "outcome",
    "record_count", "marker_timestamp",
)  # fmt: skip
TXN_COLUMNS = (*_EVIDENCE_FIELDS, "copy_end_timestamp")


def judge_partition(
    topic: str,
    partition: int,
    transactions: list[dict[str, Any]],
    commits: list[dict[str, Any]],
    declared: dict[str, str],
    skew_ms: int,
) -> list[dict]:
    """transactions: this partition's rows (COMMIT, ABORT, OPEN); commits: effective commit
    timeline rows of every group on this partition; declared: group -> isolation level.
    Whole lists, fed to :class:`PartitionLeakage` in its order."""
    judge = PartitionLeakage(topic, partition, declared, skew_ms)
    for kind, piece in _merged(transactions, commits):
        (judge.commits if kind == 0 else judge.transactions)(piece)
    return judge.finish()


def _merged(transactions: list[dict], commits: list[dict]) -> Iterator[tuple[int, pa.Table]]:
    """Both lists as one sequence of runs in offset order (a commit before a transaction at
    the same offset): (0 commits or 1 transactions, a table of the run)."""
    keyed = [(t["first_offset"], 1, i) for i, t in enumerate(transactions)]
    keyed += [(c["committed_offset"], 0, i) for i, c in enumerate(commits)
              if c["committed_offset"] is not None]  # fmt: skip
    keyed.sort()
    run: list[dict] = []
    kind = None
    for _, k, i in keyed:
        if k != kind and run:
            yield kind, _table(kind, run)
            run = []
        kind = k
        run.append(transactions[i] if k else commits[i])
    if run:
        yield kind, _table(kind, run)


TXN_SCHEMA = pa.schema([(n, pa.string() if n == "outcome" else pa.int64()) for n in TXN_COLUMNS])
COMMIT_SCHEMA = pa.schema([(n, pa.string() if n == "group_id" else pa.int64())
                           for n in COMMIT_COLUMNS])  # fmt: skip


def _table(kind: int, rows: list[dict]) -> pa.Table:
    schema = TXN_SCHEMA if kind else COMMIT_SCHEMA
    return pa.Table.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=schema)


# the stream Spark's sort gives a leakage task: (cluster, topic, partition), then by offset a
# commit (kind 0, its producer id as ``commit_producer_id``) before a transaction (kind 1)
KIND, OFFSET = "_kind", "_offset"


def leaks_stream(batches: Iterator[pa.RecordBatch], declared: dict[str, str], skew_ms: int,
                 cluster_column: str) -> Iterator[pa.Table]:  # fmt: skip
    """Findings of every partition of a sorted stream, each with its cluster first."""
    from replay import tables as T

    judge: PartitionLeakage | None = None
    key = None
    found: list[dict] = []

    def done() -> None:
        found.extend({cluster_column: key[0], **f} for f in judge.finish())

    for batch in batches:
        t = pa.Table.from_batches([batch])
        if not t.num_rows:
            continue
        clusters, cluster_codes = value_codes(t.column(cluster_column))
        topics, topic_codes = value_codes(t.column("topic"))
        parts, kinds = int_column(t, "partition"), int_column(t, KIND)
        for a, b in runs(cluster_codes, topic_codes, parts, kinds):
            now = (clusters[cluster_codes[a]], topics[topic_codes[a]], int(parts[a]))
            if now != key:
                if judge is not None:
                    done()
                key, judge = now, PartitionLeakage(now[1], now[2], declared, skew_ms)
            piece = t.slice(a, b - a)
            if int(kinds[a]) == 0:
                piece = piece.select([*COMMIT_COLUMNS[:-1], "commit_producer_id"]).rename_columns(
                    list(COMMIT_COLUMNS)
                )
                judge.commits(piece)
            else:
                judge.transactions(piece)
    if judge is not None:
        done()
    schema = pa.schema([pa.field(cluster_column, pa.string()), *T.FINDINGS])
    yield pa.Table.from_pylist(found, schema=schema)
