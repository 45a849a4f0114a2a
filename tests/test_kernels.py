"""The compiled paths that stand in for a library (decoders.kernels): the LZ4 frame decoder
against cramjam, the small-batch CRC-32C against the crc32c package. Each must give the
library's answer, or (for LZ4) leave the frame to the library: never a different answer."""

from __future__ import annotations

import cramjam
import crc32c
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from decoders import kernels
from decoders.compression import LZ4_HEADER_CHECKSUMS, compress
from decoders.constants import COMPRESSION_LZ4, LZ4_KAFKA_BLOCK_SIZE, MAGIC_VALUE_V2
from decoders.framing import _CRC32C_TABLES

TEXTS = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(1, 40_000)),
    st.builds(
        lambda parts: b"".join(parts),
        st.lists(st.sampled_from([b'{"event":"click",', b'"user":"u-1"}', b"v" * 60, b"\x00"])),
    ),
)


def _kernel(frame: bytes, cap: int) -> bytes | None:
    """The frame through kernels.inflate_lz4 alone: its bytes, or None if it left the frame."""
    src = np.frombuffer(frame, np.uint8)
    one = np.zeros(1, np.int64)
    dst = np.zeros(cap, np.uint8)
    got = np.zeros(1, np.int64)
    stop, w, _ = kernels.inflate_lz4(
        src, one, one + len(frame), np.array([cap], np.int64), np.ones(1, np.int64), 0, dst, 0,
        1 << 40, 1 << 40, LZ4_HEADER_CHECKSUMS, got,
    )  # fmt: skip
    return bytes(dst[:w]) if stop == 1 else None


def _cramjam(frame: bytes, cap: int) -> bytes | None:
    out = np.zeros(cap, np.uint8)
    try:
        n = cramjam.lz4.decompress_into(frame, out)
    except cramjam.DecompressionError:
        return None
    return bytes(out[:n])


@settings(max_examples=300, deadline=None)
@given(data=TEXTS)
def test_kafka_frames_decompress_to_their_bytes(data):
    frame = compress(COMPRESSION_LZ4, data)  # as Kafka's Lz4BlockOutputStream frames it
    assert _kernel(frame, len(data) + 64) == data


@settings(max_examples=500, deadline=None)
@given(data=TEXTS, at=st.integers(0, 1 << 30), value=st.integers(0, 255), cut=st.integers(0, 64))
def test_a_damaged_frame_is_decoded_as_cramjam_decodes_it_or_left_to_it(data, at, value, cut):
    """A byte changed and the frame cut short: the kernel gives cramjam's bytes or declines,
    so the decoder's answer (and error text) is cramjam's whenever the kernel does not take it."""
    frame = bytearray(compress(COMPRESSION_LZ4, data))
    frame[at % len(frame)] = value
    frame = bytes(frame[: len(frame) - cut % len(frame)])
    ours = _kernel(frame, len(data) + 64)
    if ours is not None:
        assert ours == _cramjam(frame, len(data) + 64)


def test_frames_the_kernel_leaves_to_cramjam():
    data = b"0123456789abcdef" * 5000
    frame = bytearray(compress(COMPRESSION_LZ4, data))
    assert _kernel(bytes(frame), len(data)) == data
    assert _kernel(bytes(frame), len(data) - 1) is None  # expands past its view
    checked = bytearray(frame)
    checked[4] |= 0x04  # content checksum flag: a frame this path does not take
    assert _kernel(bytes(checked), len(data)) is None
    assert _kernel(bytes(frame) + b"\x00", len(data)) is None  # bytes after the end mark
    big_block = bytearray(frame)
    big_block[5] = 0x70  # BD of 4 MiB blocks: the header checksum no longer holds
    assert _kernel(bytes(big_block), len(data)) is None
    assert len(data) > LZ4_KAFKA_BLOCK_SIZE  # more than one block was decoded above


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=20), seed=st.integers(0, 99))
def test_small_batch_crcs_are_crc32c(sizes, seed):
    """Entries laid end to end, each its own size: the compiled CRC of the small ones is the
    crc32c package's over the same bytes (attributes to end), the large ones left to it."""
    rng = np.random.default_rng(seed)
    entry = [61 + s for s in sizes]
    buf = rng.integers(0, 256, sum(entry), dtype=np.uint8)
    positions = np.cumsum([0, *entry[:-1]]).astype(np.int64)
    size_fields = np.array([e - 12 for e in entry], np.int32)
    magics = np.full(len(entry), MAGIC_VALUE_V2, np.int8)
    computed = np.zeros(len(entry), np.uint32)
    stored = np.zeros(len(entry), np.uint32)
    done = np.zeros(len(entry), bool)
    kernels.small_batch_crcs(buf, positions, size_fields, magics, _CRC32C_TABLES, computed,
                             stored, done)  # fmt: skip
    for i, (p, e) in enumerate(zip(positions.tolist(), entry, strict=True)):
        assert done[i] == (e <= kernels.SMALL_ENTRY_BYTES)
        if done[i]:
            assert int(computed[i]) == crc32c.crc32c(buf[p + 21 : p + e].tobytes())
            assert int(stored[i]) == int.from_bytes(buf[p + 17 : p + 21].tobytes(), "big")
