"""Where a previous run's replay of a partition ended, found again in a later copy of its log.

A run publishes each partition's point (``replay_states``: the batch that reaches the log end,
its segment, byte position and stored CRC; :func:`replay.carried.carried_row`); a later run
finds it in its own copy the way a broker finds a snapshot's offset in its log, reading batch
headers only, and follows how the log changed in between (docs/incremental.md): segments
rolled after the point, retention that deleted the point's segment, the cleaner that rewrote
it, a truncation below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decoders.layout import DumpFile
from decoders.planning import ByteRange
from replay.carried import STATE_VERSION


@dataclass
class Resumed:
    """Where a replica's replay goes on in a later copy of its log, from a ``replay_states``
    row: the byte ranges to read (the batches after the carried point, in offset order),
    whether the carried state holds there (``carried``; else the replica is replayed from its
    log start) and, when the log changed below or at the point, what happened (``reason``)."""

    ranges: list[ByteRange] = field(default_factory=list)
    carried: bool = True
    reason: str | None = None
    change: str | None = None  # retention, rewritten or truncated (:data:`CHANGES`)
    log_end: int | None = None  # truncated: where the log ends now


# how a log changed below or at a previous run's point (what :func:`resume_from` tells apart)
CHANGES = ("retention", "rewritten", "truncated", "recreated", "state_layout")


def resume_from(row: dict[str, Any], logs: list[DumpFile]) -> Resumed:
    """Find a ``replay_states`` row's point in a later copy of the replica's log (``logs``: its
    `.log` segments), the way a broker finds a snapshot's offset in its log: the same batch at
    the same place (segment, byte position, base offset, stored CRC) and the rest read from
    after it. A log changes between two copies as logs do (docs/incremental.md):

    - segments rolled after the point: read in full;
    - retention deleted the segment of the point: the log goes on from the first batch at or
      after the carried log end. Where offsets between the two were deleted before any run
      read them, the carried producer states miss what they held (a transaction the carried
      state has open may have ended there, another begun), so the replica is replayed from
      its log start as a full audit of this copy replays it (from the producer snapshot),
      and what the chain carried of it lies below its log start (replay.previous);
    - the cleaner rewrote the segment (the batch at the point changed, or the segment was
      merged into an earlier one: a segment below it is still there, which retention never
      leaves; the log still reaches past it): headers read to the first batch at or after the
      carried log end;
    - the log ends below the carried log end (truncated: an unclean election, a restore): the
      carried state does not hold; the replica is replayed from its log start.

    Only batch headers are read to find the point, never a deep decode of older bytes."""
    segments = sorted((f for f in logs if f.kind == "log"), key=lambda f: f.info.base_offset)
    end = row["log_end_offset"]
    at = next((f for f in segments if f.info.base_offset == row["segment_base_offset"]), None)
    if at is not None and row["segment_position"] is not None:
        first = _first_batch(at, row["segment_position"])
        if first is not None and (first["base_offset"], first["crc"]) == (
            row["last_batch_offset"],
            row["last_batch_crc"],
        ):
            later = [f for f in segments if f.info.base_offset > at.info.base_offset]
            start = row["segment_position"] + first["size"]
            return Resumed([ByteRange(at, start, at.size), *_whole(later)])
    # the point is gone: the first batch at or after the carried log end, if the log reaches it
    for i, f in enumerate(segments):
        nxt = segments[i + 1].info.base_offset if i + 1 < len(segments) else None
        if nxt is not None and nxt <= end:
            continue  # every offset of this segment lies below the carried end
        found = _first_from(f, end)
        if found is None:
            continue
        position, base = found
        # retention deletes a log's oldest segments; a segment below the point's still there
        # means the cleaner merged the point's into it (LogCleaner groups small segments)
        theirs = row["segment_base_offset"]
        merged = at is None and theirs is not None and segments[0].info.base_offset < theirs
        if at is None and not merged:
            why = "the segment of the carried point is gone (retention)"
        elif merged:
            why = ("the segment of the carried point was merged into an earlier one (the log "
                   "cleaner rewrote it)")  # fmt: skip
        else:
            why = "the batch at the carried point changed (the log cleaner rewrote its segment)"
        change = "retention" if at is None and not merged else "rewritten"
        if base > end:
            why += f"; offsets {end}..{base - 1} were gone before a run read them"
            if change == "retention":  # the carried state misses what they held
                return Resumed(_whole(segments), False, why + ": replayed from its start",
                               change)  # fmt: skip
        return Resumed([ByteRange(f, position, f.size), *_whole(segments[i + 1 :])], True, why,
                       change)  # fmt: skip
    now = _log_end(segments)
    if now >= end:
        return Resumed([], True, None)  # nothing after the carried point yet
    return Resumed(_whole(segments), False,
                   f"the log ends at {now}, below the carried log end {end} (truncated): "
                   "replayed from its start", "truncated", now)  # fmt: skip


# the columns of a replay_states row that say where a replay ended (its point)
POINT_COLUMNS = (
    "cluster", "topic", "partition", "broker", "topic_id", "high_watermark", "log_end_offset",
    "last_batch_offset", "last_batch_crc", "segment_base_offset", "segment_position",
    "state_version",
)  # fmt: skip


def resumed_at(point: dict[str, Any], logs: list[DumpFile], topic_id: str | None = None
               ) -> tuple[dict[str, Any], Resumed | None]:  # fmt: skip
    """What a replica's log did since a previous run's replay ended at ``point`` (a
    ``replay_states`` row's :data:`POINT_COLUMNS`), as a scan task reports it (whether the
    carried state holds, the bytes past the point out of the log's, how the log changed), and
    where it goes on (:func:`resume_from`; None: nowhere). ``topic_id``: the replica's now;
    where both runs know theirs and they differ, the topic was deleted and created again: its
    log starts anew, nothing carries over and nothing of it was truncated."""
    log_bytes = sum(f.size for f in logs if f.kind == "log")
    before = point.get("topic_id")
    if before and topic_id and before != topic_id:
        return {"carried": False, "change": "recreated", "bytes_after": log_bytes,
                "log_bytes": log_bytes,
                "reason": f"the topic was deleted and created again (topic id {topic_id}, was {before})"}, None  # fmt: skip
    if point.get("state_version") != STATE_VERSION:
        return {"carried": False, "reason": f"a state of layout {point.get('state_version')}",
                "change": "state_layout", "bytes_after": log_bytes, "log_bytes": log_bytes}, None  # fmt: skip
    found = resume_from(point, logs)
    return {
        "carried": found.carried,
        "reason": found.reason,
        "change": found.change,
        "bytes_after": sum(r.size for r in found.ranges),
        "log_bytes": log_bytes,
        "log_end_offset": found.log_end,
    }, found


def truncation_finding(point: dict[str, Any], since: dict[str, Any], topic: str,
                       partition: int) -> dict | None:  # fmt: skip
    """A log that ends now below the high watermark its broker had checkpointed when the
    previous run's copy was taken lost committed records: `committed_data_truncated`. A leader
    acknowledges a record to an `acks=all` producer, and consumers read it, only once the
    high watermark passes it (``Partition.maybeIncrementLeaderHW``); a leader's log also holds
    records above the high watermark, which a leader change truncates as Kafka intends
    (``UnifiedLog.truncateTo``, on becoming a follower). So only what lay below the
    checkpointed high watermark counts (the checkpoint lags the true high watermark: a lower
    bound). None where the log was not truncated below it, or no high watermark is known."""
    from replay.findings import finding

    hw, now = point.get("high_watermark"), since.get("log_end_offset")
    if since.get("change") != "truncated" or hw is None or now is None or now >= hw:
        return None
    return finding(
        "committed_data_truncated",
        f"{topic}-{partition} ends at offset {now}, below the high watermark {hw} its broker "
        f"had checkpointed when the previous audit's copy was taken: {hw - now} committed "
        "offsets are gone",
        {
            "log_end_offset": now,
            "previous_high_watermark": hw,
            "previous_log_end_offset": point.get("log_end_offset"),
            "previous_last_batch_offset": point.get("last_batch_offset"),
            "previous_segment_base_offset": point.get("segment_base_offset"),
            "previous_segment_position": point.get("segment_position"),
        },  # fmt: skip
        topic=topic,
        partition=partition,
        first_offset=now,
        last_offset=hw - 1,
    )


# partitions named in a summary's list of those whose log was truncated below the point
NAMED = 20


def since_summary(replicas, points: dict) -> dict[str, Any]:
    """What the replicas a scan replayed (:class:`replay.replicas.ReplicaRow`, with ``since``)
    did since the previous run's points (``points``: :attr:`ReplaySpec.points`): how many went
    on from their point, the bytes past the points out of their logs', how many logs changed
    below their point and how, the truncated ones by name, and the points no replica of this
    copy has (a partition, broker or log dir gone, or its replica not kept)."""
    seen = {r.key for r in replicas}
    since = [r for r in replicas if r.since is not None]
    changes = dict.fromkeys(CHANGES, 0)
    for r in since:
        if r.since["change"]:
            changes[r.since["change"]] += 1
    truncated = sorted(f"{r.topic}-{r.partition} (broker {r.broker})" for r in since
                       if r.since["change"] == "truncated")  # fmt: skip
    return {
        "points": len(points),
        "went_on": sum(1 for r in since if r.since["carried"]),
        "bytes_after": sum(r.since["bytes_after"] for r in since),
        "log_bytes": sum(r.since["log_bytes"] for r in since),
        "changes": {k: v for k, v in changes.items() if v},
        "truncated": truncated[:NAMED],
        "points_without_replica": sum(1 for key in points if key not in seen),
    }


def _whole(files: list[DumpFile]) -> list[ByteRange]:
    return [ByteRange(f, 0, f.size) for f in files]


# bytes read at a time to find a point: a batch header, not a segment's worth
POINT_WINDOW = 1 << 16


def _headers(f: DumpFile, start: int = 0, stop: int | None = None):
    import decoders

    window = POINT_WINDOW if stop is not None else None
    for table, batch in decoders.iter_file(f, ["batches"], deep=False, start=start, stop=stop,
                                           window_bytes=window):  # fmt: skip
        if table == "batches":
            yield from batch.select(["base_offset", "last_offset", "crc", "size", "position",
                                     "crc_valid"]).to_pylist()  # fmt: skip


def _first_batch(f: DumpFile, position: int) -> dict | None:
    """The batch whose entry starts at ``position`` of ``f``, if one does."""
    if position >= f.size:
        return None
    first = next(_headers(f, position, position + 1), None)
    return first if first is not None and first["position"] == position else None


def _first_from(f: DumpFile, offset: int) -> tuple[int, int] | None:
    """(position, base offset) of the first CRC-valid batch of ``f`` starting at ``offset``
    or later: a batch that starts below it was judged by the run that carried the state."""
    for b in _headers(f):
        if b["crc_valid"] is not False and b["base_offset"] >= offset:
            return b["position"], b["base_offset"]
    return None


def _log_end(segments: list[DumpFile]) -> int:
    """The log's end offset: one past the last offset of the last segment holding a batch, or
    the base offset of an empty segment after it (a rolled, still empty active segment: its
    base offset is where the log ends, also once retention deleted every batch before it)."""
    end = max((f.info.base_offset for f in segments), default=0)
    for f in reversed(segments):
        last = -1
        for b in _headers(f):
            last = max(last, b["last_offset"])
        if last >= 0:
            return max(end, last + 1)
    return end
