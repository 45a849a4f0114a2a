"""A dump of many quiet partitions, for the per-partition fixed cost (benchmarks/bench_small.py).

What most of a real cluster's partitions look like: a few small batches each from idempotent
producers (``linger.ms`` 5, a handful of ~200-byte records), and one consumer group that has
committed a position on every one of them. By default 10,000 partitions (100 topics of 100) of
8 batches each, about 120 MB: the bytes alone are a second's work, so what an audit spends
above Spark's floor is what it spends per partition (opening and listing its files, replaying
it, writing its rows). The simulator writes every byte as a broker does (segments, indexes,
checkpoints, ``__consumer_offsets``); only the shape is chosen here.

    python benchmarks/quiet.py OUT [--partitions 10000] [--batches 8] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from prodshape import RECORDS_PER_BATCH, SmallBatch, dump_size  # noqa: E402

from simulator.clients import Producer  # noqa: E402
from simulator.cluster import Cluster, TopicConfig  # noqa: E402

PARTITIONS_PER_TOPIC = 100
PRODUCERS = 8
GROUP = "quiet-sink"


def generate(out: str, partitions: int = 10_000, batches: int = 8, seed: int = 1) -> dict:
    """Write ``partitions`` partitions of ``batches`` small batches each under ``out``
    (replaced), and one group's commit of every partition's end; returns counts."""
    c = Cluster(out, seed, brokers=1)
    topics = []
    left = partitions
    while left > 0:
        n = min(PARTITIONS_PER_TOPIC, left)
        name = f"quiet-{len(topics):04d}"
        c.create_topic(TopicConfig(name, n))
        topics.append((name, n))
        left -= n
    template = SmallBatch()
    producers = [Producer(c) for _ in range(PRODUCERS)]
    ends: dict[tuple[str, int], int] = {}
    i = 0
    for _ in range(batches):
        c.clock.tick(5)  # linger.ms: a batch per partition per round
        for name, n in topics:
            for p in range(n):
                prod = producers[i % PRODUCERS]
                seq = prod.next_sequence((name, p), RECORDS_PER_BATCH)
                batch = template.make(c.clock.now, prod.producer_id, seq)
                ends[(name, p)] = c.log(name, p).append_batch(batch)[1] + 1
                i += 1
    gc = c.group_coordinator
    gc.commit(gc.group(GROUP), dict(ends))
    c.close()
    return {"partitions": partitions, "batches": i, "bytes": dump_size(out)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    t = time.perf_counter()
    counts = generate(args.out, args.partitions, args.batches, args.seed)
    print(f"{args.out}: {counts} in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
