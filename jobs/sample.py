"""A small, hand-built dump that exercises every format the decoders read.

Used by `logreplay demo` and the tests. It is written with :mod:`simulator.writer` only, so
decoding it back checks the writer and the readers against each other; the broker-faithful
scenario simulator with ground truth is a separate component.
"""

from __future__ import annotations

import os
import shutil
import struct

from decoders import consumer_offsets as co
from decoders import consumer_protocol as cp
from decoders import transaction_log as tl
from decoders.constants import (
    ABORT,
    COMMIT,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from decoders.partitioning import partition_for
from simulator.writer import (
    PartitionWriter,
    Record,
    SnapshotEntry,
    build_batch,
    control_batch,
    legacy_message,
    legacy_wrapper,
    meta_properties_text,
    offset_checkpoint_text,
)

T0 = 1_700_000_000_000
GROUP = "orders-app"
TXN_ID = "payments-tx"
IDEMPOTENT_PID, TXN_PID = 1000, 2000
CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]


def _records(n: int, start_ts: int, prefix: str) -> list[Record]:
    return [
        Record(
            f"{prefix}-{i}".encode(),
            f'{{"order": {i}, "amount": {i * 7 % 100}}}'.encode(),
            [("trace-id", f"t{i}".encode()), ("empty", None)],
            start_ts + i,
        )
        for i in range(n)
    ]


def write_sample_dump(out: str) -> dict:
    """Write the sample dump under `out`; returns the facts the tests check against."""
    if os.path.exists(out):
        shutil.rmtree(out)
    broker = os.path.join(out, "broker-1")
    os.makedirs(broker)
    facts: dict = {"records": {}, "aborted": [], "committed": []}
    n_orders = _idempotent_orders(broker)
    facts["records"]["orders-0"] = n_orders
    committed, aborted = _transactional_orders(broker)
    facts["committed"].append(committed)
    facts["aborted"].append(aborted)
    facts["records"]["orders-1"] = 3 + 4 + 6 + 2
    _legacy_formats(broker)
    facts["records"]["legacy-0"] = 7
    part = _consumer_offsets(broker)
    facts["offsets_partition"] = part
    _transaction_state(broker, part)
    _broker_files(broker, n_orders)
    facts["damaged"] = _damaged_replica(out, broker)
    return facts


def _idempotent_orders(broker: str) -> int:
    """orders-0: an idempotent producer cycling through every codec, small segments (so the
    readers meet several segments, indexes and a producer snapshot); returns its records."""
    w = PartitionWriter(broker, "orders", 0, segment_bytes=4096, index_interval_bytes=512)
    seq, n_orders = 0, 0
    for i in range(40):
        recs = _records(5, T0 + i * 10, f"o{i}")
        w.append(
            build_batch(
                recs,
                codec=CODECS[i % 5],
                producer_id=IDEMPOTENT_PID,
                producer_epoch=0,
                base_sequence=seq,
            )
        )
        seq += 5
        n_orders += 5
        if i == 25:
            w.add_snapshot(
                w.next_offset,
                [SnapshotEntry(IDEMPOTENT_PID, 0, seq - 1, w.next_offset - 1, 4, T0 + i * 10 + 4)],
            )
    w.close()
    return n_orders


