"""Walk a `.log` segment by byte ranges and decode it into Arrow batches and records.

Reading (docs/formats.md section 1 and Appendix B):
- the file is read in windows of ``window_bytes``; only whole entries inside a window are
  decoded, an entry cut by the window end is re-read at the start of the next one, and an
  entry larger than the window gets a window of its own (up to ``max_batch_bytes``);
- every byte ends up valid, padding (zeros to the end of the file) or corrupt, and every
  corrupt range has an error row with its position and reason; after garbage the walker
  resynchronises on the next entry whose CRC is valid, so one bad spot never hides the rest;
- v2 headers are extracted for all batches of a window at once with numpy, records are
  scanned by a compiled kernel and keys, values and headers are gathered into Arrow buffers.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import crc32c
import numpy as np
import pyarrow as pa

from decoders import fixed, kernels
from decoders.compression import (
    OutputTooSmall,
    codec_name,
    decompress_into,
    stream_decompress,
)
from decoders.constants import (
    COMPRESSION_CODEC_MASK,
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    CONTROL_FLAG_MASK,
    CREATE_TIME,
    DELETE_HORIZON_FLAG_MASK,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_VALUE_V2,
    MAX_SEQUENCE,
    NO_TIMESTAMP,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from decoders.control import control_key, control_type_name, end_txn_marker, is_txn_marker
from decoders.errors import CORRUPT_BYTES, CRC_MISMATCH, TRUNCATED_BATCH, DecodeError, ErrorRow
from decoders.legacy import decode_entry
from decoders.schemas import BATCHES, RECORDS
from decoders.source import ByteSource, open_source

DEFAULT_WINDOW_BYTES = 8 * 1024 * 1024
# A batch larger than this is treated as corrupt rather than read (message.max.bytes is ~1 MiB
# by default; clusters raise it, rarely past tens of MiB).
DEFAULT_MAX_BATCH_BYTES = 128 * 1024 * 1024
# Decompressed bytes held at once, and the most one batch may expand to.
DEFAULT_MAX_DECOMPRESSED = 32 * 1024 * 1024
DEFAULT_MAX_BATCH_DECOMPRESSED = 32 * 1024 * 1024
# What decoding one file may hold at once (decode.memory_budget_mb): sized for an executor of
# 2 cores and 8 GB, i.e. about 4 GB per task, less what Spark, Arrow and Python keep.
DEFAULT_MEMORY_BUDGET = 1024 * 1024 * 1024

_HDR = np.arange(RECORDS_OFFSET)
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_TS_TYPES = pa.array([CREATE_TIME, LOG_APPEND_TIME], pa.string())
_CODEC_NAMES = pa.array([*(COMPRESSION_NAMES[c] for c in range(5)), "unknown"], pa.string())
# First guess of a batch's decompressed size, as a multiple of its compressed size; the output
# view grows (up to max_batch_decompressed) only when a batch expands more than that.
_EXPANSION_GUESS = 16
TORN_WRITE_MIN_ZEROS = 16
_ZERO_CHUNK = 4 * 1024 * 1024


@dataclass(slots=True)
class _V2Headers:
    """The 61-byte headers of a run of v2 batches, one numpy column per field, plus what the
    walker learns about each batch (its first error, whether its bytes count as corrupt)."""

    positions: np.ndarray
    sizes: np.ndarray
    abs_pos: np.ndarray
    entry_end: np.ndarray
    base_offset: np.ndarray
    leader_epoch: np.ndarray
    crc: np.ndarray
    attributes: np.ndarray
    last_delta: np.ndarray
    base_ts: np.ndarray
    max_ts: np.ndarray
    producer_id: np.ndarray
    producer_epoch: np.ndarray
    base_seq: np.ndarray
    count: np.ndarray
    errors: list
    bad: np.ndarray
    crc_valid: np.ndarray | None = None

    @classmethod
    def read(
        cls, buf: np.ndarray, base: int, positions: np.ndarray, sizes: np.ndarray
    ) -> _V2Headers:
        hdr = buf[positions[:, None] + _HDR]  # one gather for every header of the window

        def col(a: int, _end: int, dt: str) -> np.ndarray:
            return fixed.field(hdr, a, dt)

        n = len(positions)
        return cls(
            positions, sizes, positions + base, positions + LOG_OVERHEAD + sizes,
            col(0, 8, ">i8"), col(12, 16, ">i4"), col(17, 21, ">u4"), col(21, 23, ">i2"),
            col(23, 27, ">i4"), col(27, 35, ">i8"), col(35, 43, ">i8"), col(43, 51, ">i8"),
            col(51, 53, ">i2"), col(53, 57, ">i4"), col(57, 61, ">i4"), [None] * n, np.zeros(n, bool),
        )  # fmt: skip

    @property
    def n(self) -> int:
        return len(self.positions)

    @property
    def last_offset(self) -> np.ndarray:
        return self.base_offset + self.last_delta

    @property
    def codec(self) -> np.ndarray:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def log_append(self) -> np.ndarray:
        return (self.attributes & TIMESTAMP_TYPE_MASK) != 0

    @property
    def transactional(self) -> np.ndarray:
        return (self.attributes & TRANSACTIONAL_FLAG_MASK) != 0

    @property
    def control(self) -> np.ndarray:
        return (self.attributes & CONTROL_FLAG_MASK) != 0

    @property
    def horizon(self) -> np.ndarray:
        return (self.attributes & DELETE_HORIZON_FLAG_MASK) != 0


@dataclass(slots=True)
class FileInfo:
    """Where a file sits in the dump; copied into every row decoded from it."""

    file: str
    broker: str | None = None
    topic: str | None = None
    partition: int | None = None
    base_offset: int | None = None
    kind: str = "log"


@dataclass(slots=True)
class Accounting:
    """Every byte of a file lands in exactly one of these."""

    size: int = 0
    valid: int = 0
    padding: int = 0
    corrupt: int = 0
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    errors: list[ErrorRow] = field(default_factory=list)

    def see_offsets(self, first: int, last: int) -> None:
        if self.first_offset is None or first < self.first_offset:
            self.first_offset = first
        if self.last_offset is None or last > self.last_offset:
            self.last_offset = last


@dataclass(slots=True)
class DecodedWindow:
    """Decoded contents of one window of a segment."""

    batches: pa.RecordBatch
    records: list[pa.RecordBatch]


class SegmentDecoder:
    """Decode one `.log` (or KRaft `.checkpoint`) file into bounded windows of Arrow data.

    ``deep=False`` is the header-only scan: no decompression and no record parsing.
    """

    def __init__(
        self,
        source,
        info: FileInfo | None = None,
        *,
        deep: bool = True,
        verify_crc: bool = True,
        window_bytes: int = DEFAULT_WINDOW_BYTES,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
        max_batch_decompressed: int = DEFAULT_MAX_BATCH_DECOMPRESSED,
        start: int = 0,
        stop: int | None = None,
        emit_records: bool = True,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        self.src: ByteSource = open_source(source)
        self.info = info or FileInfo(file=self.src.name)
        self.deep = deep
        # deep without emit_records validates every record (errors, accounting) but builds no
        # Arrow records: for batches, segments and errors tables.
        self.emit_records = emit_records
        self.verify_crc = verify_crc
        self.window_bytes = max(window_bytes, 64)
        self.max_batch_bytes = max_batch_bytes
        self.max_decompressed = max(max_decompressed, max_batch_decompressed)
        self.max_batch_decompressed = max_batch_decompressed
        self.start = start
        # A range decoder owns the entries that start in [start, stop); the file size bounds reads.
        self.stop = self.src.size if stop is None else min(stop, self.src.size)
        self.acct = Accounting(size=self.stop - start)
        self._rbuf: np.ndarray | None = None
        # The budget bounds the pieces a streamed batch is decompressed in, the records decoded
        # at once (a record costs about 100 bytes of columns, twice over while Arrow copies
        # them; internal topics build Python values for a slice of them) and index reads.
        self.budget = max(memory_budget, 16 << 20)
        self.stream_piece = min(4 << 20, self.budget // 128)
        self.chunk_records = max(1024, self.budget // 2048)
        self.max_decompressed = min(self.max_decompressed, self.budget // 8)
        self.max_batch_decompressed = min(self.max_batch_decompressed, self.max_decompressed)

    # -- the walk ---------------------------------------------------------------------------
    def windows(self) -> Iterator[DecodedWindow]:
        pos, size, want = self.start, self.src.size, self.window_bytes
        while pos < self.stop:
            chunk = self.src.read_at(pos, min(want, size - pos))
            buf = np.frombuffer(chunk, np.uint8)
            limit = len(buf)
            positions, sizes, magics, n, stop, reason = kernels.hop_entries(
                buf, 0, limit, self.max_batch_bytes
            )
            if n:
                keep = positions + pos < self.stop
                partial = not keep.all()
                if partial:  # entries from `stop` on belong to the next range
                    positions, sizes, magics = positions[keep], sizes[keep], magics[keep]
                    n = len(positions)
                crcs = self._entry_crcs(buf, positions, sizes, magics) if self.verify_crc else None
                split = (
                    self._split_inside_bad_entry(pos, positions, sizes, crcs)
                    if crcs is not None
                    else None
                )
                if split is not None:
                    k, resume = split
                    if k:
                        yield from self._decode(
                            buf, pos, positions[:k], sizes[:k], magics[:k], _slice(crcs, k)
                        )
                    at = pos + int(positions[k])
                    self._error(
                        at,
                        resume - at,
                        CORRUPT_BYTES,
                        f"entry fails its CRC and a valid entry starts inside it at {resume}; {resume - at} bytes skipped",
                    )
                    self.acct.corrupt += resume - at
                    pos = resume
                    continue
                if n:
                    yield from self._decode(buf, pos, positions, sizes, magics, crcs)
                if partial:
                    return
            want = self.window_bytes
            at = pos + stop
            if at >= self.stop:
                return
            if reason == kernels.HOP_END:
                pos = at
            elif reason == kernels.HOP_PARTIAL and pos + limit < size:
                if n == 0:  # one entry larger than the window: give it a window of its own
                    (s,) = struct.unpack_from(">i", chunk, stop + 8) if limit - stop >= 12 else (0,)
                    want = max(self.window_bytes, LOG_OVERHEAD + s)
                pos = at
            else:
                pos = self._recover(at, reason)

    def _entry_crcs(self, buf, positions, sizes, magics) -> tuple[np.ndarray, np.ndarray]:
        """(computed, stored) CRC of each entry: CRC-32C from byte 21 (v2), CRC-32 from byte 16 (v0/v1)."""
        mv = memoryview(buf)
        computed = np.empty(len(positions), np.uint32)
        stored = np.empty(len(positions), np.uint32)
        for i, (p, s, m) in enumerate(
            zip(positions.tolist(), sizes.tolist(), magics.tolist(), strict=True)
        ):
            e = p + LOG_OVERHEAD + s
            if m == MAGIC_VALUE_V2:
                computed[i] = crc32c.crc32c(mv[p + 21 : e])
                stored[i] = struct.unpack_from(">I", mv, p + 17)[0]
            else:
                computed[i] = zlib.crc32(mv[p + 16 : e])
                stored[i] = struct.unpack_from(">I", mv, p + 12)[0]
        return computed, stored

    def _split_inside_bad_entry(self, base, positions, sizes, crcs) -> tuple[int, int] | None:
        """A damaged size field makes one bad entry swallow good ones: for the first entry that
        fails its CRC and holds a valid entry inside it, return (its index, that entry's position)."""
        computed, stored = crcs
        for k in np.flatnonzero(computed != stored).tolist():
            start = base + int(positions[k])
            resume = self._resync(start + 1, limit=start + LOG_OVERHEAD + int(sizes[k]))
            if resume is not None:
                return k, resume
        return None

    # -- bad input: padding, truncation, garbage ---------------------------------------------
    def _recover(self, at: int, reason: int) -> int:
        """Classify the bytes from `at`; return where decoding resumes."""
        size = self.src.size
        if self._zeros_to_end(at):
            self.acct.padding += self.stop - at
            return self.stop
        head = self.src.read_at(at, 17)
        resume = self._resync(at + 1)
        if resume is not None:
            end = resume
        elif reason == kernels.HOP_PARTIAL:
            end = self.stop  # zeros inside a torn entry's declared extent belong to it
        else:
            end = self._last_nonzero_end(at)
        if reason == kernels.HOP_PARTIAL and resume is None:
            declared = struct.unpack_from(">i", head, 8)[0] if len(head) >= 12 else None
            kind = TRUNCATED_BATCH
            why = (
                f"entry declares {declared} bytes but only {size - at - LOG_OVERHEAD} follow"
                if declared is not None
                else f"{size - at} stray bytes at the end of the file"
            )
        else:
            kind = CORRUPT_BYTES
            if len(head) >= 17 and head[16] > 2:
                why = f"invalid magic {struct.unpack_from('>b', head, 16)[0]}"
            elif len(head) >= 12:
                why = f"entry size {struct.unpack_from('>i', head, 8)[0]} out of range"
            else:
                why = "unreadable entry header"
            why += f"; skipped {end - at} bytes" + (
                " to the next valid entry" if resume is not None else ""
            )
        self._error(at, end - at, kind, why)
        self.acct.corrupt += end - at
        if resume is None:
            self.acct.padding += self.stop - end
            return self.stop
        return resume

    def _skip_hole(self, p: int) -> int:
        """The first byte at or after p that is not in a hole of a sparse file (holes read as
        zeros, and no entry, padding aside, can start inside zeros)."""
        if p < self.stop and hasattr(self.src, "data_after"):
            return max(p, min(self.stop, self.src.data_after(p)))
        return p

    def _data_end(self, at: int) -> int:
        """End of the last extent holding data before ``stop`` (``stop`` if unknown)."""
        if not hasattr(self.src, "data_after"):
            return self.stop
        end, p = at, at
        while p < self.stop:
            d = self.src.data_after(p)
            if d >= self.stop:
                break
            p = max(d + 1, self.src.hole_after(d))
            end = min(p, self.stop)
        return end

    def _zeros_to_end(self, at: int) -> bool:
        p = at
        while (p := self._skip_hole(p)) < self.stop:
            b = np.frombuffer(self.src.read_at(p, min(_ZERO_CHUNK, self.stop - p)), np.uint8)
            if b.any():
                return False
            p += len(b)
        return True

    def _last_nonzero_end(self, at: int) -> int:
        """End of the last non-zero byte at or after `at` (trailing zeros count as padding)."""
        end = self._data_end(at)
        while end > at:
            lo = max(at, end - _ZERO_CHUNK)
            nz = np.flatnonzero(np.frombuffer(self.src.read_at(lo, end - lo), np.uint8))
            if nz.size:
                return lo + int(nz[-1]) + 1
            end = lo
        return at

    def _resync(self, start: int, limit: int | None = None) -> int | None:
        """Next position after garbage holding an entry with a valid CRC, or None.
        Only candidates before ``limit`` (default: the end of the range) are considered."""
        p, size = start, self.src.size
        limit = self.stop if limit is None else min(limit, self.stop)
        while p + 17 <= limit:
            # an entry's size field is non-zero: none starts more than 12 bytes before data
            p = max(p, self._skip_hole(p) - 12)
            if p + 17 > limit:
                return None
            n = min(self.window_bytes, size - p)
            buf = np.frombuffer(self.src.read_at(p, n), np.uint8)
            q = 0
            while True:
                c = kernels.find_resync(buf, q, len(buf), size - p - q, self.max_batch_bytes)
                if c < 0:
                    break
                cand = p + c
                if cand >= limit:
                    return None
                if self._entry_is_valid(cand):
                    return cand
                q = c + 1
            if p + n >= size:
                return None
            p += max(1, n - 16)
        return None

    def _entry_is_valid(self, at: int) -> bool:
        head = self.src.read_at(at, 23)
        if len(head) < 23:
            return False
        (s,) = struct.unpack_from(">i", head, 8)
        magic = head[16]
        if magic == MAGIC_VALUE_V2:
            if head[21] != 0 or (head[21 + 1] & 0x07) > 4:  # unused attribute bits, codec
                return False
            entry = self.src.read_at(at, LOG_OVERHEAD + s)
            return crc32c.crc32c(memoryview(entry)[21:]) == struct.unpack_from(">I", entry, 17)[0]
        if head[17] & 0xF0 or (head[17] & 0x07) > 3:
            return False
        entry = self.src.read_at(at, LOG_OVERHEAD + s)
        return zlib.crc32(memoryview(entry)[16:]) == struct.unpack_from(">I", entry, 12)[0]

    def _error(
        self, position: int, length: int, kind: str, reason: str, offset: int | None = None
    ) -> None:
        self.acct.errors.append(ErrorRow(self.info.file, position, length, kind, reason, offset))

    # -- decoding whole entries ---------------------------------------------------------------
    def _decode(self, buf, base, positions, sizes, magics, crcs=None) -> Iterator[DecodedWindow]:
        is_v2 = magics == MAGIC_VALUE_V2
        if is_v2.all():
            yield self._decode_v2(buf, base, positions, sizes, crcs)
            return
        # Mixed magic (an upgraded topic): decode runs of the same format in file order.
        change = np.flatnonzero(np.diff(is_v2.astype(np.int8))) + 1
        for run in np.split(np.arange(len(positions)), change):
            if is_v2[run[0]]:
                sub = None if crcs is None else (crcs[0][run], crcs[1][run])
                yield self._decode_v2(buf, base, positions[run], sizes[run], sub)
            else:
                yield self._decode_legacy(buf, base, positions[run], sizes[run])

    def _decode_v2(self, buf, base, positions, sizes, crcs=None) -> DecodedWindow:
        h = _V2Headers.read(buf, base, positions, sizes)
        if self.verify_crc:
            computed = (
                crcs[0]
                if crcs is not None
                else self._entry_crcs(buf, positions, sizes, np.full(h.n, 2, np.int8))[0]
            )
            h.crc_valid = computed == h.crc
            for i in np.flatnonzero(~h.crc_valid):
                why = f"CRC-32C mismatch: stored {int(h.crc[i]):#010x}, computed {int(computed[i]):#010x}"
                zeros = _trailing_zeros(buf, int(positions[i]), int(h.entry_end[i]))
                if zeros >= TORN_WRITE_MIN_ZEROS:
                    # A batch whose bytes give way to zeros was cut by a crash while the file
                    # was preallocated: a torn write, not a flipped bit.
                    self._fail(
                        h,
                        i,
                        TRUNCATED_BATCH,
                        f"{why}; its last {zeros} bytes are zero: a torn write into preallocated space",
                    )
                else:
                    self._fail(h, i, CRC_MISMATCH, why)
        for i in np.flatnonzero(h.count < 0):
            self._fail(h, i, CORRUPT_BYTES, f"negative recordsCount {int(h.count[i])}")
        for i in np.flatnonzero(h.codec > 4):
            self._fail(h, i, CORRUPT_BYTES, f"unknown compression codec {int(h.codec[i])}")
        control_type, coord_epoch = self._control_records(buf, h)
        # Records of a batch whose CRC fails are still decoded (and flagged), as the checklist
        # says ("decode even when it fails"); only an unusable header stops us.
        records = self._records_v2(buf, h) if self.deep else []
        self._account_v2(h)
        return DecodedWindow(self._batches_table(h, control_type, coord_epoch), records)

    def _fail(self, h: _V2Headers, i: int, kind: str, why: str) -> None:
        """Mark batch i bad: its first reason goes in the batches table, one error row per batch."""
        h.errors[i] = h.errors[i] or why
        if not h.bad[i]:
            self._error(
                int(h.abs_pos[i]), int(h.sizes[i]) + LOG_OVERHEAD, kind, why, int(h.base_offset[i])
            )
            h.bad[i] = True

    def _control_records(self, buf, h: _V2Headers) -> tuple[list[str | None], pa.Array]:
        """COMMIT/ABORT with coordinator epoch, KRaft control types named (markers are never compressed)."""
        control_type: list[str | None] = [None] * h.n
        epoch = np.full(h.n, -1, np.int32)
        has_epoch = np.zeros(h.n, bool)
        for i in np.flatnonzero(h.control & (h.count > 0) & (h.codec == COMPRESSION_NONE)):
            try:
                key, value = _first_record_key_value(
                    buf, int(h.positions[i]) + RECORDS_OFFSET, int(h.entry_end[i])
                )
                _, ctype = control_key(key)
                control_type[i] = control_type_name(ctype)
                if is_txn_marker(ctype):
                    epoch[i] = end_txn_marker(value)[1]
                    has_epoch[i] = True
            except DecodeError as e:
                self._fail(h, i, CORRUPT_BYTES, f"control record: {e}")
        return control_type, pa.array(epoch, mask=~has_epoch)

    def _account_v2(self, h: _V2Headers) -> None:
        total = int(h.sizes.sum()) + LOG_OVERHEAD * h.n
        bad_bytes = int(h.sizes[h.bad].sum()) + LOG_OVERHEAD * int(h.bad.sum())
        self.acct.valid += total - bad_bytes
        self.acct.corrupt += bad_bytes
        self.acct.batches += h.n
        self.acct.records += int(np.maximum(h.count, 0).sum())
        self.acct.see_offsets(int(h.base_offset.min()), int(h.last_offset.max()))

    def _batches_table(self, h: _V2Headers, control_type, coord_epoch) -> pa.RecordBatch:
        n = h.n
        last_seq = np.where(
            h.base_seq < 0, -1, _wrap_seq(h.base_seq.astype(np.int64) + h.last_delta)
        )
        return pa.RecordBatch.from_arrays(
            [
                _const(self.info.broker, n, pa.string()),
                _const(self.info.topic, n, pa.string()),
                _const(self.info.partition, n, pa.int32()),
                _const(self.info.file, n, pa.string()),
                pa.array(h.abs_pos, pa.int64()),
                pa.array((h.sizes + LOG_OVERHEAD).astype(np.int32)),
                pa.array(h.base_offset),
                pa.array(h.last_offset),
                pa.array(np.full(n, 2, np.int8)),
                pa.array(h.crc),
                pa.array(h.crc_valid) if h.crc_valid is not None else pa.nulls(n, pa.bool_()),
                pa.array(h.attributes),
                _CODEC_NAMES.take(pa.array(np.minimum(h.codec, 5).astype(np.int8))),
                _TS_TYPES.take(pa.array(h.log_append.view(np.int8))),
                pa.array(h.transactional),
                pa.array(h.control),
                pa.array(h.horizon),
                pa.array(h.leader_epoch),
                _ts(h.base_ts, mask=h.horizon),
                _ts(h.max_ts),
                _ts(h.base_ts, mask=~h.horizon),
                pa.array(h.producer_id),
                pa.array(h.producer_epoch),
                pa.array(h.base_seq),
                pa.array(last_seq.astype(np.int32)),
                pa.array(h.last_delta),
                pa.array(h.count),
                pa.array(control_type, pa.string()),
                coord_epoch,
                pa.array(h.errors, pa.string()),
            ],
            schema=BATCHES,
        )

    def _records_v2(self, buf, h: _V2Headers) -> Iterable[pa.RecordBatch]:
        """Records of the window's batches, in batch order.

        Batches of ordinary size are decoded at once, in chunks of at most ``max_decompressed``
        bytes. A batch holding more records than ``chunk_records``, or expanding past the view
        it was given, is streamed: validated now (so that the batches table carries its error),
        and its records are decoded again chunk by chunk only when the caller asks for them.
        """
        idx = np.flatnonzero((h.count > 0) & (h.codec <= 4))
        if idx.size == 0:
            return []
        fixed_ts = np.where(
            h.log_append, h.max_ts, -2
        )  # LogAppendTime: every record gets maxTimestamp
        out: list = []
        for item in self._record_plan(buf, idx, h):
            if isinstance(item, int):
                for _ in self._stream_records(buf, h, item, fixed_ts, first_pass=True):
                    pass
                if self.emit_records:
                    out.append(item)
                continue
            rbuf, sel, starts, ends = item
            scan = kernels.Scan(
                *kernels.scan_records(
                    rbuf,
                    starts,
                    ends,
                    h.count[sel].astype(np.int64),
                    h.base_offset[sel],
                    h.base_ts[sel],
                    fixed_ts[sel],
                )
            )
            for j in np.flatnonzero(scan.status):
                i = sel[j]
                reason = kernels.REC_REASONS[int(scan.status[j])]
                self._fail(
                    h,
                    i,
                    CORRUPT_BYTES,
                    f"{reason} (record {int(scan.decoded[j])} of {int(h.count[i])})",
                )
            if scan.offset.size and self.emit_records:
                out.append(self._records_table(rbuf, sel[scan.batch], scan, h))
        if not any(isinstance(x, int) for x in out):
            return out
        return self._lazy_records(out, buf, h, fixed_ts)

    def _lazy_records(self, items, buf, h, fixed_ts) -> Iterator[pa.RecordBatch]:
        for item in items:
            if isinstance(item, int):
                yield from self._stream_records(buf, h, item, fixed_ts, first_pass=False)
            else:
                yield item

    def _record_plan(self, buf, idx, h: _V2Headers):
        """Chunks to scan at once (rbuf, batch indexes, starts, ends), or a batch index to stream."""
        big = h.count[idx] > self.chunk_records
        if not big.any():
            yield from self._small_chunks(buf, idx, h)
            return
        cut = np.flatnonzero(np.diff(big.astype(np.int8))) + 1
        for run in np.split(idx, cut):
            if h.count[run[0]] > self.chunk_records:
                yield from run.tolist()
            else:
                yield from self._small_chunks(buf, run, h)

    def _small_chunks(self, buf, idx, h: _V2Headers):
        if (h.codec[idx] == COMPRESSION_NONE).all():  # zero copy: scan the window itself
            yield (buf, idx, h.positions[idx] + RECORDS_OFFSET, h.entry_end[idx])
        else:
            yield from self._decompress_chunks(buf, idx, h)

    def _stream_records(
        self, buf, h: _V2Headers, i: int, fixed_ts, first_pass: bool
    ) -> Iterator[pa.RecordBatch]:
        """Decode one batch's records from a stream of decompressed pieces, chunk by chunk.

        At most two pieces and the unfinished record carried over are held at once; a record
        larger than that grows the buffer up to a quarter of the memory budget. The first pass
        only validates (and marks the batch bad); the second builds the Arrow records.
        """
        a, e = int(h.positions[i]) + RECORDS_OFFSET, int(h.entry_end[i])
        codec = int(h.codec[i])
        piece = self.stream_piece
        if codec == COMPRESSION_NONE:
            pieces = (bytes(buf[p : min(p + piece, e)]) for p in range(a, e, piece))
        else:
            pieces = stream_decompress(codec, memoryview(buf)[a:e], piece=piece)
        total = int(h.count[i])
        args = (
            np.array([h.base_offset[i]], np.int64),
            np.array([h.base_ts[i]], np.int64),
            np.array([fixed_ts[i]], np.int64),
        )
        cap = 2 * piece
        rbuf = np.empty(cap, np.uint8)
        filled, decoded, ended = 0, 0, False
        pending = b""
        problem = None
        try:
            while True:
                while not ended and cap - filled >= len(pending):
                    rbuf[filled : filled + len(pending)] = np.frombuffer(pending, np.uint8)
                    filled += len(pending)
                    pending = next(pieces, None)
                    if pending is None:
                        ended, pending = True, b""
                scan = kernels.Scan(
                    *kernels.scan_records(
                        rbuf,
                        np.zeros(1, np.int64),
                        np.array([filled], np.int64),
                        np.array([total - decoded], np.int64),
                        *args,
                    )
                )
                j, st = int(scan.decoded[0]), int(scan.status[0])
                if j and not first_pass:
                    yield self._records_table(rbuf, np.full(j, i, np.int64), scan, h)
                decoded += j
                if st == kernels.REC_OK:
                    if not ended and (pending or any(len(x) for x in pieces)):
                        problem = kernels.REC_REASONS[kernels.REC_LEFTOVER]
                    break
                if ended or st not in (
                    kernels.REC_TOO_FEW,
                    kernels.REC_BAD_VARINT,
                    kernels.REC_BAD_LENGTH,
                ):
                    problem = kernels.REC_REASONS[st]
                    break
                p = int(scan.error_pos[0])
                if p == 0 and cap - filled < len(pending):  # one record fills the buffer
                    if st != kernels.REC_BAD_LENGTH or 2 * cap > self.budget // 4:
                        problem = (
                            kernels.REC_REASONS[st]
                            if st != kernels.REC_BAD_LENGTH
                            else f"a record larger than a quarter of the memory budget ({self.budget // 4} bytes)"
                        )
                        break
                    cap *= 2
                    grown = np.empty(cap, np.uint8)
                    grown[:filled] = rbuf[:filled]
                    rbuf = grown
                    continue
                rbuf[: filled - p] = rbuf[p:filled]
                filled -= p
        except DecodeError as err:
            problem = f"{codec_name(codec)} records do not decompress: {err}"
        if problem and first_pass:
            self._fail(h, i, CORRUPT_BYTES, f"{problem} (record {decoded} of {total})")

    def _decompress_chunks(self, buf, idx, h: _V2Headers):
        """Lay the records areas of a window out in bounded buffers, decompressing as needed.

        A chunk holds at most ``max_decompressed`` bytes; the kernel runs once per chunk, and a
        chunk's bytes are copied out before its buffer is reused for the next one. A batch that
        expands past the view it is given is not retried with larger buffers: it is streamed
        (yielded as its index), so a corrupt payload is decompressed at most twice.
        """
        sel: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        rbuf, w = None, 0
        held = [0]  # records in the current chunk

        def flush():
            done = (
                (
                    rbuf,
                    np.array(sel, np.int64),
                    np.array(starts, np.int64),
                    np.array(ends, np.int64),
                )
                if sel
                else None
            )
            sel.clear()
            starts.clear()
            ends.clear()
            held[0] = 0
            return done

        for i in idx.tolist():
            a, e = int(h.positions[i]) + RECORDS_OFFSET, int(h.entry_end[i])
            c = int(h.codec[i])
            need = e - a if c == COMPRESSION_NONE else self._first_view(e - a)
            held[0] += int(h.count[i])
            if rbuf is None or len(rbuf) - w < need or held[0] > self.chunk_records:
                if done := flush():
                    yield done
                rbuf, w = self._chunk_buffer(need), 0
            try:
                if c == COMPRESSION_NONE:
                    rbuf[w : w + e - a] = buf[a:e]
                    got = e - a
                else:
                    view = min(len(rbuf) - w, self._first_view(e - a))
                    got = decompress_into(c, memoryview(buf)[a:e], rbuf[w : w + view])
            except OutputTooSmall:
                if done := flush():
                    yield done
                rbuf, w = None, 0
                yield i
                continue
            except DecodeError as err:
                self._fail(h, i, CORRUPT_BYTES, f"{codec_name(c)} records do not decompress: {err}")
                continue
            sel.append(i)
            starts.append(w)
            ends.append(w + got)
            w += got
        if done := flush():
            yield done

    def _chunk_buffer(self, need: int) -> np.ndarray:
        """One decompression buffer per decoder, reused chunk after chunk (no fresh page faults)."""
        size = max(self.max_decompressed, need)
        if self._rbuf is None or len(self._rbuf) < size:
            self._rbuf = np.empty(size, np.uint8)
        return self._rbuf

    def _first_view(self, compressed: int) -> int:
        return min(self.max_batch_decompressed, max(1 << 16, compressed * _EXPANSION_GUESS))

    def _records_table(
        self, rbuf, b: np.ndarray, scan: kernels.Scan, h: _V2Headers
    ) -> pa.RecordBatch:
        """Arrow records from the kernel's columns; b maps each record to its batch."""
        n = scan.offset.size
        seq_base = h.base_seq[b].astype(np.int64)
        seq = np.where(seq_base < 0, -1, _wrap_seq(seq_base + (scan.offset - h.base_offset[b])))
        hoffsets = np.zeros(n + 1, np.int32)
        np.cumsum(scan.header_count, out=hoffsets[1:])
        header_keys = _valid_utf8(_binary(rbuf, scan.hkey_pos, scan.hkey_len, pa.string()))
        header_values = _binary(rbuf, scan.hvalue_pos, scan.hvalue_len, pa.binary())
        headers = pa.ListArray.from_arrays(
            pa.array(hoffsets),
            pa.StructArray.from_arrays([header_keys, header_values], names=["key", "value"]),
        )
        return pa.RecordBatch.from_arrays(
            [
                _const(self.info.broker, n, pa.string()),
                _const(self.info.topic, n, pa.string()),
                _const(self.info.partition, n, pa.int32()),
                pa.array(scan.offset),
                _ts(scan.timestamp),
                _TS_TYPES.take(pa.array(h.log_append[b].view(np.int8))),
                _binary(rbuf, scan.key_pos, scan.key_len, pa.binary()),
                _binary(rbuf, scan.value_pos, scan.value_len, pa.binary()),
                headers,
                pa.array(h.producer_id[b]),
                pa.array(h.producer_epoch[b]),
                pa.array(seq.astype(np.int32)),
                pa.array(h.transactional[b]),
                pa.array(h.control[b]),
                pa.array(h.crc_valid[b]) if h.crc_valid is not None else pa.nulls(n, pa.bool_()),
                pa.array(h.abs_pos[b]),
                _const(self.info.base_offset, n, pa.int64()),
            ],
            schema=RECORDS,
        )

    def _decode_legacy(self, buf, base, positions, sizes) -> DecodedWindow:
        rows, recs = [], []
        mv = memoryview(buf)
        for p, s in zip(positions.tolist(), sizes.tolist(), strict=True):
            at, length = base + p, LOG_OVERHEAD + s
            try:
                entry = decode_entry(
                    mv[p : p + length], self.verify_crc, True, self.max_batch_decompressed
                )
            except DecodeError as e:
                self._error(at, length, CORRUPT_BYTES, str(e))
                self.acct.corrupt += length
                continue
            m = entry.message
            first = entry.records[0][0] if entry.records else m.offset
            if not _INT32_MIN <= m.offset - first <= _INT32_MAX:
                # lastOffsetDelta is an int32 column: a wrapper whose inner offsets run further
                # from it than that is corrupt, and the column is null for it
                entry.errors.append(
                    f"inner offsets start {m.offset - first} before the wrapper's offset {m.offset}"
                )
            problems = list(entry.errors)
            if not m.crc_valid:
                why = f"CRC-32 mismatch: stored {m.crc:#010x}"
                self._error(at, length, CRC_MISMATCH, why, m.offset)
                problems.insert(0, why)
            elif entry.errors:
                self._error(at, length, CORRUPT_BYTES, "; ".join(entry.errors), m.offset)
            if problems:
                self.acct.corrupt += length
            else:
                self.acct.valid += length
            self.acct.batches += 1
            self.acct.records += len(entry.records)
            self.acct.see_offsets(first, m.offset)
            rows.append((at, length, first, m, len(entry.records), "; ".join(problems) or None))
            if self.deep and self.emit_records:
                recs.extend((*r, m.crc_valid, at) for r in entry.records)
        return DecodedWindow(
            self._legacy_batches(rows), [self._legacy_records(recs)] if recs else []
        )

    def _legacy_batches(self, rows) -> pa.RecordBatch:
        n = len(rows)
        ms = [r[3] for r in rows]
        cols = {
            "broker": [self.info.broker] * n,
            "topic": [self.info.topic] * n,
            "partition": [self.info.partition] * n,
            "file": [self.info.file] * n,
            "position": [r[0] for r in rows],
            "size": [r[1] for r in rows],
            "base_offset": [r[2] for r in rows],
            "last_offset": [m.offset for m in ms],
            "magic": [m.magic for m in ms],
            "crc": [m.crc for m in ms],
            "crc_valid": [m.crc_valid if self.verify_crc else None for m in ms],
            "attributes": [m.attributes for m in ms],
            "compression": [COMPRESSION_NAMES.get(m.codec, f"unknown({m.codec})") for m in ms],
            "timestamp_type": [m.timestamp_type for m in ms],
            "is_transactional": [False] * n,
            "is_control": [False] * n,
            "has_delete_horizon": [False] * n,
            "partition_leader_epoch": [-1] * n,
            "base_timestamp": [None] * n,
            "max_timestamp": [None if m.timestamp == NO_TIMESTAMP else m.timestamp for m in ms],
            "delete_horizon": [None] * n,
            "producer_id": [-1] * n,
            "producer_epoch": [-1] * n,
            "base_sequence": [-1] * n,
            "last_sequence": [-1] * n,
            "last_offset_delta": [
                d if _INT32_MIN <= (d := m.offset - r[2]) <= _INT32_MAX else None
                for m, r in zip(ms, rows, strict=True)
            ],
            "record_count": [r[4] for r in rows],
            "control_type": [None] * n,
            "coordinator_epoch": [None] * n,
            "error": [r[5] for r in rows],
        }
        return pa.RecordBatch.from_pydict(cols, schema=BATCHES)

    def _legacy_records(self, recs) -> pa.RecordBatch:
        n = len(recs)
        cols = {
            "broker": [self.info.broker] * n,
            "topic": [self.info.topic] * n,
            "partition": [self.info.partition] * n,
            "offset": [r[0] for r in recs],
            "timestamp": [None if r[1] == NO_TIMESTAMP else r[1] for r in recs],
            "timestamp_type": [r[2] for r in recs],
            "key": [r[3] for r in recs],
            "value": [r[4] for r in recs],
            "headers": [[] for _ in recs],
            "producer_id": [-1] * n,
            "producer_epoch": [-1] * n,
            "sequence": [-1] * n,
            "is_transactional": [False] * n,
            "is_control": [False] * n,
            "crc_valid": [r[5] if self.verify_crc else None for r in recs],
            "batch_position": [r[6] for r in recs],
            "segment": [self.info.base_offset] * n,
        }
        return pa.RecordBatch.from_pydict(cols, schema=RECORDS)


# -- helpers ------------------------------------------------------------------------------------
def _wrap_seq(seq: np.ndarray) -> np.ndarray:
    """Sequence arithmetic wraps from Integer.MAX_VALUE to 0 (DefaultRecordBatch.incrementSequence)."""
    return np.mod(seq, MAX_SEQUENCE + 1)


def _slice(crcs, k: int):
    return None if crcs is None else (crcs[0][:k], crcs[1][:k])


def _trailing_zeros(buf: np.ndarray, start: int, end: int) -> int:
    nz = np.flatnonzero(buf[start:end])
    return end - start - (int(nz[-1]) + 1 if nz.size else 0)


def _const(value, n: int, typ: pa.DataType) -> pa.Array:
    """A column holding one value (topic, broker, file), built from buffers, not per row."""
    if value is None:
        return pa.nulls(n, typ)
    if pa.types.is_string(typ):
        b = value.encode("utf-8")
        offsets = np.arange(n + 1, dtype=np.int64) * len(b)
        if offsets[-1] < 2**31:
            return pa.Array.from_buffers(
                typ, n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b * n)]
            )
    return pa.repeat(pa.scalar(value, typ), n)


