"""The transaction coordinator and the group coordinator of the simulated cluster.

Both write their internal topics as the brokers do: one batch per write, producer id -1 for
their own records (docs/formats.md 6.1, 8.1), and the transaction coordinator's state machine
with the transitions of 8.4 (an illegal transition raises: the model never writes one unless a
fault asks for it through ``write_state``). The coordinator of a transactional id (or group) is
the leader of its internal partition: its clock stamps the records, and the transaction
coordinator's epoch (the leader epoch of that partition) is stamped into every marker.

The transition table is Kafka's, defined once in
:data:`decoders.transaction_log.VALID_PREVIOUS_STATES` (the replay judges logs by the same one);
``Dead`` there is the tombstone, which the simulator never writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from decoders import consumer_offsets as co
from decoders import consumer_protocol as cp
from decoders import transaction_log as tl
from decoders.constants import CONSUMER_OFFSETS_TOPIC, EXHAUSTED_PRODUCER_EPOCH
from decoders.partitioning import partition_for
from decoders.transaction_log import valid_previous_states
from simulator.writer import Record


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    version: int  # client transaction version: 0, 1 or 2 (KIP-890 part 2)
    state: str = "Empty"
    partitions: set[tuple[str, int]] = field(default_factory=set)
    # TV2 producer-id rotation (8.3): the id the Prepare record announces, and the id the
    # Complete record that switched to it came from
    next_producer_id: int = -1
    previous_producer_id: int = -1
    start_timestamp: int = -1
    started_at: int = -1  # true time the transaction began (the timeout is checked on it)


class TransactionCoordinator:
    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.txns: dict[str, TxnMetadata] = {}

    def write_state(
        self, md: TxnMetadata, state: str, partitions=None, *, check: bool = True
    ) -> None:
        if check and md.state not in valid_previous_states(state, md.version):
            raise ValueError(f"illegal transition {md.state} -> {state} for {md.transactional_id}")
        md.state = state
        self.cluster.tick(1, 3)
        log = self.cluster.txn_log(md.transactional_id)
        now = self.cluster.leader_now(log)  # the coordinator's clock
        grouped = None
        if state in ("Ongoing", "PrepareCommit", "PrepareAbort"):
            grouped = {}
            for t, p in sorted(partitions if partitions is not None else md.partitions):
                grouped.setdefault(t, []).append(p)
        elif state in ("CompleteCommit", "CompleteAbort"):
            grouped = {}
        value = tl.encode_value(
            md.producer_id,
            md.producer_epoch,
            md.timeout_ms,
            state,
            grouped,
            now,
            md.start_timestamp if grouped else -1,
            # TV0/1: value version 0 without tags; TV2: version 1 with ClientTransactionVersion
            version=1 if md.version >= 2 else 0,
            previous_producer_id=md.previous_producer_id if md.version >= 2 else -1,
            next_producer_id=md.next_producer_id if md.version >= 2 else -1,
            client_transaction_version=md.version if md.version >= 2 else 0,
        )
        self.cluster.coordinator_append(
            log, [Record(tl.encode_key(md.transactional_id), value, timestamp=now)]
        )

    def restore(self, transactional_id: str, epoch: int, timeout_ms: int, version: int) -> None:
        """State the coordinator loaded for ``transactional_id`` from records its log's cleaner
        has since removed (only an id's latest record survives compaction): a producer id at
        ``epoch``, none of its history in the dump. The next InitProducerId bumps from it, as
        for an app that has run for weeks."""
        self.txns[transactional_id] = TxnMetadata(
            transactional_id, self.cluster.allocate_producer_id(), epoch, timeout_ms, version
        )

    def init_producer_id(self, transactional_id: str, timeout_ms: int, version: int) -> TxnMetadata:
        """InitProducerId: a new id at epoch 0, or the same id with the epoch bumped; an ongoing
        transaction of the previous instance is aborted first (fencing, epoch + 1)."""
        md = self.txns.get(transactional_id)
        if md is None:
            md = TxnMetadata(
                transactional_id, self.cluster.allocate_producer_id(), 0, timeout_ms, version
            )
            self.txns[transactional_id] = md
        else:
            if md.state == "Ongoing":
                self.abort_with_bump(md)
            md.producer_epoch += 1
            md.version = version
        md.partitions = set()
        md.start_timestamp = -1
        self.write_state(md, "Empty")
        return md

    def add_partitions(self, md: TxnMetadata, tps: list[tuple[str, int]]) -> None:
        """AddPartitionsToTxn (TV1), or the implicit add when the broker verifies a TV2 produce."""
        new = set(tps) - md.partitions
        if not new and md.state == "Ongoing":
            return
        if md.state != "Ongoing":
            md.started_at = self.cluster.clock.now
            md.start_timestamp = self.cluster.leader_now(self.cluster.txn_log(md.transactional_id))
        md.partitions |= new
        self.write_state(md, "Ongoing")

    def end_txn(self, md: TxnMetadata, commit: bool, *, skip_markers: set | None = None,
                outcome_override: dict | None = None, failover_after: int | None = None,
                stuck_after: int | None = None) -> dict[tuple[str, int], int]:  # fmt: skip
        """EndTxn: Prepare, markers to every partition, Complete. TV2 bumps the epoch and the
        markers carry it (10.4). When the data's epoch is exhausted (>= 32766) the TV2
        coordinator rotates the producer id (8.3, TransactionMetadata.prepareAbortOrCommit and
        prepareComplete): the Prepare record and the markers keep the old id with epoch 32767
        and name the next id, and the Complete record switches to the next id at epoch 0 with
        the old one as its previous id. ``skip_markers``/``outcome_override`` are fault hooks;
        ``failover_after=k``: the coordinator's broker goes away after k markers, see
        :meth:`failover`; ``stuck_after=k``: the coordinator writes k markers and never
        completes (a transaction-version-2 transaction stuck in Prepare, KAFKA-18660)."""
        rotate = md.version >= 2 and md.producer_epoch >= EXHAUSTED_PRODUCER_EPOCH
        md.previous_producer_id = -1
        if rotate:
            md.next_producer_id = self.cluster.allocate_producer_id()
        if md.version >= 2:
            md.producer_epoch += 1
        self.write_state(md, "PrepareCommit" if commit else "PrepareAbort")
        markers = {}
        for i, tp in enumerate(sorted(md.partitions)):
            if stuck_after is not None and i == stuck_after:
                return markers
            if failover_after is not None and i == failover_after:
                markers.update(self.failover(md, commit))
                break
            if skip_markers and tp in skip_markers:
                continue
            c = (outcome_override or {}).get(tp, commit)
            markers.update(self._markers(md, [tp], c))
        else:
            if failover_after is not None:
                markers.update(self.failover(md, commit))
        if rotate:
            md.previous_producer_id, md.producer_id = md.producer_id, md.next_producer_id
            md.producer_epoch, md.next_producer_id = 0, -1
        self.write_state(md, "CompleteCommit" if commit else "CompleteAbort")
        md.partitions = set()
        return markers

    def failover(self, md: TxnMetadata, commit: bool) -> dict[tuple[str, int], int]:
        """The `__transaction_state` partition of ``md`` changes leader (a rolling restart):
        every partition it led moves, the leader epoch - the coordinator epoch - goes up, and
        the new coordinator, loading a transaction in Prepare, sends all its markers again
        (TransactionStateManager loads pending transactions and completes them): partitions
        that already had the marker get it a second time, with the new coordinator epoch."""
        log = self.cluster.txn_log(md.transactional_id)
        self.cluster.tick(50, 400)
        self.cluster.restart_broker(log.leader)
        return self._markers(md, sorted(md.partitions), commit)

    def _markers(self, md: TxnMetadata, tps, commit: bool) -> dict[tuple[str, int], int]:
        return self.cluster.write_markers(
            tps,
            md.producer_id,
            md.producer_epoch,
            commit,
            self.cluster.coordinator_epoch(md.transactional_id),
        )

    def expire(self) -> list[TxnMetadata]:
        """The coordinator's periodic check (transaction.abort.timed.out.transaction.cleanup
        .interval.ms): every Ongoing transaction older than its timeout is aborted with an
        epoch bump. Returns the aborted transactions."""
        now = self.cluster.clock.now
        out = []
        for _, md in sorted(self.txns.items()):
            if md.state == "Ongoing" and now - md.started_at > md.timeout_ms:
                self.abort_with_bump(md)
                out.append(md)
        return out

    def abort_with_bump(self, md: TxnMetadata) -> dict[tuple[str, int], int]:
        """Timeout or fencing: PrepareAbort with epoch + 1, ABORT markers with it (8.5)."""
        md.producer_epoch += 1
        self.write_state(md, "PrepareAbort")
        markers = self._markers(md, sorted(md.partitions), False)
        self.write_state(md, "CompleteAbort")
        md.partitions = set()
        return markers


# -- groups ----------------------------------------------------------------------------------------
@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    topics: list[str]
    assignment: dict[str, list[int]] = field(default_factory=dict)
    session_timeout_ms: int = 45_000
    instance_id: str | None = None


@dataclass
class Group:
    group_id: str
    assignor: str
    isolation: str
    generation: int = 0
    state: str = "Empty"
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    pending_txn: dict[int, dict[tuple[str, int], int]] = field(default_factory=dict)
    # the next rebalance's assignment by client id (a Streams assignor moving chosen tasks)
    planned: dict[str, dict[str, list[int]]] | None = None


class GroupCoordinator:
    """Classic-protocol group coordinator: generations, assignments and offset commits."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.groups: dict[str, Group] = {}

    def group(
        self, group_id: str, assignor: str = "range", isolation: str = "read_uncommitted"
    ) -> Group:
        if group_id not in self.groups:
            self.groups[group_id] = Group(group_id, assignor, isolation)
        return self.groups[group_id]

    def rebalance(self, group: Group) -> None:
        """Complete a rebalance: next generation, the leader's assignment, the group record."""
        from simulator.assignors import assign

        group.generation += 1
        if not group.members:
            group.state, group.leader = "Empty", None
        else:
            group.state = "Stable"
            if group.leader not in group.members:
                group.leader = sorted(group.members)[0]
            partitions = {
                t: self.cluster.topics[t].partitions
                for m in group.members.values()
                for t in m.topics
            }
            previous = {mid: m.assignment for mid, m in group.members.items()}
            result = assign(
                group.assignor,
                {mid: m.topics for mid, m in group.members.items()},
                partitions,
                previous,
            )
            if group.planned is not None:
                result = {
                    mid: group.planned.get(m.client_id, result[mid])
                    for mid, m in group.members.items()
                }
                group.planned = None
            for mid, m in group.members.items():
                m.assignment = result.get(mid, {})
        self._store_group(group)

    def _now(self, group: Group) -> int:
        """The group coordinator's clock: the leader of the group's offsets partition."""
        return self.cluster.leader_now(self.cluster.offsets_log(group.group_id))

    def _store_group(self, group: Group) -> None:
        self.cluster.tick(1, 5)
        now = self._now(group)
        members = [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "subscription": cp.encode_subscription(
                    m.topics, owned=m.assignment, generation=group.generation
                ),
                "assignment": cp.encode_assignment(m.assignment),
            }
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ]
        protocol = _protocol_name(group.assignor) if group.members else None
        value = co.encode_group_metadata(
            "consumer", group.generation, protocol, group.leader, members, state_timestamp=now
        )
        log = self.cluster.offsets_log(group.group_id)
        self.cluster.coordinator_append(
            log,
            [Record(co.encode_group_metadata_key(group.group_id), value, timestamp=now)],
            base_sequence=0,
        )

    def join(self, group: Group, member: Member) -> None:
        group.members[member.member_id] = member
        self.rebalance(group)

    def leave(self, group: Group, member_id: str) -> None:
        group.members.pop(member_id, None)
        self.rebalance(group)

    def _offset_records(self, group: Group, offsets: dict[tuple[str, int], int]) -> list[Record]:
        """The OffsetCommit records of one commit (value version 3), stamped by the group
        coordinator's clock."""
        self.cluster.tick(1, 3)
        now = self._now(group)
        return [
            Record(
                co.encode_offset_commit_key(group.group_id, t, p),
                co.encode_offset_commit(o, now),
                timestamp=now,
            )
            for (t, p), o in sorted(offsets.items())
        ]

    def commit(self, group: Group, offsets: dict[tuple[str, int], int]) -> tuple[int, int]:
        """OffsetCommit: one batch with a record per partition (value version 3)."""
        records = self._offset_records(group, offsets)
        group.offsets.update(offsets)
        return self.cluster.coordinator_append(
            self.cluster.offsets_log(group.group_id), records, base_sequence=0
        )

    def delete_offsets(self, topic: str) -> None:
        """A deleted topic's committed offsets removed from every group that has any: a
        tombstone per partition (GroupMetadataManager.cleanupGroupMetadata, on the
        controller's deletion of the topic's partitions)."""
        for g in self.groups.values():
            gone = sorted(tp for tp in g.offsets if tp[0] == topic)
            if not gone:
                continue
            self.cluster.tick(1, 3)
            now = self._now(g)
            records = [Record(co.encode_offset_commit_key(g.group_id, t, p), None, timestamp=now)
                       for t, p in gone]  # fmt: skip
            for tp in gone:
                del g.offsets[tp]
            self.cluster.coordinator_append(
                self.cluster.offsets_log(g.group_id), records, base_sequence=0
            )

    def txn_commit(self, group: Group, offsets: dict[tuple[str, int], int], producer_id: int,
                   producer_epoch: int) -> tuple[int, int]:  # fmt: skip
        """TxnOffsetCommit: a transactional batch of the producer; it takes effect only at the
        COMMIT marker in this partition (6.8)."""
        records = self._offset_records(group, offsets)
        group.pending_txn.setdefault(producer_id, {}).update(offsets)
        return self.cluster.coordinator_append(
            self.cluster.offsets_log(group.group_id),
            records,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=0,
            transactional=True,
        )

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        for g in self.groups.values():
            if partition_for(g.group_id, self.cluster.offsets_partitions) != offsets_partition:
                continue
            pending = g.pending_txn.pop(producer_id, None)
            if pending and commit:
                g.offsets.update(pending)

    def offsets_topic_partition(self, group: Group) -> tuple[str, int]:
        return CONSUMER_OFFSETS_TOPIC, partition_for(
            group.group_id, self.cluster.offsets_partitions
        )


def _protocol_name(assignor: str) -> str:
    return {"broadcast": "broadcast", "stream": "stream"}.get(assignor, assignor)
