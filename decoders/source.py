"""Byte sources: read a file by ranges, never whole.

A source knows its size and returns the bytes of a range. Local files use ``os.pread``;
anything with ``read_at``/``seek``+``read`` (pyarrow's NativeFile, fsspec files, BytesIO)
is wrapped, which is how remote filesystems plug in.
"""

from __future__ import annotations

import errno
import functools
import io
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import numpy as np


class SourceChanged(OSError):
    """A file changed under a reader: bytes it had when opened are gone."""


class ByteSource(Protocol):
    size: int
    name: str

    def read_at(self, position: int, length: int) -> bytes: ...

    def close(self) -> None: ...


class _Closing:
    """Sources are context managers: ``with open_source(path) as src: ...`` closes the file."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalFile(_Closing):
    """A local file read with positional reads (no shared file position, thread safe)."""

    def __init__(self, path: str | os.PathLike, name: str | None = None) -> None:
        self.path = os.fspath(path)
        self.name = name or self.path
        self._fd = os.open(self.path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size

    def read_at(self, position: int, length: int) -> bytes:
        length = max(0, min(length, self.size - position))
        chunks, got = [], 0
        while got < length:  # pread may return short reads on some filesystems
            b = os.pread(self._fd, length - got, position + got)
            if not b:
                break
            chunks.append(b)
            got += len(b)
        if got < length:  # the file shrank since it was opened
            raise self._shrank(position + got)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _shrank(self, at: int) -> SourceChanged:
        return SourceChanged(
            f"{self.name} shrank while it was read: {at} of {self.size} bytes left"
        )

    def read_into(self, position: int, out: np.ndarray) -> int:
        """Fill ``out`` with the bytes from ``position`` on (as far as the file goes): a read
        into a buffer the caller reuses costs no fresh pages, where :meth:`read_at` makes new
        bytes each time. The number of bytes read."""
        length = max(0, min(len(out), self.size - position))
        got = 0
        while got < length:  # pread may return short reads on some filesystems
            n = os.preadv(self._fd, [out[got:length]], position + got)
            if not n:
                break
            got += n
        if got < length:  # the file shrank since it was opened
            raise self._shrank(position + got)
        return got

    def data_after(self, position: int) -> int:
        """Where the next bytes with data start at or after ``position``: a hole of a sparse
        file reads as zeros and need not be read at all (the file size when none follow)."""
        try:
            return min(self.size, os.lseek(self._fd, position, os.SEEK_DATA))
        except OSError as e:
            # ENXIO: only a hole follows; anything else (no SEEK_DATA here): read it all
            return self.size if e.errno == errno.ENXIO else position

    def hole_after(self, position: int) -> int:
        """Where the next hole (or the end of the file) starts at or after ``position``."""
        try:
            return min(self.size, os.lseek(self._fd, position, os.SEEK_HOLE))
        except OSError:
            return self.size

    def current_size(self) -> int:
        """The file's size now (the decoders check it against ``size`` when they are done)."""
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        # a descriptor left open is a leak: say so (python -X dev shows it), then close it
        if getattr(self, "_fd", -1) >= 0:
            warnings.warn(f"unclosed file {self.name!r}", ResourceWarning, stacklevel=2)
            self.close()


class FileObjectSource(_Closing):
    """Wraps a seekable binary file object (pyarrow NativeFile, fsspec file, BytesIO)."""

    def __init__(self, fileobj, name: str, size: int | None = None) -> None:
        self.f = fileobj
        self.name = name
        if size is None:
            fileobj.seek(0, io.SEEK_END)
            size = fileobj.tell()
        self.size = size

    def read_at(self, position: int, length: int) -> bytes:
        length = max(0, min(length, self.size - position))
        if hasattr(self.f, "read_at"):
            return bytes(self.f.read_at(length, position))
        self.f.seek(position)
        return self.f.read(length)

    def close(self) -> None:
        self.f.close()


class WindowedSource(_Closing):
    """A source read a window at a time: small reads in order (entry heads, then the entries
    themselves) cost one read of the underlying source per window, not one each, which on an
    object store is one request each. Larger reads go through."""

    def __init__(self, src: ByteSource, window: int = 8 << 20) -> None:
        self.src = src
        self.name = getattr(src, "name", "<source>")
        self.size = src.size
        self.window = window
        self.start, self.data = 0, b""

    def read_at(self, position: int, length: int) -> bytes:
        if length > self.window:
            return self.src.read_at(position, length)
        end = position + length
        if not (self.start <= position and end <= self.start + len(self.data)):
            self.start, self.data = position, self.src.read_at(position, self.window)
        at = position - self.start
        return self.data[at : at + length]

    def close(self) -> None:
        self.src.close()


class BytesSource(_Closing):
    """An in-memory byte string as a source (tests, decoded inner message sets)."""

    def __init__(self, data: bytes, name: str = "<bytes>") -> None:
        self.data = data
        self.name = name
        self.size = len(data)

    def read_at(self, position: int, length: int) -> bytes:
        return self.data[position : position + length]


def open_source(path_or_source, name: str | None = None) -> ByteSource:
    if isinstance(path_or_source, (str, os.PathLike)):
        return LocalFile(path_or_source, name)
    if isinstance(path_or_source, (bytes, bytearray, memoryview)):
        return BytesSource(bytes(path_or_source), name or "<bytes>")
    if (
        hasattr(path_or_source, "read_at")
        and hasattr(path_or_source, "size")
        and not callable(path_or_source.size)
    ):
        return path_or_source
    return FileObjectSource(path_or_source, name or getattr(path_or_source, "name", "<file>"))


@contextmanager
def opened(path_or_source, name: str | None = None) -> Iterator[ByteSource]:
    """A source for the duration of a ``with`` block: a path is opened and closed here, a
    source (or file object) passed in stays open for its owner."""
    src = open_source(path_or_source, name)
    try:
        yield src
    finally:
        if isinstance(path_or_source, (str, os.PathLike)):
            src.close()


def reads_source(fn):
    """Decorate a reader whose first argument is a path or a source: it gets an open source,
    closed after the call when the reader was given a path."""

    @functools.wraps(fn)
    def wrapper(path_or_source, *args, **kwargs):
        with opened(path_or_source) as src:
            return fn(src, *args, **kwargs)

    return wrapper