def _ts(values: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    null = values == NO_TIMESTAMP
    if mask is not None:
        null = null | mask
    return pa.array(values, pa.int64(), mask=null).cast(pa.timestamp("ms", tz="UTC"))


def _binary(buf: np.ndarray, pos: np.ndarray, lens: np.ndarray, typ: pa.DataType) -> pa.Array:
    n = pos.size
    offsets, data = kernels.gather(buf, pos, lens)
    null = lens < 0
    validity = None
    null_count = int(null.sum())
    if null_count:
        validity = pa.py_buffer(np.packbits(~null, bitorder="little"))
    return pa.Array.from_buffers(
        typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count
    )


def _valid_utf8(arr: pa.Array) -> pa.Array:
    """Header keys are Java Strings; replace any invalid UTF-8 rather than emit a broken array."""
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        raw = pa.Array.from_buffers(
            pa.binary(), len(arr), arr.buffers(), arr.null_count, arr.offset
        )
        return pa.array(
            [None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()],
            pa.string(),
        )


def _first_record_key_value(
    buf: np.ndarray, start: int, end: int
) -> tuple[bytes | None, bytes | None]:
    """Key and value of the first record of an uncompressed records area (control batches)."""
    from decoders.primitives import ByteReader

    r = ByteReader(memoryview(buf), start, end)
    length = r.varint()
    rend = r.pos + length
    if length < 0 or rend > end:
        raise DecodeError("record length out of range")
    r.end = rend
    r.int8()
    r.varlong()
    r.varint()
    kl = r.varint()
    key = r.raw(kl) if kl >= 0 else None
    vl = r.varint()
    value = r.raw(vl) if vl >= 0 else None
    return key, value
