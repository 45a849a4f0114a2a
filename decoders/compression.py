"""Decompression (and compression, for the writer) of Kafka's codec framings through cramjam.

docs/formats.md section 4. Decompression writes into a caller-sized buffer, so a hostile
frame cannot make us allocate more than the caller allowed: past the bound it fails like any
other broken payload.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterator

import cramjam
import lz4.frame
import numpy as np
import zstandard

from decoders.constants import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    LZ4_BD_SIZE_SHIFT,
    LZ4_FLG_INDEPENDENT_BLOCKS,
    LZ4_FLG_VERSION_01,
    LZ4_FRAME_MAGIC,
    LZ4_KAFKA_BD,
    LZ4_KAFKA_BLOCK_SIZE,
    LZ4_KAFKA_FLG,
    LZ4_UNCOMPRESSED_BLOCK_FLAG,
    MAGIC_VALUE_V0,
    SNAPPY_XERIAL_BLOCK_SIZE,
    SNAPPY_XERIAL_MAGIC,
)
from decoders.errors import DecodeError

# xerial snappy-java stream header (SnappyCodec.java): magic, version 1, compatible version 1.
XERIAL_MAGIC = SNAPPY_XERIAL_MAGIC
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = SNAPPY_XERIAL_BLOCK_SIZE
# The first four magic bytes read as a big-endian int32: marks a concatenated stream header.
XERIAL_MAGIC_AS_INT = struct.unpack(">i", XERIAL_MAGIC[:4])[0]
# After the first four magic bytes, what remains of a concatenated stream's header.
XERIAL_HEADER_REST = len(XERIAL_HEADER) - 4


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


def _lz4_header_checksums() -> np.ndarray:
    """HC by (FLG, BD) of the LZ4 frames kernels.inflate_lz4 takes (version 01, independent or
    linked blocks, no checksums, content size or dictionary; any block size), -1 for every
    other: what Kafka's Java producer and librdkafka write."""
    table = np.full((256, 256), -1, np.int16)
    for flg in (LZ4_FLG_VERSION_01 | LZ4_FLG_INDEPENDENT_BLOCKS, LZ4_FLG_VERSION_01):
        for size_code in range(4, 8):
            bd = size_code << LZ4_BD_SIZE_SHIFT
            table[flg, bd] = lz4_header_checksum(bytes([flg, bd]))
    return table


LZ4_HEADER_CHECKSUMS = _lz4_header_checksums()


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


