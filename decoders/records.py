"""The records of v2 batches: decompressed in bounded chunks, big batches streamed, scanned by
the compiled kernel into Arrow columns (docs/formats.md sections 3 and 4).

Memory stays bounded whatever a batch declares: ordinary batches are decompressed into one
reusable buffer of at most ``max_decompressed`` bytes, chunk after chunk; a batch holding more
records than ``chunk_records``, or expanding past the view it was given, is streamed piece by
piece. A payload that does not decompress is a corrupt batch, never retried with a larger
buffer: it is decompressed at most twice (the bounded attempt, then the streamed validation),
and a streamed batch that yielded no record is not decompressed again for its records.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator

import numpy as np
import pyarrow as pa

from decoders import kernels
from decoders.accounting import FileInfo
from decoders.batch_tables import Fail, V2Headers, records_table
from decoders.compression import (
    LZ4_HEADER_CHECKSUMS,
    OutputTooSmall,
    codec_name,
    decompress_into,
    stream_decompress,
)
from decoders.constants import (
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    MAX_CODEC_V2,
    RECORDS_OFFSET,
)
from decoders.errors import CORRUPT_BYTES, DecodeError
from decoders.record_walk import RecordWalker

# First guess of a batch's decompressed size, as a multiple of its compressed size; the output
# view grows (up to max_batch_decompressed) only when a batch expands more than that.
EXPANSION_GUESS = 16
# A chunk of decompressed batches is walked once it holds this much: its bytes are still in the
# CPU's cache when the walk copies them out, and the next chunk reuses the same buffer.
CHUNK_FILL = 2 << 20
# The smallest view a compressed batch is given.
MIN_VIEW = 1 << 16
# fixed_timestamps value meaning "baseTimestamp + the record's delta" (see kernels.walk_records)
_DELTA_TIMESTAMPS = -2


def _grown(rbuf: np.ndarray, filled: int, cap: int) -> np.ndarray:
    """``rbuf`` grown to ``cap`` bytes, its ``filled`` bytes kept: a streamed record larger than
    the buffer must be whole in it to be scanned."""
    grown = np.empty(cap, np.uint8)
    grown[:filled] = rbuf[:filled]
    return grown


class V2Records:
    """Decodes the records of one file's v2 batches, window after window.

    ``fail`` marks a batch bad (its error row, its bytes corrupt); the decompression buffer is
    kept from one window to the next, so chunks cost no fresh page faults.
    """

    def __init__(
        self,
        info: FileInfo,
        fail: Fail,
        *,
        emit_records: bool,
        budget: int,
        max_decompressed: int,
        max_batch_decompressed: int,
        columns: frozenset[str] | None = None,
    ) -> None:
        self.info = info
        self.fail = fail
        self.emit_records = emit_records
        self.columns = columns  # the records' columns built (batch_tables.records_table)
        # The budget bounds the pieces a streamed batch is decompressed in, the records decoded
        # at once (a record costs about 100 bytes of columns, twice over while Arrow copies
        # them; internal topics build Python values for a slice of them) and index reads.
        self.budget = budget
        self.stream_piece = min(4 << 20, budget // 128)
        self.chunk_records = max(1024, budget // 2048)
        self.max_decompressed = min(max_decompressed, budget // 8)
        self.max_batch_decompressed = min(max_batch_decompressed, self.max_decompressed)
        self._rbuf: np.ndarray | None = None
        self._walker = RecordWalker()

    def records(self, buf, h: V2Headers) -> Iterable[pa.RecordBatch]:
        """Records of the window's batches, in batch order.

        Batches of ordinary size are decoded at once, in chunks of at most ``max_decompressed``
        bytes. A batch holding more records than ``chunk_records``, or expanding past the view
        it was given, is streamed: validated now (so that the batches table carries its error),
        and its records are decoded again chunk by chunk only when the caller asks for them.
        """
        idx = np.flatnonzero((h.count > 0) & (h.codec <= MAX_CODEC_V2))
        if idx.size == 0:
            return []
        # LogAppendTime: every record gets maxTimestamp
        fixed_ts = np.where(h.log_append, h.max_ts, _DELTA_TIMESTAMPS)
        out: list = []
        for item in self._record_plan(buf, idx, h):
            if isinstance(item, int):
                decoded = _drain(self._stream_records(buf, h, item, fixed_ts, first_pass=True))
                if self.emit_records and decoded:  # a batch that yielded nothing: not again
                    out.append(item)
                continue
            rbuf, sel, starts, ends = item
            walk = self._walk(
                rbuf,
                starts,
                ends,
                h.count[sel].astype(np.int64),
                h.base_offset[sel],
                h.base_ts[sel],
                fixed_ts[sel],
            )
            for j in np.flatnonzero(walk.status):
                i = sel[j]
                reason = kernels.REC_REASONS[int(walk.status[j])]
                self.fail(
                    h,
                    i,
                    CORRUPT_BYTES,
                    f"{reason} (record {int(walk.decoded[j])} of {int(h.count[i])})",
                )
            if walk.offset.size and self.emit_records:
                out.append(records_table(self.info, sel, walk, h, self.columns))
        if not any(isinstance(x, int) for x in out):
            return out
        return self._lazy_records(out, buf, h, fixed_ts)

    def _walk(self, rbuf, starts, ends, counts, base_offsets, base_ts, fixed_ts, copy=True):
        """The kernels' walk of these records areas, copying out the binary columns wanted
        (none when the records are not emitted: the walk then only validates)."""
        copy = copy and self.emit_records
        cols = self.columns
        return self._walker.walk(
            rbuf, starts, ends, counts, base_offsets, base_ts, fixed_ts,
            keys=copy and (cols is None or "key" in cols),
            values=copy and (cols is None or "value" in cols),
            headers=copy and (cols is None or "headers" in cols),
        )  # fmt: skip

    def _lazy_records(self, items, buf, h, fixed_ts) -> Iterator[pa.RecordBatch]:
        for item in items:
            if isinstance(item, int):
                yield from self._stream_records(buf, h, item, fixed_ts, first_pass=False)
            else:
                yield item

    def _record_plan(self, buf, idx, h: V2Headers):
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

    def _small_chunks(self, buf, idx, h: V2Headers):
        if (h.codec[idx] == COMPRESSION_NONE).all():  # zero copy: walk the window itself
            yield (buf, idx, h.positions[idx] + RECORDS_OFFSET, h.entry_end[idx])
        else:
            yield from self._decompress_chunks(buf, idx, h)

    def _stream_records(
        self, buf, h: V2Headers, i: int, fixed_ts, first_pass: bool
    ) -> Generator[pa.RecordBatch, None, int]:
        """Decode one batch's records from a stream of decompressed pieces, chunk by chunk.

        At most two pieces and the unfinished record carried over are held at once; a record
        larger than that grows the buffer up to a quarter of the memory budget. The first pass
        only validates (and marks the batch bad); the second builds the Arrow records. Returns
        the number of records decoded.
        """
        codec = int(h.codec[i])
        pieces = self._pieces(buf, h, i)
        total = int(h.count[i])
        args = (
            np.array([h.base_offset[i]], np.int64),
            np.array([h.base_ts[i]], np.int64),
            np.array([fixed_ts[i]], np.int64),
        )
        cap = 2 * self.stream_piece
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
                walk = self._walk(
                    rbuf,
                    np.zeros(1, np.int64),
                    np.array([filled], np.int64),
                    np.array([total - decoded], np.int64),
                    *args,
                    copy=not first_pass,
                )
                j, st = int(walk.decoded[0]), int(walk.status[0])
                if j and not first_pass:
                    yield records_table(self.info, np.array([i]), walk, h, self.columns)
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
                p = int(walk.error_pos[0])
                if p == 0 and cap - filled < len(pending):  # one record fills the buffer
                    problem = self._unfinished(st, cap)
                    if problem:
                        break
                    cap *= 2
                    rbuf = _grown(rbuf, filled, cap)
                    continue
                rbuf[: filled - p] = rbuf[p:filled]
                filled -= p
        except DecodeError as err:
            problem = f"{codec_name(codec)} records do not decompress: {err}"
        if problem and first_pass:
            self.fail(h, i, CORRUPT_BYTES, f"{problem} (record {decoded} of {total})")
        return decoded

    def _pieces(self, buf, h: V2Headers, i: int) -> Iterator[bytes]:
        """Batch ``i``'s records area in pieces of at most ``stream_piece`` bytes: sliced from
        the window as it is, or decompressed a piece at a time (lazily: a payload that does not
        decompress fails where the stream is read)."""
        a, e = h.records_area(i)
        codec = int(h.codec[i])
        piece = self.stream_piece
        if codec == COMPRESSION_NONE:
            return (bytes(buf[p : min(p + piece, e)]) for p in range(a, e, piece))
        return stream_decompress(codec, memoryview(buf)[a:e], piece=piece)

    def _unfinished(self, status: int, cap: int) -> str | None:
        """Why a record that fills the whole buffer ends the stream, or None to grow the buffer:
        only a record whose length is past the buffer may grow it, and only up to a quarter of
        the memory budget; any other status is the batch's problem."""
        if status != kernels.REC_BAD_LENGTH:
            return kernels.REC_REASONS[status]
        if 2 * cap > self.budget // 4:
            quarter = self.budget // 4
            return f"a record larger than a quarter of the memory budget ({quarter} bytes)"
        return None

    def _decompress_chunks(self, buf, idx, h: V2Headers):
        """Lay the records areas of a window out in bounded buffers, decompressing as needed.

        A chunk holds at most ``max_decompressed`` bytes (about CHUNK_FILL); the walk runs once
        per chunk, and copies its bytes out before the buffer is reused for the next one. Runs
        of LZ4 and snappy batches are decompressed by one compiled call
        (kernels.inflate_batches); a batch it does not take, and every other codec, goes
        through cramjam here. A batch that expands
        past the view it is given is not retried with larger buffers: it is streamed (yielded
        as its index), so a corrupt payload is decompressed at most twice.
        """
        n = idx.size
        a_all = h.positions[idx] + RECORDS_OFFSET
        e_all = h.entry_end[idx]
        codecs, counts = h.codec[idx], h.count[idx].astype(np.int64)
        sizes = e_all - a_all
        views = np.where(
            codecs == COMPRESSION_NONE,
            sizes,
            np.minimum(self.max_batch_decompressed, np.maximum(MIN_VIEW, sizes * EXPANSION_GUESS)),
        )
        compiled = ((codecs == COMPRESSION_LZ4) | (codecs == COMPRESSION_SNAPPY)).tolist()
        chunk = _Chunk(idx)
        j = 0
        while j < n:
            if compiled[j] and chunk.buf is not None:
                stop, w, took = kernels.inflate_batches(
                    buf, a_all, e_all, views, counts, codecs, j, chunk.buf, chunk.w, CHUNK_FILL,
                    self.chunk_records - chunk.held, LZ4_HEADER_CHECKSUMS, chunk.got,
                )  # fmt: skip
                if stop > j:
                    chunk.taken[j:stop] = True
                    chunk.w, chunk.held = w, chunk.held + took
                    j = stop
                    continue
            # one batch: the chunk is full, or another codec, or a frame the kernel left
            a, e, c = int(a_all[j]), int(e_all[j]), int(codecs[j])
            need, count = int(views[j]), int(counts[j])
            if chunk.full(need, count, self.chunk_records):
                if done := chunk.flush(j):
                    yield done
                chunk.buf = self._chunk_buffer(need)
            rbuf, w = chunk.buf, chunk.w
            try:
                if c == COMPRESSION_NONE:
                    rbuf[w : w + e - a] = buf[a:e]
                    size = e - a
                else:
                    size = decompress_into(c, buf[a:e], rbuf[w : w + min(len(rbuf) - w, need)])
            except OutputTooSmall:
                if done := chunk.flush(j):
                    yield done
                chunk.buf = None
                yield int(idx[j])
                j += 1
                continue
            except DecodeError as err:
                i = int(idx[j])
                self.fail(h, i, CORRUPT_BYTES, f"{codec_name(c)} records do not decompress: {err}")
                j += 1
                continue
            chunk.got[j], chunk.taken[j] = size, True
            chunk.w, chunk.held = w + size, chunk.held + count
            j += 1
        if done := chunk.flush(n):
            yield done

    def _chunk_buffer(self, need: int) -> np.ndarray:
        """One decompression buffer per decoder, reused chunk after chunk (no fresh page faults)."""
        size = max(self.max_decompressed, need)
        if self._rbuf is None or len(self._rbuf) < size:
            self._rbuf = np.empty(size, np.uint8)
        return self._rbuf


