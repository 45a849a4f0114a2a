"""A Kafka Streams exactly-once thread over a long history: one producer id for life.

Under transaction versions 0 and 1 (brokers and clients before ``transaction.version=2``) a
Streams thread with ``processing.guarantee=exactly_once_v2`` keeps one transactional producer,
one producer id and one epoch for its whole life, commits every ``commit.interval.ms``
(100 ms) over every partition it writes plus its input offsets: about 860,000 transactions a
day. Time is compressed (the simulated clock moves 100 ms a transaction; nothing else runs in
between), every byte is written as a broker would (headers, CRCs, markers, coordinator
records), and the history is as long as asked.

``long_lived_producer`` is healthy. ``long_lived_producer_faults`` injects, late in the history
(from 90 % of it on), a split outcome, a missing marker and a write outside any transaction
(each of the last two hanging its partition after, which a second thread keeps writing to):
what a streamed judgement must still find after hundreds of thousands of clean transactions.

    python -m simulator long_lived_producer OUT --scale 50   # 1 M transactions
"""

from __future__ import annotations

from simulator.clients import Producer, TransactionalProducer, make_records
from simulator.cluster import Cluster, TopicConfig
from simulator.scenarios import _clean_topic, _txn_fact, scenario
from simulator.truth import Truth

TRANSACTIONS_PER_SCALE = 20_000  # --scale 1: ~33 minutes of one thread
COMMIT_INTERVAL_MS = 100
OUTPUT, INPUT, GROUP = "enriched", "orders", "enrich-app"
PARTITIONS = 4
TIMEOUT_MS = 10_000  # transaction.timeout.ms as Kafka Streams sets it under exactly-once


# the logs forget their closed past this often (PartitionLog.forget): generating a week of a
# thread (6 M transactions) holds its open state, not 50 GB of metadata
FORGET_EVERY = 10_000
DEFAULT_TRANSACTIONS = 5_000  # without --scale: the faults' partitions hang for ~30 s after


def transactions_of(scale: float) -> int:
    return int(scale * TRANSACTIONS_PER_SCALE) if scale > 0 else DEFAULT_TRANSACTIONS


