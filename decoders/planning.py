"""Plan a distributed read: which byte ranges of which files each task decodes.

Pure Python (no Spark), so the plan is testable on its own. Rules:
- only files whose kind holds the requested table are planned, and topic/partition filters
  prune by directory name: files of other partitions are never opened;
- a `.log` larger than the range size is split into ranges that start on batch boundaries:
  at offset-index positions when the segment has a `.index` (the broker wrote them at batch
  starts; each is confirmed by its CRC), else at the first position after the nominal split
  where a chain of CRC-valid entries starts. No task reads a whole segment to plan;
- ``segments`` and ``errors`` keep one range per file, so byte accounting stays per file;
- ranges are packed into tasks of about the range size, so small files share a task.
"""

from __future__ import annotations

import operator
import pickle
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

from decoders.accounting import FileInfo
from decoders.constants import CONSUMER_OFFSETS_TOPIC, LOG_OVERHEAD, TRANSACTION_STATE_TOPIC
from decoders.framing import entry_size
from decoders.indexes import read_offset_index
from decoders.layout import LOG_KINDS, DumpFile
from decoders.resync import Resync

DEFAULT_RANGE_BYTES = 128 * 1024 * 1024
# Entries after a resync candidate that must also be CRC-valid before it counts as a boundary.
CHAIN_CONFIRMATIONS = 2

TABLE_KINDS: dict[str, tuple[str, ...] | None] = {
    "batches": LOG_KINDS,
    "records": LOG_KINDS,
    "offset_commits": LOG_KINDS,
    "group_metadata": LOG_KINDS,
    "group_records": LOG_KINDS,
    "txn_log": LOG_KINDS,
    "index_entries": ("index", "timeindex"),
    "producer_snapshots": ("snapshot",),
    "aborted_txns": ("txnindex",),
    "segments": None,  # every file
    "errors": None,
}
TABLE_TOPICS = {
    "offset_commits": CONSUMER_OFFSETS_TOPIC,
    "group_metadata": CONSUMER_OFFSETS_TOPIC,
    "group_records": CONSUMER_OFFSETS_TOPIC,
    "txn_log": TRANSACTION_STATE_TOPIC,
}
SPLITTABLE = {"batches", "records", "offset_commits", "group_metadata", "group_records", "txn_log"}


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Entries of `file` that start in [start, stop)."""

    file: DumpFile
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    def __reduce__(self):
        """Pickled as one call of plain values: a scan's plans carry every file's range (60,505
        for 10,000 quiet partitions), and the dataclasses' own pickling (their fields looked
        up per object, three objects a range) took 0.7 s on the driver and as long again in
        the tasks (docs/benchmarks.md, "a scan's plans pickled as values")."""
        return (_byte_range, (_file_values(self.file), _info_values(self.file.info),
                              self.start, self.stop))  # fmt: skip


# a DumpFile's values but its place (a FileInfo: pickled as its own values, put back at _INFO_AT)
_FILE_FIELDS = [f.name for f in fields(DumpFile)]
_INFO_AT = _FILE_FIELDS.index("info")
_file_values = operator.attrgetter(*(n for n in _FILE_FIELDS if n != "info"))
_info_values = operator.attrgetter(*(f.name for f in fields(FileInfo)))


def _byte_range(file: tuple, info: tuple, start: int, stop: int) -> ByteRange:
    """A :class:`ByteRange` as its ``__reduce__`` gave it."""
    f = DumpFile(*file[:_INFO_AT], FileInfo(*info), *file[_INFO_AT:])
    return ByteRange(f, start, stop)


@dataclass(slots=True)
class Task:
    ranges: list[ByteRange] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)


def select(
    files: Iterable[DumpFile],
    table: str,
    topics: set[str] | None = None,
    partitions: set[int] | None = None,
) -> list[DumpFile]:
    """Files holding rows of `table` in the wanted topics and partitions (names only)."""
    kinds = TABLE_KINDS[table]
    topic = TABLE_TOPICS.get(table)
    out = []
    for f in files:
        if kinds is not None and f.kind not in kinds:
            continue
        if topic is not None and f.info.topic != topic:
            continue
        if topics is not None and f.info.topic not in topics:
            continue
        if partitions is not None and f.info.partition not in partitions:
            continue
        out.append(f)
    return out


def plan(
    files: Iterable[DumpFile],
    table: str,
    *,
    range_bytes: int = DEFAULT_RANGE_BYTES,
    topics: set[str] | None = None,
    partitions: set[int] | None = None,
) -> list[Task]:
    files = list(files)
    chosen = select(files, table, topics, partitions)
    indexes = {
        (f.log_dir, f.info.topic, f.info.partition, f.info.base_offset): f
        for f in files
        if f.kind == "index"
    }
    ranges: list[ByteRange] = []
    for f in chosen:
        if table in SPLITTABLE and f.kind == "log" and f.size > range_bytes:
            index = indexes.get((f.log_dir, f.info.topic, f.info.partition, f.info.base_offset))
            ranges.extend(split(f, range_bytes, index))
        else:
            ranges.append(ByteRange(f, 0, f.size))
    return pack(ranges, range_bytes)


def split(f: DumpFile, range_bytes: int, index: DumpFile | None = None) -> list[ByteRange]:
    """Ranges of about `range_bytes` starting on batch boundaries."""
    nominal = list(range(range_bytes, f.size, range_bytes))
    starts = _index_boundaries(f, nominal, index) if index is not None else None
    if starts is None:
        starts = _resync_boundaries(f, nominal)
    cuts = [0, *sorted({s for s in starts if 0 < s < f.size}), f.size]
    return [ByteRange(f, a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def _index_boundaries(f: DumpFile, nominal: list[int], index: DumpFile) -> list[int] | None:
    """The first offset-index position at or after each nominal split, confirmed by its CRC;
    None when the index does not help (empty, or a position is not a valid batch)."""
    with index.open() as index_src:
        positions = read_offset_index(index_src, index.info).table["log_position"].to_pylist()
    if not positions:
        return None
    with f.open() as src:
        entries = Resync(src, src.size)
        out = []
        for n in nominal:
            p = next((q for q in positions if q >= n), None)
            if p is None:
                break
            if p >= f.size or not entries.entry_is_valid(p):
                return None
            out.append(p)
        tail = [n for n in nominal if n > (positions[-1] if positions else 0)]
        out.extend(_resync_boundaries(f, tail, entries) if tail else [])
        return out


def _resync_boundaries(f: DumpFile, nominal: list[int], entries: Resync | None = None) -> list[int]:
    if entries is None:
        with f.open() as src:
            return _resync_boundaries(f, nominal, Resync(src, src.size))
    out = []
    for n in nominal:
        p = n
        while p is not None and p < f.size:
            p = entries.next_valid_entry(p)
            if p is None or _chain_is_valid(entries, p, f.size):
                break
            p += 1
        if p is not None:
            out.append(p)
    return out


def _chain_is_valid(entries: Resync, p: int, size: int) -> bool:
    """The entries after a candidate must be valid too (or the file must end there)."""
    for _ in range(CHAIN_CONFIRMATIONS):
        head = entries.src.read_at(p, LOG_OVERHEAD)
        if len(head) < LOG_OVERHEAD:
            return True
        p += LOG_OVERHEAD + entry_size(head)
        if p >= size:
            return p == size
        if not entries.entry_is_valid(p):
            return False
    return True


# What opening, reading and accounting for one more file costs a task, in bytes of segment
# decoded in the same time (measured: ~1.5 ms per small file of the every-scenario dump, where
# its 61 MB decode in ~0.5 s): a dump of many small files is balanced by files, not bytes.
RANGE_OVERHEAD = 256 << 10


class TaskPlans(Sequence):
    """The tasks' plans (ranges, copy runs...) a Spark job's function carries, each pickled
    apart: a task unpickles its own plan, not every task's. Carried as one list, every task
    unpickled all of them: 70,000 files' ranges, 13.6 MB, 0.8 s in each task of a 10,000
    partition dump's scan, growing with the dump (docs/benchmarks.md, "quiet partitions")."""

    def __init__(self, plans: Iterable) -> None:
        self.pickled = [pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL) for p in plans]

    def __len__(self) -> int:
        return len(self.pickled)

    def __getitem__(self, i: int):
        return pickle.loads(self.pickled[i])


