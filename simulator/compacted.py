"""Compacted user topics as the log cleaner leaves them (docs/compaction.md).

``production_compacted`` writes one three-broker cluster whose compacted topics are the state
of exactly-once and idempotent applications:

- ``order-state``: the changelog of a Kafka Streams app under transaction version 1 (one
  producer id and epoch per thread for its life), keyed state over a few hundred keys, so the
  cleaner leaves sparse batches, offset holes and empty headers;
- ``cart-state``: the changelog of a transaction-version-2 Streams app (an epoch per
  transaction);
- ``customers``: a CDC feed by an idempotent producer that bumps its epoch midway (KIP-360).

A thread crashes (InitProducerId aborts its transaction), two threads outlive their
transaction timeout (the coordinator aborts with a bumped epoch; the thread comes back at
epoch + 2). Each broker's cleaner made its last two passes at its own moment, so replicas of
one partition are cleaned to different points and hold different bytes below them; one
replica's last cleaning crashed mid-swap (`.swap` and `.deleted` files); the internal topics
are cleaned too (on odd seeds not `__transaction_state`, which then still lists
transactions whose data and markers the changelogs' cleaner removed). It is healthy.

``production_compacted_faults`` adds: a sequence gap with contiguous offsets inside a cleaned
range, a transactional write no coordinator transaction listed (under TV1 and under TV2, each
hanging the partition), a missing marker on a compacted changelog (hanging it too), and a
divergence between two replicas outside their cleaned ranges.
"""

from __future__ import annotations

import os
import random

from simulator.clients import Producer, make_records
from simulator.cluster import Cluster, TopicConfig, spread_clocks
from simulator.production import missing_marker_facts
from simulator.scenarios import _rewrite_values, _txn_fact, scenario
from simulator.streams import StreamsApp
from simulator.truth import Truth
from simulator.writer import Record

STEP_MS = 10
WINDOW_MS = (8_000, 10_000, 20_000)
IDLE_MS = 3_600_000
TIMEOUT_MS = 10_000  # transaction.timeout.ms of the Streams apps
RETENTION_MS = 30_000  # delete.retention.ms of the compacted topics
STATE_KEYS = 40  # keys per changelog partition: most updates supersede an earlier one
COMPACTED = {"compacted": True, "clean": True, "delete_retention_ms": RETENTION_MS,
             "segment_bytes": 4 << 10}  # fmt: skip


