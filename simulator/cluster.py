"""A small model of a Kafka cluster that writes what the brokers would have on disk.

Brokers with log directories and `meta.properties`, topics whose partitions are replicated
over brokers, and the two coordinators: the transaction coordinator writes
`__transaction_state` and the markers, the group coordinator writes `__consumer_offsets`.

Time is a simulated millisecond clock (the true time, so that a seed gives the same bytes), and
every machine reads it through its own :class:`MachineClock` (an offset and a drift): a
timestamp in the dump comes from the machine that wrote it, as in production
(production-shape.md "Brokers"): markers from the partition's leader, `__transaction_state`
records from the transaction coordinator (the leader of that partition), offset commits from
the group coordinator, CreateTime from the client. Each partition has a leader and a leader
epoch; a leadership move (rolling restart, failover) bumps the epoch, and the leader epoch of a
`__transaction_state` partition is the coordinator epoch its markers carry (8.1).
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
import shutil
import uuid
from contextvars import ContextVar
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
CLOSED: list = []  # clusters closed since the list was last cleared (synth reads their layout)

# the cluster.id of clusters built without one: Kafka's form (a UUID in URL-safe base64, 22
# characters); synth gives each scenario its own (cluster_id_for), as separate deployments
# have, so that several scenarios under one root are audited as separate clusters
DEFAULT_CLUSTER_ID = "c2ltdWxhdGVkLWNsdXN0"
SCENARIO_CLUSTER_ID: ContextVar[str] = ContextVar("scenario_cluster_id", default=DEFAULT_CLUSTER_ID)


def cluster_id_for(scenario: str) -> str:
    """A stable cluster.id per scenario name (the same bytes for the same scenario wherever it
    is written)."""
    digest = hashlib.sha256(f"logreplay simulator {scenario}".encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


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
    retention_ms: int | None = None  # retention.ms: older closed segments are deleted
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime (the leader stamps)
    topic_id: uuid.UUID | None = None  # None: one derived from the name (a re-created topic: new)


class Clock:
    def __init__(self, start: int = T0) -> None:
        self.now = start

    def tick(self, ms: int = 1) -> int:
        self.now += ms
        return self.now


@dataclass(frozen=True)
class MachineClock:
    """One machine's view of the true time: a fixed offset plus a drift (ppm since T0)."""

    offset_ms: int = 0
    drift_ppm: float = 0.0

    def at(self, true_ms: int) -> int:
        return true_ms + self.offset_ms + int((true_ms - T0) * self.drift_ppm / 1e6)


def spread_clocks(rng: random.Random, n: int, skew_ms: int, drift_ppm: float) -> list[MachineClock]:
    """``n`` clocks whose offsets lie within +-``skew_ms`` (default: several hundred ms apart)."""
    return [
        MachineClock(rng.randint(-skew_ms, skew_ms), rng.uniform(-drift_ppm, drift_ppm))
        for _ in range(n)
    ]


