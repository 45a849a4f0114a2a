"""The compiled paths that stand in for a library (decoders.kernels): the LZ4 and snappy
decoders against cramjam (through decoders.compression, the path they stand in for), the
small-batch CRC-32C against the crc32c package. Each must give the library's answer, or
leave the payload to the library: never a different answer."""

from __future__ import annotations

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoders import kernels
from decoders.compression import LZ4_HEADER_CHECKSUMS, compress, decompress_into
from decoders.constants import (
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    LZ4_KAFKA_BLOCK_SIZE,
    MAGIC_VALUE_V2,
)
from decoders.errors import DecodeError
from decoders.framing import _CRC32C_TABLES

TEXTS = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(1, 40_000)),
    st.builds(
        lambda parts: b"".join(parts),
        st.lists(st.sampled_from([b'{"event":"click",', b'"user":"u-1"}', b"v" * 60, b"\x00"])),
    ),
)


def _kernel(payload: bytes, cap: int, codec: int = COMPRESSION_LZ4) -> bytes | None:
    """The payload through kernels.inflate_batches alone: its bytes, or None if it left it."""
    src = np.frombuffer(payload, np.uint8)
    one = np.zeros(1, np.int64)
    dst = np.zeros(cap, np.uint8)
    got = np.zeros(1, np.int64)
    stop, w, _ = kernels.inflate_batches(
        src, one, one + len(payload), np.array([cap], np.int64), np.ones(1, np.int64),
        np.array([codec], np.int16), 0, dst, 0, 1 << 40, 1 << 40, LZ4_HEADER_CHECKSUMS, got,
    )  # fmt: skip
    return bytes(dst[:w]) if stop == 1 else None


def _library(payload: bytes, cap: int, codec: int = COMPRESSION_LZ4) -> bytes | None:
    """What the decoder's cramjam path gives (None: a DecodeError)."""
    out = np.zeros(cap, np.uint8)
    try:
        n = decompress_into(codec, payload, out)
    except DecodeError:
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
        assert ours == _library(frame, len(data) + 64)


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


@settings(max_examples=300, deadline=None)
@given(data=TEXTS, raw=st.booleans())
def test_snappy_payloads_decompress_to_their_bytes(data, raw):
    """snappy-java's stream (Kafka's Java producer) and one raw block (librdkafka)."""
    payload = compress(COMPRESSION_SNAPPY, data, snappy_raw=raw)
    assert _kernel(payload, len(data) + 64, COMPRESSION_SNAPPY) == data


@settings(max_examples=500, deadline=None)
@given(data=TEXTS, raw=st.booleans(), at=st.integers(0, 1 << 30), value=st.integers(0, 255),
       cut=st.integers(0, 64))  # fmt: skip
def test_a_damaged_snappy_payload_is_decoded_as_cramjam_decodes_it_or_left_to_it(
    data, raw, at, value, cut
):
    payload = bytearray(compress(COMPRESSION_SNAPPY, data, snappy_raw=raw))
    payload[at % len(payload)] = value
    payload = bytes(payload[: len(payload) - cut % len(payload)])
    ours = _kernel(payload, len(data) + 64, COMPRESSION_SNAPPY)
    if ours is not None:
        assert ours == _library(payload, len(data) + 64, COMPRESSION_SNAPPY)


def test_payloads_the_snappy_kernel_leaves_to_cramjam():
    data = b"0123456789abcdef" * 5000
    stream = compress(COMPRESSION_SNAPPY, data)
    assert _kernel(stream, len(data), COMPRESSION_SNAPPY) == data
    assert _kernel(stream, len(data) - 1, COMPRESSION_SNAPPY) is None  # past its view
    assert _kernel(stream + stream, 2 * len(data), COMPRESSION_SNAPPY) is None  # concatenated
    assert _library(stream + stream, 2 * len(data), COMPRESSION_SNAPPY) == data + data
    assert _kernel(compress(COMPRESSION_ZSTD, data), len(data), COMPRESSION_ZSTD) is None


CRC_KERNELS = [(kernels.small_batch_crcs_tables, kernels.SMALL_ENTRY_BYTES)]
if kernels.CRC32C_INSTRUCTION:  # the instruction's kernel exists only where it compiles
    CRC_KERNELS.append((kernels.small_batch_crcs_instructed, kernels.INSTRUCTION_ENTRY_BYTES))


@pytest.mark.parametrize(("kernel", "limit"), CRC_KERNELS, ids=lambda k: getattr(k, "__name__", ""))
@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 20_000), min_size=1, max_size=20), seed=st.integers(0, 99))
def test_small_batch_crcs_are_crc32c(kernel, limit, sizes, seed):
    """Entries laid end to end, each its own size: the compiled CRC of the small ones is the
    crc32c package's over the same bytes (attributes to end), the large ones left to it; each
    kernel alike (the CPU's instruction, where this machine has it, and the tables)."""
    rng = np.random.default_rng(seed)
    entry = [61 + s for s in sizes]
    buf = rng.integers(0, 256, sum(entry), dtype=np.uint8)
    positions = np.cumsum([0, *entry[:-1]]).astype(np.int64)
    size_fields = np.array([e - 12 for e in entry], np.int32)
    magics = np.full(len(entry), MAGIC_VALUE_V2, np.int8)
    computed = np.zeros(len(entry), np.uint32)
    stored = np.zeros(len(entry), np.uint32)
    done = np.zeros(len(entry), bool)
    kernel(buf, positions, size_fields, magics, _CRC32C_TABLES, computed, stored, done)
    for i, (p, e) in enumerate(zip(positions.tolist(), entry, strict=True)):
        assert done[i] == (e <= limit)
        if done[i]:
            assert int(computed[i]) == crc32c.crc32c(buf[p + 21 : p + e].tobytes())
            assert int(stored[i]) == int.from_bytes(buf[p + 17 : p + 21].tobytes(), "big")


def test_the_crc_kernel_is_chosen_by_the_cpu(monkeypatch):
    """The instruction's kernel where numba targets this x86-64 host with SSE 4.2; the tables
    on another machine, or where numba is told to target another CPU (a shared cache)."""
    from numba.core import config

    assert kernels.small_batch_crcs is (
        kernels.small_batch_crcs_instructed if kernels.CRC32C_INSTRUCTION
        else kernels.small_batch_crcs_tables
    )  # fmt: skip
    monkeypatch.setattr(config, "CPU_NAME", "generic")
    assert not kernels.crc32c_instruction()
    monkeypatch.setattr(config, "CPU_NAME", None)
    monkeypatch.setattr(config, "CPU_FEATURES", "-sse4.2")
    assert not kernels.crc32c_instruction()
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    assert not kernels.crc32c_instruction()
