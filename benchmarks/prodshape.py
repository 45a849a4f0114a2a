"""Production-shaped dumps of a chosen size, for the benchmarks (not a scenario with truth).

What a cluster of default-config clients writes (production-shape.md): idempotent producers with
``batch.size`` 16 KB and ``linger.ms`` 5 write batches of a few ~200-byte records over 8
partitions; a Kafka Streams-style exactly-once app (one transactional producer per thread,
``commit.interval.ms`` 100) writes into 4 partitions and commits a transaction every 100 ms of
simulated time, with its offsets sent to the transaction; consumer groups auto-commit their
positions every 5 s, and a busy fleet of small groups commits every second, so
``__consumer_offsets`` holds one small batch per commit. The simulator's clients and
coordinators write every byte (headers, CRCs, markers, coordinator records), so the dump is
broker-faithful; only the volume is chosen here.

    python benchmarks/prodshape.py OUT --gb 1 [--seed 1] [--codec lz4]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import crc32c  # noqa: E402

from decoders.constants import COMPRESSION_NAMES  # noqa: E402
from simulator.clients import Producer, TransactionalProducer  # noqa: E402
from simulator.cluster import Cluster, TopicConfig  # noqa: E402
from simulator.writer import Record, build_batch  # noqa: E402

RECORDS_PER_BATCH = 5  # a few records per batch under linger.ms 5
VALUE_BYTES = 200
PLAIN_PARTITIONS, EOS_PARTITIONS = 8, 4
TXN_EVERY_MS = 100  # commit.interval.ms under exactly_once_v2
AUTO_COMMIT_MS = 5_000
BUSY_GROUPS, BUSY_COMMIT_MS = 40, 1_000
PRODUCERS = 4
BATCHES_PER_SECOND = 2_000  # simulated time: 1 GB is about 7 minutes of this traffic
EOS_EVERY = 10  # one output batch of the Streams app per ten input batches
SIZE_EVERY = 4096  # plain batches between counts of the bytes written (generate)
CODECS = {name: codec for codec, name in COMPRESSION_NAMES.items()}  # compression.type


def logs_size(cluster: Cluster) -> int:
    """The bytes of every log the cluster has written so far."""
    return sum(s.size for log in cluster.logs.values() for s in log.writer.segments)


def dump_size(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


class SmallBatch:
    """One encoded records area of a few ~200-byte records, reused with a fresh header and CRC
    per batch (what a broker-written batch varies in), as simulator.bulk does for big ones.
    With a ``codec`` the records area is compressed and the values are JSON-like events that
    compress about as real ones do (1 GB of lz4 batches: about 4.2 M batches, 21 M records)."""

    def __init__(self, n: int = RECORDS_PER_BATCH, codec: int = 0) -> None:
        records = [
            Record(f"user-{i:06d}".encode(), _value(i) if codec else b'{"event":"click","payload":"'
                   + b"v" * VALUE_BYTES + b'"}', (), i)
            for i in range(n)
        ]  # fmt: skip
        full = build_batch(records, base_timestamp=0, producer_id=0, producer_epoch=0,
                           base_sequence=0, codec=codec)  # fmt: skip
        self.attributes = struct.unpack_from(">h", full, 21)[0]
        self.count, self.payload = n, full[61:]

    def make(self, timestamp: int, producer_id: int, sequence: int) -> bytes:
        body = struct.pack(
            ">hiqqqhii",
            self.attributes,
            self.count - 1,
            timestamp,
            timestamp + self.count - 1,
            producer_id,
            0,
            sequence,
            self.count,
        )
        body += self.payload  # fmt: skip
        return struct.pack(">qiibI", 0, len(body) + 9, -1, 2, crc32c.crc32c(body)) + body


def _value(i: int) -> bytes:
    """A JSON-like event of about VALUE_BYTES: field names and most text repeat, ids do not."""
    rng = random.Random(i)
    text = json.dumps({"event": "click", "user": f"user-{rng.randrange(10**6):06d}"})
    return (text[:-1] + ', "payload": "' + "v" * (VALUE_BYTES - len(text) - 16) + '"}').encode()


def generate(out: str, gb: float, seed: int = 1, codec: int = 0) -> dict:
    """Write about ``gb`` GB of logs under ``out`` (replaced): every partition's, the Streams
    app's outputs, its markers, the coordinators' and the groups' too; returns counts of what
    was written. Time is counted in batches: the cluster takes BATCHES_PER_SECOND plain
    batches a second.
    ``codec``: the producers' compression.type, the Streams app's too (the coordinators write
    uncompressed, as brokers do)."""
    target = int(gb * 1e9)
    c = Cluster(out, seed, brokers=1)
    c.create_topic(TopicConfig("events", PLAIN_PARTITIONS))
    c.create_topic(TopicConfig("orders-enriched", EOS_PARTITIONS))
    template = SmallBatch(codec=codec)
    producers = [Producer(c) for _ in range(PRODUCERS)]
    eos = TransactionalProducer(c, "orders-app-1-0", version=2, value_bytes=VALUE_BYTES,
                                codec=codec)  # fmt: skip
    gc = c.group_coordinator
    eos_group = gc.group("orders-app", isolation="read_committed")
    groups = [gc.group(f"service-{g}") for g in range(BUSY_GROUPS)]
    ends = {("events", p): 0 for p in range(PLAIN_PARTITIONS)}
    counts = {"batches": 0, "transactions": 0, "offset_commits": 0}
    per_ms = BATCHES_PER_SECOND // 1000
    written, i, in_txn = 0, 0, False
    while written < target:
        if i % SIZE_EVERY == 0:  # every log's bytes so far (the plain batches are ~90% of them)
            written = logs_size(c)
        if i % per_ms == 0:
            c.clock.tick(1)
        p = i % PLAIN_PARTITIONS
        prod = producers[i % PRODUCERS]
        seq = prod.next_sequence(("events", p), RECORDS_PER_BATCH)
        batch = template.make(c.clock.now, prod.producer_id, seq)
        ends[("events", p)] = c.log("events", p).append_batch(batch)[1] + 1
        if i % EOS_EVERY == 0:  # the Streams app's outputs
            eos.send("orders-enriched", (i // EOS_EVERY) % EOS_PARTITIONS, RECORDS_PER_BATCH)
            in_txn = True
        i += 1
        if i % (per_ms * TXN_EVERY_MS) == 0 and in_txn:
            eos.send_offsets(eos_group, dict(ends))
            eos.commit()
            counts["transactions"] += 1
            in_txn = False
        if i % (per_ms * BUSY_COMMIT_MS) == 0:
            for k, g in enumerate(groups):
                tp = ("events", k % PLAIN_PARTITIONS)
                gc.commit(g, {tp: ends[tp]})
            counts["offset_commits"] += len(groups)
        if i % (per_ms * AUTO_COMMIT_MS) == 0:
            gc.commit(gc.group("events-sink"), dict(ends))
            counts["offset_commits"] += 1
    if in_txn:
        eos.commit()
        counts["transactions"] += 1
    c.close()
    counts["batches"] = i + i // EOS_EVERY
    counts["bytes"] = dump_size(out)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--codec", choices=sorted(CODECS), default="none")
    args = ap.parse_args()
    t = time.perf_counter()
    counts = generate(args.out, args.gb, args.seed, CODECS[args.codec])
    print(f"{args.out}: {counts} in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
