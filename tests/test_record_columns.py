"""Records decoded for the columns a reader asks for (decoders.iter_file's ``record_columns``):
key, value and headers left out are null, every other column is what a full decode gives."""

from __future__ import annotations

import pyarrow as pa
import pytest

import decoders
from decoders.constants import COMPRESSION_NAMES, COMPRESSION_NONE
from simulator.writer import Record, build_batch

CODECS = sorted(COMPRESSION_NAMES)  # every codec of the v2 format
COPIED = ["key", "value", "headers"]


def _segment(tmp_path, codec: int):
    part = tmp_path / "orders-0"
    part.mkdir()
    body, offset = b"", 0
    for b in range(20):
        records = [
            Record(f"k{b}-{i}".encode(), b"v" * (i + b), ((f"h{i}", b"x"),), timestamp=1_000 + i)
            for i in range(7)
        ]
        body += build_batch(records, offset, codec=codec, producer_id=5, producer_epoch=0,
                            base_sequence=offset)  # fmt: skip
        offset += len(records)
    path = part / "00000000000000000000.log"
    path.write_bytes(body)
    return str(path)


def _records(path: str, **kw) -> pa.Table:
    got = [b for t, b in decoders.iter_file(path, ("records",), **kw) if t == "records"]
    return pa.Table.from_batches(got)


@pytest.mark.parametrize("codec", CODECS, ids=[COMPRESSION_NAMES[c] for c in CODECS])
def test_columns_left_out_are_null_and_the_others_equal(tmp_path, codec):
    path = _segment(tmp_path, codec)
    full = _records(path)
    some = _records(path, record_columns=["offset", "timestamp", "value"])
    assert full.num_rows == some.num_rows == 140
    assert some.schema == full.schema  # the records table keeps its schema
    for name in full.column_names:
        if name in ("key", "headers"):
            assert some[name].null_count == some.num_rows, name
        else:
            assert some[name].equals(full[name]), name
    assert full["key"].null_count == 0 and full["headers"].null_count == 0


def test_no_columns_asked_builds_every_one(tmp_path):
    path = _segment(tmp_path, COMPRESSION_NONE)
    assert _records(path, record_columns=None).equals(_records(path))
    bare = _records(path, record_columns=[])
    assert all(bare[c].null_count == bare.num_rows for c in COPIED)
    assert bare["offset"].equals(_records(path)["offset"])
