"""Every file the decoders open is closed: by the decoder that opened it, at the end of a
``with`` block, never left to the garbage collector (issue 16)."""

from __future__ import annotations

import gc
import os
import warnings

import pytest

import decoders
from decoders import planning
from decoders.indexes import read_offset_index, read_time_index
from decoders.segment import SegmentDecoder
from decoders.snapshot import read_snapshot
from decoders.source import LocalFile
from jobs.sample import write_sample_dump


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("sample"))
    write_sample_dump(out)
    return out


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_decoder_closes_the_file_it_opened_and_only_that(sample):
    log = next(f for f in decoders.discover([sample]) if f.kind == "log")
    with SegmentDecoder(log.path, log.info) as dec:
        assert sum(w.batches.num_rows for w in dec.windows()) > 0
    assert dec.src._fd == -1
    with LocalFile(log.path) as src:
        with SegmentDecoder(src, log.info) as dec:
            list(dec.windows())
        assert src.read_at(0, 8)  # a source passed in stays its owner's


def test_readers_and_planner_leave_no_file_open(sample):
    files = decoders.discover([sample])
    before = _open_fds()
    readers = {"index": read_offset_index, "timeindex": read_time_index, "snapshot": read_snapshot}
    with warnings.catch_warnings(record=True) as caught:
        # a LocalFile collected while open warns (and closes): none may
        warnings.simplefilter("always", ResourceWarning)
        for f in files:
            if f.kind in readers:
                readers[f.kind](f.path, f.info)
        tasks = planning.plan(files, "records", range_bytes=1024)
        assert sum(len(t.ranges) for t in tasks) > len([f for f in files if f.kind == "log"])
        decoders.read_dump([sample], ("batches", "index_entries", "producer_snapshots"))
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
    assert _open_fds() == before
