"""Simulated clients: plain, idempotent and transactional producers, and group consumers."""

from __future__ import annotations

from dataclasses import dataclass, field

from decoders.constants import (
    COMPRESSION_NONE,
    MAX_SEQUENCE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
)
from simulator.coordinators import Group, Member
from simulator.log import READ_COMMITTED, BatchMeta
from simulator.writer import Record

TP = tuple[str, int]


def make_records(
    cluster, topic: str, partition: int, n: int, tag: str, value_bytes: int = 40, clock=None
) -> list[Record]:
    """``n`` records stamped (CreateTime) by the client's ``clock``."""
    now = cluster.tick(1, 5)
    if clock is not None:
        now = clock.at(now)
    pad = "x" * max(0, value_bytes - 30)
    return [
        Record(
            f"{topic}-{partition}-{tag}-{i}".encode(),
            f'{{"n":{i},"tag":"{tag}","p":"{pad}"}}'.encode(),
            [("source", tag.encode())] if i == 0 else (),
            now + i,
        )
        for i in range(n)
    ]


class Producer:
    """A plain (``idempotent=False``) or idempotent producer: one id, epoch 0, and a sequence
    per partition that wraps after 2^31-1 (docs/formats.md 3.3)."""

    def __init__(self, cluster, *, idempotent: bool = True, codec: int = COMPRESSION_NONE,
                 producer_id: int | None = None, value_bytes: int = 40) -> None:  # fmt: skip
        self.cluster = cluster
        self.clock = cluster.client_clock()  # the client machine's clock stamps CreateTime
        self.value_bytes = value_bytes
        self.idempotent = idempotent
        self.codec = codec
        if producer_id is None:
            producer_id = cluster.allocate_producer_id() if idempotent else NO_PRODUCER_ID
        self.producer_id = producer_id
        self.epoch = 0 if idempotent else NO_PRODUCER_EPOCH
        self.sequences: dict[TP, int] = {}
        self.last_sent: dict[TP, tuple[list[Record], int]] = {}

    def next_sequence(self, tp: TP, n: int) -> int:
        if not self.idempotent:
            return NO_SEQUENCE
        seq = self.sequences.get(tp, 0)
        self.sequences[tp] = (seq + n) % (MAX_SEQUENCE + 1)
        return seq

    def send(self, topic: str, partition: int, n: int = 5, *, tag: str = "d", codec: int | None = None,
             records: list[Record] | None = None, transactional: bool = False) -> tuple[int, int] | None:  # fmt: skip
        records = records or make_records(
            self.cluster, topic, partition, n, tag, self.value_bytes, self.clock
        )
        seq = self.next_sequence((topic, partition), len(records))
        self.last_sent[(topic, partition)] = (records, seq)
        return self.cluster.log(topic, partition).produce(
            records,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=seq,
            transactional=transactional,
            codec=self.codec if codec is None else codec,
        )

    def bump_epoch(self) -> None:
        """KIP-360: an idempotent producer whose sequence state the broker lost (or that timed
        out a batch) asks for the next epoch of its producer id; sequences restart at 0."""
        self.epoch += 1
        self.sequences.clear()

    def retry(self, topic: str, partition: int, *, dedupe: bool = True) -> tuple[int, int] | None:
        """Resend the last batch (a lost acknowledgement). A broker holding the producer's state
        answers with the original offsets and appends nothing."""
        records, seq = self.last_sent[(topic, partition)]
        return self.cluster.log(topic, partition).produce(
            records,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=seq,
            codec=self.codec,
            dedupe=dedupe,
        )


