"""A small model of a Kafka cluster that writes what the brokers would have on disk.

Brokers with log directories and `meta.properties`, topics whose partitions are replicated
over brokers, and the two coordinators: the transaction coordinator writes
`__transaction_state` and the markers, the group coordinator writes `__consumer_offsets`. Time
is a simulated millisecond clock so that a seed gives the same bytes.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field

from decoders.constants import (
    ABORT,
    COMMIT,
    COMPRESSION_NONE,
    CONSUMER_OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from decoders.partitioning import (
    DEFAULT_OFFSETS_TOPIC_PARTITIONS,
    DEFAULT_TXN_TOPIC_PARTITIONS,
    partition_for,
)
from simulator.log import PartitionLog
from simulator.writer import (
    Record,
    meta_properties_text,
    offset_checkpoint_text,
)

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
INTERNAL_SEGMENT_BYTES = 100 << 20  # offsets.topic.segment.bytes / transaction log default


@dataclass
class TopicConfig:
    name: str
    partitions: int
    replicas: int = 1
    codec: int = COMPRESSION_NONE
    segment_bytes: int = 1 << 30
    index_interval_bytes: int = 4096
    compacted: bool = False
    clean: bool = False  # run the log cleaner at the end (compacted topics)
    delete_retention_ms: int = 86_400_000


class Clock:
    def __init__(self, start: int = T0) -> None:
        self.now = start

    def tick(self, ms: int = 1) -> int:
        self.now += ms
        return self.now


@dataclass
class Cluster:
    root: str
    seed: int = 0
    brokers: int = 1
    offsets_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS
    txn_partitions: int = DEFAULT_TXN_TOPIC_PARTITIONS
    cluster_id: str = "c2ltdWxhdGVkLWNsdXN0"
    coordinator_epoch: int = 0  # leader epoch of the coordinators' internal partitions
    internal_segment_bytes: int = INTERNAL_SEGMENT_BYTES
    clean_internal: bool = False  # run the log cleaner over both internal topics at the end
    delete_retention_ms: int = 86_400_000
    topics: dict[str, TopicConfig] = field(default_factory=dict)
    logs: dict[tuple[str, int], PartitionLog] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if os.path.exists(self.root):
            shutil.rmtree(self.root)
        self.rng = random.Random(self.seed)
        self.clock = Clock()
        self.broker_dirs = [
            os.path.join(self.root, f"broker-{b}") for b in range(1, self.brokers + 1)
        ]
        for b, d in enumerate(self.broker_dirs, start=1):
            os.makedirs(d)
            with open(os.path.join(d, "meta.properties"), "w") as f:
                f.write(meta_properties_text(b, self.cluster_id))
        self._next_pid = 1000
        for name, n in (
            (CONSUMER_OFFSETS_TOPIC, self.offsets_partitions),
            (TRANSACTION_STATE_TOPIC, self.txn_partitions),
        ):
            self.create_topic(
                TopicConfig(
                    name,
                    n,
                    segment_bytes=self.internal_segment_bytes,
                    compacted=True,
                    clean=self.clean_internal,
                    delete_retention_ms=self.delete_retention_ms,
                )
            )
        from simulator.coordinators import GroupCoordinator, TransactionCoordinator

        self.txn_coordinator = TransactionCoordinator(self)
        self.group_coordinator = GroupCoordinator(self)

    # -- topics ---------------------------------------------------------------------------------
    def create_topic(self, cfg: TopicConfig) -> None:
        self.topics[cfg.name] = cfg
        for p in range(cfg.partitions):
            n = min(cfg.replicas, len(self.broker_dirs))
            first = p % len(self.broker_dirs)
            dirs = [self.broker_dirs[(first + i) % len(self.broker_dirs)] for i in range(n)]
            self.logs[(cfg.name, p)] = PartitionLog(
                dirs,
                cfg.name,
                p,
                segment_bytes=cfg.segment_bytes,
                index_interval_bytes=cfg.index_interval_bytes,
            )

    def log(self, topic: str, partition: int) -> PartitionLog:
        return self.logs[(topic, partition)]

    def offsets_log(self, group: str) -> PartitionLog:
        return self.log(CONSUMER_OFFSETS_TOPIC, partition_for(group, self.offsets_partitions))

    def txn_log(self, transactional_id: str) -> PartitionLog:
        return self.log(
            TRANSACTION_STATE_TOPIC, partition_for(transactional_id, self.txn_partitions)
        )

    def allocate_producer_id(self) -> int:
        pid = self._next_pid
        self._next_pid += 1
        return pid

    def tick(self, lo: int = 1, hi: int = 20) -> int:
        return self.clock.tick(self.rng.randint(lo, hi))

    # -- coordinator writes ---------------------------------------------------------------------
    def coordinator_append(
        self,
        log: PartitionLog,
        records: list[Record],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
    ) -> tuple[int, int]:
        """One coordinator write: one v2 batch, CreateTime, uncompressed (the internal topics
        force compression off), origin COORDINATOR (no sequence checks)."""
        appended = log.produce(
            records,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            transactional=transactional,
            dedupe=False,
        )
        assert appended is not None
        return appended

    def write_markers(
        self,
        partitions: list[tuple[str, int]],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
    ) -> dict[tuple[str, int], int]:
        """Markers to every partition of a transaction (WriteTxnMarkers); offsets by partition."""
        out = {}
        for tp in partitions:
            ts = self.tick(0, 3)
            out[tp] = self.log(*tp).write_marker(
                producer_id, producer_epoch, COMMIT if commit else ABORT, self.coordinator_epoch, ts
            )
            if tp[0] == CONSUMER_OFFSETS_TOPIC:
                self.group_coordinator.complete_txn(tp[1], producer_id, commit)
        return out

    # -- the end ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Clean shutdown: every partition's files, then the log-dir checkpoints."""
        from simulator.cleaner import clean_twice

        for (topic, _), log in sorted(self.logs.items()):
            cfg = self.topics[topic]
            cleaner = None
            if cfg.compacted and cfg.clean:

                def cleaner(lg, cfg=cfg):
                    return clean_twice(lg, self.clock.now, cfg.delete_retention_ms)

            log.close(cleaner)
        for d in self.broker_dirs:
            parts = sorted(
                (t, p, log.log_end_offset) for (t, p), log in self.logs.items() if d in log.log_dirs
            )
            with open(os.path.join(d, "replication-offset-checkpoint"), "w") as f:
                f.write(offset_checkpoint_text(parts))
            with open(os.path.join(d, "recovery-point-offset-checkpoint"), "w") as f:
                f.write(offset_checkpoint_text(parts))
            with open(os.path.join(d, "log-start-offset-checkpoint"), "w") as f:
                f.write(offset_checkpoint_text([(t, p, 0) for t, p, _ in parts]))
            cleaned = sorted(
                (t, p, log.cleaned_upto)
                for (t, p), log in self.logs.items()
                if d in log.log_dirs and log.cleaned_upto > 0
            )
            with open(os.path.join(d, "cleaner-offset-checkpoint"), "w") as f:
                f.write(offset_checkpoint_text(cleaned))