def _transactional_orders(broker: str) -> tuple[tuple, tuple]:
    """orders-1: a transactional producer: one committed and one aborted transaction,
    interleaved with plain writes; the abort gets its .txnindex entry. Returns the committed
    and the aborted transaction as (topic, partition, producer id, first offset, marker)."""
    w = PartitionWriter(broker, "orders", 1, index_interval_bytes=256)
    w.append(build_batch(_records(3, T0, "plain"), codec=COMPRESSION_LZ4))
    first, _ = w.append(
        build_batch(
            _records(4, T0 + 100, "tx1"),
            producer_id=TXN_PID,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
    )
    _, marker = w.append(control_batch(COMMIT, TXN_PID, 0, 5, T0 + 200))
    committed = ("orders", 1, TXN_PID, first, marker)
    first, _ = w.append(
        build_batch(
            _records(6, T0 + 300, "tx2"),
            codec=COMPRESSION_ZSTD,
            producer_id=TXN_PID,
            producer_epoch=0,
            base_sequence=4,
            transactional=True,
        )
    )
    w.append(build_batch(_records(2, T0 + 350, "plain2")))
    _, marker = w.append(control_batch(ABORT, TXN_PID, 0, 5, T0 + 400))
    w.add_aborted(TXN_PID, first, marker, marker + 1)
    aborted = ("orders", 1, TXN_PID, first, marker)
    w.add_snapshot(w.next_offset, [SnapshotEntry(TXN_PID, 0, 9, first + 5, 5, T0 + 400, 5, -1)])
    w.close()
    return committed, aborted


def _legacy_formats(broker: str) -> None:
    """legacy-0: message format v1 plain, v1 gzip wrapper, v0 lz4 wrapper (broken header
    checksum), v1 snappy wrapper with log-append time: the pre-v2 readers' every path."""
    w = PartitionWriter(broker, "legacy", 0)
    w.append(legacy_message(0, b"k0", b"plain v1", magic=1, timestamp=T0))
    w.append(
        legacy_wrapper(
            [(b"k1", b"a", T0 + 1), (b"k2", b"b", T0 + 2), (None, b"c", T0 + 3)],
            3,
            COMPRESSION_GZIP,
            magic=1,
        )
    )
    w.append(legacy_wrapper([(b"k4", b"d", -1), (b"k5", None, -1)], 5, COMPRESSION_LZ4, magic=0))
    w.append(
        legacy_wrapper(
            [(b"k6", b"e", T0 + 6)], 6, COMPRESSION_SNAPPY, magic=1, log_append_time=T0 + 99
        )
    )
    w.close()


def _group_metadata(state_timestamp: int) -> bytes:
    """The group's metadata value: two consumer members under the range assignor, each owning
    one orders partition, so the consumer-protocol decoding of members is exercised."""
    members = [
        {
            "member_id": f"c{i}-uuid",
            "client_id": f"c{i}",
            "client_host": f"/10.0.0.{i}",
            "subscription": cp.encode_subscription(["orders"], owned={"orders": [i]}, generation=1),
            "assignment": cp.encode_assignment({"orders": [i]}),
        }
        for i in range(2)
    ]
    return co.encode_group_metadata(
        "consumer", 1, "range", "c0-uuid", members, state_timestamp=state_timestamp
    )


def _consumer_offsets(broker: str) -> int:
    """__consumer_offsets: group metadata (two members, range), commits, a transactional commit
    and a tombstone; returns the partition the group's records live in."""
    part = partition_for(GROUP)
    w = PartitionWriter(broker, "__consumer_offsets", part)
    gm = _group_metadata(T0)
    w.append(
        build_batch(
            [Record(co.encode_group_metadata_key(GROUP), gm, timestamp=T0)], base_sequence=0
        )
    )
    commits = [
        Record(
            co.encode_offset_commit_key(GROUP, "orders", p),
            co.encode_offset_commit(o, T0 + 500),
            timestamp=T0 + 500,
        )
        for p, o in ((0, 200), (1, 5))
    ]
    w.append(build_batch(commits, base_sequence=0))
    w.append(
        build_batch(
            [
                Record(
                    co.encode_offset_commit_key(GROUP, "orders", 1),
                    co.encode_offset_commit(9, T0 + 600, version=4),
                    timestamp=T0 + 600,
                )
            ],
            producer_id=TXN_PID,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
    )
    w.append(control_batch(COMMIT, TXN_PID, 0, 5, T0 + 650))
    w.append(
        build_batch(
            [Record(co.encode_offset_commit_key(GROUP, "gone", 0), None, timestamp=T0 + 700)],
            base_sequence=0,
        )
    )
    w.close()
    return part


def _transaction_state(broker: str, offsets_partition: int) -> None:
    """__transaction_state: the life of both transactions, the committed one spanning orders-1
    and the group's ``offsets_partition``."""
    w = PartitionWriter(broker, "__transaction_state", partition_for(TXN_ID))
    parts = {"orders": [1], "__consumer_offsets": [offsets_partition]}
    for state, ts, p in (
        ("Empty", 0, None),
        ("Ongoing", 100, {"orders": [1]}),
        ("Ongoing", 150, parts),
        ("PrepareCommit", 190, parts),
        ("CompleteCommit", 210, {}),
        ("Ongoing", 300, {"orders": [1]}),
        ("PrepareAbort", 390, {"orders": [1]}),
        ("CompleteAbort", 410, {}),
    ):
        value = tl.encode_value(TXN_PID, 0, 60000, state, p, T0 + ts, T0 + ts if p else -1)
        w.append(build_batch([Record(tl.encode_key(TXN_ID), value, timestamp=T0 + ts)]))
    w.close()


def _broker_files(broker: str, n_orders: int) -> None:
    """The broker's own files beside the partitions: meta.properties (a ZooKeeper-mode broker)
    and the replication checkpoint of both orders partitions."""
    with open(os.path.join(broker, "meta.properties"), "w") as f:
        f.write(meta_properties_text(1, "sample-cluster-0000000", kraft=False))
    with open(os.path.join(broker, "replication-offset-checkpoint"), "w") as f:
        f.write(offset_checkpoint_text([("orders", 0, n_orders), ("orders", 1, 17)]))


def _damaged_replica(out: str, healthy: str) -> dict:
    """broker-2 holds a copy of orders-1 as a crash leaves it: one flipped byte (CRC), a torn
    batch and a zero-filled preallocated tail."""
    broker = os.path.join(out, "broker-2")
    src = os.path.join(healthy, "orders-1")
    dst = os.path.join(broker, "orders-1")
    shutil.copytree(src, dst)
    with open(os.path.join(broker, "meta.properties"), "w") as f:
        f.write(meta_properties_text(2, "sample-cluster-0000000", kraft=False))
    log = os.path.join(dst, "00000000000000000000.log")
    with open(log, "rb") as f:
        data = bytearray(f.read())
    first_len = struct.unpack_from(">i", data, 8)[0] + 12
    data[first_len + 70] ^= 0xFF  # inside the second batch's records: CRC mismatch
    torn = build_batch(_records(3, T0 + 999, "torn"))
    data += torn[: len(torn) // 2]
    data += bytes(4096)
    with open(log, "wb") as f:
        f.write(data)
    return {
        "file": os.path.relpath(log, out),
        "crc_position": first_len,
        "torn_position": len(data) - 4096 - len(torn) // 2,
    }