class _Chunk:
    """The decompressed batches of a window laid out one after another in one buffer, from its
    start: which of the window's batches it holds (``taken``) and what each decompressed to
    (``got``, which the kernel fills too); where each one lies follows from those."""

    def __init__(self, idx: np.ndarray) -> None:
        self.idx = idx  # the window's batches laid out (indexes into its headers)
        self.buf: np.ndarray | None = None
        self.w = 0  # bytes written
        self.held = 0  # records
        self.got = np.zeros(idx.size, np.int64)
        self.taken = np.zeros(idx.size, bool)
        self.first = 0  # the first of the window's batches this chunk may hold

    def full(self, need: int, count: int, max_records: int) -> bool:
        """Whether a batch given ``need`` bytes and holding ``count`` records starts a new chunk."""
        return (
            self.buf is None
            or len(self.buf) - self.w < need
            or self.w >= CHUNK_FILL
            or self.held + count > max_records
        )

    def flush(self, upto: int):
        """(buffer, batch indexes, starts, ends) of the batches taken before ``upto``, the
        chunk emptied; None when it holds none."""
        held = np.flatnonzero(self.taken[self.first : upto]) + self.first
        self.first, self.w, self.held = upto, 0, 0
        if not held.size:
            return None
        ends = np.cumsum(self.got[held])
        return self.buf, self.idx[held], ends - self.got[held], ends


def _drain(gen: Generator) -> int:
    """Run a generator to its end, dropping what it yields; its return value."""
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value
