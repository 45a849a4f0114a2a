"""Bad input inside a `.log`: classify the bytes that do not hop as entries, and find where
whole entries start again (docs/formats.md section 1 and Appendix B).

After garbage, a torn write or a damaged size field, decoding resumes at the next position
holding an entry whose CRC is valid, so one bad spot never hides the rest of a file. Trailing
zeros are padding (a preallocated file), and holes of a sparse file are skipped without being
read. The planner uses the same checks to start its byte ranges on entry boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decoders import kernels
from decoders.accounting import Accounting
from decoders.constants import (
    ATTRIBUTES_LOW_BYTE_OFFSET,
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_COMPRESSION_CODEC_MASK,
    LEGACY_ENTRY_ATTRIBUTES_OFFSET,
    LEGACY_UNUSED_ATTRIBUTES_MASK,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V2,
    MAX_CODEC_LEGACY,
    MAX_CODEC_V2,
)
from decoders.errors import CORRUPT_BYTES, TRUNCATED_BATCH, ErrorRow
from decoders.framing import crc_holds, entry_magic, entry_size
from decoders.limits import DEFAULT_MAX_BATCH_BYTES, DEFAULT_WINDOW_BYTES
from decoders.source import ByteSource

# Zeros are looked for in reads of this size.
ZERO_CHUNK = 4 * 1024 * 1024
# Bytes of an entry's head read to judge it before its CRC: up to the attributes' low byte.
_JUDGED_HEAD = ATTRIBUTES_LOW_BYTE_OFFSET + 1


@dataclass(slots=True)
class Resync:
    """Recovery over the entries of ``src`` that start before ``stop``.

    ``window_bytes`` bounds what is read at once while searching; ``max_batch_bytes`` is the
    largest entry a candidate may declare.
    """

    src: ByteSource
    stop: int
    window_bytes: int = DEFAULT_WINDOW_BYTES
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES

    def entry_is_valid(self, at: int) -> bool:
        """Whether a whole entry starts at ``at``: attributes Kafka could have written, and a
        CRC that holds (CRC-32C of a batch, CRC-32 of a legacy message)."""
        head = self.src.read_at(at, _JUDGED_HEAD)
        if len(head) < _JUDGED_HEAD:
            return False
        size = entry_size(head)
        magic = head[MAGIC_OFFSET]
        if magic == MAGIC_VALUE_V2:
            # the attributes' high byte is unused; the codec must be one Kafka knows
            low = head[ATTRIBUTES_LOW_BYTE_OFFSET]
            if head[ATTRIBUTES_OFFSET] != 0 or (low & COMPRESSION_CODEC_MASK) > MAX_CODEC_V2:
                return False
        else:
            attributes = head[LEGACY_ENTRY_ATTRIBUTES_OFFSET]
            if attributes & LEGACY_UNUSED_ATTRIBUTES_MASK or (
                (attributes & LEGACY_COMPRESSION_CODEC_MASK) > MAX_CODEC_LEGACY
            ):
                return False
        return crc_holds(self.src.read_at(at, LOG_OVERHEAD + size), magic)

    def next_valid_entry(self, start: int, limit: int | None = None) -> int | None:
        """Next position at or after ``start`` holding an entry with a valid CRC, or None.
        Only candidates before ``limit`` (default: the end of the range) are considered."""
        p, size = start, self.src.size
        limit = self.stop if limit is None else min(limit, self.stop)
        while p + HEADER_SIZE_UP_TO_MAGIC <= limit:
            # an entry's size field is non-zero: none starts more than its framing before data
            p = max(p, self.skip_hole(p) - LOG_OVERHEAD)
            if p + HEADER_SIZE_UP_TO_MAGIC > limit:
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
                if self.entry_is_valid(cand):
                    return cand
                q = c + 1
            if p + n >= size:
                return None
            # the next read overlaps this one by a head less one byte: no candidate is missed
            p += max(1, n - (HEADER_SIZE_UP_TO_MAGIC - 1))
        return None

    def split_inside_bad_entry(
        self, base: int, positions: np.ndarray, sizes: np.ndarray, crcs
    ) -> tuple[int, int] | None:
        """A damaged size field makes one bad entry swallow good ones: for the first entry that
        fails its CRC and holds a valid entry inside it, return (its index, that entry's position)."""
        computed, stored = crcs
        for k in np.flatnonzero(computed != stored).tolist():
            start = base + int(positions[k])
            resume = self.next_valid_entry(start + 1, limit=start + LOG_OVERHEAD + int(sizes[k]))
            if resume is not None:
                return k, resume
        return None

    def recover(self, at: int, reason: int, acct: Accounting, file: str) -> int:
        """Classify the bytes from ``at`` where hopping stopped for ``reason`` (a
        :data:`kernels.HOP_PARTIAL`, bad size or bad magic); account for them, add their error
        row and return where decoding resumes."""
        size = self.src.size
        if self.zeros_to_end(at):
            acct.padding += self.stop - at
            return self.stop
        head = self.src.read_at(at, HEADER_SIZE_UP_TO_MAGIC)
        resume = self.next_valid_entry(at + 1)
        if resume is not None:
            end = resume
        elif reason == kernels.HOP_PARTIAL:
            end = self.stop  # zeros inside a torn entry's declared extent belong to it
        else:
            end = self.last_nonzero_end(at)
        if reason == kernels.HOP_PARTIAL and resume is None:
            declared = entry_size(head) if len(head) >= LOG_OVERHEAD else None
            kind = TRUNCATED_BATCH
            why = (
                f"entry declares {declared} bytes but only {size - at - LOG_OVERHEAD} follow"
                if declared is not None
                else f"{size - at} stray bytes at the end of the file"
            )
        else:
            kind = CORRUPT_BYTES
            if len(head) >= HEADER_SIZE_UP_TO_MAGIC and head[MAGIC_OFFSET] > MAGIC_VALUE_V2:
                why = f"invalid magic {entry_magic(head)}"
            elif len(head) >= LOG_OVERHEAD:
                why = f"entry size {entry_size(head)} out of range"
            else:
                why = "unreadable entry header"
            why += f"; skipped {end - at} bytes" + (
                " to the next valid entry" if resume is not None else ""
            )
        acct.errors.append(ErrorRow(file, at, end - at, kind, why))
        acct.corrupt += end - at
        if resume is None:
            acct.padding += self.stop - end
            return self.stop
        return resume

    def skip_hole(self, p: int) -> int:
        """The first byte at or after p that is not in a hole of a sparse file (holes read as
        zeros, and no entry, padding aside, can start inside zeros)."""
        if p < self.stop and hasattr(self.src, "data_after"):
            return max(p, min(self.stop, self.src.data_after(p)))
        return p

    def data_end(self, at: int) -> int:
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

    def zeros_to_end(self, at: int) -> bool:
        """Whether every byte from ``at`` to ``stop`` is zero (padding of a preallocated file)."""
        p = at
        while (p := self.skip_hole(p)) < self.stop:
            b = np.frombuffer(self.src.read_at(p, min(ZERO_CHUNK, self.stop - p)), np.uint8)
            if b.any():
                return False
            p += len(b)
        return True

    def last_nonzero_end(self, at: int) -> int:
        """End of the last non-zero byte at or after `at` (trailing zeros count as padding)."""
        end = self.data_end(at)
        while end > at:
            lo = max(at, end - ZERO_CHUNK)
            nz = np.flatnonzero(np.frombuffer(self.src.read_at(lo, end - lo), np.uint8))
            if nz.size:
                return lo + int(nz[-1]) + 1
            end = lo
        return at
