"""Bounds-checked readers for Kafka's primitive encodings (docs/formats.md section 0).

Used on the cold paths (internal-topic records, control records, snapshots, legacy messages).
The hot v2 record path lives in :mod:`decoders.kernels`. Every length read here is checked
against the bytes that remain before it is used, so garbage cannot drive an allocation.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, TypeVar

from decoders.errors import DecodeError

T = TypeVar("T")

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


class ByteReader:
    """Sequential reader over a bytes-like object for generated (schema JSON) messages."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise DecodeError(f"needs {n} bytes at {self.pos}, {self.end - self.pos} left")

    def _fixed(self, st: struct.Struct) -> int:
        # the bounds check inline: these run once per field of every internal-topic record
        pos = self.pos
        stop = pos + st.size
        if stop > self.end:
            raise DecodeError(f"needs {st.size} bytes at {pos}, {self.end - pos} left")
        self.pos = stop
        return st.unpack_from(self.buf, pos)[0]

    def int8(self) -> int:
        return self._fixed(_I8)

    def int16(self) -> int:
        return self._fixed(_I16)

    def uint16(self) -> int:
        return self._fixed(_U16)

    def int32(self) -> int:
        return self._fixed(_I32)

    def uint32(self) -> int:
        return self._fixed(_U32)

    def int64(self) -> int:
        return self._fixed(_I64)

    def int32s(self, n: int) -> list[int]:
        """``n`` int32 at once (an array's elements, its length read and bounded before)."""
        pos = self.pos
        stop = pos + 4 * n
        if n < 0 or stop > self.end:
            raise DecodeError(f"needs {4 * n} bytes at {pos}, {self.end - pos} left")
        self.pos = stop
        return list(struct.unpack_from(f">{n}i", self.buf, pos))

    def boolean(self) -> bool:
        return self.int8() != 0

    def uuid(self) -> bytes:
        return self.raw(16)

    def raw(self, n: int) -> bytes:
        self._need(n)
        v = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return v

    def unsigned_varint(self) -> int:
        """LEB128 of at most 5 bytes (ByteUtils.readUnsignedVarint)."""
        pos = self.pos
        if pos < self.end and self.buf[pos] < 0x80:  # one byte: lengths, counts, no tags
            self.pos = pos + 1
            return self.buf[pos]
        value = 0
        for i in range(5):
            self._need(1)
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                return value
        raise DecodeError(f"unsigned varint longer than 5 bytes at {self.pos - 5}")

    def varint(self) -> int:
        """ZigZag varint on 32 bits (ByteUtils.readVarint)."""
        u = self.unsigned_varint()
        return (u >> 1) ^ -(u & 1)

    def varlong(self) -> int:
        """ZigZag varlong on 64 bits, at most 10 bytes (ByteUtils.readVarlong)."""
        value = 0
        for i in range(10):
            self._need(1)
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                return (value >> 1) ^ -(value & 1)
        raise DecodeError(f"varlong longer than 10 bytes at {self.pos - 10}")

    # -- strings and bytes, both encodings (docs/formats.md 0.3) --------------------------
    def _text(self, n: int) -> str:
        data = self.raw(n)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"invalid UTF-8 string at {self.pos - n}") from e

    def string(self, flexible: bool = False) -> str:
        v = self.nullable_string(flexible)
        if v is None:
            raise DecodeError(f"null where a non-null string is required at {self.pos}")
        return v

    def nullable_string(self, flexible: bool = False) -> str | None:
        n = self.unsigned_varint() - 1 if flexible else self.int16()
        if n < 0:
            if n == -1:
                return None
            raise DecodeError(f"negative string length {n} at {self.pos}")
        return self._text(n)

    def nullable_bytes(self, flexible: bool = False) -> bytes | None:
        n = self.unsigned_varint() - 1 if flexible else self.int32()
        if n < 0:
            if n == -1:
                return None
            raise DecodeError(f"negative bytes length {n} at {self.pos}")
        return self.raw(n)

    def bytes_(self, flexible: bool = False) -> bytes:
        v = self.nullable_bytes(flexible)
        if v is None:
            raise DecodeError(f"null where non-null bytes are required at {self.pos}")
        return v

    def array_length(self, flexible: bool = False) -> int:
        """Element count of an array, -1 for null; bounded by the bytes that remain."""
        n = self.unsigned_varint() - 1 if flexible else self.int32()
        if n < -1:
            raise DecodeError(f"negative array length {n} at {self.pos}")
        if n > self.remaining:  # every element takes at least one byte
            raise DecodeError(f"array of {n} elements cannot fit in {self.remaining} bytes")
        return n

    def array(self, read: Callable[[], T], flexible: bool = False) -> list[T]:
        n = self.array_length(flexible)
        if n < 0:
            raise DecodeError(f"null where a non-null array is required at {self.pos}")
        if read == self.int32:  # partition lists: one unpack for the whole array
            return self.int32s(n)
        return [read() for _ in range(n)]

    def nullable_array(self, read: Callable[[], T], flexible: bool = False) -> list[T] | None:
        n = self.array_length(flexible)
        return None if n < 0 else [read() for _ in range(n)]

    def tagged_fields(self, known: dict[int, Callable[[ByteReader], Any]] | None = None) -> dict:
        """Read a tagged-field section; known tags are decoded, unknown ones skipped by size."""
        out: dict[int | str, Any] = {}
        count = self.unsigned_varint()
        if count > self.remaining:
            raise DecodeError(f"{count} tagged fields cannot fit in {self.remaining} bytes")
        for _ in range(count):
            tag = self.unsigned_varint()
            size = self.unsigned_varint()
            self._need(size)
            if known and tag in known:
                sub = ByteReader(self.buf, self.pos, self.pos + size)
                out[tag] = known[tag](sub)
            else:
                out.setdefault("unknown_tags", []).append(tag)
            self.pos += size
        return out


