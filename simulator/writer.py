"""Write Kafka's on-disk formats: the inverse of the decoders, for tests and the simulator.

Batches are built the way the broker stores them (docs/formats.md 3.6): the CRC covers
attributes..end, baseOffset and partitionLeaderEpoch are patched in place on append. Index
files follow LogSegment.append: an offset/time index entry is written before an append once
more than ``index.interval.bytes`` were appended since the last entry.
"""

from __future__ import annotations

import base64
import os
import struct
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import crc32c

from decoders.compression import compress
from decoders.constants import (
    ABORTED_TXN_CURRENT_VERSION,
    ABORTED_TXN_ENTRY_SIZE,
    ABORTED_TXN_FORMAT,
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BATCH_HEADER_AFTER_CRC_FORMAT,
    BATCH_HEADER_UP_TO_CRC_FORMAT,
    COMPRESSION_CODEC_MASK,
    COMPRESSION_NONE,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    DEFAULT_INDEX_INTERVAL_BYTES,
    DELETE_HORIZON_FLAG_MASK,
    LEGACY_ENTRY_TIMESTAMP_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V1,
    MAGIC_VALUE_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_SNAPSHOT_COUNT_OFFSET,
    PRODUCER_SNAPSHOT_CRC_OFFSET,
    PRODUCER_SNAPSHOT_ENTRY_FORMAT,
    PRODUCER_SNAPSHOT_HEADER_FORMAT,
    PRODUCER_SNAPSHOT_VERSION,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    last_sequence,
)
from decoders.framing import batch_header, entry_offset, entry_size
from decoders.primitives import encode_varint

Header = tuple[str, bytes | None]
_AFTER_CRC = struct.Struct(BATCH_HEADER_AFTER_CRC_FORMAT)
_UP_TO_CRC = struct.Struct(BATCH_HEADER_UP_TO_CRC_FORMAT)


@dataclass(slots=True)
class Record:
    """A record to write; offset_delta defaults to its position in the batch."""

    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp: int = NO_TIMESTAMP
    offset_delta: int | None = None


def encode_record(
    offset_delta: int, timestamp_delta: int, key, value, headers: Sequence[Header]
) -> bytes:
    """One v2 record (DefaultRecord.writeTo)."""
    body = bytearray(b"\x00")  # attributes
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    for part in (key, value):
        if part is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(part)) + part
    body += encode_varint(len(headers))
    for hk, hv in headers:
        kb = hk.encode("utf-8")
        body += encode_varint(len(kb)) + kb
        body += encode_varint(-1) if hv is None else encode_varint(len(hv)) + hv
    return encode_varint(len(body)) + bytes(body)


def build_batch(
    records: Sequence[Record],
    base_offset: int = 0,
    *,
    codec: int = COMPRESSION_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    log_append_time: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    delete_horizon: int | None = None,
    attributes_extra: int = 0,
) -> bytes:
    """A complete magic-2 batch. Defaults reproduce what a healthy broker stores."""
    deltas = [r.offset_delta if r.offset_delta is not None else i for i, r in enumerate(records)]
    stamps = [r.timestamp for r in records]
    if base_timestamp is None:
        base_timestamp = stamps[0] if stamps else NO_TIMESTAMP
    if delete_horizon is not None:
        base_timestamp = delete_horizon
    if max_timestamp is None:
        max_timestamp = (
            log_append_time
            if log_append_time is not None
            else (max(stamps) if stamps else NO_TIMESTAMP)
        )
    if last_offset_delta is None:
        last_offset_delta = deltas[-1] if deltas else 0
    payload = b"".join(
        encode_record(
            d,
            (r.timestamp - base_timestamp) if r.timestamp != NO_TIMESTAMP else 0,
            r.key,
            r.value,
            r.headers,
        )
        for d, r in zip(deltas, records, strict=True)
    )
    payload = compress(codec, payload) if codec != COMPRESSION_NONE else payload
    attributes = codec | attributes_extra
    if log_append_time is not None:
        attributes |= TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if control:
        attributes |= CONTROL_FLAG_MASK
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
    body = (
        _AFTER_CRC.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + payload
    )
    return frame_batch(base_offset, partition_leader_epoch, body)


