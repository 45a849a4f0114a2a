"""A `__transaction_state` partition's records applied a block at a time, over columns.

:class:`replay.coordinator.CoordinatorReplay` is the reference: a record at a time, every
transactional id's state at once. A block whose records all keep to the coordinator's normal
course (docs/formats.md 8.4: Ongoing, one or more, then PrepareCommit or PrepareAbort, then the
matching Complete, with Empty records between; every transition allowed; nothing in the cleaned
range; no tombstone) is applied here with the same state, rows and order: its records sorted
by transactional id (ids are independent), each id's transactions found as segments from the
Ongoing record that starts them, their partitions unioned over Arrow columns. A Kafka Streams
exactly-once thread commits every 100 ms and writes about seven records a transaction: a
week of one thread is tens of millions of records, none of which becomes a Python object here.

An id's records before its first new transaction in the block (continuing the transaction the
replay holds open) go through the reference replay, as does any block with anything else in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders.columns import as_type
from decoders.transaction_log import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    STATE_CODES,
    TXN_STATES,
    valid_previous_states,
)
from replay import tables as T

if TYPE_CHECKING:
    from replay.coordinator import CoordinatorReplay

NONE = len(TXN_STATES)  # the state of an id with no record yet
_E, _O = STATE_CODES[EMPTY], STATE_CODES[ONGOING]
_PC, _PA = STATE_CODES[PREPARE_COMMIT], STATE_CODES[PREPARE_ABORT]
_CC, _CA = STATE_CODES[COMPLETE_COMMIT], STATE_CODES[COMPLETE_ABORT]
_USUAL = np.array([_E, _O, _PC, _PA, _CC, _CA])


def _allowed() -> np.ndarray:
    """[transaction version 2 or not][previous state][state]: 8.4's transitions as a table."""
    out = np.zeros((2, NONE + 1, NONE + 1), bool)
    for tv2 in (0, 1):
        for code, name in TXN_STATES.items():
            for previous in valid_previous_states(name, 2 if tv2 else 0) or ():
                out[tv2, STATE_CODES[previous], code] = True
    return out


ALLOWED = _allowed()
TXN_FIELDS = T.COORDINATOR_TXNS


def apply_block(replay: CoordinatorReplay, block: pa.RecordBatch) -> bool:
    """Apply ``block`` (records in log order, timestamps filled with -1) as
    :meth:`CoordinatorReplay.record` would one by one; False, changing nothing, where it does
    not keep to the normal course."""
    n = block.num_rows
    cols = _columns(replay, block)
    if cols is None:
        return False
    tids, tcode, new, tv = cols["tids"], cols["tcode"], cols["new"], cols["tv"]
    order = np.argsort(tcode, kind="stable")
    s_new, s_tv = new[order], tv[order]
    first = np.concatenate(([True], tcode[order][1:] != tcode[order][:-1]))
    group_rows = np.flatnonzero(first)
    group_tid = [tids[c] for c in tcode[order][group_rows].tolist()]
    # the state each group (id) starts from, and whether its first transition is judged
    start_state = np.empty(len(group_rows), np.int64)
    judged_first = np.empty(len(group_rows), bool)
    for i, tid in enumerate(group_tid):
        s = replay.ids.get(tid)
        if s is None or s.previous is None:
            if s is not None and s.current is not None:
                return False
            start_state[i], judged_first[i] = NONE, False
            continue
        if not replay._whole(s.previous) or s.state not in STATE_CODES:
            return False
        code = STATE_CODES[s.state]
        held = s.current
        expected_held = (
            held is not None and not held.get("outcome") if code == _O
            else held is not None and bool(held.get("outcome")) if code in (_PC, _PA)
            else held is None
        )  # fmt: skip
        if not expected_held:
            return False  # a state the usual course does not leave
        start_state[i], judged_first[i] = code, True
    prev = np.concatenate(([NONE], s_new[:-1]))
    prev[group_rows] = start_state
    judged = np.ones(n, bool)
    judged[group_rows] = judged_first
    ok = np.where(
        judged, ALLOWED[(s_tv >= 2).astype(np.int64), prev, s_new], np.isin(s_new, (_E, _O))
    )
    prepare = (s_new == _PC) | (s_new == _PA)
    ok &= ~prepare | (prev == _O)  # an abort from no transaction (TV2) starts one: not here
    if not ok.all():
        return False
    starts = (s_new == _O) & (prev != _O)
    # each id's records before its first new transaction continue what the replay holds:
    # through the reference replay; the rest in segments, one per transaction
    started = np.maximum.accumulate(np.where(starts, np.arange(n), -1))
    group_of = np.cumsum(first) - 1
    lead = started < group_rows[group_of]
    captured: list[tuple[int, str, dict]] = []
    emit = replay.emit
    try:
        for i in np.flatnonzero(lead).tolist():
            key = int(order[i])
            replay.emit = lambda kind, row, key=key: captured.append((key, kind, row))
            replay.record(block.slice(key, 1).to_pylist()[0])
    finally:
        replay.emit = emit
    rest = np.flatnonzero(~lead)
    txns = (
        _segments(replay, block, cols, order, rest, starts, group_of, group_tid)
        if len(rest)
        else None
    )
    _hand_on(replay, captured, txns)
    return True