# -- encoders, for the writer ----------------------------------------------------------------
def encode_unsigned_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_varint(v: int) -> bytes:
    return encode_unsigned_varint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)


class ByteWriter:
    """The inverse of ByteReader, for building generated messages in the writer and tests."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.out)

    def int8(self, v: int) -> ByteWriter:
        self.out += _I8.pack(v)
        return self

    def int16(self, v: int) -> ByteWriter:
        self.out += _I16.pack(v)
        return self

    def uint16(self, v: int) -> ByteWriter:
        self.out += _U16.pack(v)
        return self

    def int32(self, v: int) -> ByteWriter:
        self.out += _I32.pack(v)
        return self

    def uint32(self, v: int) -> ByteWriter:
        self.out += _U32.pack(v)
        return self

    def int64(self, v: int) -> ByteWriter:
        self.out += _I64.pack(v)
        return self

    def raw(self, b: bytes) -> ByteWriter:
        self.out += b
        return self

    def unsigned_varint(self, v: int) -> ByteWriter:
        self.out += encode_unsigned_varint(v)
        return self

    def nullable_string(self, s: str | None, flexible: bool = False) -> ByteWriter:
        if s is None:
            return self.unsigned_varint(0) if flexible else self.int16(-1)
        b = s.encode("utf-8")
        if flexible:
            self.unsigned_varint(len(b) + 1)
        else:
            self.int16(len(b))
        return self.raw(b)

    string = nullable_string

    def nullable_bytes(self, b: bytes | None, flexible: bool = False) -> ByteWriter:
        if b is None:
            return self.unsigned_varint(0) if flexible else self.int32(-1)
        if flexible:
            self.unsigned_varint(len(b) + 1)
        else:
            self.int32(len(b))
        return self.raw(b)

    bytes_ = nullable_bytes

    def array_length(self, n: int | None, flexible: bool = False) -> ByteWriter:
        if n is None:
            return self.unsigned_varint(0) if flexible else self.int32(-1)
        return self.unsigned_varint(n + 1) if flexible else self.int32(n)

    def tagged_fields(self, fields: dict[int, bytes] | None = None) -> ByteWriter:
        fields = fields or {}
        self.unsigned_varint(len(fields))
        for tag in sorted(fields):
            self.unsigned_varint(tag).unsigned_varint(len(fields[tag])).raw(fields[tag])
        return self
