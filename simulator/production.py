"""The production-day scenario family: one cluster shaped like production, healthy or with faults.

Three brokers with their own clocks, partition leaders, group and transaction coordinators
spread over them; many applications (plain, idempotent and transactional producers, Kafka
Streams-style exactly-once apps with transaction versions 1 and 2, read_committed consumers,
read_uncommitted consumers of topics without transactions, a compacted topic, a topic with
retention); small batches (batch.size 16 KB, linger.ms 0-5: a few ~200-byte records each);
three busy windows of a simulated day separated by idle hours; rebalances, a thread crash, a
transaction timeout, a rolling restart and a coordinator failover in the middle of a commit;
small internal segments so the log cleaner has compacted history away; and a dump whose broker
copies were taken at slightly different moments with some index and snapshot files missing.

``production_day_faults`` is the same world with anomalies injected into a transaction-version-1
Streams app committing every 10 ms whose coordinator's clock is 2 s behind the partitions'
leaders; every anomaly is recorded in the truth with what a faithful auditor reports.
"""

from __future__ import annotations

import random

from decoders.constants import COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_ZSTD
from decoders.partitioning import partition_for
from simulator.clients import Consumer, Producer, TransactionalProducer, make_records
from simulator.cluster import Cluster, MachineClock, TopicConfig, spread_clocks
from simulator.copies import drop_some_files, logs_only
from simulator.log import READ_COMMITTED, READ_UNCOMMITTED, TXN_DATA
from simulator.scenarios import _group, _txn_fact, scenario
from simulator.streams import StreamsApp
from simulator.truth import Truth
from simulator.writer import Record

STEP_MS = 10  # the loop's resolution: the fastest app commits every 10 ms
IDLE_MS = 2 * 3_600_000  # idle hours between the busy windows
WINDOW_MS = (12_000, 24_000, 20_000)
TIMEOUT_MS = 10_000  # transaction.timeout.ms of the Streams apps (StreamsConfig default)
AUTO_COMMIT_MS = 5_000