def _columns(replay: CoordinatorReplay, block: pa.RecordBatch) -> dict | None:
    """The block's columns as numpy, or None where a record is outside the usual course: a
    tombstone, a state other than Empty, Ongoing, Prepare or Complete, a missing producer id,
    epoch or place in the log, a record in the cleaned range."""
    col = block.column
    if pc.any(pc.fill_null(col("is_tombstone"), False)).as_py():
        return None
    for name in ("state", "producer_id", "producer_epoch", "log_partition", "log_offset"):
        if col(name).null_count:
            return None
    states, state_idx = T.value_codes(col("state"))
    if any(s not in STATE_CODES for s in states):
        return None
    new = np.array([STATE_CODES[s] for s in states], np.int64)[state_idx]
    if not np.isin(new, _USUAL).all():
        return None
    lp = T.int_column(block, "log_partition")
    lo = T.int_column(block, "log_offset")
    whole_from = np.zeros(len(lp), np.int64)
    for p in np.unique(lp).tolist():
        whole_from[lp == p] = replay.complete_from.get(p, 0)
    if (lo < whole_from).any():
        return None  # the cleaned range: what the reference replay knows not to judge
    tids, tcode = T.value_codes(col("transactional_id"))
    tv = pc.fill_null(col("client_transaction_version").cast(pa.int64()), 0).to_numpy()
    return {
        "tids": tids, "tcode": tcode, "new": new, "tv": tv, "lp": lp, "lo": lo,
        "pid": T.int_column(block, "producer_id"), "epoch": T.int_column(block, "producer_epoch"),
        "ts": T.int_column(block, "last_update_timestamp"),
        "start": T.int_column(block, "start_timestamp"),
    }  # fmt: skip


def _segments(replay, block, cols, order, rest, starts, group_of, group_tid) -> tuple | None:
    """Every transaction that starts in the block: (its row table, each row's emission key),
    the completed ones; the ids' states after the block; the open ones held as the replay holds
    a transaction in progress."""
    rows = order[rest]  # block rows, by id then log order
    new, pid, epoch = cols["new"][rows], cols["pid"][rows], cols["epoch"][rows]
    ts, start_ts, tv = cols["ts"][rows], cols["start"][rows], cols["tv"][rows]
    seg = np.cumsum(starts[rest]) - 1  # every row here follows its id's start
    seg_rows = np.flatnonzero(starts[rest])
    k = len(seg_rows)
    prep = np.full(k, -1, np.int64)
    comp = np.full(k, -1, np.int64)
    is_prep = (new == _PC) | (new == _PA)
    prep[seg[is_prep]] = np.flatnonzero(is_prep)
    is_comp = (new == _CC) | (new == _CA)
    comp[seg[is_comp]] = np.flatnonzero(is_comp)
    sr = seg_rows
    group_of_seg = group_of[rest][sr]  # each transaction's id, as its group in the block
    ids = pa.array(group_tid, pa.string())
    has_prep = prep >= 0
    p = np.maximum(prep, 0)
    outcome = np.where(new[p] == _PC, "COMMIT", "ABORT")
    data_epoch = epoch[sr]
    marker_epoch = epoch[p]
    fenced = has_prep & (outcome == "ABORT") & (marker_epoch > data_epoch) & (tv[sr] < 2)
    partitions = _partition_lists(block, rows, seg, (new == _O) | is_prep, k)
    timeout = block.column("timeout_ms").take(pa.array(rows[sr]))
    columns = {
        "transactional_id": ids.take(pa.array(group_of_seg, pa.int64())),
        "producer_id": pid[sr],
        "data_epoch": data_epoch,
        "marker_epoch": pa.array(marker_epoch, pa.int64(), mask=~has_prep),
        "outcome": pa.array(outcome, pa.string(), mask=~has_prep),
        "partitions": partitions,
        "start_timestamp": np.where(start_ts[sr] >= 0, start_ts[sr], ts[sr]),
        "prepare_timestamp": pa.array(ts[p], pa.int64(), mask=~has_prep),
        "complete_timestamp": pa.array(ts[np.maximum(comp, 0)], pa.int64(), mask=comp < 0),
        "timeout_ms": timeout,
        "transaction_version": tv[sr],
        "fenced": fenced,
        "maybe": np.zeros(k, bool),
        "log_partition": cols["lp"][rows][sr],
        "first_log_offset": cols["lo"][rows][sr],
    }
    table = pa.table(columns)
    # first records of each producer id, then each id's state after its last record
    last_of_id = np.flatnonzero(np.concatenate((group_of[rest][1:] != group_of[rest][:-1], [True])))
    firsts, _ = T.distinct_rows(group_of[rest], pid)
    need = [i for i in firsts.tolist() if pid[i] >= 0]
    picked = sorted(set(need) | set(last_of_id.tolist()))
    dicts = dict(zip(picked, block.take(pa.array(rows[picked])).to_pylist(), strict=True))
    for i in need:
        replay.state_of(group_tid[group_of[rest][i]]).first_of.setdefault(int(pid[i]), dicts[i])
    for i in last_of_id.tolist():
        s = replay.state_of(group_tid[group_of[rest][i]])
        s.state, s.previous, s.current = TXN_STATES[int(new[i])], dicts[i], None
    # the transactions still open: held as the reference replay holds them
    open_ = np.flatnonzero(comp < 0)
    if len(open_):
        for j, row in zip(open_.tolist(), table.take(pa.array(open_)).to_pylist(), strict=True):
            row["partitions"] = {(e["topic"], e["partition"]) for e in row["partitions"]}
            for name in ("data_epoch", "marker_epoch"):
                row[name] = None if row[name] is None else int(row[name])
            replay.ids[group_tid[group_of_seg[j]]].current = row
    done = np.flatnonzero(comp >= 0)
    if not len(done):
        return None
    table = table.take(pa.array(done))
    known, latest = _per_producer(replay, group_tid, group_of_seg[done], pid[sr][done])
    table = table.append_column("history_from_start", pa.array(known))
    table = table.append_column("latest_epoch", pa.array(latest))
    table = table.append_column("state_at_end", pa.repeat("Complete", len(done)))
    return table, order[rest][comp[done]]