class TransactionalProducer(Producer):
    """transactional.id with transaction version 1 (one epoch per producer session, markers
    with the same epoch) or 2 (the coordinator bumps the epoch at every EndTxn)."""

    def __init__(self, cluster, transactional_id: str, *, version: int = 1, timeout_ms: int = 60_000,
                 codec: int = COMPRESSION_NONE, value_bytes: int = 40) -> None:  # fmt: skip
        super().__init__(cluster, idempotent=True, codec=codec, producer_id=NO_PRODUCER_ID,
                         value_bytes=value_bytes)  # fmt: skip
        self.transactional_id = transactional_id
        self.version = version
        self.timeout_ms = timeout_ms
        self.md = None
        self.init()

    def init(self) -> None:
        self.md = self.cluster.txn_coordinator.init_producer_id(
            self.transactional_id, self.timeout_ms, self.version
        )
        self.producer_id, self.epoch = self.md.producer_id, self.md.producer_epoch
        self.sequences.clear()
        self.written: dict[TP, list[tuple[int, int]]] = {}

    def send(self, topic: str, partition: int, n: int = 5, **kw) -> tuple[int, int] | None:
        self.cluster.txn_coordinator.add_partitions(self.md, [(topic, partition)])
        out = super().send(topic, partition, n, transactional=True, **kw)
        if out is not None:
            self.written.setdefault((topic, partition), []).append(out)
        return out

    def send_offsets(self, group: Group, offsets: dict[TP, int]) -> tuple[int, int]:
        """sendOffsetsToTransaction: AddOffsetsToTxn (TV1; implicit with TV2) then
        TxnOffsetCommit to the group coordinator."""
        gc = self.cluster.group_coordinator
        self.cluster.txn_coordinator.add_partitions(self.md, [gc.offsets_topic_partition(group)])
        return gc.txn_commit(group, offsets, self.producer_id, self.epoch)

    def end(self, commit: bool, **faults) -> dict[TP, int]:
        markers = self.cluster.txn_coordinator.end_txn(self.md, commit, **faults)
        self._after_end()
        return markers

    def commit(self, **faults) -> dict[TP, int]:
        return self.end(True, **faults)

    def abort(self, **faults) -> dict[TP, int]:
        return self.end(False, **faults)

    def _after_end(self) -> None:
        # TV2: a new epoch (or, once the epoch is exhausted, a new producer id at epoch 0, as
        # the EndTxn response hands the client): sequences restart at 0
        if (self.md.producer_id, self.md.producer_epoch) != (self.producer_id, self.epoch):
            self.producer_id, self.epoch = self.md.producer_id, self.md.producer_epoch
            self.sequences.clear()
        self.written = {}


@dataclass
class Consumed:
    """What one member fetched from one partition in one poll."""

    topic: str
    partition: int
    batches: list[BatchMeta]
    position: int


@dataclass
class Consumer:
    """A group member: fetches its assigned partitions at the group's isolation level, from the
    committed offset (auto.offset.reset=earliest), and commits its positions."""

    cluster: object
    group: Group
    member: Member
    positions: dict[TP, int] = field(default_factory=dict)
    history: list[Consumed] = field(default_factory=list)

    @classmethod
    def join(cls, cluster, group: Group, member_id: str, topics: list[str]) -> Consumer:
        host = f"/10.0.{len(group.members)}.{cluster.rng.randint(2, 250)}"
        m = Member(f"{member_id}-{cluster.rng.getrandbits(32):08x}", member_id, host, topics)
        cluster.group_coordinator.join(group, m)
        return cls(cluster, group, m)

    def leave(self) -> None:
        self.cluster.group_coordinator.leave(self.group, self.member.member_id)

    def assigned(self) -> list[TP]:
        return sorted((t, p) for t, ps in self.member.assignment.items() for p in ps)

    def poll(self, max_batches: int = 1 << 30, upto: dict[TP, int] | None = None) -> list[Consumed]:
        out = []
        for tp in self.assigned():
            pos = self.positions.get(tp, self.group.offsets.get(tp, 0))
            limit = (upto or {}).get(tp)
            new_pos, batches = self.cluster.log(*tp).fetch(
                pos, self.group.isolation, max_batches, limit
            )
            self.positions[tp] = new_pos
            got = Consumed(tp[0], tp[1], batches, new_pos)
            self.history.append(got)
            out.append(got)
        return out

    def commit(self) -> tuple[int, int] | None:
        mine = {tp: pos for tp, pos in self.positions.items() if tp in set(self.assigned())}
        if not mine:
            return None
        return self.cluster.group_coordinator.commit(self.group, mine)

    def forget_positions(self) -> None:
        """After a rebalance the client restarts from the committed offsets."""
        self.positions.clear()

    @property
    def read_committed(self) -> bool:
        return self.group.isolation == READ_COMMITTED