class World:
    """The applications and the loop that drives them; ``faults`` injects the anomalies."""

    def __init__(self, out: str, seed: int, truth: Truth, faults: bool) -> None:
        self.truth, self.faults, self.records = truth, faults, []
        c = self.c = Cluster(
            out, seed, brokers=3, internal_segment_bytes=8 << 10, clean_internal=True,
            internal_replicas=2, delete_retention_ms=RETENTION_MS, copy_skew_ms=1_000,
            op_ms_scale=0.25, offsets_partitions=6, txn_partitions=6,
        )  # fmt: skip
        self.knobs = random.Random(seed * 17 + 3)
        if seed % 2:  # the cleaner has not reached the coordinator's log (its segments are
            # larger than the changelogs'): it still lists transactions whose data and
            # markers the changelogs' cleaner removed
            c.topics["__transaction_state"].clean = False
        c.broker_clocks = spread_clocks(c.clock_rng, 3, 400, 20.0)
        for name, n, extra in (("orders", 4, {}), ("carts", 3, {}), ("order-state", 4, COMPACTED),
                               ("cart-state", 3, COMPACTED), ("customers", 3, COMPACTED)):  # fmt: skip
            c.create_topic(TopicConfig(name, n, replicas=2, **{"segment_bytes": 16 << 10, **extra}))
        self.orders = Producer(c, value_bytes=120)
        self.carts = Producer(c, value_bytes=120)
        self.cdc = Producer(c, value_bytes=150)
        self.importer = Producer(c, value_bytes=150)  # a one-off load, early in the day
        self.order_app = StreamsApp(
            c, "order-state-app", "orders", self._route("order-state"), threads=2, version=1,
            commit_interval_ms=100, timeout_ms=TIMEOUT_MS,
        )  # fmt: skip
        self.cart_app = StreamsApp(
            c, "cart-app", "carts", self._route("cart-state"), threads=2, version=2,
            commit_interval_ms=100, timeout_ms=TIMEOUT_MS,
        )  # fmt: skip
        for app in (self.order_app, self.cart_app):
            truth.facts.setdefault("groups", {})[app.app_id] = {
                "assignor": "stream", "isolation": "read_committed"}  # fmt: skip
        self.t0 = c.clock.now

    def _route(self, topic: str):
        """A state store's changelog: each input record updates one of a few keys of the
        task's partition (the cleaner keeps each key's latest)."""
        rng = self.c.rng

        def route(p: int, b) -> list[tuple[str, int, list[Record]]]:
            now = self.c.clock.now
            recs = [
                Record(
                    f"{topic}-{p}-k{rng.randrange(STATE_KEYS)}".encode(),
                    f'{{"v":{b.base + i},"at":{now}}}'.encode(),
                    (),
                    now + i,
                )  # fmt: skip
                for i in range(b.records)
            ]
            return [(topic, p, recs)]

        return route

    # -- the loop ----------------------------------------------------------------------------------
    def run_window(self, index: int, events: dict[int, object]) -> None:
        c = self.c
        start, pending, step = c.clock.now, sorted(events.items()), 0
        while c.clock.now - start < WINDOW_MS[index]:
            step += 1
            c.clock.now = max(c.clock.now, start + step * STEP_MS)
            while pending and pending[0][0] <= c.clock.now - start:
                pending.pop(0)[1]()
            self.traffic(step)
            c.txn_coordinator.expire()

    def traffic(self, step: int) -> None:
        r = self.c.rng
        if step % 5 == 0:
            self.orders.send("orders", r.randrange(4), r.randint(1, 3), tag="o")
        if step % 7 == 0:
            self.carts.send("carts", r.randrange(3), r.randint(1, 2), tag="c")
        if step % 9 == 0:
            self.cdc_update(r.randrange(3))
        if step % 40 == 0 and self.c.clock.now < self.t0 + WINDOW_MS[0] // 2:
            # rows the CDC rewrites later: the load's last batches end empty, their headers
            # kept for the producer's sequences (docs/compaction.md)
            self.cdc_update(r.randrange(3), producer=self.importer)
        self.order_app.step()
        self.cart_app.step()

    def cdc_update(self, p: int, keys: list[str] | None = None, producer: Producer | None = None):
        """A change of one or two customers (keys reused: rows updated again and again)."""
        producer = producer or self.cdc
        r = self.c.rng
        keys = keys or [f"customer-{r.randrange(30)}" for _ in range(r.randint(1, 2))]
        now = producer.clock.at(self.c.tick(1, 3))
        recs = [Record(k.encode(), f'{{"row":"{k}","at":{now}}}'.encode(), (), now) for k in keys]
        return producer.send("customers", p, records=recs)

    def stall(self, app: StreamsApp, index: int, changelog: str) -> None:
        """A thread blocked past transaction.timeout.ms with its transaction open: the
        coordinator aborts it (epoch + 1); back, it re-initialises (epoch + 2)."""
        t = app.threads[index]
        t.process()
        t.producer.send(changelog, (t.tasks or [0])[0], 1, tag="stall")
        t.stalled_until = self.c.clock.now + TIMEOUT_MS + 2_000


