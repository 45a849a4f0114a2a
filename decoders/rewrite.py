"""Entries of a `.log` walked without decoding their records, and payloads replaced by tokens.

`logreplay extract` cuts a slice of a dump at entry boundaries (docs/extract.md). It needs each
entry's place (position, length, offsets, producer, timestamp) to choose what to keep, the keys
of internal-topic records to follow one transactional id or group, and, unless the user asks
for payloads, the same entry with every user key, value and header value replaced by a token
of the same length: equal bytes get equal tokens (so compaction's and partitioning's notion of
"the same key" survives), different bytes different tokens. Record lengths are unchanged, so
only the compressed payload, the batch length and the CRC are recomputed (DefaultRecordBatch,
LegacyRecord); the header fields the audit reads (offsets, producer, epoch, sequence,
timestamps, attributes) are copied as they were.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import crc32c

from decoders.compression import compress, decompress
from decoders.constants import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    COMPRESSION_NONE,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    LEGACY_COMPRESSION_CODEC_MASK,
    LEGACY_ENTRY_ATTRIBUTES_OFFSET,
    LEGACY_ENTRY_CRC_OFFSET,
    LEGACY_ENTRY_MAGIC_OFFSET,
    LEGACY_ENTRY_TIMESTAMP_OFFSET,
    LEGACY_HEADER_SIZE_V0,
    LEGACY_HEADER_SIZE_V1,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V0,
    MAGIC_VALUE_V1,
    MAGIC_VALUE_V2,
    MIN_BATCH_LENGTH_V2,
    MIN_LEGACY_ENTRY_SIZE,
    NO_PRODUCER_ID,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    SIZE_OFFSET,
    TRANSACTIONAL_FLAG_MASK,
)
from decoders.errors import DecodeError
from decoders.framing import batch_header, crc_holds, entry_offset, entry_size
from decoders.primitives import ByteReader

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
DECOMPRESSED_LIMIT = 1 << 28  # a batch's records, decompressed, at most (a slice is small)

ReadAt = Callable[[int, int], bytes]


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a `.log` as found on disk, or a run of bytes that is not one
    (``magic`` -1: garbage, a torn write, a size field past the end of the file)."""

    position: int
    length: int
    magic: int
    base_offset: int = -1
    last_offset: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    attributes: int = 0
    max_timestamp: int = -1

    @property
    def readable(self) -> bool:
        return self.magic >= 0

    @property
    def is_control(self) -> bool:
        return self.magic == MAGIC_VALUE_V2 and bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def is_transactional(self) -> bool:
        return self.magic == MAGIC_VALUE_V2 and bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def end(self) -> int:
        return self.position + self.length


def _framed(head: bytes, at: int, size: int) -> bool:
    """Whether the entry head at ``at`` is framed like one Kafka could write that ends in the
    file: a known magic and a size field at least that magic's header, within the file."""
    if len(head) < MAGIC_OFFSET + 1:
        return False
    n = entry_size(head)
    magic = head[MAGIC_OFFSET]
    least = MIN_BATCH_LENGTH_V2 if magic == MAGIC_VALUE_V2 else MIN_LEGACY_ENTRY_SIZE
    return magic <= MAGIC_VALUE_V2 and n >= least and at + LOG_OVERHEAD + n <= size


def entries(read_at: ReadAt, size: int, resume: Callable[[int], int | None]) -> Iterator[Entry]:
    """Every entry of a file of ``size`` bytes from its framing, heads only (61 bytes read per
    batch). Where the framing does not hold, the bytes up to ``resume(position)`` (the next
    position holding a valid entry, decoders.resync) are one unreadable run."""
    pos = 0
    while pos < size:
        head = read_at(pos, RECORD_BATCH_OVERHEAD)
        if not _framed(head, pos, size):
            nxt = resume(pos + 1)
            end = size if nxt is None else nxt
            yield Entry(pos, end - pos, -1)
            pos = end
            continue
        length = LOG_OVERHEAD + entry_size(head)
        magic = head[MAGIC_OFFSET]
        if magic == MAGIC_VALUE_V2:
            h = batch_header(head)
            yield Entry(pos, length, magic, h.base_offset, h.base_offset + h.last_offset_delta,
                        h.producer_id, h.producer_epoch, h.attributes, h.max_timestamp)  # fmt: skip
        else:
            off = entry_offset(head)
            ts = -1
            if magic == MAGIC_VALUE_V1:
                ts = _I64.unpack_from(head, LEGACY_ENTRY_TIMESTAMP_OFFSET)[0]
            yield Entry(pos, length, magic, off, off, attributes=head[LEGACY_ENTRY_ATTRIBUTES_OFFSET],
                        max_timestamp=ts)  # fmt: skip
        pos += length


# -- records of a v2 batch ------------------------------------------------------------------------
def _payload(batch: bytes) -> tuple[int, bytes]:
    """(codec, the records' bytes decompressed) of a whole v2 batch."""
    codec = batch_header(batch).attributes & COMPRESSION_CODEC_MASK
    raw = batch[RECORDS_OFFSET:]
    if codec == COMPRESSION_NONE:
        return codec, raw
    return codec, decompress(codec, raw, DECOMPRESSED_LIMIT)


def _spans(data: bytes, count: int, nulls: bool = False) -> Iterator[tuple[str, int, int]]:
    """(what, start, length) of each key, value and header value of ``count`` records
    (DefaultRecord.readFrom); null keys and values are yielded (length -1) when ``nulls``."""
    r = ByteReader(data)
    for _ in range(count):
        length = r.varint()
        end = r.pos + length
        r.pos += 1  # attributes
        r.varlong()  # timestamp delta
        r.varint()  # offset delta
        for what in ("key", "value"):
            n = r.varint()
            if n >= 0 or nulls:
                yield what, r.pos, n
                r.pos += max(n, 0)
        for _h in range(r.varint()):
            name = r.varint()  # the header's key: a name, kept
            r.pos += name
            n = r.varint()
            if n >= 0:
                yield "header", r.pos, n
                r.pos += n
        if r.pos != end:
            raise DecodeError(f"record ends at {r.pos}, its length says {end}")


