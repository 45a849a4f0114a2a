"""The records walk (decoders.record_walk, kernels.walk_records / copy_slices / copy_headers)
and the buffers around it: what a caller holds stays what was decoded, whichever buffer the
decoder reuses, and every codec and chunking gives the uncompressed decode's records."""

from __future__ import annotations

import weakref

import numpy as np
import pyarrow as pa
import pytest

from decoders import records as records_module
from decoders.constants import COMPRESSION_NAMES, COMPRESSION_NONE, RECORDS_OFFSET
from decoders.record_walk import RecordWalker
from decoders.segment import SegmentDecoder
from decoders.source import BytesSource
from simulator.writer import Record, build_batch

CODECS = sorted(COMPRESSION_NAMES)
# columns that say where a record lies in its file: they differ between codecs
WHERE = {"batch_position"}


def _records(n_batches: int, per_batch: int, seed: int = 1) -> list[list[Record]]:
    """Batches of records with every shape a record takes: null and empty keys and values,
    none to several headers, a header value null, values long enough to span varint bytes."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(n_batches):
        batch = []
        for i in range(per_batch):
            shape = int(rng.integers(0, 5))
            key = None if shape == 0 else b"" if shape == 1 else f"k{b}-{i}".encode()
            size = int(rng.integers(0, 300))
            value = None if shape == 2 else rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            headers = tuple(
                (f"h{j}", None if (i + j) % 4 == 0 else f"v{j}".encode() * j)
                for j in range(int(rng.integers(0, 4)))
            )
            batch.append(Record(key, value, headers, timestamp=1_000 + b * per_batch + i))
        out.append(batch)
    return out


def _segment(batches: list[list[Record]], codec: int) -> bytes:
    body, offset = bytearray(), 0
    for recs in batches:
        body += build_batch(recs, offset, codec=codec, producer_id=7, producer_epoch=1,
                            base_sequence=offset)  # fmt: skip
        offset += len(recs)
    return bytes(body)


def _decode(source, keep_windows: bool = False, **kw) -> pa.Table:
    with SegmentDecoder(source, **kw) as dec:
        if keep_windows:  # every window held before any of its records is read
            windows = list(dec.windows())
            got = [r for w in windows for r in w.records]
        else:
            got = [r for w in dec.windows() for r in w.records]
    return pa.Table.from_batches(got)


def _expected(batches: list[list[Record]]) -> list[tuple]:
    return [
        (r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp)
        for recs in batches
        for r in recs
    ]


def _as_tuples(table: pa.Table) -> list[tuple]:
    heads = [[(h["key"], h["value"]) for h in hs] for hs in table["headers"].to_pylist()]
    stamps = table["timestamp"].cast(pa.int64()).to_pylist()
    return list(
        zip(table["key"].to_pylist(), table["value"].to_pylist(), heads, stamps, strict=True)
    )


def test_records_of_every_shape_are_what_was_written(tmp_path):
    batches = _records(40, 50)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_segment(batches, COMPRESSION_NONE))
    got = _decode(str(path))
    assert _as_tuples(got) == _expected(batches)
    assert got["offset"].to_pylist() == list(range(2000))
    assert got["sequence"].to_pylist() == list(range(2000))
    assert got["key"].null_count == sum(r.key is None for b in batches for r in b) > 0


def test_windows_a_caller_holds_keep_their_records_while_the_decoder_reads_on(tmp_path):
    """The decoder reads a local file into one buffer it reuses; a caller holding every
    window (and a streamed batch's records, decoded only when iterated) sees what a decoder
    reading fresh bytes for each window sees."""
    batches = _records(60, 30) + [_records(1, 9000, seed=2)[0]] + _records(20, 30, seed=3)
    data = _segment(batches, COMPRESSION_NONE)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    kw = {
        "window_bytes": 64 << 10,
        "memory_budget": 16 << 20,
    }  # many windows; 9000 records: streamed
    fresh = _decode(BytesSource(data, str(path)), keep_windows=True, **kw)
    for keep in (False, True):
        got = _decode(str(path), keep_windows=keep, **kw)
        assert got.equals(fresh)
    assert _as_tuples(fresh) == _expected(batches)


@pytest.mark.parametrize("codec", CODECS, ids=[COMPRESSION_NAMES[c] for c in CODECS])
def test_every_codec_and_chunking_gives_the_uncompressed_records(tmp_path, codec, monkeypatch):
    """Decompressed batches are walked in chunks of about CHUNK_FILL bytes: chunk boundaries
    anywhere (a chunk per batch, several batches, all of them) change nothing."""
    batches = _records(30, 40, seed=4)
    plain = tmp_path / "plain.log"
    plain.write_bytes(_segment(batches, COMPRESSION_NONE))
    packed = tmp_path / "packed.log"
    packed.write_bytes(_segment(batches, codec))
    want = _decode(str(plain))
    for fill in (1, 20_000, 1 << 40):
        monkeypatch.setattr(records_module, "CHUNK_FILL", fill)
        got = _decode(str(packed))
        for name in want.column_names:
            if name not in WHERE:
                assert got[name].equals(want[name]), (fill, name)


def test_the_walk_takes_a_record_whole_or_not_at_all():
    """A record whose header runs past its end stops the batch there: the records before it
    are taken, its status and position are the batch's, and no header of it is counted."""
    good = [Record(b"a", b"1", (("h", b"x"),)), Record(b"b", b"2", (("h", b"y"),))]
    data = bytearray(build_batch(good + [Record(b"c", b"3", (("hh", b"zz"),))], 0))
    # the last record ends with its header: key "hh" (len 2) then value "zz"; claim value len 9
    at = len(data) - 3
    assert data[at] == 4  # zigzag varint of 2
    data[at] = 18
    buf = np.frombuffer(bytes(data), np.uint8)
    one = np.array([1], np.int64)
    walk = RecordWalker().walk(
        buf, np.array([RECORDS_OFFSET], np.int64), np.array([len(data)], np.int64),
        np.array([3], np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), -2 * one,
    )  # fmt: skip
    assert walk.decoded.tolist() == [2] and walk.status.tolist() != [0]
    assert walk.key.to_pylist() == [b"a", b"b"]
    assert walk.headers.to_pylist() == [
        [{"key": "h", "value": b"x"}],
        [{"key": "h", "value": b"y"}],
    ]
    assert walk.error_pos[0] > RECORDS_OFFSET


def test_a_local_file_is_read_into_one_buffer_when_nothing_holds_its_windows(tmp_path):
    """The other side of the test above: with nothing kept, every window of a local file is
    read into the same buffer (fresh bytes for each cost a page fault per 4 KiB)."""
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_segment(_records(200, 30), COMPRESSION_NONE))
    buffers = []  # weak references: holding the buffer would keep it from being reused
    with SegmentDecoder(str(path), window_bytes=64 << 10) as dec:
        for w in dec.windows():
            assert sum(r.num_rows for r in w.records)
            buffers.append(weakref.ref(dec._window))
        assert len(buffers) > 10
        assert all(b() is dec._window for b in buffers)


def test_a_walk_with_room_for_no_record_reports_the_batch_not_a_bug():
    """A first walk whose areas cannot hold one record (recordsCount says 3, the area has 4
    bytes): no scratch to speak of, every batch's status says why, no exception."""
    buf = np.zeros(16, np.uint8)
    one = np.ones(1, np.int64)
    walk = RecordWalker().walk(buf, 0 * one, 4 * one, 3 * one, 0 * one, 0 * one, -2 * one)
    assert walk.offset.size == 0 and walk.decoded.tolist() == [0]
    assert walk.status.tolist() != [0] and walk.key.to_pylist() == []
