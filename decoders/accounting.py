"""Where a file sits in the dump, what a window of it decodes to, and where each byte went.

Every decoder (segments, indexes, snapshots, text files) fills one :class:`Accounting` per file,
so that the segments table can say of every byte whether it was valid, padding or corrupt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from decoders.errors import ErrorRow


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
    """Decoded contents of one window of a segment: its batches rows and its records."""

    batches: pa.RecordBatch  # or a decoders.batch_tables.HeaderBatch (SegmentDecoder header_rows)
    records: list[pa.RecordBatch]
