"""Fixed-width big-endian records (batch headers, index entries, snapshot entries) as numpy
columns: one gather of the rows, then one vectorised view per field."""

from __future__ import annotations

import numpy as np


def rows(data, entry_size: int, count: int, offset: int = 0) -> np.ndarray:
    """`count` rows of `entry_size` bytes starting at `offset`, as a (count, entry_size) array."""
    return np.frombuffer(data, np.uint8, count=count * entry_size, offset=offset).reshape(
        count, entry_size
    )


def field(table: np.ndarray, start: int, dtype: str) -> np.ndarray:
    """The big-endian field of type `dtype` (e.g. '>i8') at byte `start` of every row, in native order."""
    size = np.dtype(dtype).itemsize
    return (
        np.ascontiguousarray(table[:, start : start + size]).view(dtype).ravel().astype(dtype[1:])
    )
