"""Walk a `.log` segment by byte ranges and decode it into Arrow batches and records.

Reading (kafka-formats.md section 1 and Appendix B):
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
from collections.abc import Iterator
from dataclasses import dataclass, field

import crc32c
import numpy as np
import pyarrow as pa

from decoders import kernels
from decoders.compression import codec_name, decompress_into
from decoders.constants import (
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_VALUE_V2,
    MAX_SEQUENCE,
    NO_TIMESTAMP,
    RECORDS_OFFSET,
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

_HDR = np.arange(RECORDS_OFFSET)
_TS_TYPES = pa.array([CREATE_TIME, LOG_APPEND_TIME], pa.string())
# First guess of a batch's decompressed size, as a multiple of its compressed size; the output
# view grows (up to max_batch_decompressed) only when a batch expands more than that.
_EXPANSION_GUESS = 16
TORN_WRITE_MIN_ZEROS = 16
_ZERO_CHUNK = 4 * 1024 * 1024


class _OutOfRoom(Exception):
    """A batch did not fit in what was left of the current decompression chunk."""


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
    ) -> None:
        self.src: ByteSource = open_source(source)
        self.info = info or FileInfo(file=self.src.name)
        self.deep = deep
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

    def _zeros_to_end(self, at: int) -> bool:
        p = at
        while p < self.stop:
            b = np.frombuffer(self.src.read_at(p, min(_ZERO_CHUNK, self.stop - p)), np.uint8)
            if b.any():
                return False
            p += len(b)
        return True

    def _last_nonzero_end(self, at: int) -> int:
        """End of the last non-zero byte at or after `at` (trailing zeros count as padding)."""
        end = self.stop
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
        n = len(positions)
        hdr = buf[positions[:, None] + _HDR]

        def col(a: int, b: int, dt: str) -> np.ndarray:
            return np.ascontiguousarray(hdr[:, a:b]).view(dt).ravel().astype(dt[1:])

        base_offset = col(0, 8, ">i8")
        leader_epoch = col(12, 16, ">i4")
        crc = col(17, 21, ">u4")
        attributes = col(21, 23, ">i2")
        last_delta = col(23, 27, ">i4")
        base_ts = col(27, 35, ">i8")
        max_ts = col(35, 43, ">i8")
        producer_id = col(43, 51, ">i8")
        producer_epoch = col(51, 53, ">i2")
        base_seq = col(53, 57, ">i4")
        count = col(57, 61, ">i4")
        codec = attributes & 0x07
        log_append = (attributes & 0x08) != 0
        transactional = (attributes & 0x10) != 0
        control = (attributes & 0x20) != 0
        horizon = (attributes & 0x40) != 0
        entry_end = positions + LOG_OVERHEAD + sizes
        abs_pos = positions + base
        errors: list[str | None] = [None] * n
        bad = np.zeros(n, bool)

        crc_valid = None
        if self.verify_crc:
            computed = (
                crcs[0]
                if crcs is not None
                else self._entry_crcs(buf, positions, sizes, np.full(n, 2, np.int8))[0]
            )
            crc_valid = computed == crc
            for i in np.flatnonzero(~crc_valid):
                errors[i] = (
                    f"CRC-32C mismatch: stored {int(crc[i]):#010x}, computed {int(computed[i]):#010x}"
                )
                kind = CRC_MISMATCH
                zeros = _trailing_zeros(buf, int(positions[i]), int(entry_end[i]))
                if zeros >= TORN_WRITE_MIN_ZEROS:
                    # A batch whose bytes stop and give way to zeros was cut by a crash while the
                    # file was preallocated: a torn write, not a flipped bit.
                    kind = TRUNCATED_BATCH
                    errors[i] += (
                        f"; its last {zeros} bytes are zero: a torn write into preallocated space"
                    )
                self._error(
                    int(abs_pos[i]),
                    int(sizes[i]) + LOG_OVERHEAD,
                    kind,
                    errors[i],
                    int(base_offset[i]),
                )
                bad[i] = True
        for i in np.flatnonzero(count < 0):
            errors[i] = f"negative recordsCount {int(count[i])}"
            self._error(
                int(abs_pos[i]),
                int(sizes[i]) + LOG_OVERHEAD,
                CORRUPT_BYTES,
                errors[i],
                int(base_offset[i]),
            )
            bad[i] = True
        for i in np.flatnonzero(codec > 4):
            errors[i] = f"unknown compression codec {int(codec[i])}"
            self._error(
                int(abs_pos[i]),
                int(sizes[i]) + LOG_OVERHEAD,
                CORRUPT_BYTES,
                errors[i],
                int(base_offset[i]),
            )
            bad[i] = True

        # Control records: COMMIT/ABORT with coordinator epoch, KRaft types named.
        control_type: list[str | None] = [None] * n
        coord_epoch = np.full(n, -1, np.int32)
        has_coord = np.zeros(n, bool)
        for i in np.flatnonzero(control & (count > 0) & (codec == COMPRESSION_NONE)):
            try:
                key, value = _first_record_key_value(
                    buf, int(positions[i]) + RECORDS_OFFSET, int(entry_end[i])
                )
                _, ctype = control_key(key)
                control_type[i] = control_type_name(ctype)
                if is_txn_marker(ctype):
                    coord_epoch[i] = end_txn_marker(value)[1]
                    has_coord[i] = True
            except DecodeError as e:
                msg = f"control record: {e}"
                errors[i] = errors[i] or msg
                self._error(
                    int(abs_pos[i]),
                    int(sizes[i]) + LOG_OVERHEAD,
                    CORRUPT_BYTES,
                    msg,
                    int(base_offset[i]),
                )
                bad[i] = True

        records: list[pa.RecordBatch] = []
        if self.deep:
            # Records of a batch whose CRC fails are still decoded (and flagged): the
            # checklist's "decode even when it fails"; only an unusable header stops us.
            decodable = (count > 0) & (codec <= 4)
            records = self._records_v2(
                buf,
                base,
                positions,
                entry_end,
                decodable,
                codec,
                count,
                base_offset,
                base_ts,
                max_ts,
                log_append,
                producer_id,
                producer_epoch,
                base_seq,
                transactional,
                control,
                crc_valid,
                abs_pos,
                sizes,
                errors,
                bad,
            )

        total = int(sizes.sum()) + LOG_OVERHEAD * n
        bad_bytes = int(sizes[bad].sum()) + LOG_OVERHEAD * int(bad.sum())
        self.acct.valid += total - bad_bytes
        self.acct.corrupt += bad_bytes
        self.acct.batches += n
        self.acct.records += int(np.maximum(count, 0).sum())
        last_offset = base_offset + last_delta
        self.acct.see_offsets(int(base_offset.min()), int(last_offset.max()))

        last_seq = np.where(
            base_seq < 0, -1, _wrap_seq(base_seq.astype(np.int64) + last_delta)
        ).astype(np.int32)
        ts_type = _TS_TYPES.take(pa.array(log_append.view(np.int8)))
        batches = pa.RecordBatch.from_arrays(
            [
                _const(self.info.broker, n, pa.string()),
                _const(self.info.topic, n, pa.string()),
                _const(self.info.partition, n, pa.int32()),
                _const(self.info.file, n, pa.string()),
                pa.array(abs_pos, pa.int64()),
                pa.array((sizes + LOG_OVERHEAD).astype(np.int32)),
                pa.array(base_offset),
                pa.array(last_offset),
                pa.array(np.full(n, 2, np.int8)),
                pa.array(crc),
                pa.array(crc_valid) if crc_valid is not None else pa.nulls(n, pa.bool_()),
                pa.array(attributes),
                pa.array(
                    [COMPRESSION_NAMES.get(int(c), f"unknown({int(c)})") for c in codec],
                    pa.string(),
                ),
                ts_type,
                pa.array(transactional),
                pa.array(control),
                pa.array(horizon),
                pa.array(leader_epoch),
                _ts(base_ts, mask=horizon),
                _ts(max_ts),
                _ts(base_ts, mask=~horizon),
                pa.array(producer_id),
                pa.array(producer_epoch),
                pa.array(base_seq),
                pa.array(last_seq),
                pa.array(last_delta),
                pa.array(count),
                pa.array(control_type, pa.string()),
                pa.array(coord_epoch, mask=~has_coord),
                pa.array(errors, pa.string()),
            ],
            schema=BATCHES,
        )
        return DecodedWindow(batches, records)

    def _records_v2(
        self,
        buf,
        base,
        positions,
        entry_end,
        decodable,
        codec,
        count,
        base_offset,
        base_ts,
        max_ts,
        log_append,
        producer_id,
        producer_epoch,
        base_seq,
        transactional,
        control,
        crc_valid,
        abs_pos,
        sizes,
        errors,
        bad,
    ) -> list[pa.RecordBatch]:
        idx = np.flatnonzero(decodable)
        if idx.size == 0:
            return []
        fixed_ts = np.where(log_append, max_ts, -2)
        out: list[pa.RecordBatch] = []
        if not (codec[idx] != COMPRESSION_NONE).any():
            chunks = [(buf, idx, positions[idx] + RECORDS_OFFSET, entry_end[idx])]
        else:
            chunks = self._decompress_chunks(
                buf, idx, positions, entry_end, codec, abs_pos, sizes, base_offset, errors, bad
            )
        for rbuf, sel, starts, ends in chunks:
            if sel.size == 0:
                continue
            res = kernels.scan_records(
                rbuf,
                starts.astype(np.int64),
                ends.astype(np.int64),
                count[sel].astype(np.int64),
                base_offset[sel],
                base_ts[sel],
                fixed_ts[sel],
            )
            (
                rb,
                off,
                ts,
                kpos,
                klen,
                vpos,
                vlen,
                hfirst,
                hcount,
                hkp,
                hkl,
                hvp,
                hvl,
                status,
                decoded,
                errpos,
            ) = res
            for j in np.flatnonzero(status):
                i = sel[j]
                why = f"{kernels.REC_REASONS[int(status[j])]} (record {int(decoded[j])} of {int(count[i])})"
                errors[i] = errors[i] or why
                if not bad[i]:
                    self._error(
                        int(abs_pos[i]),
                        int(sizes[i]) + LOG_OVERHEAD,
                        CORRUPT_BYTES,
                        why,
                        int(base_offset[i]),
                    )
                    bad[i] = True
            if off.size == 0:
                continue
            b = sel[rb]
            out.append(
                self._record_batch(
                    rbuf,
                    b,
                    off,
                    ts,
                    kpos,
                    klen,
                    vpos,
                    vlen,
                    hfirst,
                    hcount,
                    hkp,
                    hkl,
                    hvp,
                    hvl,
                    base_offset,
                    log_append,
                    producer_id,
                    producer_epoch,
                    base_seq,
                    transactional,
                    control,
                    crc_valid,
                    abs_pos,
                )
            )
        return out

    def _decompress_chunks(
        self, buf, idx, positions, entry_end, codec, abs_pos, sizes, base_offset, errors, bad
    ):
        """Lay the records areas of a window out in bounded buffers, decompressing as needed.

        A chunk holds at most ``max_decompressed`` bytes (one batch may need up to
        ``max_batch_decompressed``); the kernel then runs once per chunk.
        """
        sel: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        rbuf, w = None, 0

        def flush():
            """The finished chunk (if any); its bytes are copied out before the buffer is reused."""
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
            return done

        for i in idx.tolist():
            a, e = int(positions[i]) + RECORDS_OFFSET, int(entry_end[i])
            c = int(codec[i])
            need = e - a if c == COMPRESSION_NONE else self._first_view(e - a)
            if rbuf is None or len(rbuf) - w < need:
                if done := flush():
                    yield done
                rbuf, w = self._chunk_buffer(need), 0
            try:
                if c == COMPRESSION_NONE:
                    rbuf[w : w + e - a] = buf[a:e]
                    got = e - a
                else:
                    try:
                        got = self._decompress_batch(c, memoryview(buf)[a:e], rbuf, w)
                    except _OutOfRoom:  # expands past what this chunk has left: a chunk of its own
                        if done := flush():
                            yield done
                        rbuf, w = self._chunk_buffer(self.max_batch_decompressed), 0
                        got = self._decompress_batch(c, memoryview(buf)[a:e], rbuf, w)
            except DecodeError as err:
                why = f"{codec_name(c)} records do not decompress: {err}"
                errors[i] = errors[i] or why
                if not bad[i]:
                    self._error(
                        int(abs_pos[i]),
                        int(sizes[i]) + LOG_OVERHEAD,
                        CORRUPT_BYTES,
                        why,
                        int(base_offset[i]),
                    )
                    bad[i] = True
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

    def _decompress_batch(self, codec: int, payload: memoryview, rbuf: np.ndarray, w: int) -> int:
        """Decompress into rbuf[w:], trying a view sized from the payload first (cramjam's cost
        grows with the size of the view it is given), growing it up to the per-batch bound."""
        room = len(rbuf) - w
        view = min(room, self._first_view(len(payload)))
        while True:
            try:
                return decompress_into(codec, payload, rbuf[w : w + view])
            except DecodeError:
                if view >= self.max_batch_decompressed:
                    raise
                if view >= room:
                    raise _OutOfRoom() from None
                view = min(room, self.max_batch_decompressed, view * 8)

    def _record_batch(
        self,
        rbuf,
        b,
        off,
        ts,
        kpos,
        klen,
        vpos,
        vlen,
        hfirst,
        hcount,
        hkp,
        hkl,
        hvp,
        hvl,
        base_offset,
        log_append,
        producer_id,
        producer_epoch,
        base_seq,
        transactional,
        control,
        crc_valid,
        abs_pos,
    ) -> pa.RecordBatch:
        n = off.size
        seq_base = base_seq[b].astype(np.int64)
        seq = np.where(seq_base < 0, -1, _wrap_seq(seq_base + (off - base_offset[b]))).astype(
            np.int32
        )
        hk = _binary(rbuf, hkp, hkl, pa.string())
        hv = _binary(rbuf, hvp, hvl, pa.binary())
        hoffsets = np.zeros(n + 1, np.int32)
        np.cumsum(hcount, out=hoffsets[1:])
        headers = pa.ListArray.from_arrays(
            pa.array(hoffsets),
            pa.StructArray.from_arrays([_valid_utf8(hk), hv], names=["key", "value"]),
        )
        return pa.RecordBatch.from_arrays(
            [
                _const(self.info.broker, n, pa.string()),
                _const(self.info.topic, n, pa.string()),
                _const(self.info.partition, n, pa.int32()),
                pa.array(off),
                _ts(ts),
                _TS_TYPES.take(pa.array(log_append[b].view(np.int8))),
                _binary(rbuf, kpos, klen, pa.binary()),
                _binary(rbuf, vpos, vlen, pa.binary()),
                headers,
                pa.array(producer_id[b]),
                pa.array(producer_epoch[b]),
                pa.array(seq),
                pa.array(transactional[b]),
                pa.array(control[b]),
                pa.array(crc_valid[b]) if crc_valid is not None else pa.nulls(n, pa.bool_()),
                pa.array(abs_pos[b]),
                _const(self.info.file, n, pa.string()),
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
            first = entry.records[0][0] if entry.records else m.offset
            self.acct.batches += 1
            self.acct.records += len(entry.records)
            self.acct.see_offsets(first, m.offset)
            rows.append((at, length, first, m, len(entry.records), "; ".join(problems) or None))
            if self.deep:
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
            "last_offset_delta": [m.offset - r[2] for m, r in zip(ms, rows, strict=True)],
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
            "file": [self.info.file] * n,
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