def frame_batch(base_offset: int, partition_leader_epoch: int, body: bytes) -> bytes:
    """A whole v2 batch from its body (attributes..records): the framing, the leader epoch,
    the magic and the CRC-32C of the body go in front (DefaultRecordBatch.writeHeader)."""
    # batchLength counts what follows its own field: the header from the leader epoch on
    batch_length = len(body) + ATTRIBUTES_OFFSET - PARTITION_LEADER_EPOCH_OFFSET
    crc = crc32c.crc32c(body)
    return (
        _UP_TO_CRC.pack(base_offset, batch_length, partition_leader_epoch, MAGIC_VALUE_V2, crc)
        + body
    )


def restamp_crc(data: bytearray, at: int = 0) -> None:
    """Recompute in place the CRC of the v2 batch at ``at`` after its covered bytes changed."""
    end = at + LOG_OVERHEAD + entry_size(data, at)
    struct.pack_into(
        ">I", data, at + CRC_OFFSET, crc32c.crc32c(bytes(data[at + ATTRIBUTES_OFFSET : end]))
    )


def control_batch(
    control_type: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker exactly as the broker writes it (78 bytes, section 5.2)."""
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [Record(key, value, timestamp=timestamp)],
        base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def empty_batch(like: bytes) -> bytes:
    """The header-only batch the cleaner keeps when every record is removed (section 3.7)."""
    h = batch_header(like)
    attributes = h.attributes & ~COMPRESSION_CODEC_MASK & ~DELETE_HORIZON_FLAG_MASK
    body = _AFTER_CRC.pack(
        attributes,
        h.last_offset_delta,
        NO_TIMESTAMP,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        0,
    )
    return frame_batch(h.base_offset, h.partition_leader_epoch, body)


def set_base_offset(
    batch: bytes, base_offset: int, partition_leader_epoch: int | None = None
) -> bytes:
    """Patch what the broker assigns on append; neither field is covered by the CRC."""
    out = bytearray(batch)
    struct.pack_into(">q", out, BASE_OFFSET_OFFSET, base_offset)
    if partition_leader_epoch is not None:
        struct.pack_into(">i", out, PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    return bytes(out)


# -- message format v0/v1 ------------------------------------------------------------------------
def legacy_message(
    offset: int, key, value, *, magic: int = 1, timestamp: int = NO_TIMESTAMP, attributes: int = 0
) -> bytes:
    """One `offset | size | message` entry (LegacyRecord.write)."""
    body = struct.pack(">bb", magic, attributes)
    if magic == MAGIC_VALUE_V1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def legacy_wrapper(
    messages: Sequence[tuple[bytes | None, bytes | None, int]],
    last_offset: int,
    codec: int,
    *,
    magic: int = 1,
    log_append_time: int | None = None,
) -> bytes:
    """A compressed wrapper; v1 inner offsets are relative (0..n-1), v0 absolute."""
    n = len(messages)
    first = last_offset - n + 1
    inner = b"".join(
        legacy_message(i if magic == MAGIC_VALUE_V1 else first + i, k, v, magic=magic, timestamp=ts)
        for i, (k, v, ts) in enumerate(messages)
    )
    attributes = codec
    ts = max((m[2] for m in messages), default=NO_TIMESTAMP)
    if log_append_time is not None:
        attributes |= TIMESTAMP_TYPE_MASK
        ts = log_append_time
    return legacy_message(
        last_offset,
        None,
        compress(codec, inner, magic=magic),
        magic=magic,
        timestamp=ts,
        attributes=attributes,
    )


# -- index, snapshot and checkpoint files ---------------------------------------------------------
def offset_index_bytes(entries: Sequence[tuple[int, int]]) -> bytes:
    """(relative offset, position) pairs."""
    return b"".join(struct.pack(">ii", r, p) for r, p in entries)


def time_index_bytes(entries: Sequence[tuple[int, int]]) -> bytes:
    """(timestamp, relative offset) pairs."""
    return b"".join(struct.pack(">qi", t, r) for t, r in entries)


def txn_index_bytes(entries: Sequence[tuple[int, int, int, int]]) -> bytes:
    """(producer id, first offset, last offset, last stable offset) aborted transactions."""
    out = b"".join(
        struct.pack(ABORTED_TXN_FORMAT, ABORTED_TXN_CURRENT_VERSION, *e) for e in entries
    )
    assert len(out) == ABORTED_TXN_ENTRY_SIZE * len(entries)
    return out


@dataclass(slots=True)
class SnapshotEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int = NO_SEQUENCE
    last_offset: int = -1
    offset_delta: int = 0
    timestamp: int = NO_TIMESTAMP
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


def snapshot_bytes(entries: Sequence[SnapshotEntry]) -> bytes:
    """A producer snapshot: version, CRC-32C of count..end, count, entries."""
    count = len(entries)
    body = b"".join(
        struct.pack(
            PRODUCER_SNAPSHOT_ENTRY_FORMAT,
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in entries
    )
    out = bytearray(
        struct.pack(PRODUCER_SNAPSHOT_HEADER_FORMAT, PRODUCER_SNAPSHOT_VERSION, 0, count)
    )
    out += body
    crc = crc32c.crc32c(bytes(out[PRODUCER_SNAPSHOT_COUNT_OFFSET:]))
    struct.pack_into(">I", out, PRODUCER_SNAPSHOT_CRC_OFFSET, crc)
    return bytes(out)


def leader_epoch_checkpoint_text(entries: Sequence[tuple[int, int]]) -> str:
    return f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries)


def offset_checkpoint_text(entries: Sequence[tuple[str, int, int]]) -> str:
    return f"0\n{len(entries)}\n" + "".join(f"{t} {p} {o}\n" for t, p, o in entries)


def topic_id_text(topic_uuid: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_uuid.bytes).rstrip(b"=").decode()


def partition_metadata_text(topic_uuid: uuid.UUID) -> str:
    return f"version: 0\ntopic_id: {topic_id_text(topic_uuid)}\n"


def meta_properties_text(broker_id: int, cluster_id: str, kraft: bool = True) -> str:
    key = "node.id" if kraft else "broker.id"
    return f"#\n#written by logreplay\n{key}={broker_id}\nversion={1 if kraft else 0}\ncluster.id={cluster_id}\n"


def segment_name(base_offset: int, ext: str) -> str:
    return f"{base_offset:020d}.{ext}"


# -- a partition directory ---------------------------------------------------------------------
class SegmentIndexer:
    """The sparse offset and time indexes of one segment, built as LogSegment.append does.

    Per append (one produce request's batches for the partition, or one batch in recovery):
    the maximum timestamp so far is updated first; then, if more than ``index.interval.bytes``
    were appended since the last entry, an offset entry (largest offset of the append, position
    where the append starts) and a time entry (max timestamp so far, its offset) are added; then
    the append's size is counted. Time entries are added only when the timestamp grows
    (TimeIndex.maybeAppend); ``close`` adds the final one as onBecomeInactiveSegment does.
    """

    def __init__(
        self, base_offset: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    ) -> None:
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.offsets: list[tuple[int, int]] = []
        self.times: list[tuple[int, int]] = []
        self.bytes_since_index = 0
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1

    def append(
        self,
        position: int,
        size: int,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int | None = None,
    ) -> None:
        """``offset_of_max_timestamp``: brokers before 3.8 (KAFKA-16310) indexed the offset of
        the batch's first record holding the maximum timestamp; newer ones its last offset."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = (
                last_offset if offset_of_max_timestamp is None else offset_of_max_timestamp
            )
        if self.bytes_since_index > self.index_interval_bytes:
            self.offsets.append((last_offset - self.base_offset, position))
            self._maybe_time_entry()
            self.bytes_since_index = 0
        self.bytes_since_index += size

    def _maybe_time_entry(self) -> None:
        if self.max_timestamp == NO_TIMESTAMP:
            return
        if not self.times or self.max_timestamp > self.times[-1][0]:
            self.times.append((self.max_timestamp, self.offset_of_max_timestamp - self.base_offset))

    def shutdown(self) -> None:
        """A clean broker shutdown and restart: LogSegment.close appends the time entry of the
        maximum timestamp so far, and the reloaded segment counts bytes since an index entry
        from zero again."""
        self._maybe_time_entry()
        self.bytes_since_index = 0

    def close(self) -> tuple[bytes, bytes]:
        """(offset index bytes, time index bytes) of the finished segment."""
        self._maybe_time_entry()
        return offset_index_bytes(self.offsets), time_index_bytes(self.times)


@dataclass
class _Segment:
    base_offset: int
    indexer: SegmentIndexer
    size: int = 0
    aborted: list[tuple[int, int, int, int]] = field(default_factory=list)


class PartitionWriter:
    """Append batches to a `<topic>-<partition>` directory: offsets, rolls, indexes.

    ``append`` takes a v2 batch (its baseOffset is rewritten) or a legacy entry (offsets kept)
    and returns (base, last) offsets. Bytes go straight to the active segment's file, so memory
    stays bounded whatever the volume; a rolled segment's indexes are written at the roll, the
    active one's by ``close``.
    """

    def __init__(
        self,
        log_dir: str,
        topic: str,
        partition: int,
        *,
        segment_bytes: int = 1 << 30,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        start_offset: int = 0,
        leader_epoch: int = 0,
        topic_id: uuid.UUID | None = None,
    ) -> None:
        self.dir = os.path.join(log_dir, f"{topic}-{partition}")
        os.makedirs(self.dir, exist_ok=True)
        self.topic, self.partition = topic, partition
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.next_offset = start_offset
        self.leader_epoch = leader_epoch
        self.epochs: list[tuple[int, int]] = []
        self.segments: list[_Segment] = []
        self.topic_id = topic_id or uuid.uuid5(uuid.NAMESPACE_URL, f"logreplay:{topic}")
        self.snapshots: dict[int, bytes] = {}
        self._file = None
        self.on_roll = None
        self._open_segment(start_offset)

    @property
    def active(self) -> _Segment:
        return self.segments[-1]

    def _open_segment(self, base_offset: int) -> None:
        self.segments.append(
            _Segment(base_offset, SegmentIndexer(base_offset, self.index_interval_bytes))
        )
        self._file = open(os.path.join(self.dir, segment_name(base_offset, "log")), "wb")  # noqa: SIM115 (open for the segment's life)

    def append(
        self, batch: bytes, *, leader_epoch: int | None = None, base_offset: int | None = None
    ) -> tuple[int, int]:
        """``base_offset`` keeps a given offset (a cleaned segment keeps its offsets, gaps
        and all); otherwise the next offset is assigned as the leader does."""
        epoch = self.leader_epoch if leader_epoch is None else leader_epoch
        if base_offset is not None:
            self.next_offset = base_offset
        magic = batch[MAGIC_OFFSET]
        if magic == MAGIC_VALUE_V2:
            h = batch_header(batch)
            batch = set_base_offset(batch, self.next_offset, epoch)
            base, last = self.next_offset, self.next_offset + h.last_offset_delta
            max_ts = h.max_timestamp
            if not self.epochs or epoch > self.epochs[-1][0]:
                self.epochs.append((epoch, base))
        else:  # legacy entries carry their own offsets
            last = entry_offset(batch)
            base, max_ts = (
                self.next_offset,
                (
                    struct.unpack_from(">q", batch, LEGACY_ENTRY_TIMESTAMP_OFFSET)[0]
                    if magic == MAGIC_VALUE_V1
                    else NO_TIMESTAMP
                ),
            )
        if self.active.size and self.active.size + len(batch) > self.segment_bytes:
            self.next_offset = base
            self.roll()
        seg = self.active
        seg.indexer.append(seg.size, len(batch), last, max_ts)
        self._file.write(batch)
        seg.size += len(batch)
        self.next_offset = last + 1
        return base, last

    def add_aborted(
        self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int
    ) -> None:
        """Record an aborted transaction in the index of the segment holding its marker."""
        self.active.aborted.append((producer_id, first_offset, last_offset, last_stable_offset))

    def add_snapshot(self, offset: int, entries: Sequence[SnapshotEntry]) -> None:
        self.snapshots[offset] = snapshot_bytes(entries)

    def roll(self) -> None:
        if self.on_roll is not None:
            self.on_roll(self.next_offset)  # the broker snapshots producer state at a roll
        self._finish(self.active)
        self._open_segment(self.next_offset)

    def _finish(self, seg: _Segment) -> None:
        self._file.close()
        index, timeindex = seg.indexer.close()
        self._write(segment_name(seg.base_offset, "index"), index)
        self._write(segment_name(seg.base_offset, "timeindex"), timeindex)
        if seg.aborted:
            self._write(segment_name(seg.base_offset, "txnindex"), txn_index_bytes(seg.aborted))

    def close(self) -> None:
        self._finish(self.active)
        for off, data in self.snapshots.items():
            self._write(segment_name(off, "snapshot"), data)
        self._write("leader-epoch-checkpoint", leader_epoch_checkpoint_text(self.epochs).encode())
        self._write("partition.metadata", partition_metadata_text(self.topic_id).encode())

    def _write(self, name: str, data: bytes) -> None:
        with open(os.path.join(self.dir, name), "wb") as f:
            f.write(data)


__all__ = [
    "LOG_OVERHEAD",
    "PartitionWriter",
    "Record",
    "SegmentIndexer",
    "SnapshotEntry",
    "build_batch",
    "control_batch",
    "empty_batch",
    "encode_record",
    "last_sequence",
    "legacy_message",
    "legacy_wrapper",
]
