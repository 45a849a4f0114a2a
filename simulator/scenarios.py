"""Scenarios: clean ones for every feature, and ones with injected faults and their truth.

Each scenario builds a :class:`Cluster`, drives clients through it, injects its faults while
recording them in a :class:`Truth`, and closes the cluster (files written). Offsets in the truth
come from the appends themselves, never from constants.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from decoders.constants import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    RECORD_BATCH_OVERHEAD,
)
from decoders.framing import batch_header, iter_entries
from simulator.bulk import SCALE_UNIT_BYTES, background
from simulator.clients import Consumer, Producer, TransactionalProducer
from simulator.cluster import Cluster, TopicConfig
from simulator.log import READ_COMMITTED, READ_UNCOMMITTED, TXN_DATA
from simulator.truth import Truth
from simulator.writer import legacy_message, legacy_wrapper, restamp_crc

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
SCENARIOS: dict[str, Callable[[str, int, float], Truth]] = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def _segment_bytes(scale: float, small: int) -> int:
    """Small segments show rolls in small dumps; with --scale about four per partition's share
    of the background data, as a broker with a sized segment.bytes would have."""
    return max(small, int(scale * SCALE_UNIT_BYTES) // 8)


def _bulk(c: Cluster, topic: str, scale: float) -> None:
    background(c, topic, int(scale * SCALE_UNIT_BYTES))


def _group(c: Cluster, group_id: str, assignor: str, isolation: str, truth: Truth):
    truth.facts.setdefault("groups", {})[group_id] = {"assignor": assignor, "isolation": isolation}
    return c.group_coordinator.group(group_id, assignor, isolation)


def _txn_fact(truth: Truth, p: TransactionalProducer) -> None:
    truth.facts.setdefault("transactional_ids", {})[p.transactional_id] = {
        "producer_id": p.producer_id,
        "transaction_version": p.version,
        "timeout_ms": p.timeout_ms,
    }


def _poll_and_record(
    c: Cluster, members, chances, commits: dict[int, list[int]], most: int
) -> None:
    """Broadcast members poll and commit at their own pace; every committed position is
    recorded per partition (the order the coordinator appends them)."""
    for m, chance in zip(members, chances, strict=True):
        if c.rng.random() < chance:
            m.poll(max_batches=c.rng.randint(1, most))
            m.commit()
            for (_, p), pos in m.positions.items():
                commits[p].append(pos)


def _overwrites(truth: Truth, topic: str, group: str, commits: dict[int, list[int]]) -> None:
    for p, seq in commits.items():
        backs = [(a, b) for a, b in zip(seq, seq[1:], strict=False) if b < a]
        if backs:
            truth.add("offset_overwrite", topic=topic, partition=p, group_id=group,
                      record_count=sum(a - b for a, b in backs),
                      note=f"{len(backs)} regressions; offsets re-read summed")  # fmt: skip


def _clean_topic(truth: Truth, c: Cluster, topic: str, why: str) -> None:
    for p in range(c.topics[topic].partitions):
        truth.clean_partition(topic, p, why)


# -- clean scenarios ---------------------------------------------------------------------------
@scenario
def clean_idempotent(out: str, seed: int, scale: float) -> Truth:
    """Idempotent and plain producers over every codec, retries the broker deduplicates,
    segment rolls with indexes and snapshots; groups with range, roundrobin, sticky and
    cooperative-sticky assignors rebalancing on joins, leaves and session timeouts."""
    truth = Truth("clean_idempotent", seed, scale, clean_idempotent.__doc__)
    c = Cluster(out, seed)
    c.create_topic(
        TopicConfig(
            "events", 3, segment_bytes=_segment_bytes(scale, 16 << 10), index_interval_bytes=1024
        )
    )
    _bulk(c, "events", scale)
    producers = [Producer(c, codec=CODECS[i]) for i in range(5)] + [Producer(c, idempotent=False)]
    groups = [
        _group(c, f"events-{a}", a, READ_UNCOMMITTED, truth)
        for a in ("range", "roundrobin", "sticky", "cooperative-sticky")
    ]
    members = {
        g.group_id: [Consumer.join(c, g, f"{g.group_id}-c{i}", ["events"]) for i in range(2)]
        for g in groups
    }
    for rnd in range(60):
        for pr in producers:
            p = c.rng.randrange(3)
            pr.send("events", p, c.rng.randint(1, 8), tag=f"r{rnd}")
            if pr.idempotent and c.rng.random() < 0.1:
                assert pr.retry("events", p) is None  # deduplicated by the broker
        for g in groups:
            ms = members[g.group_id]
            if rnd == 20:
                ms.append(Consumer.join(c, g, f"{g.group_id}-c2", ["events"]))
            if rnd == 35:  # a clean leave
                ms.pop(0).leave()
            if rnd == 45:  # a session timeout: the coordinator removes the member
                gone = ms.pop(0)
                c.clock.tick(gone.member.session_timeout_ms + 1)
                c.group_coordinator.leave(g, gone.member.member_id)
            if rnd in (20, 35, 45):
                for m in ms:
                    m.forget_positions()
            for m in ms:
                m.poll(max_batches=c.rng.randint(1, 4))
                m.commit()
    c.close()
    _clean_topic(truth, c, "events", "idempotent producers, broker-deduplicated retries")
    for g in groups:
        truth.clean_group(g.group_id, "one member per partition")
    return truth


@scenario
def clean_transactions(out: str, seed: int, scale: float) -> Truth:
    """Transactional producers with transaction versions 1 and 2, commits and aborts, a
    coordinator timeout abort, interleaved with idempotent writes; a read_committed group."""
    truth = Truth("clean_transactions", seed, scale, clean_transactions.__doc__)
    c = Cluster(out, seed)
    c.create_topic(
        TopicConfig(
            "payments", 4, segment_bytes=_segment_bytes(scale, 32 << 10), codec=COMPRESSION_ZSTD
        )
    )
    _bulk(c, "payments", scale)
    tv1 = TransactionalProducer(c, "payments-tv1", version=1, timeout_ms=30_000)
    tv2 = TransactionalProducer(
        c, "payments-tv2", version=2, timeout_ms=30_000, codec=COMPRESSION_LZ4
    )
    plain = Producer(c, codec=COMPRESSION_SNAPPY)
    g = _group(c, "payments-rc", "roundrobin", READ_COMMITTED, truth)
    ms = [Consumer.join(c, g, f"payments-rc-c{i}", ["payments"]) for i in range(2)]
    for rnd in range(30):
        for tp in (tv1, tv2):
            for p in sorted(c.rng.sample(range(4), 2)):
                tp.send("payments", p, c.rng.randint(1, 6), tag=f"{tp.transactional_id}-{rnd}")
                plain.send("payments", c.rng.randrange(4), 2, tag=f"plain-{rnd}")
            if rnd == 12 and tp is tv1:  # the coordinator times the transaction out
                c.clock.tick(tp.timeout_ms + 1)
                c.txn_coordinator.abort_with_bump(tp.md)
                tp.init()  # the producer learns it was fenced and starts over
            elif c.rng.random() < 0.3:
                tp.abort()
            else:
                tp.commit()
        for m in ms:
            m.poll(max_batches=5)
            m.commit()
    for tp in (tv1, tv2):
        _txn_fact(truth, tp)
    c.close()
    _clean_topic(truth, c, "payments", "transactions completed by the coordinator")
    truth.clean_group("payments-rc", "read_committed")
    return truth


@scenario
def clean_eos_pipeline(out: str, seed: int, scale: float) -> Truth:
    """consume-transform-produce: a read_committed group feeds a transactional producer that
    commits its input offsets with sendOffsetsToTransaction; aborted steps are reprocessed."""
    truth = Truth("clean_eos_pipeline", seed, scale, clean_eos_pipeline.__doc__)
    c = Cluster(out, seed)
    c.create_topic(TopicConfig("orders", 2))
    c.create_topic(TopicConfig("orders-enriched", 2, codec=COMPRESSION_GZIP))
    _bulk(c, "orders", scale)
    source = TransactionalProducer(c, "orders-source", version=2)
    step = TransactionalProducer(c, "enricher-tx", version=1)
    g = _group(c, "enricher", "cooperative-sticky", READ_COMMITTED, truth)
    consumer = Consumer.join(c, g, "enricher-c0", ["orders"])
    down = _group(c, "reporting", "sticky", READ_COMMITTED, truth)
    readers = [Consumer.join(c, down, f"reporting-c{i}", ["orders-enriched"]) for i in range(2)]
    for rnd in range(25):
        for p in range(2):
            source.send("orders", p, c.rng.randint(2, 6), tag=f"o{rnd}")
        source.commit() if c.rng.random() < 0.8 else source.abort()
        _transform(c, consumer, step, "orders-enriched", commit=c.rng.random() < 0.85)
        for r in readers:
            r.poll(max_batches=3)
            r.commit()
    for tp in (source, step):
        _txn_fact(truth, tp)
    c.close()
    for t in ("orders", "orders-enriched"):
        _clean_topic(truth, c, t, "exactly-once pipeline")
    truth.clean_group("enricher", "transactional offset commits, read_committed")
    truth.clean_group("reporting", "read_committed")
    return truth


def _transform(
    c: Cluster, consumer: Consumer, step: TransactionalProducer, out_topic: str, commit: bool
):
    """One consume-transform-produce step; returns (consumed, outputs by partition)."""
    consumed = consumer.poll(max_batches=3)
    outputs: dict[int, list[tuple[int, int]]] = {}
    n = sum(b.records for got in consumed for b in got.batches)
    if not n:
        return consumed, outputs
    for got in consumed:
        for b in got.batches:
            p = b.base % c.topics[out_topic].partitions
            outputs.setdefault(p, []).append(
                step.send(out_topic, p, b.records, tag=f"from-{got.partition}-{b.base}")
            )
    step.send_offsets(consumer.group, {(g.topic, g.partition): g.position for g in consumed})
    if commit:
        step.commit()
    else:
        step.abort()
        consumer.forget_positions()  # restart from the committed offsets: reprocess
    return consumed, outputs


@scenario
def clean_compaction(out: str, seed: int, scale: float) -> Truth:
    """Compacted internal topics and a compacted user topic after the log cleaner ran: empty
    batches kept for producer state, markers stamped with a delete horizon or removed,
    superseded offset commits gone."""
    truth = Truth("clean_compaction", seed, scale, clean_compaction.__doc__)
    c = Cluster(
        out, seed, internal_segment_bytes=4 << 10, clean_internal=True, delete_retention_ms=5_000
    )
    c.create_topic(
        TopicConfig(
            "profiles",
            1,
            segment_bytes=4 << 10,
            compacted=True,
            clean=True,
            delete_retention_ms=5_000,
        )
    )
    c.create_topic(TopicConfig("visits", 2))
    tx = TransactionalProducer(c, "profiles-tx", version=1)
    g = _group(c, "profile-builder", "range", READ_COMMITTED, truth)
    consumer = Consumer.join(c, g, "profile-builder-c0", ["visits"])
    visitor = Producer(c)
    importer = Producer(c)  # every key it wrote is superseded: an empty batch stays for it
    importer.send("profiles", 0, records=[_keyed(c, f"user-{i}", "imported") for i in range(8)])
    for rnd in range(40):
        visitor.send("visits", rnd % 2, 3, tag=f"v{rnd}")
        recs = [
            _keyed(c, f"user-{c.rng.randrange(8)}", f"profile-{rnd}-{i}")
            for i in range(c.rng.randint(1, 4))
        ]
        tx.send("profiles", 0, records=recs)
        consumed = consumer.poll()
        tx.send_offsets(g, {(x.topic, x.partition): x.position for x in consumed})
        if c.rng.random() < 0.25:
            tx.abort()
            consumer.forget_positions()
        else:
            tx.commit()
        c.clock.tick(400)
    _txn_fact(truth, tx)
    c.close()
    _clean_topic(truth, c, "profiles", "compacted and cleaned")
    _clean_topic(truth, c, "visits", "plain data")
    truth.clean_group("profile-builder", "transactional commits in a cleaned __consumer_offsets")
    return truth


def _keyed(c: Cluster, key: str, value: str):
    from simulator.writer import Record

    return Record(key.encode(), value.encode(), (), c.tick(1, 3))


@scenario
def clean_legacy(out: str, seed: int, scale: float) -> Truth:
    """Message format v0 and v1 topics: plain messages and compressed wrappers of every
    legacy codec, as brokers before 0.11 wrote them."""
    truth = Truth("clean_legacy", seed, scale, clean_legacy.__doc__)
    c = Cluster(out, seed)
    for magic in (0, 1):
        topic = f"legacy-v{magic}"
        c.create_topic(TopicConfig(topic, 1, segment_bytes=8 << 10, index_interval_bytes=512))
        w = c.log(topic, 0).writer
        offset = 0
        for i in range(80):
            ts = c.tick(1, 5) if magic else -1
            codec = CODECS[i % 4]  # zstd needs magic 2
            if codec == COMPRESSION_NONE:
                w.append(
                    legacy_message(
                        offset, f"k{i}".encode(), f"v{i}".encode(), magic=magic, timestamp=ts
                    )
                )
                offset += 1
            else:
                n = c.rng.randint(2, 5)
                msgs = [(f"k{i}-{j}".encode(), f"value {i}.{j}".encode(), ts) for j in range(n)]
                w.append(legacy_wrapper(msgs, offset + n - 1, codec, magic=magic))
                offset += n
    c.close()
    for magic in (0, 1):
        truth.clean_partition(f"legacy-v{magic}", 0, "legacy message format")
    return truth


# -- faults --------------------------------------------------------------------------------------
@scenario
def idempotence_faults(out: str, seed: int, scale: float) -> Truth:
    """Producer-state faults: a duplicate after the broker lost the producer's state, a sequence
    gap, a step backwards, a new epoch not starting at 0, a zombie write with an old epoch."""
    truth = Truth("idempotence_faults", seed, scale, idempotence_faults.__doc__)
    c = Cluster(out, seed)
    c.create_topic(TopicConfig("sensors", 6, segment_bytes=_segment_bytes(scale, 32 << 10)))
    _bulk(c, "sensors", scale)
    ps = [Producer(c, codec=CODECS[i % 5]) for i in range(6)]

    def warm(p: int, rounds: int = 6) -> None:
        for r in range(rounds):
            ps[p].send("sensors", p, c.rng.randint(2, 6), tag=f"w{r}")

    # partition 0: the broker loses the producer's state; the retry is appended again.
    warm(0)
    log = c.log("sensors", 0)
    log.forget_producer(ps[0].producer_id)
    dup = ps[0].retry("sensors", 0)
    records, seq = ps[0].last_sent[("sensors", 0)]
    truth.add("duplicate_sequence", topic="sensors", partition=0, producer_id=ps[0].producer_id,
              producer_epoch=0, first_offset=dup[0], last_offset=dup[1], record_count=len(records),
              note=f"sequences {seq}..{seq + len(records) - 1} written twice")  # fmt: skip
    warm(0, 3)

    # partition 1: seven sequence numbers never reached the log.
    warm(1)
    ps[1].sequences[("sensors", 1)] += 7
    gap = ps[1].send("sensors", 1, 4, tag="after-gap")
    truth.add("sequence_gap", topic="sensors", partition=1, producer_id=ps[1].producer_id,
              producer_epoch=0, first_offset=gap[0], last_offset=gap[1], record_count=4)  # fmt: skip
    warm(1, 3)

    # partition 2: the sequence steps back by three (not an exact duplicate).
    warm(2)
    ps[2].sequences[("sensors", 2)] -= 3
    back = ps[2].send("sensors", 2, 5, tag="backwards")
    truth.add("out_of_order_sequence", topic="sensors", partition=2, producer_id=ps[2].producer_id,
              producer_epoch=0, first_offset=back[0], last_offset=back[1], record_count=5)  # fmt: skip
    warm(2, 3)

    # partition 3: the producer bumps its epoch (KIP-360) but keeps counting sequences.
    warm(3)
    ps[3].epoch = 1
    bad = ps[3].send("sensors", 3, 3, tag="epoch1")
    truth.add("invalid_epoch_start", topic="sensors", partition=3, producer_id=ps[3].producer_id,
              producer_epoch=1, first_offset=bad[0], last_offset=bad[1], record_count=3)  # fmt: skip
    warm(3, 3)

    # partition 4: a correct epoch bump, then a zombie still on epoch 0 gets a write in.
    warm(4)
    zombie_seq = ps[4].sequences[("sensors", 4)]
    ps[4].epoch, ps[4].sequences[("sensors", 4)] = 1, 0
    warm(4, 3)
    rec = ps[4].sequences[("sensors", 4)]
    ps[4].epoch, ps[4].sequences[("sensors", 4)] = 0, zombie_seq
    z = ps[4].send("sensors", 4, 2, tag="zombie")
    truth.add("fenced_epoch_write", topic="sensors", partition=4, producer_id=ps[4].producer_id,
              producer_epoch=0, first_offset=z[0], last_offset=z[1], record_count=2)  # fmt: skip
    ps[4].epoch, ps[4].sequences[("sensors", 4)] = 1, rec
    warm(4, 3)

    # partition 5: healthy, including a producer that idles past producer.id.expiration.ms.
    warm(5)
    c.clock.tick(86_400_000 + 1)
    warm(5, 3)
    _cleaned_gap(c, truth)
    c.close()
    truth.clean_partition("sensors", 5, "healthy idempotent producer, expired and resumed")
    return truth


def _cleaned_gap(c: Cluster, truth: Truth) -> None:
    """A compacted topic the cleaner then runs over: an idempotent producer rewrites a few keys
    (the cleaner removes most of its batches, leaving offset holes), and five of its sequence
    numbers never reach the log between two batches whose keys are never superseded. The
    cleaner removes offsets with their sequences and never more sequences than offsets, so the
    gap is still provable inside the cleaned range."""
    c.create_topic(TopicConfig("sensor-state", 1, segment_bytes=2 << 10, compacted=True,
                               clean=True, delete_retention_ms=5_000))  # fmt: skip
    p = Producer(c)

    def churn(rounds: int, tag: str) -> None:
        for r in range(rounds):
            p.send("sensor-state", 0, records=[_keyed(c, f"s-{r % 3}", f"{tag}{r}")])

    churn(12, "a")
    p.send("sensor-state", 0, records=[_keyed(c, "before-gap", "kept")])
    churn(6, "b")
    p.sequences[("sensor-state", 0)] += 5
    n = 2
    gap = p.send("sensor-state", 0, records=[_keyed(c, f"after-gap-{i}", "kept") for i in range(n)])
    truth.add("sequence_gap", topic="sensor-state", partition=0, producer_id=p.producer_id,
              producer_epoch=0, first_offset=gap[0], last_offset=gap[1], record_count=n,
              note="inside the cleaned range: 5 sequences more than the offsets the cleaner removed")  # fmt: skip
    churn(30, "c")
    c.clock.tick(10_000)


@scenario
def transaction_faults(out: str, seed: int, scale: float) -> Truth:
    """Transaction faults: a hanging transaction, a late write outside any transaction (before
    KIP-890), a split outcome, a missing marker, a non-transactional write inside a transaction."""
    truth = Truth("transaction_faults", seed, scale, transaction_faults.__doc__)
    c = Cluster(out, seed)
    c.create_topic(TopicConfig("ledger", 6))
    c.create_topic(TopicConfig("ledger-ok", 2))
    _bulk(c, "ledger", scale)
    timeout = 10_000
    filler = Producer(c)
    ok = TransactionalProducer(c, "ledger-ok-tx", timeout_ms=timeout)
    for i in range(6):
        ok.send("ledger-ok", i % 2, 3)
        ok.commit() if i % 3 else ok.abort()
    late, hanging_late = _late_write(c, truth, timeout)
    hanging = [hanging_late]

    # partition 2: the coordinator's log stops at Ongoing; no marker ever comes.
    stuck = TransactionalProducer(c, "ledger-stuck", timeout_ms=timeout)
    sp = stuck.send("ledger", 2, 4)
    hanging.append(("ledger", 2, stuck, stuck.epoch, sp[0], 4))

    split = _split_outcome(c, truth, timeout)
    miss, hanging_miss = _missing_marker(c, truth, timeout)
    hanging.append(hanging_miss)
    mixed = _non_transactional_write_in_txn(c, truth, timeout)
    _move_on(c, filler, timeout * 3)
    for topic, p, prod, ep, first, n in hanging:
        truth.add("hanging_transaction", topic=topic, partition=p, producer_id=prod.producer_id,
                  producer_epoch=ep, transactional_id=prod.transactional_id, first_offset=first,
                  record_count=n)  # fmt: skip
    for tp in (ok, late, stuck, split, miss, mixed):
        _txn_fact(truth, tp)
    c.close()
    _clean_topic(truth, c, "ledger-ok", "committed and aborted transactions, all markers")
    return truth


# A transaction that never ends, as transaction_faults lists them to report hanging:
# (topic, partition, producer, producer epoch, first offset, records).
_Hanging = tuple[str, int, TransactionalProducer, int, int, int]


def _move_on(c: Cluster, filler: Producer, ms: int) -> None:
    """Other producers keep writing for longer than the transaction timeout."""
    for _ in range(6):
        for p in range(6):
            filler.send("ledger", p, 2, tag="filler")
        c.clock.tick(ms // 6)


def _late_write(c: Cluster, truth: Truth, timeout: int) -> tuple[TransactionalProducer, _Hanging]:
    """Partition 0: aborted by timeout, then a late produce request of the old epoch lands in
    partition 1, which the coordinator never added: it opens a transaction nobody will end."""
    late = TransactionalProducer(c, "ledger-late", timeout_ms=timeout)
    late.send("ledger", 0, 3)
    old_epoch = late.epoch
    c.clock.tick(timeout + 1)
    c.txn_coordinator.abort_with_bump(late.md)
    lp = c.log("ledger", 1).produce(
        [_keyed(c, "late", "late write") for _ in range(2)], producer_id=late.producer_id,
        producer_epoch=old_epoch, base_sequence=0, transactional=True,
    )  # fmt: skip
    truth.add("write_outside_transaction", topic="ledger", partition=1, producer_id=late.producer_id,
              producer_epoch=old_epoch, transactional_id="ledger-late", first_offset=lp[0],
              last_offset=lp[1], record_count=2)  # fmt: skip
    return late, ("ledger", 1, late, old_epoch, lp[0], 2)


def _split_outcome(c: Cluster, truth: Truth, timeout: int) -> TransactionalProducer:
    """Partitions 3 and 4: one transaction, COMMIT in 3 and ABORT in 4."""
    split = TransactionalProducer(c, "ledger-split", timeout_ms=timeout)
    split.send("ledger", 3, 3)
    s4 = split.send("ledger", 4, 3)
    epoch = split.epoch
    split.commit(outcome_override={("ledger", 4): False})
    truth.add("split_outcome", topic="ledger", partition=4, producer_id=split.producer_id,
              producer_epoch=epoch, transactional_id="ledger-split", first_offset=s4[0],
              record_count=3)  # fmt: skip
    return split


def _missing_marker(
    c: Cluster, truth: Truth, timeout: int
) -> tuple[TransactionalProducer, _Hanging]:
    """Partitions 3 and 5: the coordinator completes a commit, partition 5 never gets its
    marker (so its transaction also hangs)."""
    miss = TransactionalProducer(c, "ledger-miss", timeout_ms=timeout)
    miss.send("ledger", 3, 2)
    m5 = miss.send("ledger", 5, 3)
    epoch = miss.epoch
    miss.commit(skip_markers={("ledger", 5)})
    truth.add("missing_marker", topic="ledger", partition=5, producer_id=miss.producer_id,
              producer_epoch=epoch, transactional_id="ledger-miss", first_offset=m5[0],
              record_count=3)  # fmt: skip
    return miss, ("ledger", 5, miss, epoch, m5[0], 3)


def _non_transactional_write_in_txn(
    c: Cluster, truth: Truth, timeout: int
) -> TransactionalProducer:
    """Partition 0 again: a non-transactional batch of a producer whose transaction is open."""
    mixed = TransactionalProducer(c, "ledger-mixed", timeout_ms=timeout)
    mixed.send("ledger", 0, 2)
    nt = c.log("ledger", 0).produce(
        [_keyed(c, "nt", "outside") for _ in range(2)], producer_id=mixed.producer_id,
        producer_epoch=mixed.epoch, base_sequence=mixed.next_sequence(("ledger", 0), 2),
    )  # fmt: skip
    truth.add("non_transactional_write_in_txn", topic="ledger", partition=0,
              producer_id=mixed.producer_id, producer_epoch=mixed.epoch,
              transactional_id="ledger-mixed", first_offset=nt[0], last_offset=nt[1],
              record_count=2)  # fmt: skip
    mixed.commit()
    return mixed


@scenario
def aborted_reads(out: str, seed: int, scale: float) -> Truth:
    """read_uncommitted groups consume aborted transactions: one commits past a transaction
    while it is still open (proof of read_uncommitted), one is a consume-transform-produce step
    that carries the aborted records into its committed output; a read_committed group is clean."""
    truth = Truth("aborted_reads", seed, scale, aborted_reads.__doc__)
    c = Cluster(out, seed)
    c.create_topic(TopicConfig("trades", 2))
    c.create_topic(TopicConfig("trades-enriched", 2))
    _bulk(c, "trades", scale)
    src = TransactionalProducer(c, "trades-tx", version=1)
    rc = _group(c, "risk-rc", "range", READ_COMMITTED, truth)
    ru = _group(c, "risk-ru", "range", READ_UNCOMMITTED, truth)
    ctp = _group(c, "trades-enricher", "range", READ_UNCOMMITTED, truth)
    rc_c = Consumer.join(c, rc, "risk-rc-c0", ["trades"])
    ru_c = Consumer.join(c, ru, "risk-ru-c0", ["trades"])
    ctp_c = Consumer.join(c, ctp, "trades-enricher-c0", ["trades"])
    step = TransactionalProducer(c, "trades-enricher-tx", version=1)
    aborted_batches: dict[int, list] = {0: [], 1: []}
    for rnd in range(16):
        for p in range(2):
            src.send("trades", p, c.rng.randint(2, 5), tag=f"t{rnd}")
        abort = rnd % 4 == 2
        if abort:  # the uncommitted readers see it before the abort
            ru_c.poll()
            ru_c.commit()
            _transform(c, ctp_c, step, "trades-enriched", commit=True)
            for p in range(2):
                aborted_batches[p] += [
                    b
                    for b in c.log("trades", p).batches
                    if b.kind == TXN_DATA and c.log("trades", p).txns[b.txn].outcome == "OPEN"
                ]
            c.tick(3000, 6000)  # the transaction stays open a while after they committed
            src.abort()
        else:
            src.commit()
        for m in (rc_c, ru_c):
            m.poll()
            m.commit()
        _transform(c, ctp_c, step, "trades-enriched", commit=True)
    for p in range(2):
        n = sum(b.records for b in aborted_batches[p])
        first, last = aborted_batches[p][0].base, aborted_batches[p][-1].last
        for gid in ("risk-ru", "trades-enricher"):
            truth.add("aborted_read_leak", topic="trades", partition=p, group_id=gid,
                      producer_id=src.producer_id, first_offset=first, last_offset=last, record_count=n)  # fmt: skip
        truth.add("aborted_data_propagated", topic="trades", partition=p, group_id="trades-enricher",
                  producer_id=step.producer_id, transactional_id="trades-enricher-tx", record_count=n,
                  note=f"aborted records of producer {src.producer_id} carried into trades-enriched")  # fmt: skip
    for tp in (src, step):
        _txn_fact(truth, tp)
    c.close()
    truth.clean_group("risk-rc", "read_committed")
    return truth


@scenario
def broadcast_groups(out: str, seed: int, scale: float) -> Truth:
    """A group whose assignor hands every member every partition: members commit their own
    positions and overwrite each other; a range group on the same topic is clean."""
    truth = Truth("broadcast_groups", seed, scale, broadcast_groups.__doc__)
    c = Cluster(out, seed)
    c.create_topic(TopicConfig("metrics", 3))
    _bulk(c, "metrics", scale)
    prod = Producer(c)
    bg = _group(c, "dashboards", "broadcast", READ_UNCOMMITTED, truth)
    ok = _group(c, "metrics-archiver", "range", READ_UNCOMMITTED, truth)
    members = [Consumer.join(c, bg, f"dashboards-c{i}", ["metrics"]) for i in range(3)]
    for m in members:
        m.forget_positions()
    archivers = [Consumer.join(c, ok, f"archiver-c{i}", ["metrics"]) for i in range(2)]
    commits: dict[int, list[int]] = {p: [] for p in range(3)}
    for rnd in range(30):
        for p in range(3):
            prod.send("metrics", p, c.rng.randint(2, 6), tag=f"m{rnd}")
        _poll_and_record(c, members, (0.9, 0.5, 0.25), commits, 3)
        for a in archivers:
            a.poll()
            a.commit()
    _overwrites(truth, "metrics", "dashboards", commits)
    c.close()
    truth.clean_group("metrics-archiver", "range assignor")
    _clean_topic(truth, c, "metrics", "idempotent producer")
    return truth


@scenario
def offset_resets(out: str, seed: int, scale: float) -> Truth:
    """Offset regressions outside broadcast groups: a reset to earliest while the group is
    empty (an operator's reset, info) and a rewind while the group is stable (a warning)."""
    truth = Truth("offset_resets", seed, scale, offset_resets.__doc__)
    c = Cluster(out, seed)
    c.create_topic(TopicConfig("audit-log", 2))
    _bulk(c, "audit-log", scale)
    prod = Producer(c)
    g = _group(c, "auditors", "range", READ_UNCOMMITTED, truth)
    other = _group(c, "auditors-2", "range", READ_UNCOMMITTED, truth)
    o = Consumer.join(c, other, "auditors-2-c0", ["audit-log"])

    def traffic(rounds: int, consumers) -> None:
        for r in range(rounds):
            for p in range(2):
                prod.send("audit-log", p, 4, tag=f"a{r}")
            for m in consumers:
                m.poll(max_batches=2)
                m.commit()

    m = Consumer.join(c, g, "auditors-c0", ["audit-log"])
    traffic(8, [m, o])
    before = dict(g.offsets)
    m.leave()  # the group is empty; an operator resets it to the earliest offsets
    c.tick(1000, 2000)
    c.group_coordinator.commit(g, {tp: 0 for tp in before})
    for (t, p), off in sorted(before.items()):
        truth.add("offset_regression", topic=t, partition=p, group_id="auditors", severity="info",
                  first_offset=0, last_offset=off - 1, record_count=off, note="reset while Empty")  # fmt: skip
    m = Consumer.join(c, g, "auditors-c1", ["audit-log"])
    traffic(8, [m, o])
    # partition 1 rewinds by ten offsets while the group is stable (a seek in the application).
    pos = m.positions[("audit-log", 1)]
    m.positions[("audit-log", 1)] = pos - 10
    m.commit()
    truth.add("offset_regression", topic="audit-log", partition=1, group_id="auditors",
              severity="warning", first_offset=pos - 10, last_offset=pos - 1, record_count=10,
              note="rewind while Stable")  # fmt: skip
    traffic(3, [m, o])
    c.close()
    truth.clean_group("auditors-2", "monotonic commits")
    return truth


@scenario
def replica_divergence(out: str, seed: int, scale: float) -> Truth:
    """Two brokers hold replicas of each partition; after an unclean leader election one
    replica of inventory-0 holds different batches at the same offsets."""
    truth = Truth("replica_divergence", seed, scale, replica_divergence.__doc__)
    c = Cluster(out, seed, brokers=2)
    c.create_topic(TopicConfig("inventory", 2, replicas=2))
    _bulk(c, "inventory", scale)
    prod = Producer(c)
    spans = []
    for r in range(30):
        for p in range(2):
            got = prod.send("inventory", p, 3, tag=f"i{r}")
            if p == 0:
                spans.append(got)
    c.close()
    leader, follower = c.log("inventory", 0).log_dirs
    first, last = spans[20][0], spans[24][1]
    _rewrite_values(os.path.join(follower, "inventory-0"), first, last)
    truth.add("replica_divergence", topic="inventory", partition=0, first_offset=first,
              last_offset=last, record_count=last - first + 1,
              note=f"{os.path.basename(follower)} differs from {os.path.basename(leader)}")  # fmt: skip
    truth.clean_partition("inventory", 1, "identical replicas")
    return truth


def _rewrite_values(part_dir: str, first: int, last: int) -> None:
    """Flip value bytes of the batches within [first, last] and fix their CRCs: valid batches
    with other content, as a diverged replica has."""
    for name in sorted(os.listdir(part_dir)):
        if not name.endswith(".log"):
            continue
        path = os.path.join(part_dir, name)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        for pos, base, length in iter_entries(data):
            if pos + RECORD_BATCH_OVERHEAD > len(data):
                break
            if base >= first and base + batch_header(data, pos).last_offset_delta <= last:
                data[pos + length - 3] ^= 0x01  # inside the last record's value
                restamp_crc(data, pos)
        with open(path, "wb") as f:
            f.write(data)


@scenario
def corrupt_segments(out: str, seed: int, scale: float) -> Truth:
    """Damaged files: a flipped byte (CRC mismatch), a torn write into a zero-filled tail, and
    garbage over the middle of a segment; one partition stays intact."""
    truth = Truth("corrupt_segments", seed, scale, corrupt_segments.__doc__)
    c = Cluster(out, seed)
    c.create_topic(TopicConfig("clicks", 4))
    _bulk(c, "clicks", scale)
    prod = Producer(c, codec=COMPRESSION_LZ4)
    spans: dict[int, list] = {p: [] for p in range(4)}
    for r in range(20):
        for p in range(4):
            spans[p].append(prod.send("clicks", p, 4, tag=f"c{r}"))
    c.close()
    d = c.log("clicks", 0).writer.dir

    def seg(p: int) -> str:
        return os.path.join(os.path.dirname(d), f"clicks-{p}", "00000000000000000000.log")

    def positions(path: str) -> list[tuple[int, int, int]]:
        with open(path, "rb") as f:
            return list(iter_entries(f.read()))

    p0 = positions(seg(0))
    pos, base, size = p0[5]
    with open(seg(0), "r+b") as f:
        f.seek(pos + size - 5)
        b = f.read(1)
        f.seek(pos + size - 5)
        f.write(bytes([b[0] ^ 0xFF]))
    truth.add("crc_mismatch", topic="clicks", partition=0, first_offset=base,
              note=f"byte {pos + size - 5} flipped")  # fmt: skip
    p1 = positions(seg(1))
    pos, base, size = p1[-1]
    with open(seg(1), "r+b") as f:
        f.truncate(pos + size // 2)
        f.seek(0, 2)
        f.write(bytes(8192))
    truth.add("truncated_batch", topic="clicks", partition=1, first_offset=base,
              note=f"torn write at byte {pos}, zero-filled tail")  # fmt: skip
    p2 = positions(seg(2))
    pos, base, size = p2[8]
    with open(seg(2), "r+b") as f:
        f.seek(pos + 20)
        f.write(bytes(c.rng.getrandbits(8) for _ in range(size + 40)))
    # the garbage starts inside batch 8: its header survives and its CRC fails; what follows
    # up to the next valid batch is unreadable
    truth.add("crc_mismatch", topic="clicks", partition=2, first_offset=base,
              note=f"garbage from byte {pos + 20}, inside this batch")  # fmt: skip
    truth.add("corrupt_bytes", topic="clicks", partition=2,
              note="the rest of the garbage, up to the next valid batch")  # fmt: skip
    truth.clean_partition("clicks", 3, "intact")
    return truth


CLEAN = [n for n in SCENARIOS if n.startswith("clean_")]


@scenario
def demo(out: str, seed: int, scale: float) -> Truth:
    """One cluster with a bit of everything the audit looks for: an idempotent duplicate, a
    hanging transaction, a read_uncommitted group consuming aborted records and carrying them
    through a consume-transform-produce step, and a broadcast group overwriting its offsets."""
    truth = Truth("demo", seed, scale, demo.__doc__)
    c = Cluster(out, seed)
    c.create_topic(TopicConfig("orders", 2, codec=COMPRESSION_LZ4))
    c.create_topic(TopicConfig("orders-enriched", 2, codec=COMPRESSION_ZSTD))
    c.create_topic(TopicConfig("clicks", 2))
    _bulk(c, "clicks", scale)
    src = TransactionalProducer(c, "orders-tx", version=2)
    step = TransactionalProducer(c, "enricher-tx", version=1)
    ru = _group(c, "enricher", "range", READ_UNCOMMITTED, truth)
    rc = _group(c, "billing", "range", READ_COMMITTED, truth)
    ru_c = Consumer.join(c, ru, "enricher-c0", ["orders"])
    rc_c = Consumer.join(c, rc, "billing-c0", ["orders"])
    clicks = Producer(c)
    dash = _group(c, "dashboards", "broadcast", READ_UNCOMMITTED, truth)
    viewers = [Consumer.join(c, dash, f"dashboards-c{i}", ["clicks"]) for i in range(3)]
    for v in viewers:
        v.forget_positions()
    aborted: list = []
    commits: dict[int, list[int]] = {0: [], 1: []}
    for rnd in range(12):
        src.send("orders", rnd % 2, c.rng.randint(2, 5), tag=f"o{rnd}")
        if rnd % 4 == 1:  # the uncommitted reader takes it in before the abort
            _transform(c, ru_c, step, "orders-enriched", commit=True)
            log = c.log("orders", rnd % 2)
            aborted += [
                (rnd % 2, b)
                for b in log.batches
                if b.kind == TXN_DATA and log.txns[b.txn].outcome == "OPEN"
            ]
            c.tick(3000, 6000)
            src.abort()
        else:
            src.commit()
        _transform(c, ru_c, step, "orders-enriched", commit=True)
        rc_c.poll()
        rc_c.commit()
        for p in range(2):
            clicks.send("clicks", p, 3, tag=f"c{rnd}")
        _poll_and_record(c, viewers, (0.9, 0.5, 0.3), commits, 2)
    for p in (0, 1):
        mine = [b for q, b in aborted if q == p]
        if not mine:
            continue
        n = sum(b.records for b in mine)
        truth.add("aborted_read_leak", topic="orders", partition=p, group_id="enricher",
                  producer_id=src.producer_id, record_count=n)  # fmt: skip
        truth.add("aborted_data_propagated", topic="orders", partition=p, group_id="enricher",
                  producer_id=step.producer_id, transactional_id="enricher-tx", record_count=n)  # fmt: skip
    _overwrites(truth, "clicks", "dashboards", commits)
    # a duplicate after the broker lost the producer's state
    c.log("clicks", 0).forget_producer(clicks.producer_id)
    dup = clicks.retry("clicks", 0)
    truth.add("duplicate_sequence", topic="clicks", partition=0, producer_id=clicks.producer_id,
              producer_epoch=0, first_offset=dup[0], record_count=dup[1] - dup[0] + 1)  # fmt: skip
    # a transaction whose coordinator never finishes it, while the partition moves on
    stuck = TransactionalProducer(c, "orders-stuck", timeout_ms=10_000)
    first, _ = stuck.send("orders", 1, 3)
    for r in range(4):
        clicks.send("orders", 1, 2, tag=f"late{r}")
        c.clock.tick(5_000)
    truth.add("hanging_transaction", topic="orders", partition=1, producer_id=stuck.producer_id,
              transactional_id="orders-stuck", first_offset=first, record_count=3)  # fmt: skip
    for tp in (src, step, stuck):
        _txn_fact(truth, tp)
    c.close()
    truth.clean_group("billing", "read_committed")
    return truth


# registers the production_day family, the long_lived_producer family, then the
# production_layouts family, then the production_compacted family
from simulator import production  # noqa: E402,F401,I001
from simulator import long_lived  # noqa: E402,F401,I001
from simulator import layouts  # noqa: E402,F401,I001
from simulator import compacted  # noqa: E402,F401,I001