@dataclass
class Cluster:
    root: str
    seed: int = 0
    brokers: int = 1
    offsets_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS
    txn_partitions: int = DEFAULT_TXN_TOPIC_PARTITIONS
    cluster_id: str | None = None  # None: the scenario's (SCENARIO_CLUSTER_ID)
    internal_segment_bytes: int = INTERNAL_SEGMENT_BYTES
    clean_internal: bool = False  # run the log cleaner over both internal topics at the end
    delete_retention_ms: int = 86_400_000
    internal_replicas: int = 1
    clock_skew_ms: int = 400  # broker and client clock offsets lie within +- this
    drift_ppm: float = 20.0  # over a simulated day of hours: a few hundred ms
    broker_clocks: list[MachineClock] | None = None  # explicit clocks, one per broker
    copy_skew_ms: int = 0  # each broker's copy is taken up to this long before the end
    op_ms_scale: float = 1.0  # how much true time one simulated operation takes (x its draw)
    # the log cleaner's last pass ended at this true time: later data is the dirty section
    # (min.cleanable.dirty.ratio leaves a dirty tail); None: it cleaned all it could at the end
    clean_until: int | None = None
    # each broker's cleaner on its own: its last pass ended at this true time (by broker), so
    # replicas of a compacted user topic are cleaned to different points; None: all alike
    broker_clean_times: dict[int, int] | None = None
    # (topic, partition, broker): that replica's last cleaning crashed mid-swap (docs/formats.md
    # 10.8): the cleaned first segment left as `.swap` files, the old one as `.deleted`
    interrupted_cleaning: tuple[str, int, int] | None = None
    topics: dict[str, TopicConfig] = field(default_factory=dict)
    logs: dict[tuple[str, int], PartitionLog] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cluster_id is None:
            self.cluster_id = SCENARIO_CLUSTER_ID.get()
        if os.path.exists(self.root):
            shutil.rmtree(self.root)
        self.rng = random.Random(self.seed)
        # clocks draw from their own stream so that the events of a seed do not depend on them
        self.clock_rng = random.Random(self.seed * 7919 + 17)
        if self.broker_clocks is None:
            self.broker_clocks = spread_clocks(
                self.clock_rng, self.brokers, self.clock_skew_ms, self.drift_ppm
            )
        self.copy_times: dict[int, int] = {}
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
                    replicas=self.internal_replicas,
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
        shift = sum(cfg.name.encode()) % len(self.broker_dirs)  # leaders differ per topic
        for p in range(cfg.partitions):
            n = min(cfg.replicas, len(self.broker_dirs))
            first = (p + shift) % len(self.broker_dirs)
            replicas = [(first + i) % len(self.broker_dirs) + 1 for i in range(n)]
            log = PartitionLog(
                [self.broker_dirs[b - 1] for b in replicas],
                cfg.name,
                p,
                segment_bytes=cfg.segment_bytes,
                index_interval_bytes=cfg.index_interval_bytes,
                topic_id=cfg.topic_id,
            )
            log.replicas, log.leader = replicas, replicas[0]
            log.clock = self.clock
            if cfg.log_append_time:
                log.append_time = lambda log=log: self.leader_now(log)
            self.logs[(cfg.name, p)] = log

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
        ms = self.rng.randint(lo, hi)
        return self.clock.tick(ms if self.op_ms_scale == 1.0 else int(ms * self.op_ms_scale))

    # -- machines' clocks and leadership ------------------------------------------------------------
    def broker_now(self, broker: int) -> int:
        """What broker ``broker`` (1-based) reads on its clock now."""
        return self.broker_clocks[broker - 1].at(self.clock.now)

    def leader_now(self, log: PartitionLog) -> int:
        """The clock of the partition's current leader (markers, LogAppendTime, coordinators)."""
        return self.broker_now(log.leader)

    def client_clock(self) -> MachineClock:
        """A new client machine's clock (offset within the same skew as the brokers)."""
        return spread_clocks(self.clock_rng, 1, self.clock_skew_ms, self.drift_ppm)[0]

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The leader epoch of the transactional id's `__transaction_state` partition."""
        return self.txn_log(transactional_id).writer.leader_epoch

    def move_leader(self, log: PartitionLog) -> None:
        """A leader election: the next replica leads (the same one if there is no other) and
        the leader epoch goes up by one (it is stamped into every batch appended from now)."""
        i = log.replicas.index(log.leader)
        log.leader = log.replicas[(i + 1) % len(log.replicas)]
        log.writer.leader_epoch += 1

    def restart_broker(self, broker: int) -> list[PartitionLog]:
        """A broker restarts: every partition it led elects another leader (or, alone, itself
        again with a new epoch). Returns the partitions that moved."""
        moved = [log for _, log in sorted(self.logs.items()) if log.leader == broker]
        for log in moved:
            self.move_leader(log)
        return moved

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
        coordinator_epoch: int = 0,
    ) -> dict[tuple[str, int], int]:
        """Markers to every partition of a transaction (WriteTxnMarkers), each stamped by that
        partition's leader clock; offsets by partition."""
        out = {}
        for tp in partitions:
            self.tick(0, 3)
            log = self.log(*tp)
            out[tp] = log.write_marker(
                producer_id,
                producer_epoch,
                COMMIT if commit else ABORT,
                coordinator_epoch,
                self.leader_now(log),
            )
            if tp[0] == CONSUMER_OFFSETS_TOPIC:
                self.group_coordinator.complete_txn(tp[1], producer_id, commit)
        return out

    def _cleaned_per_broker(self, topic: str) -> bool:
        return self.broker_clean_times is not None and not topic.startswith("__")

    def _clean_replica(self, log: PartitionLog, d: str, cut: int, cfg: TopicConfig) -> int:
        """One replica cleaned by its own broker's cleaner: up to what its log held at that
        broker's last pass, two passes apart by the delete horizon, ending at its moment."""
        from simulator.cleaner import clean_twice

        broker = log.replicas[log.log_dirs.index(os.path.dirname(d))]
        moment = self.broker_clean_times[broker]
        limit = min(cut, log.offset_at(moment))
        crash = self.interrupted_cleaning == (log.topic, log.partition, broker)
        before = _first_segment_files(d) if crash else {}
        upto = clean_twice(log, moment, cfg.delete_retention_ms, d=d, cut=cut, limit=limit)
        if crash and upto:
            _leave_swap(d, before)
        return upto

    # -- the end ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Shutdown: every partition's files, each broker's copy cut at the moment it was taken
        (``copy_skew_ms``), cleaned where the topic is compacted, then the log-dir checkpoints."""
        from simulator.cleaner import clean_twice

        CLOSED.append(self)
        end = self.clock.now
        for b in range(1, len(self.broker_dirs) + 1):
            skew = self.clock_rng.randint(0, self.copy_skew_ms) if self.copy_skew_ms else 0
            self.copy_times[b] = end - skew
        cuts_of: dict[tuple[str, int], dict[str, int]] = {}
        for key, log in sorted(self.logs.items()):
            cfg = self.topics[key[0]]
            cleaner = None
            cuts = {
                self.broker_dirs[b - 1]: log.offset_at(self.copy_times[b]) for b in log.replicas
            }
            each = cfg.compacted and cfg.clean and self._cleaned_per_broker(key[0])
            if cfg.compacted and cfg.clean and not each:
                shortest = min(cuts.values())
                if self.clean_until is not None:
                    shortest = min(shortest, log.offset_at(self.clean_until))

                def cleaner(lg, d, cut, cfg=cfg, limit=shortest):
                    return clean_twice(
                        lg, self.clock.now, cfg.delete_retention_ms, d=d, cut=cut, limit=limit
                    )

            elif each:

                def cleaner(lg, d, cut, cfg=cfg):
                    return self._clean_replica(lg, d, cut, cfg)

            cuts_of[key] = cuts
            if cfg.retention_ms is not None:
                log.retain(end - cfg.retention_ms)
            log.close(cleaner, cuts, each=bool(each))
        for d in self.broker_dirs:
            parts = sorted(
                (t, p, cuts_of[(t, p)][d]) for (t, p), log in self.logs.items() if d in log.log_dirs
            )
            with open(os.path.join(d, "replication-offset-checkpoint"), "w") as f:
                f.write(offset_checkpoint_text(parts))
            with open(os.path.join(d, "recovery-point-offset-checkpoint"), "w") as f:
                f.write(offset_checkpoint_text(parts))
            with open(os.path.join(d, "log-start-offset-checkpoint"), "w") as f:
                f.write(
                    offset_checkpoint_text(
                        [(t, p, self.logs[(t, p)].log_start_offset) for t, p, _ in parts]
                    )
                )
            cleaned = sorted(
                (t, p, log.cleaned_upto.get(d, 0))
                for (t, p), log in self.logs.items()
                if d in log.log_dirs and log.cleaned_upto.get(d, 0) > 0
            )
            with open(os.path.join(d, "cleaner-offset-checkpoint"), "w") as f:
                f.write(offset_checkpoint_text(cleaned))


def _first_segment_files(d: str) -> dict[str, bytes]:
    """The files of a partition directory's first segment (log and indexes), by name."""
    base = min(f[:20] for f in os.listdir(d) if f.endswith(".log"))
    out = {}
    for f in sorted(os.listdir(d)):
        if f.startswith(base + ".") and not f.endswith(".snapshot"):
            with open(os.path.join(d, f), "rb") as fh:
                out[f] = fh.read()
    return out


def _leave_swap(d: str, before: dict[str, bytes]) -> None:
    """A crash inside LogCleaner's segment replacement (UnifiedLog.replaceSegments): the new
    first segment's files already renamed `.swap`, the old ones `.deleted`, the swap not yet
    renamed into place. The broker's recovery completes it; an audit must read the swap."""
    base = min(f[:20] for f in os.listdir(d) if f.endswith(".log"))
    for f in sorted(os.listdir(d)):
        if f.startswith(base + ".") and not f.endswith((".snapshot", ".swap")):
            os.rename(os.path.join(d, f), os.path.join(d, f + ".swap"))
    for f, data in before.items():
        with open(os.path.join(d, f + ".deleted"), "wb") as fh:
            fh.write(data)
