"""Message format v0 and v1 (the legacy MessageSet), docs/formats.md section 2.

Legacy data is rare and small in practice (pre-0.11 topics), so this is plain Python per
message; the v2 hot path does not go through here.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from decoders.compression import decompress
from decoders.constants import (
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    CREATE_TIME,
    LEGACY_COMPRESSION_CODEC_MASK,
    LEGACY_ENTRY_CRC_OFFSET,
    LEGACY_ENTRY_MAGIC_OFFSET,
    LEGACY_ENTRY_TIMESTAMP_OFFSET,
    LEGACY_HEADER_SIZE_V0,
    LEGACY_KEY_SIZE_LENGTH,
    LEGACY_KEY_SIZE_OFFSET_V0,
    LEGACY_KEY_SIZE_OFFSET_V1,
    LEGACY_TIMESTAMP_LENGTH,
    LEGACY_TIMESTAMP_TYPE_MASK,
    LEGACY_VALUE_SIZE_LENGTH,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_VALUE_V0,
    MAGIC_VALUE_V1,
    NO_TIMESTAMP,
    NO_TIMESTAMP_TYPE,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
)
from decoders.errors import DecodeError

_ENTRY = struct.Struct(">qi")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MSG_HEAD = struct.Struct(">Ibb")  # crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")  # key and value lengths
assert _MSG_HEAD.size == LEGACY_HEADER_SIZE_V0 and _TIMESTAMP.size == LEGACY_TIMESTAMP_LENGTH
assert _LENGTH.size == LEGACY_KEY_SIZE_LENGTH == LEGACY_VALUE_SIZE_LENGTH


@dataclass(slots=True)
class LegacyMessage:
    offset: int
    size: int
    crc: int
    crc_valid: bool
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & LEGACY_COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> str:
        if self.magic == MAGIC_VALUE_V0:
            return NO_TIMESTAMP_TYPE
        return LOG_APPEND_TIME if self.attributes & LEGACY_TIMESTAMP_TYPE_MASK else CREATE_TIME


@dataclass(slots=True)
class LegacyEntry:
    """One top-level legacy entry: a plain message or a compressed wrapper with its records."""

    message: LegacyMessage
    records: list[tuple[int, int, str, bytes | None, bytes | None]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse_message(entry: bytes | memoryview, verify_crc: bool = True) -> LegacyMessage:
    """Parse one `offset | size | message` entry whose bytes are all present."""
    if len(entry) < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
        raise DecodeError(f"legacy entry of {len(entry)} bytes is shorter than the minimum")
    offset, size = _ENTRY.unpack_from(entry, 0)
    if size < RECORD_OVERHEAD_V0 or LOG_OVERHEAD + size > len(entry):
        raise DecodeError(f"legacy message size {size} out of range")
    end = LOG_OVERHEAD + size
    crc, magic, attributes = _MSG_HEAD.unpack_from(entry, LEGACY_ENTRY_CRC_OFFSET)
    if magic not in (MAGIC_VALUE_V0, MAGIC_VALUE_V1):
        raise DecodeError(f"legacy message with magic {magic}")
    crc_valid = (zlib.crc32(entry[LEGACY_ENTRY_MAGIC_OFFSET:end]) == crc) if verify_crc else True
    p = LOG_OVERHEAD + LEGACY_KEY_SIZE_OFFSET_V0
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_VALUE_V1:
        if end - p < RECORD_OVERHEAD_V1 - LEGACY_HEADER_SIZE_V0:
            raise DecodeError("v1 message shorter than its header")
        (timestamp,) = _TIMESTAMP.unpack_from(entry, LEGACY_ENTRY_TIMESTAMP_OFFSET)
        p = LOG_OVERHEAD + LEGACY_KEY_SIZE_OFFSET_V1
    key, p = _sized(entry, p, end, "key")
    value, p = _sized(entry, p, end, "value")
    if p != end:
        raise DecodeError(f"{end - p} bytes left over after the message value")
    return LegacyMessage(offset, size, crc, crc_valid, magic, attributes, timestamp, key, value)


def _sized(buf, p: int, end: int, what: str) -> tuple[bytes | None, int]:
    if p + _LENGTH.size > end:
        raise DecodeError(f"message ends inside the {what} length")
    (n,) = _LENGTH.unpack_from(buf, p)
    p += _LENGTH.size
    if n == -1:
        return None, p
    if n < 0 or p + n > end:
        raise DecodeError(f"{what} length {n} out of range")
    return bytes(buf[p : p + n]), p + n


def decode_entry(
    entry: bytes | memoryview, verify_crc: bool, deep: bool, max_decompressed: int
) -> LegacyEntry:
    """Decode a top-level legacy entry and, when deep, its records (inner messages if compressed)."""
    msg = parse_message(entry, verify_crc)
    out = LegacyEntry(msg)
    if not deep:
        return out
    if msg.codec == COMPRESSION_NONE:
        out.records.append((msg.offset, msg.timestamp, msg.timestamp_type, msg.key, msg.value))
        return out
    if msg.codec == COMPRESSION_ZSTD or msg.codec > COMPRESSION_ZSTD:
        out.errors.append(f"codec {msg.codec} is not allowed in message format v{msg.magic}")
        return out
    if msg.value is None:
        out.errors.append("compressed wrapper with a null value")
        return out
    try:
        inner = decompress(msg.codec, msg.value, max_decompressed, magic=msg.magic)
    except DecodeError as e:
        out.errors.append(str(e))
        return out
    inner_msgs = _inner_messages(inner, verify_crc, out.errors)
    if not inner_msgs:
        out.errors.append("compressed wrapper with an empty inner message set")
        return out
    last_rel = inner_msgs[-1].offset
    for m in inner_msgs:
        if msg.magic == MAGIC_VALUE_V1 and msg.offset != 0:
            # v1 inner offsets are relative: abs = wrapper - lastRelative + relative
            # (AbstractLegacyRecordBatch); a wrapper offset of 0 keeps them as written.
            absolute = msg.offset - last_rel + m.offset
        else:
            absolute = m.offset
        if not _INT64_MIN <= absolute <= _INT64_MAX:
            out.errors.append(f"inner message offset {absolute} does not fit a 64-bit offset")
            continue
        if msg.timestamp_type == LOG_APPEND_TIME:
            ts, ts_type = msg.timestamp, LOG_APPEND_TIME  # the wrapper's time wins (section 2.4)
        else:
            ts, ts_type = m.timestamp, m.timestamp_type
        out.records.append((absolute, ts, ts_type, m.key, m.value))
    return out


def _inner_messages(inner: bytes, verify_crc: bool, errors: list[str]) -> list[LegacyMessage]:
    msgs: list[LegacyMessage] = []
    p, n = 0, len(inner)
    while p < n:
        if n - p < LOG_OVERHEAD:
            errors.append(f"inner message set ends with {n - p} stray bytes")
            break
        _, size = _ENTRY.unpack_from(inner, p)
        if size < RECORD_OVERHEAD_V0 or p + LOG_OVERHEAD + size > n:
            errors.append(f"inner message at {p} has size {size} out of range")
            break
        try:
            m = parse_message(memoryview(inner)[p : p + LOG_OVERHEAD + size], verify_crc)
        except DecodeError as e:
            errors.append(f"inner message at {p}: {e}")
            break
        if not m.crc_valid:
            errors.append(f"inner message at {p} (offset {m.offset}) has a CRC mismatch")
        if m.codec != COMPRESSION_NONE:
            errors.append(f"inner message at {p} is itself compressed")
        msgs.append(m)
        p += LOG_OVERHEAD + size
    return msgs