class World:
    """Everything that runs in the production day; ``faults`` injects the anomalies."""

    def __init__(self, out: str, seed: int, truth: Truth, faults: bool) -> None:
        self.truth, self.faults = truth, faults
        c = self.c = Cluster(
            out, seed, brokers=3, internal_segment_bytes=24 << 10, clean_internal=True,
            internal_replicas=2, delete_retention_ms=60_000, copy_skew_ms=1_500,
            op_ms_scale=0.25,
        )  # fmt: skip
        knobs = random.Random(seed * 31 + 7)
        self.knobs = knobs
        self.inv_pid = f"{seed:08x}-{knobs.getrandbits(32):08x}"
        # the slow broker: the coordinator of the inventory app's first thread
        self.slow = c.log(
            "__transaction_state", partition_for(f"inventory-sync-{self.inv_pid}-0", 50)
        ).leader
        self._set_clocks()
        self._create_topics()
        self._start_producers()
        self._start_streams_apps()
        self._start_consumer_groups()
        self.window = 0
        self.t0 = c.clock.now
        self.inventory_fast = False
        self.alert_every = knobs.randint(4, 7)

    def _set_clocks(self) -> None:
        """The brokers' clocks. Any two stay within the audit's tested tolerance (2 s) for the
        whole day: a drift of 20 ppm moves a clock by 0.3 s over the simulated hours. With
        faults, the slow broker's clock is 2 s behind the other two, drift-free."""
        c = self.c
        if self.faults:
            c.broker_clocks = [
                MachineClock(-1_000 if b == self.slow else 1_000 - 13 * b, 0.0) for b in range(1, 4)
            ]
        else:
            c.broker_clocks = spread_clocks(c.clock_rng, 3, 400, 20.0)

    def _create_topics(self) -> None:
        """The applications' topics: replication factors, codecs, a topic with retention and
        log-append time, a compacted one the cleaner has worked on."""
        c, seg = self.c, 64 << 10
        for name, n, rf, extra in (
            ("clickstream", 6, 2, {}),
            ("telemetry", 4, 1, {"retention_ms": 3 * 3_600_000, "segment_bytes": 16 << 10,
                                  "log_append_time": True}),
            ("orders", 6, 2, {"codec": COMPRESSION_LZ4}),
            ("orders-enriched", 6, 2, {}),
            ("payments", 4, 2, {"codec": COMPRESSION_ZSTD}),
            ("fraud-scores", 4, 2, {}),
            ("inventory-events", 6, 1, {}),
            ("inventory-state", 6, 1, {}),
            ("inventory-alerts", 2, 1, {}),
            ("customer-profiles", 2, 2, {"compacted": True, "clean": True,
                                          "delete_retention_ms": 60_000,
                                          "segment_bytes": 8 << 10}),
        ):  # fmt: skip
            c.create_topic(TopicConfig(name, n, replicas=rf, **{"segment_bytes": seg, **extra}))

    def _start_producers(self) -> None:
        """The plain, idempotent and transactional producers (small batches of ~200-byte
        values), created in a fixed order: producer ids are handed out in it."""
        c = self.c
        self.web = [Producer(c, idempotent=False, value_bytes=150) for _ in range(2)]
        self.sensors = Producer(c, value_bytes=120)
        self.order_src = [
            Producer(c, codec=COMPRESSION_LZ4, value_bytes=220),
            Producer(c, codec=COMPRESSION_NONE, value_bytes=220),
        ]
        self.inventory_src = Producer(c, value_bytes=180)
        self.profiles = Producer(c, value_bytes=150)
        self.gateway = TransactionalProducer(
            c, "payments-gateway", version=0, timeout_ms=60_000, codec=COMPRESSION_ZSTD,
            value_bytes=200,
        )  # fmt: skip

    def _start_streams_apps(self) -> None:
        """The exactly-once Streams apps: transaction versions 1 and 2, commit intervals of 100
        and 10 ms; the inventory app's tasks planned across the slow/fast clock divide."""
        c = self.c
        self.enricher = StreamsApp(
            c, "order-enricher", "orders", lambda p, b: [("orders-enriched", p, b.records)],
            threads=3, version=1, commit_interval_ms=100, timeout_ms=TIMEOUT_MS,
        )  # fmt: skip
        self.scorer = StreamsApp(
            c, "fraud-scorer", "payments", lambda p, b: [("fraud-scores", p, b.records)],
            threads=2, version=2, commit_interval_ms=100, timeout_ms=TIMEOUT_MS,
        )  # fmt: skip
        self.inventory = StreamsApp(
            c, "inventory-sync", "inventory-events", self._inventory_route, threads=3, version=1,
            commit_interval_ms=10, timeout_ms=TIMEOUT_MS, process_id=self.inv_pid,
        )  # fmt: skip
        self._plan_inventory()

    def _start_consumer_groups(self) -> None:
        """The consumer groups (read_committed and read_uncommitted, three assignors), their
        members and commit intervals; the Streams apps' groups go into the truth as well."""
        c, t = self.c, self.truth
        self.analytics = _group(c, "clickstream-analytics", "range", READ_UNCOMMITTED, t)
        self.archiver = _group(c, "telemetry-archiver", "cooperative-sticky", READ_UNCOMMITTED, t)
        self.shipping = _group(c, "shipping", "range", READ_COMMITTED, t)
        self.ledger = _group(c, "ledger", "roundrobin", READ_COMMITTED, t)
        self.audit = _group(c, "inventory-audit", "range", READ_UNCOMMITTED, t)
        for app in (self.enricher, self.scorer, self.inventory):
            t.facts.setdefault("groups", {})[app.app_id] = {
                "assignor": "stream",
                "isolation": READ_COMMITTED,
            }
        self.consumers = {
            "clickstream-analytics": [
                Consumer.join(c, self.analytics, f"analytics-{i}", ["clickstream"])
                for i in range(2)
            ],
            "telemetry-archiver": [Consumer.join(c, self.archiver, "archiver-0", ["telemetry"])],
            "shipping": [
                Consumer.join(c, self.shipping, f"shipping-{i}", ["orders-enriched"])
                for i in range(2)
            ],
            "ledger": [Consumer.join(c, self.ledger, "ledger-0", ["payments"])],
            "inventory-audit": [Consumer.join(c, self.audit, "audit-0", ["inventory-alerts"])],
        }
        self.commit_every = {
            "clickstream-analytics": AUTO_COMMIT_MS,
            "telemetry-archiver": AUTO_COMMIT_MS,
            "shipping": AUTO_COMMIT_MS,
            "ledger": 1_000,
            "inventory-audit": 1_000,
        }
        self.last_commit = {g: c.clock.now for g in self.consumers}

    def _plan_inventory(self) -> None:
        """A follow-up rebalance of the inventory app (Streams' probing rebalances move tasks
        like this): each thread gets a task whose inventory-state leader's clock is on the
        other side of the slow/fast divide from its coordinator's."""
        c, inv = self.c, self.inventory
        on_slow = [p for p in range(6) if c.log("inventory-state", p).leader == self.slow]
        fast = [p for p in range(6) if p not in on_slow]
        plan = [fast[:2], [on_slow[0], fast[2]], [on_slow[1], fast[3]]]
        inv.group.planned = {
            t.consumer.member.client_id: {"inventory-events": sorted(ps)}
            for t, ps in zip(inv.threads, plan, strict=True)
        }
        c.group_coordinator.rebalance(inv.group)
        inv.restart_from_committed()

    def _inventory_route(self, p: int, b) -> list[tuple[str, int, int]]:
        out = [("inventory-state", p, b.records)]
        if b.base % self.alert_every == 0:
            out.append(("inventory-alerts", p % 2, 1))
        return out

    # -- the loop ---------------------------------------------------------------------------------
    def at(self) -> int:
        """Milliseconds since the current window began (true time)."""
        return self.c.clock.now - self.t0

    def run_window(self, index: int, events: dict[int, object]) -> None:
        """One busy window; ``events`` maps a time in the window (ms) to a callable."""
        c = self.c
        self.window, self.t0 = index, c.clock.now
        pending = sorted(events.items())
        step = 0
        while self.at() < WINDOW_MS[index]:
            step += 1
            target = self.t0 + step * STEP_MS
            if c.clock.now < target:
                c.clock.now = target
            while pending and pending[0][0] <= self.at():
                pending.pop(0)[1]()
            self.traffic(step)
            c.txn_coordinator.expire()

    def traffic(self, step: int) -> None:
        c, r = self.c, self.c.rng
        if self.inventory_fast or step % 10 == 0:
            for p in r.sample(range(6), r.randint(1, 2)):
                self.inventory_src.send("inventory-events", p, r.randint(1, 3), tag="inv")
        self.inventory.step()
        if step % 10:
            return
        for w in self.web:  # every 100 ms: clicks, orders, telemetry
            if r.random() < 0.6:
                w.send("clickstream", r.randrange(6), r.randint(1, 3), tag="click")
        self.sensors.send("telemetry", r.randrange(4), r.randint(2, 6), tag="temp")
        for o in self.order_src:
            if r.random() < 0.7:
                o.send("orders", r.randrange(6), r.randint(1, 3), tag="order")
        if step % 20 == 0:  # payments every 200 ms, an occasional abort
            for p in sorted(r.sample(range(4), r.randint(1, 2))):
                self.gateway.send("payments", p, r.randint(1, 3), tag="pay")
            self.gateway.commit() if r.random() < 0.9 else self.gateway.abort()
        if step % 50 == 0:
            ts = self.profiles.clock.at(c.clock.now)
            recs = [
                Record(f"customer-{r.randrange(40)}".encode(), f"profile v{step}".encode(), (), ts)
                for _ in range(2)
            ]
            self.profiles.send("customer-profiles", r.randrange(2), records=recs)
        self.enricher.step()
        self.scorer.step()
        for gid, members in self.consumers.items():
            for m in members:
                m.poll(max_batches=r.randint(2, 6))
            if c.clock.now - self.last_commit[gid] >= self.commit_every[gid]:
                self.last_commit[gid] = c.clock.now
                for m in members:
                    m.commit()

    def rebalance_group(self, gid: str, join: str | None = None, leave: int | None = None):
        c = self.c
        g = c.group_coordinator.groups[gid]
        members = self.consumers[gid]
        for m in members:  # the Java consumer commits its positions before a rebalance
            m.commit()
        if join:
            members.append(Consumer.join(c, g, join, members[0].member.topics))
        if leave is not None:
            members.pop(leave).leave()
        for m in members:
            m.forget_positions()

    def idle(self, ms: int) -> None:
        self.c.clock.tick(ms)


