"""Kafka Streams-style exactly-once applications (``processing.guarantee=exactly_once_v2``).

As production-shape.md describes them (StreamsConfig, KIP-447): each stream thread has ONE
transactional producer (transactional.id ``<application.id>-<process>-<thread>``) over all its
tasks (one task per input partition here), a consumer in the application's group reading
``read_committed``, and commits every ``commit.interval.ms`` (100 ms under EOS): the outputs
of every task it processed, partitions added to the transaction one by one (an Ongoing record
each), then sendOffsetsToTransaction (the group coordinator writes the offsets into
`__consumer_offsets`, the transaction coordinator adds that partition and later marks it), then
EndTxn. A thread that crashes or outlives ``transaction.timeout.ms`` is re-initialised: the new
instance's InitProducerId (or the coordinator's timeout) aborts the open transaction with an
epoch bump, and the thread rejoins the group.
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.clients import Consumer, TransactionalProducer
from simulator.log import READ_COMMITTED

TP = tuple[str, int]


class StreamThread:
    def __init__(self, app: StreamsApp, index: int) -> None:
        self.app, self.index = app, index
        c = app.cluster
        self.transactional_id = f"{app.app_id}-{app.process_id}-{index}"
        self.producer = TransactionalProducer(
            c,
            self.transactional_id,
            version=app.version,
            timeout_ms=app.timeout_ms,
            codec=app.codec,
            value_bytes=app.value_bytes,
        )
        self.consumer = Consumer.join(
            c, app.group, f"{app.app_id}-StreamThread-{index + 1}-consumer", [app.source]
        )
        self.stalled_until: int | None = None
        self.transactions = 0

    @property
    def tasks(self) -> list[int]:
        return sorted(p for _, p in self.consumer.assigned())

    def process(self, max_batches: int = 4) -> dict[TP, list[tuple[int, int]]]:
        """Poll the thread's tasks and write their outputs into the open transaction (adding
        each new output partition to it), then its input positions (sendOffsetsToTransaction).
        Returns the data written in this call, by partition."""
        consumed = [g for g in self.consumer.poll(max_batches=max_batches) if g.batches]
        written: dict[TP, list[tuple[int, int]]] = {}
        for got in consumed:
            for b in got.batches:
                for topic, p, n in self.app.route(got.partition, b):
                    # a count (generated records) or the records themselves (keyed state)
                    kw = {"records": n} if isinstance(n, list) else {}
                    out = self.producer.send(topic, p, n if isinstance(n, int) else 0,
                                             tag=f"{got.partition}-{b.base}", **kw)  # fmt: skip
                    written.setdefault((topic, p), []).append(out)
        if consumed:
            self.producer.send_offsets(
                self.app.group, {(g.topic, g.partition): g.position for g in consumed}
            )
        return written

    def commit(self, **faults) -> dict[TP, int]:
        """EndTxn(commit) when the transaction holds anything; returns markers by partition."""
        if self.producer.md.state != "Ongoing":
            return {}
        self.transactions += 1
        return self.producer.commit(**faults)

    def crash_and_restart(self) -> None:
        """The thread dies with its transaction open; its replacement calls InitProducerId
        (the coordinator aborts the open transaction, epoch + 1, then bumps again for the new
        instance) and rejoins the group from the committed offsets."""
        self.producer.init()
        self.rejoin()

    def rejoin(self) -> None:
        c = self.app.cluster
        self.consumer.leave()
        self.consumer = Consumer.join(
            c, self.app.group, f"{self.app.app_id}-StreamThread-{self.index + 1}-consumer",
            [self.app.source],
        )  # fmt: skip
        self.app.restart_from_committed()


class StreamsApp:
    """One application instance: ``threads`` stream threads reading ``source`` and writing what
    ``route(input_partition, batch)`` returns: [(topic, partition, count or records), ...]."""

    def __init__(self, cluster, app_id: str, source: str, route: Callable, *, threads: int = 3,
                 version: int = 1, commit_interval_ms: int = 100, timeout_ms: int = 10_000,
                 codec: int = 0, value_bytes: int = 200, process_id: str = "") -> None:  # fmt: skip
        self.cluster, self.app_id, self.source, self.route = cluster, app_id, source, route
        self.version, self.timeout_ms, self.codec = version, timeout_ms, codec
        self.commit_interval_ms, self.value_bytes = commit_interval_ms, value_bytes
        self.process_id = process_id or f"{cluster.clock_rng.getrandbits(64):016x}"
        self.group = cluster.group_coordinator.group(app_id, "stream", READ_COMMITTED)
        self.threads: list[StreamThread] = []
        for i in range(threads):
            self.add_thread(i)
        self.next_commit = cluster.clock.now + commit_interval_ms

    def add_thread(self, index: int | None = None) -> StreamThread:
        t = StreamThread(self, len(self.threads) if index is None else index)
        self.threads.append(t)
        self.restart_from_committed()
        return t

    def restart_from_committed(self) -> None:
        """After a rebalance every thread restarts its (possibly new) tasks from the committed
        offsets; the model rebalances only between commits, so nothing is reprocessed."""
        for t in self.threads:
            t.consumer.forget_positions()

    def transaction_ids(self) -> list[str]:
        return [t.transactional_id for t in self.threads]

    def step(self, *, skip: set[int] = frozenset()) -> None:
        """One commit interval if it is due: every running thread processes and commits."""
        now = self.cluster.clock.now
        if now < self.next_commit:
            return
        self.next_commit = now + self.commit_interval_ms
        for t in self.threads:
            if t.index in skip or (t.stalled_until is not None and now < t.stalled_until):
                continue
            if t.stalled_until is not None:  # woke up after the coordinator aborted it
                t.stalled_until = None
                t.crash_and_restart()
                continue
            t.process()
            t.commit()
