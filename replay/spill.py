"""Bounded memory for sequences that grow with a producer's life: rows of int64 columns held in
memory up to a budget, then appended to a file in the local directories Spark gives its
Python workers, and read back a range of rows at a time.

Why: a Kafka Streams thread under transaction version 0/1 keeps one producer id for its whole
life (about 860,000 transactions a day); the cross-log judgement of such a producer reads its
sequences twice, forwards and then backwards a block at a time (:mod:`replay.crosslog`), so it
needs them again but never all at once. The file is written once, sequentially, and read a
block at a time: the process holds one block, whatever the history's length (Spark's own
sorts spill the same way)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import weakref

import numpy as np

# what one sequence holds in memory before it goes to a file: a day of one producer in one
# partition (~860,000 rows of ~15 columns) is ~100 MB; a short-lived producer (fewer than
# ~8,000 transactions) never reaches it, and a producer writing 50 partitions holds 100 MB
HOLD_BYTES = 1 << 20


def local_dir() -> str:
    """The first of the local directories Spark gives its Python workers (``SPARK_LOCAL_DIRS``,
    as PySpark's own spills use), else the temporary directory."""
    return os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or tempfile.gettempdir()


def remove_file(path: str, sink=None) -> None:
    """Close ``sink`` and remove ``path`` (already gone: nothing to do)."""
    if sink is not None:
        sink.close()
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


class SpilledRows:
    """Rows of ``width`` int64 columns, appended in order and read back by row range
    (:meth:`rows`). Past ``hold`` bytes they go to a file, removed by :meth:`close` (or when
    the object is dropped)."""

    def __init__(self, width: int, hold: int | None = None) -> None:
        self.width, self.hold = width, HOLD_BYTES if hold is None else hold
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0
        self.filed = 0  # rows in the file
        self.path: str | None = None
        self.sink = None
        self.memory: np.ndarray | None = None  # everything, when it never spilled
        self._remove: weakref.finalize | None = None

    def __len__(self) -> int:
        return self.filed + self.pending_rows

    def append(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        assert rows.ndim == 2 and rows.shape[1] == self.width, rows.shape
        self.memory = None
        self.pending.append(np.array(rows, np.int64, order="C"))  # a copy: the caller may reuse it
        self.pending_rows += len(rows)
        if self.pending_rows * self.width * 8 > self.hold:
            self._flush()

    def _flush(self) -> None:
        if self.sink is None:
            fd, self.path = tempfile.mkstemp(prefix="logreplay-rows-", dir=local_dir())
            self.sink = os.fdopen(fd, "wb")
            self._remove = weakref.finalize(self, remove_file, self.path, self.sink)
        for block in self.pending:
            self.sink.write(memoryview(block).cast("B"))
        self.filed += self.pending_rows
        self.pending, self.pending_rows = [], 0

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) (clipped to what there is), as one array."""
        start, stop = max(0, start), min(len(self), stop)
        if stop <= start:
            return np.zeros((0, self.width), np.int64)
        if self.sink is None:
            if self.memory is None:
                self.memory = (
                    np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
                )
                self.pending = [self.memory]
            return self.memory[start:stop]
        parts = []
        if start < self.filed:
            self.sink.flush()
            upto = min(stop, self.filed)
            with open(self.path, "rb") as f:
                f.seek(start * self.width * 8)
                flat = np.frombuffer(f.read((upto - start) * self.width * 8), np.int64)
            parts.append(flat.reshape(-1, self.width))
        if stop > self.filed:
            tail = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
            self.pending = [tail]
            parts.append(tail[max(0, start - self.filed) : stop - self.filed])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def close(self) -> None:
        self.pending, self.pending_rows, self.memory = [], 0, None
        if self._remove is not None:
            self._remove()
