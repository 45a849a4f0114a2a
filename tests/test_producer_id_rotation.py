"""Producer-id rotation under transaction version 2 (docs/formats.md 8.3, 10.4): the coordinator
bumps the epoch at every EndTxn, so a Streams app committing every 100 ms exhausts the 32,767
epochs of its producer id in under an hour, and the coordinator moves it to a new id. A dump of
a long-lived TV2 app holds such rotations; they are normal traffic and must give no finding.

Kafka's rule (TransactionMetadata.prepareAbortOrCommit, prepareComplete, prepareTransitionTo):
at EndTxn with the data's epoch >= 32766 the Prepare record keeps the old id with epoch 32767 and
names the next id (NextProducerId), the markers carry the old id and epoch 32767, and the
Complete record shows the next id at epoch 0 with the old id as PreviousProducerId; the next
transaction writes with the new id from epoch 0, sequence 0.

The app has run for weeks: its producer id starts a few dozen epochs below the limit, its
earlier history compacted out of the coordinator's log (only an id's latest record survives
the cleaner), so the dump holds the rotation without 32,700 transactions before it."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

import decoders
from decoders.constants import EXHAUSTED_PRODUCER_EPOCH, MAX_PRODUCER_EPOCH
from replay.local import audit_local
from simulator.clients import Producer, TransactionalProducer
from simulator.cluster import Cluster, TopicConfig

START = EXHAUSTED_PRODUCER_EPOCH - 60  # the epoch of the dump's first transaction
# the rotation at the 61st, then a few transactions on the new id
TRANSACTIONS = EXHAUSTED_PRODUCER_EPOCH - START + 1 + 6


@pytest.fixture(scope="module")
def rotated(tmp_path_factory):
    """A consume-transform-produce app (TV2) over 2 partitions with its offsets in every
    transaction, every seventh transaction aborted, and its read_committed group."""
    out = str(tmp_path_factory.mktemp("rotation") / "dump")
    c = Cluster(out, 5, brokers=1)
    c.create_topic(TopicConfig("in", 2))
    c.create_topic(TopicConfig("out", 2))
    source = Producer(c)
    c.txn_coordinator.restore("app-0", START - 1, 60_000, version=2)  # InitProducerId bumps it
    app = TransactionalProducer(c, "app-0", version=2)
    assert app.epoch == START
    group = c.group_coordinator.group("app", isolation="read_committed")
    first_id = app.producer_id
    for i in range(TRANSACTIONS):
        source.send("in", i % 2, 1)
        app.send("out", i % 2, 1)
        app.send_offsets(group, {("in", i % 2): i // 2 + 1})
        app.end(commit=i % 7 != 3)
    c.close()
    assert app.producer_id != first_id
    return out, first_id, app.producer_id


def test_the_simulated_coordinator_rotates_as_kafka_does(rotated):
    out, old, new = rotated
    t = decoders.read_dump([out], ["txn_log", "batches"], deep=True)
    log = t["txn_log"].to_pylist()
    switch = next(i for i, r in enumerate(log) if r["producer_id"] == new)
    prepare, complete = log[switch - 1], log[switch]
    assert prepare["state"] in ("PrepareCommit", "PrepareAbort")
    assert (prepare["producer_id"], prepare["producer_epoch"]) == (old, MAX_PRODUCER_EPOCH)
    assert prepare["next_producer_id"] == new
    assert complete["state"] == "Complete" + prepare["state"][len("Prepare") :]
    assert (complete["producer_epoch"], complete["previous_producer_id"]) == (0, old)
    batches = t["batches"].filter(pc.equal(t["batches"].column("topic"), "out"))
    rows = [r for r in batches.to_pylist() if r["producer_id"] in (old, new)]
    markers = [r for r in rows if r["is_control"] and r["producer_id"] == old]
    assert max(r["producer_epoch"] for r in markers) == MAX_PRODUCER_EPOCH
    first_new = min((r for r in rows if r["producer_id"] == new), key=lambda r: r["base_offset"])
    assert (first_new["producer_epoch"], first_new["base_sequence"]) == (0, 0)


def test_a_rotation_is_no_finding_and_both_ids_are_replayed(rotated):
    out, old, new = rotated
    res = audit_local([out])
    assert res["findings"] == []
    coord = [r for r in res["coordinator_transactions"] if r["transactional_id"] == "app-0"]
    assert len(coord) == TRANSACTIONS
    last_old = max((r for r in coord if r["producer_id"] == old), key=lambda r: r["data_epoch"])
    assert (last_old["data_epoch"], last_old["marker_epoch"]) == (
        EXHAUSTED_PRODUCER_EPOCH,
        MAX_PRODUCER_EPOCH,
    )
    on_new = sorted(r["data_epoch"] for r in coord if r["producer_id"] == new)
    assert on_new == list(range(TRANSACTIONS - (EXHAUSTED_PRODUCER_EPOCH - START) - 1))
    # every transaction of both ids is found in the data partitions and the offsets topic
    txns = [r for r in res["transactions"] if r["producer_id"] in (old, new)]
    assert {r["producer_id"] for r in txns} == {old, new}
    assert sum(r["topic"] == "out" for r in txns) == TRANSACTIONS