def history(out: str, seed: int, transactions: int, faults: bool, name: str, doc: str) -> Truth:
    """One Streams thread's ``transactions`` transactions (TV1): each reads a batch of the
    input, writes a batch to every output partition it owns and commits its input offsets in
    the transaction."""
    truth = Truth(name, seed, transactions / TRANSACTIONS_PER_SCALE, doc)
    c = Cluster(out, seed, brokers=1)
    c.create_topic(TopicConfig(INPUT, PARTITIONS))
    c.create_topic(TopicConfig(OUTPUT, PARTITIONS))
    source = Producer(c)
    thread = TransactionalProducer(c, f"{GROUP}-0_0", version=1, timeout_ms=TIMEOUT_MS)
    other = TransactionalProducer(c, f"{GROUP}-1_0", version=1, timeout_ms=TIMEOUT_MS)
    group = c.group_coordinator.group(GROUP, isolation="read_committed")
    ends = {(INPUT, p): 0 for p in range(PARTITIONS)}
    owned = set(range(PARTITIONS))
    moved: set[int] = set()  # output partitions the other thread took over
    at = {int(transactions * share): fault for share, fault in
          ((0.90, "split"), (0.92, "missing"), (0.94, "late"))} if faults else {}  # fmt: skip
    for k in range(transactions):
        if k and k % FORGET_EVERY == 0:  # what a week of history would hold: its bytes only
            for log in c.logs.values():
                log.forget()
        c.clock.tick(COMMIT_INTERVAL_MS)
        p_in = k % PARTITIONS
        ends[(INPUT, p_in)] = source.send(INPUT, p_in, 3)[1] + 1
        for p in sorted(owned):
            thread.send(OUTPUT, p, 2)
        thread.send_offsets(group, dict(ends))
        fault = at.get(k)
        if fault == "split":
            x = min(owned)
            spans = list(thread.written[(OUTPUT, x)])
            markers = thread.commit(outcome_override={(OUTPUT, x): False})
            truth.add("split_outcome", topic=OUTPUT, partition=x, producer_id=thread.producer_id,
                      producer_epoch=thread.epoch, transactional_id=thread.transactional_id,
                      first_offset=spans[0][0], last_offset=markers[(OUTPUT, x)],
                      record_count=sum(b - a + 1 for a, b in spans),
                      note=f"transaction {k}: the coordinator committed, this partition aborted")  # fmt: skip
        elif fault == "missing":
            x = sorted(owned)[1]
            spans = list(thread.written[(OUTPUT, x)])
            thread.commit(skip_markers={(OUTPUT, x)})
            _moved(truth, thread, x, spans, "missing_marker", f"transaction {k}: CompleteCommit listed it")  # fmt: skip
            owned.discard(x)
            moved.add(x)
        elif fault == "late":
            x = sorted(owned)[1]
            tp = (OUTPUT, x)
            records = make_records(c, OUTPUT, x, 2, "late", thread.value_bytes, thread.clock)
            seq = thread.next_sequence(tp, len(records))
            epoch = thread.epoch
            thread.commit()
            c.clock.tick(20)
            span = c.log(*tp).produce(records, producer_id=thread.producer_id,
                                      producer_epoch=epoch, base_sequence=seq,
                                      transactional=True)  # fmt: skip
            _moved(truth, thread, x, [span], "write_outside_transaction", f"after transaction {k}'s COMMIT")  # fmt: skip
            owned.discard(x)
            moved.add(x)
        else:
            thread.commit()
        if moved:  # the partitions' new owner keeps writing: later records behind the open ones
            for p in sorted(moved):
                other.send(OUTPUT, p, 2)
            other.commit()
    for p in range(PARTITIONS):
        if p not in moved and not (faults and p == min(range(PARTITIONS))):
            truth.clean_partition(
                OUTPUT, p, "a long-lived TV1 producer's transactions, all markers"
            )
    _clean_topic(truth, c, INPUT, "idempotent input")
    _txn_fact(truth, thread)
    _txn_fact(truth, other)
    truth.facts["transactions"] = transactions
    truth.describe(c)
    c.close()
    return truth


def _moved(truth: Truth, thread, x: int, spans, kind: str, note: str) -> None:
    """A partition the thread leaves with data no marker will end: the finding, and the
    transaction hanging it (the other thread's later records wait behind it)."""
    where = dict(topic=OUTPUT, partition=x, producer_id=thread.producer_id,
                 producer_epoch=thread.epoch, transactional_id=thread.transactional_id,
                 first_offset=spans[0][0], last_offset=spans[-1][1],
                 record_count=sum(b - a + 1 for a, b in spans))  # fmt: skip
    truth.add(kind, **where, note=note)
    truth.add("hanging_transaction", **where, note="pins the LSO to the end")


@scenario
def long_lived_producer(out: str, seed: int, scale: float) -> Truth:
    """One Kafka Streams exactly-once thread under transaction version 1 over a long history:
    one producer id and epoch for life, a transaction every 100 ms (time compressed) over 4
    output partitions plus its input offsets; 20,000 transactions per unit of --scale. Healthy."""
    return history(out, seed, transactions_of(scale), False, "long_lived_producer",
                   long_lived_producer.__doc__)  # fmt: skip


@scenario
def long_lived_producer_faults(out: str, seed: int, scale: float) -> Truth:
    """long_lived_producer with faults late in the history (at 90, 92 and 94 % of it): a split
    outcome, a missing marker and a write outside any transaction (each of the last two
    hanging its partition, which a second thread takes over)."""
    return history(out, seed, transactions_of(scale), True, "long_lived_producer_faults",
                   long_lived_producer_faults.__doc__)  # fmt: skip
