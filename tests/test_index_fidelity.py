"""The simulator's index writer (simulator.writer.SegmentIndexer) against the broker's own files.

For every real segment with a non-empty .index or .timeindex, the indexes are rebuilt from the
.log alone and must equal the broker's bytes. Two broker facts are modelled: clean restarts
(LogSegment.close appends a time entry and the reloaded segment counts bytes from zero; seen as
a time entry with no offset entry beside it) and, before KAFKA-16310, time entries naming the
offset of the record with the maximum timestamp rather than the batch's last offset.
"""

from __future__ import annotations

import os
import struct

import pyarrow as pa
import pyarrow.compute as pc

from decoders import iter_file
from simulator.writer import SegmentIndexer

# Segments the model cannot rebuild from the log alone, each for a known broker reason.
NOT_REBUILDABLE = {
    # broker 0 of a 3-broker 2.8 cluster, a follower for these partitions: followers append
    # whole fetched chunks, and before KAFKA-806 (4.0) one append got at most one index entry.
    *(
        f"dipendrasaini__kafka-learnning-series/tmp/kafka-logs/invoice-{p}/{base:020d}.index"
        for p, base in (
            (0, 0), (0, 30626), (0, 60611), (1, 0), (1, 30620), (1, 60492), (2, 0),
            (3, 0), (3, 30636), (3, 60678), (4, 0), (4, 30614), (4, 60434),
        )
    ),
    # compacted topic: the cleaner rewrote these segments in its own chunks.
    "smartassets__backend-server/kafka/data/docker-connect-configs-0/00000000000000000000.index",
    "smartassets__backend-server/kafka/data/docker-connect-configs-0/00000000000000000069.index",
    # Kafka Streams changelogs (compacted, cleaned) of Control Center.
    "rjmfernandes__flink-on-prem/data/customers_keyed-0/00000000000000000000.index",
    "rjmfernandes__flink-on-prem/data/order_customer_product-0/00000000000000000000.index",
    "rjmfernandes__flink-on-prem/data/products_keyed-0/00000000000000000000.index",
    # a restart that added no time entry (no larger timestamp) is invisible in the files.
    "MashaKosher__Internship/kafka/data/jwtCheckRequest-1/00000000000000000147.index",
}  # fmt: skip


def _ms(column) -> list[int]:
    """Timestamps as epoch milliseconds, exactly (the columns are timestamp[ms]); -1: none."""
    return pc.fill_null(column.cast(pa.int64()), -1).to_pylist()


def _appends(log: str, record_offsets: bool) -> list[tuple]:
    first_max: dict[int, tuple[int, int]] = {}
    if record_offsets:
        for _, r in iter_file(log, ("records",)):
            positions, offsets = (
                r.column("batch_position").to_pylist(),
                r.column("offset").to_pylist(),
            )
            for pos, off, ts in zip(positions, offsets, _ms(r.column("timestamp")), strict=True):
                if pos not in first_max or ts > first_max[pos][0]:
                    first_max[pos] = (ts, off)
    out = []
    for _, b in iter_file(log, ("batches",), deep=False):
        cols = [b.column(c).to_pylist() for c in ("position", "size", "last_offset")]
        for p, s, last, mt in zip(*cols, _ms(b.column("max_timestamp")), strict=True):
            out.append((p, s, last, mt, first_max[p][1] if p in first_max else None))
    return out


def _rebuild(base: int, appends: list[tuple], real_offsets: list, real_times: list):
    ind = SegmentIndexer(base)
    for i, (pos, size, last, max_ts, off_of_max) in enumerate(appends):
        ind.append(pos, size, last, max_ts, off_of_max)
        lone = (
            len(ind.times) < len(real_times)
            and i + 1 < len(appends)
            and ind.max_timestamp >= 0
            and real_times[len(ind.times)]
            == (ind.max_timestamp, ind.offset_of_max_timestamp - base)
        )
        if lone:
            npos, _, nlast, _, _ = appends[i + 1]
            indexed_next = (
                ind.bytes_since_index > ind.index_interval_bytes
                and len(ind.offsets) < len(real_offsets)
                and real_offsets[len(ind.offsets)] == (nlast - base, npos)
            )
            if not indexed_next:
                ind.shutdown()
    return ind.close()


def _segments(root: str):
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".index"):
                continue
            stem = os.path.join(dirpath, name[:-6])
            if not (os.path.exists(stem + ".log") and os.path.exists(stem + ".timeindex")):
                continue
            if os.path.getsize(stem + ".index") or os.path.getsize(stem + ".timeindex"):
                yield stem


def test_rebuilt_indexes_equal_the_brokers_files(corpus):
    rebuilt, failed = [], []
    for stem in _segments(corpus):
        with open(stem + ".index", "rb") as f:
            real_index = f.read()
        with open(stem + ".timeindex", "rb") as f:
            real_time = f.read()
        ro = [struct.unpack_from(">ii", real_index, i) for i in range(0, len(real_index), 8)]
        rt = [struct.unpack_from(">qi", real_time, i) for i in range(0, len(real_time), 12)]
        base = int(os.path.basename(stem))
        ok = any(
            _rebuild(base, _appends(stem + ".log", variant), ro, rt) == (real_index, real_time)
            for variant in (False, True)
        )
        (rebuilt if ok else failed).append(os.path.relpath(stem + ".index", corpus))
    assert set(failed) <= NOT_REBUILDABLE, sorted(set(failed) - NOT_REBUILDABLE)
    assert len(rebuilt) >= 123


def test_index_entries_follow_the_interval_and_restarts():
    ind = SegmentIndexer(100, index_interval_bytes=1000)
    ind.append(0, 600, 104, 50)  # no entry: nothing appended before
    ind.append(600, 600, 109, 40)  # 600 <= 1000: none
    ind.append(1200, 600, 114, 70)  # 1200 > 1000: entry (14, 1200), time (70, 14)
    ind.shutdown()  # time entry only if larger: none; the byte count restarts
    ind.append(1800, 600, 119, 80)
    ind.append(2400, 600, 124, 60)
    index, times = ind.close()
    assert index == struct.pack(">ii", 14, 1200)
    assert times == struct.pack(">qi", 70, 14) + struct.pack(">qi", 80, 19)
    after = SegmentIndexer(0, index_interval_bytes=1000)
    after.append(0, 500, 4, 10)
    after.shutdown()  # a larger timestamp since the last entry: close writes it
    assert after.close()[1] == struct.pack(">qi", 10, 4)
