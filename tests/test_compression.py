"""Decompression errors: only the codecs' own errors are bad input, and a corrupt payload is
decompressed at most twice (issue 16)."""

from __future__ import annotations

import cramjam
import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from decoders import compression, records
from decoders.constants import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_GZIP,
    COMPRESSION_ZSTD,
    RECORDS_OFFSET,
)
from decoders.errors import CORRUPT_BYTES, DecodeError
from decoders.segment import SegmentDecoder
from simulator.writer import Record, build_batch, frame_batch


def _batch_with_payload(codec: int, values: list[bytes], cut: int = 0, flip: int | None = None):
    """A valid-CRC batch whose compressed records area is cut short by ``cut`` bytes and/or has
    the byte at ``flip`` (from the area's start) inverted: corrupt for the codec, not the CRC."""
    batch = bytearray(build_batch([Record(b"k", v, timestamp=1) for v in values], codec=codec))
    payload = batch[RECORDS_OFFSET:]
    if flip is not None:
        payload[flip] ^= 0xFF
    if cut:
        payload = payload[:-cut]
    body = bytes(batch[ATTRIBUTES_OFFSET:RECORDS_OFFSET]) + bytes(payload)
    return frame_batch(0, 0, body)


@pytest.fixture
def codec_calls(monkeypatch):
    """Counts every call the records decoder makes into the codecs."""
    calls = []

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(records, "decompress_into", counting("into", compression.decompress_into))
    monkeypatch.setattr(
        records, "stream_decompress", counting("stream", compression.stream_decompress)
    )
    return calls


def _decode(data: bytes):
    """(accounting, values of the records decoded) of a whole file."""
    with SegmentDecoder(data) as dec:
        values = [
            v for w in dec.windows() for r in w.records for v in r.column("value").to_pylist()
        ]
        return dec.acct, values


def test_a_bug_inside_a_codec_is_not_bad_input(monkeypatch):
    def broken(*_args, **_kwargs):
        raise TypeError("a bug, not a corrupt payload")

    monkeypatch.setattr(cramjam.zstd, "decompress_into", broken)
    with pytest.raises(TypeError):
        compression.decompress_into(COMPRESSION_ZSTD, b"\x28\xb5\x2f\xfd", np.empty(10, np.uint8))


def test_memory_error_propagates_from_the_stream(monkeypatch):
    class Exhausted:
        def decompressobj(self):
            raise MemoryError

    monkeypatch.setattr(zstandard, "ZstdDecompressor", Exhausted)
    with pytest.raises(MemoryError):
        list(compression.stream_decompress(COMPRESSION_ZSTD, b"\x28\xb5\x2f\xfd\x00"))


def test_a_codec_error_is_a_decode_error():
    with pytest.raises(DecodeError):
        compression.decompress_into(COMPRESSION_GZIP, b"\x1f\x8bnot gzip", np.empty(64, np.uint8))
    with pytest.raises(DecodeError):
        list(compression.stream_decompress(COMPRESSION_GZIP, b"\x1f\x8bnot gzip"))


def test_a_corrupt_payload_is_decompressed_once(codec_calls):
    data = _batch_with_payload(COMPRESSION_ZSTD, [b"v" * 100] * 5, flip=6)
    acct, values = _decode(data)
    assert [e.kind for e in acct.errors] == [CORRUPT_BYTES]
    assert "do not decompress" in acct.errors[0].reason
    assert values == []
    assert codec_calls == ["into"]


def test_a_corrupt_payload_that_expands_past_its_view_is_decompressed_twice(codec_calls):
    # one 2 MiB record of zeros compresses to a few KiB: it expands past the first view
    # (OutputTooSmall) and is streamed; the stream ends early, before the record is whole
    data = _batch_with_payload(COMPRESSION_GZIP, [bytes(2 << 20)], cut=64)
    acct, values = _decode(data)
    assert [e.kind for e in acct.errors] == [CORRUPT_BYTES]
    assert "(record 0 of 1)" in acct.errors[0].reason
    assert values == []
    assert codec_calls == ["into", "stream"]
    assert acct.corrupt == len(data) and acct.valid == 0


def test_a_big_valid_payload_is_streamed_and_its_records_kept(codec_calls):
    data = _batch_with_payload(COMPRESSION_GZIP, [bytes(2 << 20), b"x"])
    acct, values = _decode(data)
    assert acct.errors == [] and acct.valid == len(data)
    # bounded attempt, validation pass, then the pass that builds the records
    assert codec_calls == ["into", "stream", "stream"]
    assert values == [bytes(2 << 20), b"x"]


ZSTD_TEXTS = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(1, 20_000)),
)


@settings(max_examples=300, deadline=None)
@given(
    data=ZSTD_TEXTS,
    sized=st.booleans(),
    checksum=st.booleans(),
    frames=st.integers(1, 2),
    at=st.integers(0, 1 << 30),
    value=st.one_of(st.none(), st.integers(0, 255)),
    room=st.integers(-64, 64),
)
def test_zstd_through_a_kept_context_gives_cramjam_s_bytes_or_leaves_the_payload(
    data, sized, checksum, frames, at, value, room
):
    """A zstd payload (with and without its content size, as zstd-jni's stream writes it, and
    its checksum; two frames; a byte damaged; an output too small or roomy) through the kept
    context
    gives exactly what cramjam gives, or None and cramjam decides (its verdict stands)."""
    compressor = zstandard.ZstdCompressor(write_content_size=sized, write_checksum=checksum)
    payload = bytearray(compressor.compress(data) * frames)
    if value is not None:
        payload[at % len(payload)] = value
    cap = max(0, len(data) * frames + room)
    ours = compression._zstd_into(bytes(payload), np.zeros(cap, np.uint8))
    if ours is None:
        return
    out = np.zeros(cap, np.uint8)
    assert ours == cramjam.zstd.decompress_into(bytes(payload), out)
    mine = np.zeros(cap, np.uint8)
    compression._zstd_into(bytes(payload), mine)
    assert bytes(mine[:ours]) == bytes(out[:ours])


def test_zstd_a_second_frame_or_a_declared_size_past_the_output_is_left_to_cramjam():
    frame = zstandard.ZstdCompressor().compress(b"x" * 1000)
    assert compression._zstd_into(frame, np.zeros(1000, np.uint8)) == 1000
    assert compression._zstd_into(frame + frame, np.zeros(2000, np.uint8)) is None
    assert (
        compression.decompress_into(COMPRESSION_ZSTD, frame + frame, np.zeros(2000, np.uint8))
        == 2000
    )
    assert compression._zstd_into(frame, np.zeros(999, np.uint8)) is None
    with pytest.raises(compression.OutputTooSmall):
        compression.decompress_into(COMPRESSION_ZSTD, frame, np.zeros(999, np.uint8))