def key_values(batch: bytes) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of each record of a v2 batch (internal topics: the key names the group or
    the transactional id, the value what happened to it; None: null)."""
    _, data = _payload(batch)
    count = batch_header(batch).records_count
    out: list[list[bytes | None]] = []
    for what, s, n in _spans(data, count, nulls=True):
        if what == "key":
            out.append([None if n < 0 else bytes(data[s : s + n]), None])
        elif what == "value" and n >= 0:
            out[-1][1] = bytes(data[s : s + n])
    return [(k, v) for k, v in out]


class Tokens:
    """Same bytes, same token; different bytes (of one length), different tokens. Tokens of 8
    bytes or more read ``t<hex>...``; shorter ones are the counter of their length in binary,
    which never runs out: a length has at most 256**length different values."""

    def __init__(self) -> None:
        self.seen: dict[bytes, bytes] = {}
        self.count: dict[int, int] = {}
        self.replaced = 0

    def token(self, value: bytes) -> bytes:
        t = self.seen.get(value)
        if t is None:
            n = len(value)
            c = self.count.get(n, 0)
            self.count[n] = c + 1
            t = f"t{c:x}".encode().ljust(n, b".") if n >= 8 else c.to_bytes(n, "big") if n else b""
            self.seen[value] = t
        self.replaced += 1
        return t


def _tokenised_records(data: bytes, count: int, tokens: Tokens) -> bytes:
    out = bytearray(data)
    for _what, s, n in _spans(data, count):
        out[s : s + n] = tokens.token(bytes(data[s : s + n]))
    return bytes(out)


def tokenised(entry: bytes, tokens: Tokens) -> bytes:
    """``entry`` (a whole v2 batch or legacy entry whose CRC holds) with its payloads replaced by
    tokens; control batches are returned as they are."""
    magic = entry[MAGIC_OFFSET]
    if magic != MAGIC_VALUE_V2:
        return _tokenised_legacy(entry, tokens)
    h = batch_header(entry)
    if h.attributes & CONTROL_FLAG_MASK:
        return entry
    codec, data = _payload(entry)
    records = _tokenised_records(data, h.records_count, tokens)
    body = bytearray(entry[:RECORDS_OFFSET])
    body += compress(codec, records) if codec != COMPRESSION_NONE else records
    _I32.pack_into(body, LENGTH_OFFSET, len(body) - LOG_OVERHEAD)
    _U32.pack_into(body, CRC_OFFSET, crc32c.crc32c(bytes(body[ATTRIBUTES_OFFSET:])))
    return bytes(body)


def _legacy_fields(entry: bytes, magic: int) -> tuple[int, int, int, int]:
    """(key position, key length, value position, value length) of a legacy entry (-1 lengths:
    null)."""
    header = LEGACY_HEADER_SIZE_V1 if magic == MAGIC_VALUE_V1 else LEGACY_HEADER_SIZE_V0
    at = LOG_OVERHEAD + header
    klen = _I32.unpack_from(entry, at)[0]
    kpos = at + 4
    vat = kpos + max(klen, 0)
    vlen = _I32.unpack_from(entry, vat)[0]
    return kpos, klen, vat + 4, vlen


def _restamp_legacy(entry: bytearray) -> None:
    _U32.pack_into(entry, LEGACY_ENTRY_CRC_OFFSET,
                   zlib.crc32(bytes(entry[LEGACY_ENTRY_MAGIC_OFFSET:])))  # fmt: skip


def _tokenised_legacy(entry: bytes, tokens: Tokens) -> bytes:
    """A legacy message (LegacyRecord): an uncompressed one gets tokens in place; a compressed
    wrapper's inner messages get them, and the wrapper a new value and CRC."""
    magic = entry[MAGIC_OFFSET]
    kpos, klen, vpos, vlen = _legacy_fields(entry, magic)
    codec = entry[LEGACY_ENTRY_ATTRIBUTES_OFFSET] & LEGACY_COMPRESSION_CODEC_MASK
    out = bytearray(entry)
    if codec == COMPRESSION_NONE:
        for pos, n in ((kpos, klen), (vpos, vlen)):
            if n >= 0:
                out[pos : pos + n] = tokens.token(bytes(entry[pos : pos + n]))
        _restamp_legacy(out)
        return bytes(out)
    if vlen < 0:
        return entry
    inner = decompress(codec, entry[vpos : vpos + vlen], DECOMPRESSED_LIMIT, magic)
    parts, at = [], 0
    while at + LOG_OVERHEAD <= len(inner):
        n = LOG_OVERHEAD + entry_size(inner, at)
        parts.append(_tokenised_legacy(inner[at : at + n], tokens))
        at += n
    value = compress(codec, b"".join(parts), magic=magic)
    head = bytearray(entry[:vpos - 4])  # fmt: skip
    head += _I32.pack(len(value)) + value
    _I32.pack_into(head, SIZE_OFFSET, len(head) - LOG_OVERHEAD)
    _restamp_legacy(head)
    return bytes(head)


def crc_ok(entry: bytes) -> bool:
    """Whether a whole entry's stored CRC holds (a v2 batch's CRC-32C, a legacy CRC-32)."""
    magic = entry[MAGIC_OFFSET]
    return magic in (MAGIC_VALUE_V0, MAGIC_VALUE_V1, MAGIC_VALUE_V2) and crc_holds(entry, magic)
