"""Background traffic for ``--scale``: many large batches at disk speed.

A batch's records area holds only deltas (offset and timestamp relative to the header), keys and
values, so one encoded (and compressed) records area serves every batch; each batch gets its own
header (timestamps, producer, sequence) and CRC, which is all a broker-written batch varies in.
"""

from __future__ import annotations

import struct

from decoders.constants import (
    BATCH_HEADER_AFTER_CRC_FORMAT,
    COMPRESSION_NONE,
    MAX_SEQUENCE,
    NO_PARTITION_LEADER_EPOCH,
    RECORDS_OFFSET,
)
from decoders.framing import batch_header
from simulator.writer import Record, build_batch, frame_batch

_AFTER_CRC = struct.Struct(BATCH_HEADER_AFTER_CRC_FORMAT)

SCALE_UNIT_BYTES = 8 << 20  # --scale 1 adds about 8 MiB of background data per scenario
RECORDS_PER_BATCH = 200
VALUE_BYTES = 1000


class BatchTemplate:
    def __init__(
        self, codec: int = COMPRESSION_NONE, n: int = RECORDS_PER_BATCH, tag: str = "bulk"
    ) -> None:
        records = [
            Record(
                f"{tag}-{i:05d}".encode(),
                (
                    f'{{"i":{i},"payload":"' + "abcdefghij"[i % 10] * (VALUE_BYTES - 24) + '"}'
                ).encode(),
                (),
                i,
            )
            for i in range(n)
        ]
        full = build_batch(
            records, base_timestamp=0, codec=codec, producer_id=0, producer_epoch=0, base_sequence=0
        )
        self.attributes = batch_header(full).attributes
        self.count = n
        self.payload = full[RECORDS_OFFSET:]

    def make(self, timestamp: int, producer_id: int, epoch: int, sequence: int) -> bytes:
        body = _AFTER_CRC.pack(
            self.attributes,
            self.count - 1,
            timestamp,
            timestamp + self.count - 1,
            producer_id,
            epoch,
            sequence,
            self.count,
        )
        return frame_batch(0, NO_PARTITION_LEADER_EPOCH, body + self.payload)


def background(cluster, topic: str, total_bytes: int) -> int:
    """Append about ``total_bytes`` from one idempotent producer, round-robin over the topic's
    partitions; returns the bytes written."""
    if total_bytes <= 0:
        return 0
    from simulator.clients import Producer

    cfg = cluster.topics[topic]
    template = BatchTemplate(cfg.codec)
    producer = Producer(cluster, codec=cfg.codec)
    written, i = 0, 0
    while written < total_bytes:
        p = i % cfg.partitions
        seq = producer.sequences.get((topic, p), 0)
        batch = template.make(cluster.tick(1, 3), producer.producer_id, 0, seq)
        producer.sequences[(topic, p)] = (seq + template.count) % (MAX_SEQUENCE + 1)
        cluster.log(topic, p).append_batch(batch)
        written += len(batch)
        i += 1
    return written
