"""Decompression (and compression, for the writer) of Kafka's codec framings through cramjam.

kafka-formats.md section 4. Decompression writes into a caller-sized buffer, so a hostile
frame cannot make us allocate more than the caller allowed: past the bound it fails like any
other broken payload.
"""

from __future__ import annotations

import struct

import cramjam
import numpy as np

from decoders.constants import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    MAGIC_VALUE_V0,
)
from decoders.errors import DecodeError

# xerial snappy-java stream header (SnappyCodec.java): magic, version 1, compatible version 1.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
# The first four magic bytes read as a big-endian int32: marks a concatenated stream header.
XERIAL_MAGIC_AS_INT = struct.unpack(">i", XERIAL_MAGIC[:4])[0]

LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
LZ4_KAFKA_FLG = 0x60  # version 01, independent blocks, no checksums, no content size
LZ4_KAFKA_BD = 0x40  # 64 KiB maximum block size
LZ4_KAFKA_BLOCK_SIZE = 64 * 1024
LZ4_UNCOMPRESSED_BLOCK_FLAG = 0x80000000

_XXH_P1, _XXH_P2, _XXH_P3, _XXH_P4, _XXH_P5 = (
    2654435761,
    2246822519,
    3266489917,
    668265263,
    374761393,
)
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, only ever applied to an LZ4 frame descriptor (2 to 10 bytes)."""
    n = len(data)
    p = 0
    if n >= 16:
        v = [
            (seed + _XXH_P1 + _XXH_P2) & _M32,
            (seed + _XXH_P2) & _M32,
            seed,
            (seed - _XXH_P1) & _M32,
        ]
        while p + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, p)
                v[i] = (_rotl((v[i] + lane * _XXH_P2) & _M32, 13) * _XXH_P1) & _M32
                p += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _XXH_P5) & _M32
    h = (h + n) & _M32
    while p + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, p)
        h = (_rotl((h + lane * _XXH_P3) & _M32, 17) * _XXH_P4) & _M32
        p += 4
    while p < n:
        h = (_rotl((h + data[p] * _XXH_P5) & _M32, 11) * _XXH_P1) & _M32
        p += 1
    h ^= h >> 15
    h = (h * _XXH_P2) & _M32
    h ^= h >> 13
    h = (h * _XXH_P3) & _M32
    h ^= h >> 16
    return h


def lz4_header_checksum(descriptor: bytes) -> int:
    """HC byte of an LZ4 frame: second byte of XXH32 over FLG, BD and the optional size."""
    return (xxh32(descriptor) >> 8) & 0xFF


def _lz4_with_fixed_header(data: bytes | memoryview) -> bytes | memoryview:
    """Rewrite a magic-0 frame's broken header checksum (computed over the magic too)."""
    if len(data) < 7 or bytes(data[:4]) != LZ4_FRAME_MAGIC:
        return data
    flg = data[4]
    desc_len = 2 + (8 if flg & 0x08 else 0)
    if len(data) < 4 + desc_len + 1:
        return data
    fixed = bytearray(data)
    fixed[4 + desc_len] = lz4_header_checksum(bytes(fixed[4 : 4 + desc_len]))
    return fixed


def _xerial_blocks(data: memoryview, out: np.ndarray) -> int:
    """Decode a snappy-java stream: length-prefixed raw snappy blocks after a 16-byte header."""
    pos, n, written = 16, len(data), 0
    while pos < n:
        if pos + 4 > n:
            raise DecodeError("snappy stream ends inside a block length")
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length == XERIAL_MAGIC_AS_INT:  # concatenated stream: skip the rest of its header
            pos += 12
            continue
        if length < 0 or pos + length > n:
            raise DecodeError(f"snappy block length {length} out of range")
        try:
            written += cramjam.snappy.decompress_raw_into(
                bytes(data[pos : pos + length]), out[written:]
            )
        except Exception as e:  # cramjam raises its own error types
            raise DecodeError(f"snappy block: {e}") from e
        pos += length
    return written


def decompress_into(codec: int, data: bytes | memoryview, out: np.ndarray, magic: int = 2) -> int:
    """Decompress one Kafka payload into ``out``; returns the number of bytes written.

    Raises DecodeError for an unknown codec, a broken stream or output larger than ``out``.
    """
    try:
        if codec == COMPRESSION_GZIP:
            return cramjam.gzip.decompress_into(bytes(data), out)
        if codec == COMPRESSION_SNAPPY:
            mv = memoryview(data)
            if len(mv) >= 16 and bytes(mv[:8]) == XERIAL_MAGIC:
                return _xerial_blocks(mv, out)
            return cramjam.snappy.decompress_raw_into(bytes(mv), out)
        if codec == COMPRESSION_LZ4:
            if magic == MAGIC_VALUE_V0:
                data = _lz4_with_fixed_header(data)
            return cramjam.lz4.decompress_into(bytes(data), out)
        if codec == COMPRESSION_ZSTD:
            return cramjam.zstd.decompress_into(bytes(data), out)
    except DecodeError:
        raise
    except Exception as e:  # cramjam.DecompressionError and friends
        raise DecodeError(f"{codec_name(codec)} payload does not decompress: {e}") from e
    raise DecodeError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview, limit: int, magic: int = 2) -> bytes:
    """Convenience wrapper of decompress_into returning bytes, bounded by ``limit``."""
    out = np.empty(limit, np.uint8)
    n = decompress_into(codec, data, out, magic)
    return out[:n].tobytes()


def codec_name(codec: int) -> str:
    from decoders.constants import COMPRESSION_NAMES

    return COMPRESSION_NAMES.get(codec, f"unknown({codec})")


# -- compression, as Kafka's producers and broker write it -------------------------------------
def compress(codec: int, data: bytes, magic: int = 2, snappy_raw: bool = False) -> bytes:
    """Compress a payload the way Kafka's Java client frames it (kafka-formats.md section 4)."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        if snappy_raw:  # librdkafka-style raw block
            return bytes(cramjam.snappy.compress_raw(data))
        out = bytearray(XERIAL_HEADER)
        for i in range(0, len(data), XERIAL_BLOCK_SIZE):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + XERIAL_BLOCK_SIZE]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == COMPRESSION_LZ4:
        return _lz4_kafka_frame(data, broken_checksum=(magic == MAGIC_VALUE_V0))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def _lz4_kafka_frame(data: bytes, broken_checksum: bool) -> bytes:
    """An LZ4 frame as Lz4BlockOutputStream writes it: FLG 0x60, BD 0x40, 64 KiB blocks."""
    descriptor = bytes([LZ4_KAFKA_FLG, LZ4_KAFKA_BD])
    hc_input = LZ4_FRAME_MAGIC + descriptor if broken_checksum else descriptor
    out = bytearray(LZ4_FRAME_MAGIC + descriptor + bytes([lz4_header_checksum(hc_input)]))
    for i in range(0, len(data), LZ4_KAFKA_BLOCK_SIZE):
        chunk = data[i : i + LZ4_KAFKA_BLOCK_SIZE]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            out += struct.pack("<I", len(chunk) | LZ4_UNCOMPRESSED_BLOCK_FLAG) + chunk
        else:
            out += struct.pack("<I", len(block)) + block
    out += struct.pack("<I", 0)
    return bytes(out)
