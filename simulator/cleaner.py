"""The log cleaner of a compacted partition, as it leaves the log (docs/formats.md 10.8).

Runs on a closed partition directory: every segment below the first uncleanable offset (the
active segment's base, or the first offset of an open transaction) is rewritten, offsets kept:
- a record survives when it has a key and is the latest record of that key in the cleaned
  range; records of aborted transactions are removed;
- transaction markers whose transaction has no data left are removable: the first pass stamps
  them with a delete horizon (3.8), a pass after the horizon drops them;
- a batch left without records is dropped, except the last data batch of each producer
  (sequence state) and the last batch of the cleaned range, kept as empty headers (3.7).
The batch header keeps producer id, epoch, base sequence and lastOffsetDelta.
"""

from __future__ import annotations

import os
import shutil

import pyarrow as pa

from decoders import iter_file
from simulator.writer import PartitionWriter, Record, build_batch, empty_batch

DELETE_RETENTION_MS = 86_400_000  # delete.retention.ms


def _ms(ts) -> int:
    return -1 if ts is None else int(ts.timestamp() * 1000)


# A segment as the cleaner reads it: its batches, and its records by their batch's position.
_Segment = tuple[list[dict], dict[int, list[dict]]]


def _read(path: str) -> _Segment:
    batches: list[dict] = []
    records: dict[int, list[dict]] = {}
    for name, rb in iter_file(path, ("batches", "records")):
        rows = pa.Table.from_batches([rb]).to_pylist()
        if name == "batches":
            batches.extend(rows)
        elif name == "records":
            for r in rows:
                records.setdefault(r["batch_position"], []).append(r)
    return batches, records


