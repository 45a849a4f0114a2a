"""One simulated partition: the leader's log with the broker's bookkeeping around it.

The bytes go through :class:`simulator.writer.PartitionWriter` (segments, indexes); this module
adds what UnifiedLog keeps beside them: producer state as ProducerStateManager holds it (for the
duplicate check a healthy broker applies and for `.snapshot` files at each roll), open
transactions (the LSO and the `.txnindex`), and compact per-batch metadata so that simulated
consumers can fetch with either isolation level (docs/formats.md 10.7).
"""

from __future__ import annotations

import bisect
import collections
import os
import shutil
from dataclasses import dataclass, field

from decoders.constants import (
    ABORT,
    COMPRESSION_NONE,
    CONTROL_FLAG_MASK,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_FLAG_MASK,
    last_sequence,
)
from decoders.framing import batch_header
from simulator.writer import (
    PartitionWriter,
    Record,
    SnapshotEntry,
    build_batch,
    control_batch,
    leader_epoch_checkpoint_text,
)

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
NUM_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN

DATA, TXN_DATA, CONTROL = 0, 1, 2
OPEN, COMMITTED, ABORTED = "OPEN", "COMMIT", "ABORT"


@dataclass(slots=True)
class BatchMeta:
    base: int
    last: int
    producer_id: int
    producer_epoch: int
    kind: int
    records: int
    max_timestamp: int
    txn: int = -1  # index into PartitionLog.txns for transactional data and markers
    appended: int = 0  # true (simulated) time of the append, for copies taken at a moment


@dataclass(slots=True)
class Txn:
    producer_id: int
    producer_epoch: int
    first_offset: int
    records: int = 0
    last_data_offset: int = -1
    marker_offset: int = -1
    outcome: str = OPEN
    first_timestamp: int = -1
    marker_timestamp: int = -1
    lso: int = -1  # the LSO once it completed (the .txnindex field)


@dataclass
class ProducerEntry:
    """ProducerStateEntry: epoch, the last five batches of that epoch, coordinator epoch and
    the open transaction's first offset."""

    epoch: int = NO_PRODUCER_EPOCH
    batches: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )  # (first_seq, last_seq, last_offset, offset_delta, timestamp)
    coordinator_epoch: int = -1
    txn_first_offset: int = -1
    last_timestamp: int = -1

    def snapshot(self, pid: int) -> SnapshotEntry:
        if self.batches:
            _, last_seq, last_off, delta, ts = self.batches[-1]
        else:
            last_seq, last_off, delta, ts = NO_SEQUENCE, -1, 0, self.last_timestamp
        return SnapshotEntry(
            pid,
            self.epoch,
            last_seq,
            last_off,
            delta,
            self.last_timestamp if self.last_timestamp >= 0 else ts,
            self.coordinator_epoch,
            self.txn_first_offset,
        )


