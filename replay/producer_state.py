"""What a partition's leader keeps per producer id, and the broker's rules over it, each written
once (docs/formats.md 10.1-10.4; Kafka's ProducerStateEntry and ProducerAppendInfo).

The rules are written with operators that hold for Python values and numpy columns alike: the
replay applies them to one batch (:meth:`replay.partition.PartitionReplay.batch`) and to a run of
batches at once (:mod:`replay.partition_runs`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from decoders.constants import MAX_SEQUENCE, NO_PRODUCER_EPOCH

NUM_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN
RECENT_RANGES = 4096  # sequence ranges remembered per producer to tell duplicates apart


class RecentRanges:
    """A producer's last :data:`RECENT_RANGES` sequence ranges of its current epoch, each with
    the offset it was first written at (a batch sent again is a `duplicate_sequence`), and the
    highest last sequence put in since the epoch began: a run of batches whose sequences all
    lie above it repeats none of them, known without looking at each range."""

    __slots__ = ("highest", "ranges")

    def __init__(self) -> None:
        self.ranges: collections.OrderedDict[tuple[int, int], int] = collections.OrderedDict()
        self.highest = -1

    def add(self, first_seq: int, last_seq: int, offset: int) -> None:
        self.ranges[(first_seq, last_seq)] = offset
        if len(self.ranges) > RECENT_RANGES:
            self.ranges.popitem(last=False)
        self.highest = max(self.highest, last_seq)

    def add_all(self, first_seqs: list[int], last_seqs: list[int], offsets: list[int]) -> None:
        """:meth:`add` of each range in turn, in one step where that is the same: ranges
        distinct and none held already (a run of a producer's batches, whose sequences rise),
        so each adds itself at the end and pushes out the oldest; else one by one."""
        keys = list(zip(first_seqs, last_seqs, strict=True))
        distinct = set(keys)
        if len(distinct) < len(keys) or not self.ranges.keys().isdisjoint(keys):
            if len(self.ranges) + len(distinct - self.ranges.keys()) <= RECENT_RANGES:
                # nothing pushed out: adding each in turn is the dict's own update (a key
                # held keeps its place and takes the later offset), e.g. the group
                # coordinator's batches of transactional offset commits, which all carry
                # sequence 0 (docs/formats.md 3.3)
                self.ranges.update(zip(keys, offsets, strict=True))
                self.highest = max(self.highest, *last_seqs)
                return
            for (f, last), o in zip(keys, offsets, strict=True):
                self.add(f, last, o)
            return
        keep = min(len(keys), RECENT_RANGES)
        for _ in range(max(0, len(self.ranges) + keep - RECENT_RANGES)):
            self.ranges.popitem(last=False)
        start = len(keys) - keep
        self.ranges.update(zip(keys[start:], offsets[start:], strict=True))
        if last_seqs:
            self.highest = max(self.highest, max(last_seqs))

    def get(self, first_seq: int, last_seq: int) -> int | None:
        """The offset the range was first written at, if it is among the recent ones."""
        return self.ranges.get((first_seq, last_seq))

    def clear(self) -> None:
        self.ranges.clear()
        self.highest = -1


@dataclass
class Producer:
    epoch: int = NO_PRODUCER_EPOCH
    batches: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )  # (first_seq, last_seq, last_offset, offset_delta, timestamp)
    recent: RecentRanges = field(default_factory=RecentRanges)
    coordinator_epoch: int = -1
    txn: dict | None = None  # the open transaction
    last_timestamp: int = -1
    # False while all the log showed of it is markers: its sequences before them are unknown
    sequences_known: bool = True


def next_sequence(last_seq):
    """The sequence after ``last_seq``: 0 follows 2147483647
    (DefaultRecordBatch.incrementSequence), and a producer without one starts at 0."""
    return (last_seq + 1) % (MAX_SEQUENCE + 1)


def keeps_producer_state(crc_valid, magic, producer_id):
    """A batch the broker's producer state sees (10.1): CRC-valid (a damaged header cannot be
    trusted), format v2, with a producer id."""
    return crc_valid & (magic >= 2) & (producer_id >= 0)


def expired(last_timestamp, timestamp, expiration_ms):
    """10.3: a producer idle for ``producer.id.expiration.ms`` (its last write's timestamp to
    this batch's) is forgotten; one without a known timestamp never expires."""
    return (last_timestamp >= 0) & (timestamp - last_timestamp >= expiration_ms)


def batch_entry(first_seq: int, last_seq: int, base_offset: int, last_offset: int, ts: int):
    """A data batch as a producer's state keeps it among its last five
    (ProducerStateEntry.batchMetadata): sequences, last offset, offset delta, timestamp."""
    return (first_seq, last_seq, last_offset, last_offset - base_offset, ts)