def clean_twice(
    log, now: int, delete_retention_ms: int = DELETE_RETENTION_MS, d: str | None = None,
    cut: int | None = None, limit: int | None = None,
) -> int:  # fmt: skip
    """Two cleaner passes as a long-lived broker makes them: the first over the older half of
    the segments, the second past its delete horizon over everything cleanable. Markers the
    first pass stamped are gone; those the second pass found removable carry a horizon."""
    d = d or log.writer.dir
    limit = limit if limit is not None else cut
    n = len(_segments(d, limit))
    if n >= 3:
        clean(log, now, delete_retention_ms, max_segments=(n - 1) // 2, d=d, cut=cut, limit=limit)
        now += delete_retention_ms + 1
    return clean(log, now, delete_retention_ms, d=d, cut=cut, limit=limit)


def _segments(d: str, limit: int | None) -> list[str]:
    """The segments the cleaner may consider: those starting below ``limit`` (the shortest
    replica's end, so every replica cleans the same range and stays byte-identical there)."""
    logs = sorted(f for f in os.listdir(d) if f.endswith(".log"))
    if limit is None:
        return logs
    return [f for i, f in enumerate(logs) if i == 0 or int(f[:20]) < limit]


def clean(
    log, now: int, delete_retention_ms: int = DELETE_RETENTION_MS, max_segments: int | None = None,
    d: str | None = None, cut: int | None = None, limit: int | None = None,
) -> int:  # fmt: skip
    """Clean ``log`` (a closed PartitionLog) in place, or its copy in directory ``d`` whose log
    ends before offset ``cut`` (transactions whose marker lies past the cut are open there);
    returns the cleaned-up-to offset."""
    d = d or log.writer.dir
    cut = log.log_end_offset if cut is None else cut
    limit = cut if limit is None else limit
    logs = sorted(f for f in os.listdir(d) if f.endswith(".log"))
    n_clean = _cleanable_count(log, d, logs, limit, max_segments)
    if not n_clean:
        return 0
    upto = int(logs[n_clean][:20])
    read = [_read(os.path.join(d, f)) for f in logs]
    w = PartitionWriter(os.path.join(os.path.dirname(d), ".cleaning"), log.topic, log.partition,
                        segment_bytes=log.writer.segment_bytes,
                        index_interval_bytes=log.writer.index_interval_bytes)  # fmt: skip
    out_dir = w.dir
    aborted = {
        i for i, t in enumerate(log.txns) if t.outcome == "ABORT" and t.marker_offset < limit
    }
    cleaned, txn_data_left = _kept_records(log, read[:n_clean], aborted)
    last_data_batch = _last_data_batches(read)
    last_index = len(cleaned) - 1
    for i, (b, rs, txn) in enumerate(cleaned):
        pid = b["producer_id"]
        batch = _cleaned_batch(
            d, b, rs, now, delete_retention_ms,
            removable=txn_data_left.get(txn, 0) == 0 and i != last_index,
            keep_empty=(pid >= 0 and last_data_batch.get(pid) == b["base_offset"])
            or i == last_index,
        )  # fmt: skip
        if batch is None:
            continue
        w.append(batch, leader_epoch=b["partition_leader_epoch"], base_offset=b["base_offset"])
        _index_aborts(log, w, b["base_offset"], b["last_offset"])
    w.next_offset = upto
    w.roll()
    _copy_dirty(log, w, d, read[n_clean:])
    w.epochs = [(e, o) for e, o in log.writer.epochs if o < cut or o == 0]
    w.close()
    _replace(d, out_dir)
    return upto


def _cleanable_count(log, d: str, logs: list[str], limit: int, max_segments: int | None) -> int:
    """How many of the first segments this pass rewrites (0: none). The cleaner stops at the
    first uncleanable offset: the active segment's base (or that of the segment ``max_segments``
    in, for a pass over the older part only), or the first offset of a transaction still open
    below ``limit``, so an open transaction's records are never compacted under it."""
    considered = _segments(d, limit)
    if len(considered) < 2:
        return 0
    first_unstable = min(
        (
            t.first_offset
            for t in log.txns
            if t.first_offset < limit and not (0 <= t.marker_offset < limit)
        ),
        default=None,
    )
    active_base = int(considered[-1][:20])
    if max_segments is not None:
        active_base = int(considered[min(max_segments, len(considered) - 1)][:20])
    upto = active_base if first_unstable is None else min(active_base, first_unstable)
    return len([f for f, nxt in zip(logs, logs[1:], strict=False) if int(nxt[:20]) <= upto])


def _kept_records(
    log, read: list[_Segment], aborted: set[int]
) -> tuple[list[tuple[dict, list[dict], int]], dict[int, int]]:
    """Each batch of the cleaned segments with the records it keeps and its transaction (-1
    without): a data record survives when it has a key, is its key's latest in the cleaned range
    and its transaction did not abort; markers keep theirs. Also returns how many records each
    transaction has left, which decides whether its markers are removable."""
    txn_of = {b.base: b.txn for b in log.batches if b.txn >= 0}
    latest: dict[bytes, int] = {}
    for _, records in read:
        for rs in records.values():
            for r in rs:
                if r["key"] is not None and not r["is_control"]:
                    latest[r["key"]] = r["offset"]
    txn_data_left: dict[int, int] = {}
    cleaned = []
    for batches, records in read:
        for b in batches:
            rs = records.get(b["position"], [])
            txn = txn_of.get(b["base_offset"], -1)
            if b["is_control"]:
                cleaned.append((b, rs, txn))
                continue
            keep = [
                r
                for r in rs
                if r["key"] is not None
                and latest.get(r["key"]) == r["offset"]
                and txn not in aborted
            ]
            if txn >= 0:
                txn_data_left[txn] = txn_data_left.get(txn, 0) + len(keep)
            cleaned.append((b, keep, txn))
    return cleaned, txn_data_left


def _last_data_batches(read: list[_Segment]) -> dict[int, int]:
    """Producer id -> base offset of its last data batch in the whole log: that batch keeps its
    header even when emptied, since it carries the producer's sequence state (3.7)."""
    last_data_batch = {}
    for batches, _ in read:
        for b in batches:
            if b["producer_id"] >= 0 and not b["is_control"]:
                last_data_batch[b["producer_id"]] = b["base_offset"]
    return last_data_batch


def _cleaned_batch(
    d: str, b: dict, rs: list[dict], now: int, delete_retention_ms: int, *, removable: bool,
    keep_empty: bool,
) -> bytes | None:  # fmt: skip
    """What becomes of one batch of the cleaned range (None: dropped). ``removable``: a marker
    whose transaction has no data left and that is not the range's last batch; ``keep_empty``:
    a data batch whose header must stay when no record is left."""
    if b["is_control"]:
        if removable:
            return _stamped_marker(b, rs, now, delete_retention_ms)
        return _original(d, b)
    if rs:
        return _original(d, b) if len(rs) == b["record_count"] else _rebuilt(b, rs)
    return empty_batch(_original(d, b)) if keep_empty else None


def _stamped_marker(b: dict, rs: list[dict], now: int, delete_retention_ms: int) -> bytes | None:
    """A removable marker: dropped once a pass runs past its delete horizon, else rewritten
    with the horizon (kept from an earlier pass, or set now), as the broker stamps it (3.8)."""
    stamped = b["delete_horizon"] is not None
    if stamped and _ms(b["delete_horizon"]) <= now:
        return None  # a later pass after the horizon drops it
    horizon = _ms(b["delete_horizon"]) if stamped else now + delete_retention_ms
    marker = rs[0] if rs else None
    if marker is None:
        return None
    return build_batch(
        [Record(marker["key"], marker["value"], timestamp=_ms(marker["timestamp"]))],
        producer_id=b["producer_id"], producer_epoch=b["producer_epoch"],
        transactional=True, control=True, delete_horizon=horizon,
    )  # fmt: skip


def _rebuilt(b: dict, rs: list[dict]) -> bytes:
    """A data batch that lost some records: its survivors at their own offsets, under the
    original header's producer id, epoch, base sequence and lastOffsetDelta."""
    return build_batch(
        [Record(r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]],
                _ms(r["timestamp"]), r["offset"] - b["base_offset"]) for r in rs],
        producer_id=b["producer_id"], producer_epoch=b["producer_epoch"],
        base_sequence=b["base_sequence"], transactional=b["is_transactional"],
        last_offset_delta=b["last_offset_delta"], max_timestamp=_ms(b["max_timestamp"]),
    )  # fmt: skip