def _day(out: str, seed: int, name: str, faults: bool, doc: str) -> Truth:
    """The day in order: three busy windows with idle hours between, then the truth closed."""
    truth = Truth(name, seed, 0.0, doc)
    w = World(out, seed, truth, faults)
    f = Faults(w) if faults else None
    _morning(w)
    _midday(w, f)
    _evening(w, f)
    _close_day(out, seed, w, f)
    return truth


def _morning(w: World) -> None:
    """Window 1: a consumer joins, a stream thread crashes and is replaced; then the idle hours,
    in the middle of which the log cleaner makes its last pass: the morning's history of the
    compacted topics is cleaned, the rest of the day is their dirty section."""
    c, knobs = w.c, w.knobs
    w.run_window(0, {
        knobs.randint(3_000, 5_000): lambda: w.rebalance_group("clickstream-analytics",
                                                               join="analytics-2"),
        knobs.randint(7_000, 10_000): lambda: _crash(w.enricher.threads[1]),
    })  # fmt: skip
    w.idle(IDLE_MS // 2)
    c.clean_until = c.clock.now
    w.idle(IDLE_MS // 2)


def _midday(w: World, f: Faults | None) -> None:
    """Window 2: inventory input every 10 ms (transactions ~10 ms apart); a fourth thread joins
    and takes over two tasks; the faults happen just before and after. Then a rolling restart
    in the quiet hours: every broker in turn."""
    c, knobs, inv = w.c, w.knobs, w.inventory

    def fast():
        w.inventory_fast = True

    def scale_up():
        moving = f.moving if f else _moving(inv)
        planned = {t.consumer.member.client_id: {"inventory-events": [p for p in t.tasks
                   if p not in moving]} for t in inv.threads}  # fmt: skip
        planned["inventory-sync-StreamThread-4-consumer"] = {"inventory-events": sorted(moving)}
        inv.group.planned = planned
        inv.add_thread()

    def faults_then_scale_up():
        f.missing_marker()  # both partitions move to the new thread at once: the producers
        f.late_write()  # that wrote them there never write them again
        scale_up()

    def slow():
        w.inventory_fast = False

    events = {500: fast, 3_000: faults_then_scale_up if f else scale_up, 7_000: slow}
    if f:
        events.update({1_800: f.split_outcome, 6_000: f.stall_for_leak})
    w.run_window(1, events)
    w.inventory_fast = False
    w.idle(IDLE_MS // 2)
    for b in (1, 2, 3):
        c.restart_broker(b)
        w.idle(knobs.randint(60_000, 120_000))
    w.idle(IDLE_MS // 2)


def _evening(w: World, f: Faults | None) -> None:
    """Window 3: a coordinator fails over in the middle of a commit, a thread outlives its
    transaction timeout, a consumer leaves."""
    c, knobs = w.c, w.knobs

    def failover():
        t = w.enricher.threads[0]
        t.process()
        t.producer.send("orders-enriched", (t.tasks or [0])[0], 1, tag="failover")
        t.commit(failover_after=1)

    def stall():
        t = w.enricher.threads[2]
        t.process()
        t.producer.send("orders-enriched", (t.tasks or [0])[0], 1, tag="stall")
        t.stalled_until = c.clock.now + TIMEOUT_MS + 2_000

    events = {
        knobs.randint(2_000, 4_000): failover,
        knobs.randint(5_000, 6_000): stall,
        knobs.randint(15_000, 17_000): lambda: w.rebalance_group("clickstream-analytics", leave=0),
    }
    if f:
        events.update({1_000: f.duplicate, 4_500: f.rewind})
    w.run_window(2, events)


def _close_day(out: str, seed: int, w: World, f: Faults | None) -> None:
    """The end of the day: the transactional producers' and the clocks' facts, the cluster
    closed, the anomalies recorded and every other partition and group marked clean; last, the
    index and snapshot files the dump's copies lost."""
    c, truth = w.c, w.truth
    for tp in (w.gateway, *(t.producer for a in (w.enricher, w.scorer, w.inventory)
                             for t in a.threads)):  # fmt: skip
        _txn_fact(truth, tp)
    c.close()
    truth.facts["clocks"] = {
        "brokers_ms": [bc.offset_ms for bc in c.broker_clocks],
        "copy_times": {str(b): t for b, t in c.copy_times.items()},
    }
    if f:
        f.record()
    faulty = {(a.topic, a.partition) for a in truth.anomalies}
    faulty_groups = {a.group_id for a in truth.anomalies}
    for (topic, p), _ in sorted(c.logs.items()):
        if (topic, p) not in faulty and not topic.startswith("__"):
            truth.clean_partition(topic, p, "no injected fault")
    for gid in sorted(c.group_coordinator.groups):
        if gid not in faulty_groups:
            truth.clean_group(gid, "no injected fault")
    dropped = drop_some_files(out, random.Random(seed * 13 + 5), share=0.15)
    truth.facts["files_missing"] = len(dropped)


def _crash(t) -> None:
    t.process()  # the transaction is open when the thread dies
    t.crash_and_restart()


def _moving(inv: StreamsApp) -> set[int]:
    """The tasks the new thread takes over: one of thread 1's and one of thread 2's."""
    return {inv.threads[1].tasks[0], inv.threads[2].tasks[0]}


def missing_marker_facts(topic: str, x: int, t, spans) -> list[tuple[str, dict]]:
    """What a faithful auditor reports when stream thread ``t``'s transaction, whose data went
    to ``topic``-``x`` at ``spans``, was completed without that partition's marker: the missing
    marker, and the transaction it leaves hanging."""
    a = dict(topic=topic, partition=x, producer_id=t.producer.producer_id,
             producer_epoch=t.producer.epoch, transactional_id=t.transactional_id,
             first_offset=spans[0][0], last_offset=spans[-1][1],
             record_count=sum(b - a + 1 for a, b in spans))  # fmt: skip
    return [("missing_marker", {**a, "note": "CompleteCommit listed it"}),
            ("hanging_transaction", {**a, "note": "pins the LSO to the end"})]  # fmt: skip


class Faults:
    """The anomalies of ``production_day_faults``, each recorded with what a faithful auditor
    reports (kind, severity, place, offsets, record count)."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.records: list[tuple[str, dict]] = []
        self.moving: set[int] = set()
        self.used: set[int] = set()

    def _pick(self):
        """A thread not used by another fault yet, and one of its tasks whose inventory-state
        partition's leader has a clock 2 s off its coordinator's: a slow coordinator with a
        fast leader (preferred: the leader 2 s ahead), or a fast one with the slow leader."""
        c, slow = self.w.c, self.w.slow
        choices = []
        for t in self.w.inventory.threads:
            if t.index in self.used:
                continue
            cb = c.txn_log(t.transactional_id).leader
            for p in t.tasks:
                lb = c.log("inventory-state", p).leader
                if lb != cb and slow in (cb, lb):
                    choices.append((cb != slow, t.index, p, t))
        if not choices:
            raise AssertionError("no thread with a task whose leader is 2 s off its coordinator")
        _, _, p, t = min(choices, key=lambda x: x[:3])
        self.used.add(t.index)
        return t, p

    def _txn(self, thread, x: int, n: int = 3):
        """Process, then make sure the transaction has data in inventory-state-x."""
        thread.process()
        thread.producer.send("inventory-state", x, n, tag="fault")
        return list(thread.producer.written[("inventory-state", x)])

    def split_outcome(self) -> None:
        t, x = self._pick()
        self.split_thread = t
        spans = self._txn(t, x)
        markers = t.commit(outcome_override={("inventory-state", x): False})
        m = markers[("inventory-state", x)]
        self.records.append(("split_outcome", dict(
            topic="inventory-state", partition=x, producer_id=t.producer.producer_id,
            producer_epoch=t.producer.epoch, transactional_id=t.transactional_id,
            first_offset=spans[0][0], last_offset=m,
            record_count=sum(b - a + 1 for a, b in spans),
            note="the coordinator decided COMMIT; this partition got an ABORT marker")))  # fmt: skip

    def missing_marker(self) -> None:
        t, x = self._pick()
        spans = self._txn(t, x)
        t.commit(skip_markers={("inventory-state", x)})
        self.moving.add(x)
        self.records += missing_marker_facts("inventory-state", x, t, spans)

    def late_write(self) -> None:
        """A produce request of transaction N reaches the partition after N's marker (before
        KIP-890 nothing stops it): same producer id and epoch, the next sequence."""
        t, x = self._pick()
        self._txn(t, x)
        prod = t.producer
        tp = ("inventory-state", x)
        c = self.w.c
        records = make_records(c, tp[0], x, 2, "late", prod.value_bytes, prod.clock)
        seq = prod.next_sequence(tp, len(records))
        epoch = prod.epoch
        t.commit()
        c.tick(20, 60)
        late = c.log(*tp).produce(records, producer_id=prod.producer_id, producer_epoch=epoch,
                                  base_sequence=seq, transactional=True)  # fmt: skip
        self.moving.add(x)
        a = dict(topic="inventory-state", partition=x, producer_id=prod.producer_id,
                 producer_epoch=epoch, transactional_id=t.transactional_id,
                 first_offset=late[0], last_offset=late[1], record_count=late[1] - late[0] + 1)  # fmt: skip
        self.records.append(("write_outside_transaction", {**a, "note": "after its COMMIT"}))
        self.records.append(("hanging_transaction", {**a, "note": "pins the LSO to the end"}))

    def stall_for_leak(self) -> None:
        """Thread 0 hangs with a transaction open in inventory-alerts; the read_uncommitted
        inventory-audit group reads it and commits past it; the coordinator aborts it after
        transaction.timeout.ms (epoch + 1)."""
        t = self.split_thread
        t.process()
        t.producer.send("inventory-alerts", 0, 2, tag="stalled")
        self.leak_pid = t.producer.producer_id
        self.leak = [
            (log, log.open_txn[self.leak_pid])
            for log in (self.w.c.log("inventory-alerts", y) for y in (0, 1))
            if self.leak_pid in log.open_txn
        ]
        t.stalled_until = self.w.c.clock.now + TIMEOUT_MS + 3_000

    def duplicate(self) -> None:
        c, s = self.w.c, self.w.sensors
        tp = max(s.last_sent)
        c.log(*tp).forget_producer(s.producer_id)
        dup = s.retry(*tp)
        records, seq = s.last_sent[tp]
        self.records.append(("duplicate_sequence", dict(
            topic=tp[0], partition=tp[1], producer_id=s.producer_id, producer_epoch=0,
            first_offset=dup[0], last_offset=dup[1], record_count=len(records),
            note=f"sequences {seq}..{seq + len(records) - 1} written twice after the broker "
                 "lost the producer's state")))  # fmt: skip

    def rewind(self) -> None:
        m = self.w.consumers["clickstream-analytics"][0]
        tp = ("clickstream", m.assigned()[0][1])
        m.commit()
        pos = m.positions[tp]
        n = min(pos, 25)
        m.positions[tp] = pos - n
        m.commit()
        self.records.append(("offset_regression", dict(
            topic=tp[0], partition=tp[1], group_id="clickstream-analytics", severity="warning",
            first_offset=pos - n, last_offset=pos - 1, record_count=n,
            note="rewind while Stable")))  # fmt: skip

    def record(self) -> None:
        truth = self.w.truth
        for log, i in self.leak:
            assert log.txns[i].outcome == "ABORT", "the coordinator aborted it on timeout"
            batches = [b for b in log.batches if b.kind == TXN_DATA and b.txn == i]
            self.records.append(("aborted_read_leak", dict(
                topic=log.topic, partition=log.partition, group_id="inventory-audit",
                producer_id=self.leak_pid, first_offset=batches[0].base,
                last_offset=batches[-1].last, record_count=sum(b.records for b in batches),
                note="committed past the open transaction seconds before its ABORT marker")))  # fmt: skip
        for kind, a in self.records:
            truth.add(kind, **a)


@scenario
def production_day(out: str, seed: int, scale: float) -> Truth:
    """A production-shaped day, healthy: three brokers with clocks a few hundred ms apart, Kafka
    Streams-style exactly-once apps (transaction versions 1 and 2, one at 10 ms commits),
    plain, idempotent and transactional producers with small batches, read_committed and
    read_uncommitted groups, rebalances, a crash, a transaction timeout, a rolling restart and
    a coordinator failover (re-sent markers), retention, compaction of the internal topics,
    broker copies taken at different moments, some index and snapshot files missing."""
    return _day(out, seed, "production_day", False, production_day.__doc__)


@scenario
def production_day_faults(out: str, seed: int, scale: float) -> Truth:
    """production_day with faults in a transaction-version-1 Streams app committing every 10 ms
    whose coordinator's clock is 2 s behind the partition leaders': a split outcome, a missing
    marker and a late write outside the transaction (each hanging the partition after), a
    read_uncommitted group leaking a transaction the coordinator aborted on timeout, a
    duplicate after lost producer state and an offset rewind."""
    return _day(out, seed, "production_day_faults", True, production_day_faults.__doc__)


@scenario
def production_day_logs_only(out: str, seed: int, scale: float) -> Truth:
    """production_day copied as only its `.log` files (no indexes, snapshots, checkpoints or
    meta.properties), as a `find -name '*.log'` copy leaves it."""
    truth = _day(out, seed, "production_day_logs_only", False, production_day_logs_only.__doc__)
    truth.facts["files_missing"] = logs_only(out)
    return truth