def pack(ranges: list[ByteRange], range_bytes: int, min_tasks: int = 1) -> list[Task]:
    """Group ranges, in order, into tasks of up to `range_bytes` (a bigger range alone), and
    into at least about `min_tasks` tasks when there are ranges enough: a small dump still
    keeps every core busy (each range counted with :data:`RANGE_OVERHEAD`)."""
    return pack_units([[r] for r in ranges], range_bytes, min_tasks)


def pack_units(units: list[list[ByteRange]], range_bytes: int, min_tasks: int = 1) -> list[Task]:
    """:func:`pack` for units of ranges that stay together in one task (a partition
    directory's files, for a task that replays it): a unit larger than `range_bytes` alone."""

    def cost(unit: list[ByteRange]) -> int:
        return sum(r.size + RANGE_OVERHEAD for r in unit)

    total = sum(cost(u) for u in units)
    share = -(-total // max(min_tasks, 1))
    tasks: list[Task] = []
    current, size, spent = Task(), 0, 0
    for unit in units:
        unit_size = sum(r.size for r in unit)
        if current.ranges and (size + unit_size > range_bytes or spent + cost(unit) > share):
            tasks.append(current)
            current, size, spent = Task(), 0, 0
        current.ranges.extend(unit)
        size += unit_size
        spent += cost(unit)
    if current.ranges:
        tasks.append(current)
    return tasks