def _copy_dirty(log, w: PartitionWriter, d: str, read: list[_Segment]) -> None:
    """The segments past the cleaned range, batch for batch as they were (the dirty section)."""
    for batches, _ in read:
        for b in batches:
            w.append(
                _original(d, b),
                leader_epoch=b["partition_leader_epoch"],
                base_offset=b["base_offset"],
            )
            _index_aborts(log, w, b["base_offset"], b["last_offset"])


def _replace(d: str, out_dir: str) -> None:
    """Swap the cleaned copy in for ``d``, producer snapshots carried over (the cleaner does not
    touch them), and forget the old segments' bytes."""
    for f in os.listdir(d):
        if f.endswith(".snapshot"):
            shutil.copy(os.path.join(d, f), out_dir)
    _FILES.clear()
    shutil.rmtree(d)
    os.rename(out_dir, d)
    os.rmdir(os.path.dirname(out_dir))


_FILES: dict[str, bytes] = {}  # the segments of the directory being cleaned, read once


def _original(d: str, b: dict) -> bytes:
    path = os.path.join(d, os.path.basename(b["file"]))
    if path not in _FILES:
        with open(path, "rb") as f:
            _FILES[path] = f.read()
    return _FILES[path][b["position"] : b["position"] + b["size"]]


def _index_aborts(log, w: PartitionWriter, base: int, last: int) -> None:
    """A marker batch is one offset: look the aborted transaction up by its marker's offset."""
    t = _aborted_by_marker(log).get(base)
    if t is not None:
        w.add_aborted(t.producer_id, t.first_offset, t.marker_offset, t.lso)


def _aborted_by_marker(log) -> dict:
    cached = getattr(log, "_aborted_by_marker", None)
    if cached is None or cached[0] != len(log.txns):
        table = {t.marker_offset: t for t in log.txns if t.outcome == "ABORT" and t.lso >= 0}
        cached = (len(log.txns), table)
        log._aborted_by_marker = cached
    return cached[1]