class PartitionLog:
    """The leader's copy of one partition; followers get the same bytes at ``close``."""

    def __init__(
        self,
        log_dirs: list[str],
        topic: str,
        partition: int,
        *,
        segment_bytes: int = 1 << 30,
        index_interval_bytes: int = 4096,
        leader_epoch: int = 0,
        snapshots: bool = True,
        topic_id=None,
    ) -> None:
        self.topic, self.partition = topic, partition
        self.log_dirs = log_dirs  # leader first
        self.writer = PartitionWriter(
            log_dirs[0],
            topic,
            partition,
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            leader_epoch=leader_epoch,
            topic_id=topic_id,
        )
        if snapshots:
            self.writer.on_roll = self._snapshot
        self.producers: dict[int, ProducerEntry] = {}
        self.batches: list[BatchMeta] = []
        self._bases: list[int] = []
        self.txns: list[Txn] = []
        self.open_txn: dict[int, int] = {}  # producer id -> index into txns
        self.closed = False
        self.replicas: list[int] = [1]  # broker ids, set by the cluster
        self.leader = 1
        self.clock = None  # the cluster's true clock (copies cut at a moment)
        self.cleaned_upto: dict[str, int] = {}
        self.log_start_offset = 0
        self.append_time = None  # LogAppendTime topics: the leader's clock, read at append

    # -- appends --------------------------------------------------------------------------------
    @property
    def log_end_offset(self) -> int:
        return self.writer.next_offset

    def produce(
        self,
        records: list[Record],
        *,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        transactional: bool = False,
        codec: int = COMPRESSION_NONE,
        dedupe: bool = True,
    ) -> tuple[int, int] | None:
        """Append a client batch. With ``dedupe`` the broker's duplicate check runs first
        (10.2 step 1): a batch equal to one of the producer's last five is not appended and
        None is returned, as the broker answers a retried produce request."""
        batch = build_batch(
            records,
            codec=codec,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            transactional=transactional,
            log_append_time=self.append_time() if self.append_time else None,
        )
        return self.append_batch(batch, dedupe=dedupe)

    def append_batch(self, batch: bytes, *, dedupe: bool = False) -> tuple[int, int] | None:
        """Append a prepared v2 batch (its base offset is assigned here)."""
        h = batch_header(batch)
        pid, epoch, base_seq, count = (
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.records_count,
        )
        max_ts = h.max_timestamp
        transactional = bool(h.attributes & TRANSACTIONAL_FLAG_MASK)
        control = bool(h.attributes & CONTROL_FLAG_MASK)
        last_seq = last_sequence(base_seq, h.last_offset_delta)
        entry = self.producers.get(pid) if pid >= 0 else None
        if (
            dedupe
            and entry is not None
            and entry.epoch == epoch
            and not control
            and any(b[0] == base_seq and b[1] == last_seq for b in entry.batches)
        ):
            return None
        base, last = self.writer.append(batch)
        kind = CONTROL if control else TXN_DATA if transactional else DATA
        meta = BatchMeta(base, last, pid, epoch, kind, count, max_ts, appended=self._now())
        if pid >= 0 and not control:
            self._update_producer(pid, epoch, base_seq, last_seq, base, last, max_ts)
            if transactional:
                meta.txn = self._add_to_txn(pid, epoch, base, last, count, max_ts)
        self.batches.append(meta)
        self._bases.append(base)
        return base, last

    def _update_producer(self, pid, epoch, first_seq, last_seq, base, last, ts) -> None:
        entry = self.producers.setdefault(pid, ProducerEntry())
        if epoch != entry.epoch:
            entry.batches.clear()
            entry.epoch = epoch
        entry.batches.append((first_seq, last_seq, last, last - base, ts))
        entry.last_timestamp = ts

    def _add_to_txn(self, pid, epoch, base, last, count, ts) -> int:
        i = self.open_txn.get(pid)
        if i is None:
            i = len(self.txns)
            self.txns.append(Txn(pid, epoch, base, first_timestamp=ts))
            self.open_txn[pid] = i
            self.producers[pid].txn_first_offset = base
        t = self.txns[i]
        t.records += count
        t.last_data_offset = last
        return i

    def write_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        control_type: int,
        coordinator_epoch: int,
        timestamp: int,
    ) -> int:
        """A COMMIT/ABORT marker (origin COORDINATOR, 10.4); returns its offset."""  # fmt: skip
        batch = control_batch(
            control_type, producer_id, producer_epoch, coordinator_epoch, timestamp
        )
        base, _ = self.writer.append(batch)
        meta = BatchMeta(
            base, base, producer_id, producer_epoch, CONTROL, 1, timestamp, appended=self._now()
        )
        i = self.open_txn.pop(producer_id, None)
        if i is not None:
            t = self.txns[i]
            t.marker_offset, t.marker_timestamp = base, timestamp
            t.outcome = ABORTED if control_type == ABORT else COMMITTED
            meta.txn = i
            t.lso = self.lso()  # other open transactions' first offset, else marker + 1
            if control_type == ABORT:
                self.writer.add_aborted(producer_id, t.first_offset, base, t.lso)
        entry = self.producers.setdefault(producer_id, ProducerEntry())
        if producer_epoch != entry.epoch:
            entry.batches.clear()
            entry.epoch = producer_epoch
        entry.coordinator_epoch = coordinator_epoch
        entry.txn_first_offset = -1
        entry.last_timestamp = timestamp
        self.batches.append(meta)
        self._bases.append(base)
        return base

    def forget(self, keep: int = 64) -> None:
        """Drop what the log keeps of its past beyond its last ``keep`` batches: their metadata
        and every transaction already closed (the bytes are on disk already). A history of
        millions of transactions written by one process (:mod:`simulator.long_lived`) then
        holds its open state, not its past; fetching, cleaning and copies cut before the kept
        batches are no longer possible, so a scenario calls it only where it uses none."""
        if len(self.batches) > keep:
            del self.batches[:-keep]
            del self._bases[:-keep]
        open_ = set(self.open_txn.values())
        start = getattr(self, "_forgotten", 0)
        for i in range(start, len(self.txns)):
            if i not in open_:
                self.txns[i] = None
        self._forgotten = min(open_, default=len(self.txns))

    def _now(self) -> int:
        return self.clock.now if self.clock is not None else 0

    def offset_at(self, moment: int) -> int:
        """The log end offset as it stood at true time ``moment``."""
        for b in reversed(self.batches):
            if b.appended <= moment:
                return b.last + 1
        return 0 if self.batches else self.log_end_offset

    def retain(self, since: int) -> None:
        """retention.ms: closed segments whose every batch was appended before ``since`` go
        (called before ``close``); the log start offset moves to the first segment kept."""
        self.retention_since = since

    def _apply_retention(self) -> None:
        since = getattr(self, "retention_since", None)
        if since is None:
            return
        bases = [s.base_offset for s in self.writer.segments]
        start = 0
        for base, nxt in zip(bases, bases[1:], strict=False):
            newest = max((b.appended for b in self.batches if base <= b.base < nxt), default=0)
            if newest >= since:
                break
            start = nxt
        if start == 0:
            return
        from simulator.copies import delete_before

        delete_before(self.writer.dir, start)
        self.log_start_offset = start
        # LeaderEpochFileCache.truncateFromStart: the epoch holding the new start begins there
        epochs = self.writer.epochs
        kept = [(e, o) for e, o in epochs if o > start]
        older = [(e, o) for e, o in epochs if o <= start]
        if older:
            kept.insert(0, (older[-1][0], start))
        self.writer.epochs = kept
        self.writer._write("leader-epoch-checkpoint", leader_epoch_checkpoint_text(kept).encode())

    def forget_producer(self, producer_id: int) -> None:
        """Lose the broker's state of a producer (expiry, a restart from an old snapshot)."""
        self.producers.pop(producer_id, None)

    # -- what consumers see ---------------------------------------------------------------------
    def lso(self) -> int:
        """Last stable offset (10.6); every replica is in sync here, so HW = log end offset."""
        firsts = [self.txns[i].first_offset for i in self.open_txn.values()]
        return min(firsts, default=self.log_end_offset)

    def fetch(
        self, position: int, isolation: str, max_batches: int = 1 << 30, upto: int | None = None
    ) -> tuple[int, list[BatchMeta]]:
        """(next position, data batches returned) for a consumer at ``position``.

        read_uncommitted is bounded by the HW and returns aborted and open transactions' data;
        read_committed is bounded by the LSO and drops aborted transactions' batches. Control
        batches are never returned; the position still moves past them (10.7)."""
        bound = self.log_end_offset if isolation == READ_UNCOMMITTED else self.lso()
        if upto is not None:
            bound = min(bound, upto)
        i = bisect.bisect_right(self._bases, position) - 1
        if i < 0 or self.batches[i].last < position:
            i += 1
        returned: list[BatchMeta] = []
        while i < len(self.batches) and len(returned) < max_batches:
            b = self.batches[i]
            if b.last >= bound:
                break
            i += 1
            position = b.last + 1
            if b.kind == CONTROL:
                continue
            aborted = b.kind == TXN_DATA and self.txns[b.txn].outcome == ABORTED
            if aborted and isolation == READ_COMMITTED:
                continue
            returned.append(b)
        return position, returned

    # -- files ----------------------------------------------------------------------------------
    def _snapshot(self, offset: int) -> None:
        entries = [e.snapshot(pid) for pid, e in sorted(self.producers.items())]
        self.writer.add_snapshot(offset, entries)

    def close(self, cleaner=None, cuts: dict[str, int] | None = None, each: bool = False) -> None:
        """Write the remaining files; a clean shutdown snapshots producer state at the log end.
        Each replica's copy is then cut to its offset in ``cuts`` (a copy taken while the
        broker ran, :mod:`simulator.copies`), and ``cleaner(log, dir, cut)`` compacts it
        (compacted topics): once, before the copies, or with ``each`` every replica on its own
        after them, as each broker's cleaner does (LogCleaner runs per broker)."""
        from simulator.copies import copy_dir, truncate_dir

        if self.closed:
            return
        if self.writer.on_roll is not None and self.producers:
            self._snapshot(self.log_end_offset)
        self.writer.close()
        self._apply_retention()
        cuts = cuts or {}
        end = self.log_end_offset
        name = os.path.basename(self.writer.dir)
        # one cleaning of the whole log up to the shortest copy's end: every replica then
        # holds the same cleaned prefix and its own uncleaned tail
        once = cleaner(self, self.writer.dir, end) if cleaner and not each else 0
        self.cleaned_upto = dict.fromkeys(self.log_dirs, once)
        for follower in self.log_dirs[1:]:
            dst = os.path.join(follower, name)
            if cuts.get(follower, end) < end:
                copy_dir(self.writer.dir, dst, cuts[follower])
            else:
                shutil.copytree(self.writer.dir, dst, dirs_exist_ok=True)
        if cuts.get(self.log_dirs[0], end) < end:
            truncate_dir(self.writer.dir, cuts[self.log_dirs[0]])
        if cleaner and each:
            for d in self.log_dirs:
                self.cleaned_upto[d] = cleaner(self, os.path.join(d, name), cuts.get(d, end))
        self.closed = True