def _per_producer(replay, group_tid: list[str], groups: np.ndarray, pids: np.ndarray) -> tuple:
    """Whether each completed transaction's producer's history starts in the whole log, and
    its latest epoch: asked once per (id, producer id) and spread by index (a long-lived
    producer's million transactions are one pair)."""
    first, at = T.distinct_rows(groups, pids)
    known, latest = [], []
    for g, p in zip(groups[first].tolist(), pids[first].tolist(), strict=True):
        known.append(replay._history_from_start(replay.ids[group_tid[g]], p))
        latest.append(replay.latest_epoch.get((group_tid[g], p), -1))
    return np.array(known, bool)[at], np.array(latest, np.int64)[at]


def _partition_lists(block, rows, seg, adds, k) -> pa.Array:
    """Per segment, the partitions its Ongoing and Prepare records name, each once, sorted by
    topic and partition (as the reference replay's set, sorted). Read over the block's own
    column, in its order (``rows``: the block's rows as the segments hold them): a take of
    the nested column, and a topic string per listed partition, were a seventh of a
    long-lived producer's coordinator replay."""
    lists = block.column("partitions")
    entries = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False)
    structs = lists.flatten()
    topic, numbers = structs.flatten()
    per_entry = pc.list_value_length(numbers).fill_null(0).to_numpy(zero_copy_only=False)
    number = numbers.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    # each listed partition's block row, and that row's place among ``rows`` (-1: none)
    row_of = np.repeat(np.repeat(np.arange(block.num_rows), entries), per_entry)
    place = np.full(block.num_rows + 1, -1, np.int64)
    place[rows] = np.arange(len(rows))
    at = place[row_of]
    keep = at >= 0
    keep[keep] = adds[at[keep]]
    # topics by their code among the block's few names (a code per entry, spread to its
    # partitions), ranked by name
    names, code = T.value_codes(topic) if len(topic) else ([], np.zeros(0, np.int64))
    rank = np.argsort(np.argsort(np.array(names, dtype=object))) if names else np.zeros(0, int)
    r = rank[np.repeat(code, per_entry)[keep]] if len(code) else np.zeros(0, np.int64)
    s, number = seg[at[keep]], number[keep]
    first, _ = T.distinct_rows(s, r, number)  # sorted by segment, topic, partition
    s, r, number = s[first], r[first], number[first]
    offsets = np.concatenate(([0], np.cumsum(np.bincount(s, minlength=k))))
    sorted_names = pa.array(sorted(names), pa.string())
    tp = pa.StructArray.from_arrays(
        [sorted_names.take(pa.array(r, pa.int64())), pa.array(number, pa.int32())],
        fields=list(T.TYPES["list<tp>"].value_type),
    )
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), tp)


def _hand_on(replay, captured, txns) -> None:
    """The block's rows out in the order the reference replay gives them: by the record that
    completed each."""
    findings = [(key, row) for key, kind, row in captured if kind == "finding"]
    for _, row in sorted(findings, key=lambda x: x[0]):
        replay.emit("finding", row)
    rows = [(key, row) for key, kind, row in captured if kind == "coord_txn"]
    parts, keys = [], []
    if rows:
        parts.append(T.table_of_rows(TXN_FIELDS, [r for _, r in rows]))
        keys.append(np.array([k for k, _ in rows], np.int64))
    if txns is not None:
        table, k = txns
        parts.append(
            pa.table([as_type(table.column(f.name), f.type) for f in TXN_FIELDS], schema=TXN_FIELDS)
        )
        keys.append(np.asarray(k, np.int64))
    if not parts:
        return
    table = pa.concat_tables(parts)
    table = table.take(pa.array(np.argsort(np.concatenate(keys), kind="stable")))
    replay.emit_rows("coord_txn", table)