def _is_xerial(mv: memoryview) -> bool:
    return len(mv) >= len(XERIAL_HEADER) and bytes(mv[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC


def _xerial_blocks(data: memoryview, out: np.ndarray) -> int:
    """Decode a snappy-java stream: length-prefixed raw snappy blocks after a 16-byte header."""
    written = 0
    for a, b in _xerial_block_ranges(data):
        try:
            written += cramjam.snappy.decompress_raw_into(data[a:b], out[written:])
        except cramjam.DecompressionError as e:
            raise _codec_error("snappy block", e) from e
    return written


def decompress_into(
    codec: int, data: bytes | memoryview | np.ndarray, out: np.ndarray, magic: int = 2
) -> int:
    """Decompress one Kafka payload into ``out``; returns the number of bytes written.

    ``data`` is any buffer (bytes, a memoryview, a numpy slice of the window): cramjam reads it
    in place. Raises DecodeError for an unknown codec, a broken stream or output larger than
    ``out``.
    """
    try:
        if codec == COMPRESSION_LZ4:
            if magic == MAGIC_VALUE_V0:
                data = _lz4_with_fixed_header(data)
            return cramjam.lz4.decompress_into(data, out)
        if codec == COMPRESSION_ZSTD:
            got = _zstd_into(data, out)
            return cramjam.zstd.decompress_into(data, out) if got is None else got
        if codec == COMPRESSION_SNAPPY:
            mv = memoryview(data)
            if _is_xerial(mv):
                return _xerial_blocks(mv, out)
            return cramjam.snappy.decompress_raw_into(data, out)
        if codec == COMPRESSION_GZIP:
            return cramjam.gzip.decompress_into(data, out)
    except cramjam.DecompressionError as e:  # only the codec's own errors: a bug stays a bug
        raise _codec_error(f"{codec_name(codec)} payload", e) from e
    raise DecodeError(f"unknown compression codec {codec}")


_ZSTD_CONTEXTS = threading.local()  # a zstd decompression context per thread (not shareable)
ZSTD_MAGIC = 0xFD2FB528  # a zstd frame's first four bytes, little-endian (RFC 8878 3.1.1)
_ZSTD_CONTENT_SIZE_BYTES = (1, 2, 4, 8)  # by FCS flag; flag 0 means none unless single-segment


def _zstd_frame(mv: memoryview) -> tuple[int, int] | None:
    """(the frame's length in bytes, its declared content size or -1) of the zstd frame that
    starts ``mv``, walking its header and block headers (RFC 8878 3.1.1), or None for what is
    not one well-formed frame head this path takes (reserved bits, a dictionary, a reserved
    block type, a short read)."""
    n = len(mv)
    if n < 6 or int.from_bytes(mv[:4], "little") != ZSTD_MAGIC:
        return None
    fhd = mv[4]
    if fhd & 0x0B:  # a reserved bit, or a dictionary (Kafka's producers use none)
        return None
    single = (fhd >> 5) & 1
    fcs_flag = fhd >> 6
    fcs_bytes = _ZSTD_CONTENT_SIZE_BYTES[fcs_flag] if (fcs_flag or single) else 0
    pos = 5 + (1 - single)  # the window descriptor, absent from a single-segment frame
    if pos + fcs_bytes > n:
        return None
    size = int.from_bytes(mv[pos : pos + fcs_bytes], "little") if fcs_bytes else -1
    if fcs_bytes == 2:
        size += 256
    pos += fcs_bytes
    while True:
        if pos + 3 > n:
            return None
        head = mv[pos] | (mv[pos + 1] << 8) | (mv[pos + 2] << 16)
        pos += 3
        kind = (head >> 1) & 3
        if kind == 3:  # reserved block type
            return None
        pos += 1 if kind == 1 else head >> 3  # an RLE block holds one byte
        if head & 1:  # the last block
            break
    return pos + (4 if fhd & 0x04 else 0), size  # the content checksum


def _zstd_into(data: bytes | memoryview | np.ndarray, out: np.ndarray) -> int | None:
    """One zstd payload into ``out`` through a decompression context kept per thread: cramjam
    makes a context per call (~12 us, where a production-shaped batch of a few records takes
    ~1 us to decompress). Taken only when the payload is exactly one frame whose declared
    size, if any, fits ``out``; None otherwise and on any fault: the caller asks cramjam,
    whose verdict and error text stand, as they did before this path."""
    mv = memoryview(data).cast("B")
    frame = _zstd_frame(mv)
    cap = len(out)
    if frame is None or frame[0] != len(mv) or frame[1] > cap or frame[1] == 0:
        return None  # a second frame, nothing allocated for what a header declares, or empty
    dctx = getattr(_ZSTD_CONTEXTS, "dctx", None)
    if dctx is None:
        dctx = _ZSTD_CONTEXTS.dctx = zstandard.ZstdDecompressor()
    try:
        got = dctx.decompress(mv, max_output_size=cap)
    except zstandard.ZstdError:
        return None
    if len(got) > cap or (frame[1] >= 0 and len(got) != frame[1]):
        return None  # (a size the frame declares and does not hold: cramjam refuses it)
    out[: len(got)] = np.frombuffer(got, np.uint8)
    return len(got)


class OutputTooSmall(DecodeError):
    """The payload decompresses further than the buffer it was given: not corrupt, only bigger."""


def _codec_error(what: str, e: Exception) -> DecodeError:
    text = str(e)
    if "failed to write whole buffer" in text or "smaller than required" in text:
        return OutputTooSmall(f"{what} decompresses past the buffer given: {text}")
    return DecodeError(f"{what} does not decompress: {text}")


STREAM_PIECE = 1 << 20


def stream_decompress(
    codec: int, data: bytes | memoryview, magic: int = 2, piece: int = STREAM_PIECE
) -> Iterator[bytes]:
    """Decompress one Kafka payload as a stream of pieces of at most ``piece`` bytes.

    What a small payload may expand to is not bounded by anything it declares, so a large (or
    hostile) batch is never held decompressed as a whole: callers consume the pieces and keep
    only what they have not decoded yet. Broken streams raise DecodeError, like
    :func:`decompress_into`.
    """
    try:
        if codec == COMPRESSION_GZIP:
            yield from _gzip_stream(bytes(data), piece)
        elif codec == COMPRESSION_SNAPPY:
            yield from _snappy_stream(memoryview(data), piece)
        elif codec == COMPRESSION_LZ4:
            payload = _lz4_with_fixed_header(data) if magic == MAGIC_VALUE_V0 else data
            yield from _lz4_stream(bytes(payload), piece)
        elif codec == COMPRESSION_ZSTD:
            yield from _zstd_stream(bytes(data), piece)
        else:
            raise DecodeError(f"unknown compression codec {codec}")
    except (zlib.error, zstandard.ZstdError, cramjam.DecompressionError) as e:
        raise DecodeError(f"{codec_name(codec)} payload does not decompress: {e}") from e
    except RuntimeError as e:  # lz4.frame reports a broken frame as RuntimeError
        if "LZ4" not in str(e):
            raise
        raise DecodeError(f"lz4 payload does not decompress: {e}") from e


def _gzip_stream(data: bytes, piece: int) -> Iterator[bytes]:
    rest = data
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = d.decompress(rest, piece)
        while True:
            if out:
                yield out
            if d.eof or not d.unconsumed_tail:
                break
            out = d.decompress(d.unconsumed_tail, piece)
        while not d.eof:  # input consumed; drain what zlib still holds
            out = d.decompress(b"", piece)
            if not out:
                raise DecodeError("gzip stream ends early")
            yield out
        rest = d.unused_data  # concatenated members
        if rest and not rest.strip(b"\0"):
            return


# A zstd block of up to 128 KiB can be encoded in 4 bytes (an RLE block), so input is fed in
# slices small enough that one slice cannot expand past a few MiB.
_ZSTD_FEED = 128


def _zstd_stream(data: bytes, piece: int) -> Iterator[bytes]:
    mv = memoryview(data)
    pos = 0
    while pos < len(mv):
        d = zstandard.ZstdDecompressor().decompressobj()
        while pos < len(mv) and not d.eof:
            out = d.decompress(mv[pos : pos + _ZSTD_FEED])
            pos += _ZSTD_FEED
            for i in range(0, len(out), piece):
                yield out[i : i + piece]
        if not d.eof:
            raise DecodeError("zstd frame ends early")
        if d.unused_data:  # the next frame (or garbage) starts inside the last slice
            pos -= len(d.unused_data)
        if not bytes(mv[pos:]).strip(b"\x00"):
            return


def _lz4_stream(data: bytes, piece: int) -> Iterator[bytes]:
    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(data, max_length=piece)
    while True:
        if out:
            yield out
        if d.eof or d.needs_input:
            break
        out = d.decompress(b"", max_length=piece)
    if not d.eof:
        raise DecodeError("lz4 frame ends early")


def _snappy_stream(mv: memoryview, piece: int) -> Iterator[bytes]:
    blocks = _xerial_block_ranges(mv) if _is_xerial(mv) else iter([(0, len(mv))])
    for a, b in blocks:
        block = bytes(mv[a:b])
        n = cramjam.snappy.decompress_raw_len(block)
        if n > max(piece, XERIAL_BLOCK_SIZE * 4) * 64:
            raise DecodeError(f"snappy block declares {n} bytes, more than one block may hold")
        out = bytes(cramjam.snappy.decompress_raw(block))
        for i in range(0, len(out), piece):
            yield out[i : i + piece]


def _xerial_block_ranges(data: memoryview) -> Iterator[tuple[int, int]]:
    """[start, end) of each raw snappy block of a snappy-java stream, concatenated streams
    included (their headers are skipped)."""
    pos, n = len(XERIAL_HEADER), len(data)
    while pos < n:
        if pos + 4 > n:
            raise DecodeError("snappy stream ends inside a block length")
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length == XERIAL_MAGIC_AS_INT:  # concatenated stream: skip the rest of its header
            pos += XERIAL_HEADER_REST
            continue
        if length < 0 or pos + length > n:
            raise DecodeError(f"snappy block length {length} out of range")
        yield pos, pos + length
        pos += length


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
    """Compress a payload the way Kafka's Java client frames it (docs/formats.md section 4)."""
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