def _world(out: str, seed: int, name: str, faults: bool, doc: str) -> Truth:
    truth = Truth(name, seed, 0.0, doc)
    w = World(out, seed, truth, faults)
    c, knobs = w.c, w.knobs
    f = Faults(w) if faults else None
    events = {knobs.randint(2_000, 5_000): lambda: w.order_app.threads[1].crash_and_restart()}
    if f:
        events[6_000] = f.sequence_gap
    w.run_window(0, events)
    early = c.clock.now + IDLE_MS // 2  # one broker's cleaner ran last in this idle hour
    c.clock.tick(IDLE_MS)
    w.run_window(1, {
        knobs.randint(1_000, 3_000): lambda: w.stall(w.order_app, 0, "order-state"),
        knobs.randint(4_000, 6_000): lambda: w.stall(w.cart_app, 1, "cart-state"),
        knobs.randint(2_000, 7_000): w.cdc.bump_epoch,
    })  # fmt: skip
    later = c.clock.now + IDLE_MS // 2  # the others' in this one: the replicas' cleaned
    c.clock.tick(IDLE_MS)  # ranges differ, and each cleaned only its own bytes
    behind = knobs.randint(1, 3)
    c.broker_clean_times = {b: early if b == behind else later for b in (1, 2, 3)}
    c.clean_until = later
    crashed = knobs.randrange(4)
    c.interrupted_cleaning = ("order-state", crashed, c.log("order-state", crashed).replicas[-1])
    w.run_window(2, f.window_events() if f else {})
    for app in (w.order_app, w.cart_app):
        for t in app.threads:
            _txn_fact(truth, t.producer)
    c.close()
    if f:
        f.diverge()
        f.record()
    faulty = {(a.topic, a.partition) for a in truth.anomalies}
    for (topic, p), _ in sorted(c.logs.items()):
        if (topic, p) not in faulty and not topic.startswith("__"):
            truth.clean_partition(topic, p, "no injected fault")
    for gid in sorted(c.group_coordinator.groups):
        truth.clean_group(gid, "no injected fault")
    truth.facts["cleaning"] = {
        "broker_clean_times": {str(b): t for b, t in c.broker_clean_times.items()},
        "interrupted": list(c.interrupted_cleaning),
    }
    return truth


