"""Walk a `.log` segment by byte ranges and decode it into Arrow batches and records.

Reading (docs/formats.md section 1 and Appendix B):
- the file is read in windows of ``window_bytes``; only whole entries inside a window are
  decoded, an entry cut by the window end is re-read at the start of the next one, and an
  entry larger than the window gets a window of its own (up to ``max_batch_bytes``);
- every byte ends up valid, padding (zeros to the end of the file) or corrupt, and every
  corrupt range has an error row with its position and reason; after garbage the walker
  resynchronises on the next entry whose CRC is valid (:mod:`decoders.resync`), so one bad
  spot never hides the rest;
- v2 headers are extracted for all batches of a window at once with numpy
  (:mod:`decoders.batch_tables`), records are scanned by a compiled kernel and keys, values and
  headers are gathered into Arrow buffers (:mod:`decoders.records`); legacy entries go through
  :mod:`decoders.legacy_tables`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import numpy as np

from decoders import kernels
from decoders.accounting import Accounting, DecodedWindow, FileInfo
from decoders.batch_tables import HeaderBatch, V2Headers, batches_table, control_records
from decoders.constants import LOG_OVERHEAD, MAGIC_VALUE_V2, MAX_CODEC_V2
from decoders.errors import CORRUPT_BYTES, CRC_MISMATCH, TRUNCATED_BATCH, ErrorRow
from decoders.framing import entry_crcs, entry_size
from decoders.legacy_tables import decode_legacy_window
from decoders.limits import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_DECOMPRESSED,
    DEFAULT_MAX_DECOMPRESSED,
    DEFAULT_MEMORY_BUDGET,
    DEFAULT_WINDOW_BYTES,
)
from decoders.records import V2Records
from decoders.resync import Resync
from decoders.source import ByteSource, open_source

# A batch failing its CRC whose last bytes are this many zeros or more is a torn write.
TORN_WRITE_MIN_ZEROS = 16
# The smallest window: one entry's head and a little more.
MIN_WINDOW_BYTES = 64
# The smallest memory budget a decoder works with.
MIN_MEMORY_BUDGET = 16 << 20


class SegmentDecoder:
    """Decode one `.log` (or KRaft `.checkpoint`) file into bounded windows of Arrow data.

    ``deep=False`` is the header-only scan: no decompression and no record parsing. The
    decoder owns the source it opens from a path: use it as a context manager (or call
    :meth:`close`); a source passed in open stays the caller's to close.

    ``records_apart``: the records decoded (as ``deep`` decodes them) from the same read as a
    header-only scan whose batches rows, errors and accounting are what it gives: a record's
    failure marks its batch for the records that follow, as a deep decode does, but is in
    none of them (the audit reads an internal topic's records once, beside its header scan).

    ``header_rows`` (header-only): a window of fewer v2 batches than this gives its batches
    rows as a :class:`decoders.batch_tables.HeaderBatch`, the table made only where asked (an
    audit's scan reads a quiet partition's few batches as Python values).
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
        columns: frozenset[str] | None = None,
        records_apart: bool = False,
        header_rows: int = 0,
    ) -> None:
        self.src: ByteSource = open_source(source)
        # a path is opened here and closed by close(); an object passed in stays the caller's
        self._owns_src = isinstance(source, (str, os.PathLike))
        self.info = info or FileInfo(file=self.src.name)
        self.records_apart = records_apart
        self.deep = deep or records_apart
        # a header-only window of fewer v2 batches than this gives them as a HeaderBatch
        self.header_rows = 0 if self.deep else header_rows
        # deep without emit_records validates every record (errors, accounting) but builds no
        # Arrow records: for batches, segments and errors tables.
        self.emit_records = emit_records
        self.verify_crc = verify_crc
        self.window_bytes = max(window_bytes, MIN_WINDOW_BYTES)
        self.max_batch_bytes = max_batch_bytes
        self.start = start
        # A range decoder owns the entries that start in [start, stop); the file size bounds reads.
        self.stop = self.src.size if stop is None else min(stop, self.src.size)
        self.acct = Accounting(size=self.stop - start)
        self.budget = max(memory_budget, MIN_MEMORY_BUDGET)
        self.v2 = V2Records(
            self.info,
            self._mark if records_apart else self.fail,
            emit_records=emit_records,
            budget=self.budget,
            max_decompressed=max(max_decompressed, max_batch_decompressed),
            max_batch_decompressed=max_batch_decompressed,
            columns=columns,
        )
        self.resync = Resync(self.src, self.stop, self.window_bytes, max_batch_bytes)
        self._window: np.ndarray | None = None  # the buffer windows are read into (_read_window)
        self._unshared = 0

    def close(self) -> None:
        """Close the source if this decoder opened it, and let go of the window and the records
        decoder at once: the records decoder calls back into this one (``fail``), a cycle
        that only Python's cyclic collector would free, and a decoder that allocates few
        Python objects runs it rarely: a file's window and scratch would outlive it, one
        more for every file of a long log."""
        if self._owns_src:
            self.src.close()
        self.v2 = None
        self._window = None

    def __enter__(self) -> SegmentDecoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the walk ---------------------------------------------------------------------------
    def windows(self) -> Iterator[DecodedWindow]:
        pos, size, want = self.start, self.src.size, self.window_bytes
        while pos < self.stop:
            buf = None  # the previous window's view, released before its buffer is reused
            buf = self._read_window(pos, min(want, size - pos))
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
                crcs = entry_crcs(buf, positions, sizes, magics) if self.verify_crc else None
                split = (
                    self.resync.split_inside_bad_entry(pos, positions, sizes, crcs)
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
                    s = entry_size(buf, stop) if limit - stop >= LOG_OVERHEAD else 0
                    want = max(self.window_bytes, LOG_OVERHEAD + s)
                pos = at
            else:
                pos = self.resync.recover(at, reason, self.acct, self.info.file)

    def _read_window(self, position: int, length: int) -> np.ndarray:
        """The window's bytes. A local file is read into one buffer kept from window to window
        (fresh bytes for each would cost a page fault per 4 KiB, a third of decoding an
        uncompressed window), reused only when nothing made from the last window still
        refers to it: the records are copied out of it, but a streamed batch's records are
        decoded when a caller iterates them, from the window's bytes."""
        read_into = getattr(self.src, "read_into", None)
        if read_into is None:
            return np.frombuffer(self.src.read_at(position, length), np.uint8)
        window = self._window
        if window is None or len(window) < length or sys.getrefcount(window) > self._unshared:
            window = self._window = np.empty(length, np.uint8)
            # its references with no view alive (this attribute, this name and whatever the
            # interpreter counts for the call), measured as they will be checked
            self._unshared = sys.getrefcount(window)
        return window[: read_into(position, window[:length])]

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
                # a legacy entry is decoded whole either way (its batches row and accounting
                # are the same whether its records are made: records_apart needs no more)
                yield decode_legacy_window(
                    buf,
                    base,
                    positions[run],
                    sizes[run],
                    info=self.info,
                    acct=self.acct,
                    verify_crc=self.verify_crc,
                    emit_records=self.deep and self.emit_records,
                    max_decompressed=self.v2.max_batch_decompressed,
                )

    def _decode_v2(self, buf, base, positions, sizes, crcs=None) -> DecodedWindow:
        h = V2Headers.read(buf, base, positions, sizes)
        if self.verify_crc:
            computed = (
                crcs[0]
                if crcs is not None
                else entry_crcs(buf, positions, sizes, np.full(h.n, MAGIC_VALUE_V2, np.int8))[0]
            )
            h.crc_valid = computed == h.crc
            for i in np.flatnonzero(~h.crc_valid):
                why = f"CRC-32C mismatch: stored {int(h.crc[i]):#010x}, computed {int(computed[i]):#010x}"
                zeros = _trailing_zeros(buf, int(positions[i]), int(h.entry_end[i]))
                if zeros >= TORN_WRITE_MIN_ZEROS:
                    # A batch whose bytes give way to zeros was cut by a crash while the file
                    # was preallocated: a torn write, not a flipped bit.
                    self.fail(
                        h,
                        i,
                        TRUNCATED_BATCH,
                        f"{why}; its last {zeros} bytes are zero: a torn write into preallocated space",
                    )
                else:
                    self.fail(h, i, CRC_MISMATCH, why)
        for i in np.flatnonzero(h.count < 0):
            self.fail(h, i, CORRUPT_BYTES, f"negative recordsCount {int(h.count[i])}")
        for i in np.flatnonzero(h.codec > MAX_CODEC_V2):
            self.fail(h, i, CORRUPT_BYTES, f"unknown compression codec {int(h.codec[i])}")
        control_type, coord_epoch = control_records(buf, h, self.fail)
        if self.records_apart:  # the header scan's rows and accounting, made before the records
            batches = batches_table(self.info, h, control_type, coord_epoch)
            self._account_v2(h)
            return DecodedWindow(batches, self.v2.records(buf, h))
        # Records of a batch whose CRC fails are still decoded (and flagged), as the checklist
        # says ("decode even when it fails"); only an unusable header stops us.
        records = self.v2.records(buf, h) if self.deep else []
        self._account_v2(h)
        if h.n < self.header_rows:  # (header-only: nothing marks the headers after this)
            return DecodedWindow(HeaderBatch(self.info, h, control_type, coord_epoch), records)
        return DecodedWindow(batches_table(self.info, h, control_type, coord_epoch), records)

    def fail(self, h: V2Headers, i: int, kind: str, why: str) -> None:
        """Mark batch i bad: its first reason goes in the batches table, one error row per batch."""
        h.errors[i] = h.errors[i] or why
        if not h.bad[i]:
            self._error(
                int(h.abs_pos[i]), int(h.sizes[i]) + LOG_OVERHEAD, kind, why, int(h.base_offset[i])
            )
            h.bad[i] = True

    def _mark(self, h: V2Headers, i: int, kind: str, why: str) -> None:
        """A record's failure where the records are decoded apart: its batch marked for the
        records that follow (as :meth:`fail` marks it), no error row."""
        h.errors[i] = h.errors[i] or why
        h.bad[i] = True

    def _account_v2(self, h: V2Headers) -> None:
        total = int(h.sizes.sum()) + LOG_OVERHEAD * h.n
        bad_bytes = int(h.sizes[h.bad].sum()) + LOG_OVERHEAD * int(h.bad.sum())
        self.acct.valid += total - bad_bytes
        self.acct.corrupt += bad_bytes
        self.acct.batches += h.n
        self.acct.records += int(np.maximum(h.count, 0).sum())
        self.acct.see_offsets(int(h.base_offset.min()), int(h.last_offset.max()))


def _slice(crcs, k: int):
    return None if crcs is None else (crcs[0][:k], crcs[1][:k])


def _trailing_zeros(buf: np.ndarray, start: int, end: int) -> int:
    nz = np.flatnonzero(buf[start:end])
    return end - start - (int(nz[-1]) + 1 if nz.size else 0)