class Faults:
    """The anomalies of ``production_compacted_faults``, each with what a faithful auditor
    reports."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.records: list[tuple[str, dict]] = []

    def sequence_gap(self) -> None:
        """Five sequence numbers of the CDC producer never reach customers-0, between two
        batches of keys never updated again (both survive cleaning, offsets contiguous)."""
        w = self.w
        w.cdc_update(0, ["customer-before-gap"])
        w.cdc.sequences[("customers", 0)] += 5
        keys = ["customer-after-gap-1", "customer-after-gap-2"]
        first, last = w.cdc_update(0, keys)
        self.records.append(("sequence_gap", dict(
            topic="customers", partition=0, producer_id=w.cdc.producer_id, producer_epoch=0,
            first_offset=first, last_offset=last, record_count=len(keys),
            note="inside the cleaned range, offsets contiguous: 5 sequences the cleaner cannot "
                 "have removed")))  # fmt: skip

    def window_events(self) -> dict[int, object]:
        return {2_000: self.unlisted_tv1, 3_000: self.unlisted_tv2, 4_000: self.missing_marker}

    def _other_task(self, app: StreamsApp, index: int) -> int:
        """A task of another thread than ``index``: a partition thread ``index`` never writes."""
        return next(p for t in app.threads if t.index != index for p in t.tasks)

    def _unlisted(self, app: StreamsApp, topic: str, note: str) -> None:
        """Thread 0's producer writes transactional records into a partition of another
        thread's task without AddPartitionsToTxn (no broker check before KIP-890), then goes
        on: no marker ever closes them, and that thread's writes pile up behind them."""
        c, t = self.w.c, app.threads[0]
        t.process()
        x = self._other_task(app, 0)
        prod, tp = t.producer, (topic, x)
        records = make_records(c, topic, x, 2, "unlisted", 60, prod.clock)
        seq = prod.next_sequence(tp, len(records))
        first, last = c.log(*tp).produce(records, producer_id=prod.producer_id,
                                         producer_epoch=prod.epoch, base_sequence=seq,
                                         transactional=True)  # fmt: skip
        a = dict(topic=topic, partition=x, producer_id=prod.producer_id, producer_epoch=prod.epoch,
                 transactional_id=t.transactional_id, first_offset=first, last_offset=last,
                 record_count=last - first + 1)  # fmt: skip
        t.commit()
        self.records.append(("write_outside_transaction", {**a, "note": note}))
        self.records.append(("hanging_transaction", {**a, "note": "pins the LSO to the end"}))

    def unlisted_tv1(self) -> None:
        self._unlisted(self.w.order_app, "order-state", "TV1: no transaction lists the partition")

    def unlisted_tv2(self) -> None:
        self._unlisted(
            self.w.cart_app,
            "cart-state",
            "TV2: the COMMIT with the data's epoch did not list the partition",
        )

    def missing_marker(self) -> None:
        """Thread 1 of the order app commits, the coordinator completes, one partition's
        marker never written; the task then moves to thread 0 (a rebalance), whose writes
        pile up behind the open data."""
        w, c = self.w, self.w.c
        app = w.order_app
        t = app.threads[1]
        t.process()
        x = t.tasks[-1]  # not the partition of the unlisted write (a task of its tasks[0])
        t.producer.send("order-state", x, 2, tag="miss")
        spans = list(t.producer.written[("order-state", x)])
        t.commit(skip_markers={("order-state", x)})
        self.records += missing_marker_facts("order-state", x, t, spans)
        others = {q for q in t.tasks if q != x}
        app.group.planned = {
            th.consumer.member.client_id: {"orders": sorted(
                (set(th.tasks) | {x}) if th.index == 0 else others)}
            for th in app.threads
        }  # fmt: skip
        c.group_coordinator.rebalance(app.group)
        app.restart_from_committed()

    def diverge(self) -> None:
        """After the copies: a follower's replica of customers-1 differs from its leader's in
        a few batches of the dirty section (an unclean election), past both cleaned ranges."""
        log = self.w.c.log("customers", 1)
        upto = max(log.cleaned_upto.values())
        spans = [(b.base, b.last) for b in log.batches if b.base >= upto]
        if len(spans) < 8:
            raise AssertionError("customers-1 has too short a dirty section")
        first, last = spans[2][0], spans[5][1]
        end = min(_end(os.path.join(d, "customers-1")) for d in log.log_dirs)
        if last >= end:
            raise AssertionError("the divergence must lie where both copies hold data")
        _rewrite_values(os.path.join(log.log_dirs[1], "customers-1"), first, last)
        self.records.append(("replica_divergence", dict(
            topic="customers", partition=1, first_offset=first, last_offset=last,
            record_count=last - first + 1,
            note="outside both replicas' cleaned ranges")))  # fmt: skip

    def record(self) -> None:
        for kind, a in self.records:
            self.w.truth.add(kind, **a)


def _end(part_dir: str) -> int:
    from simulator.layouts import _log_end

    return _log_end(part_dir)


@scenario
def production_compacted(out: str, seed: int, scale: float) -> Truth:
    """Compacted changelogs of exactly-once Streams apps (transaction versions 1 and 2) and an
    idempotent CDC feed (an epoch bump), healthy: crashes and timeout aborts, each broker's
    cleaner at its own point over several passes (sparse batches, holes, empty headers, delete
    horizons), a cleaning interrupted mid-swap, cleaned internal topics."""
    return _world(out, seed, "production_compacted", False, production_compacted.__doc__)


@scenario
def production_compacted_faults(out: str, seed: int, scale: float) -> Truth:
    """production_compacted with a sequence gap (contiguous offsets) inside a cleaned range,
    transactional writes no coordinator transaction listed (TV1, TV2), a missing marker on a
    changelog, and replicas diverging outside their cleaned ranges."""
    return _world(
        out, seed, "production_compacted_faults", True, production_compacted_faults.__doc__
    )
