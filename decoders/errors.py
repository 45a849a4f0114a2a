"""Why a byte range was rejected: the error rows every decoder emits instead of raising.

Error kinds are the decoding finding kinds of docs/findings.md so that a later audit can turn an
error row into a finding without translation.
"""

from __future__ import annotations

from dataclasses import dataclass

CRC_MISMATCH = "crc_mismatch"
TRUNCATED_BATCH = "truncated_batch"
CORRUPT_BYTES = "corrupt_bytes"
UNKNOWN_VERSION = "unknown_version"
INDEX_INCONSISTENT = "index_inconsistent"
# Decoding a file raised something that is not a format error (out of memory, a bug), or the Spark
# task decoding it failed after every attempt (a worker lost): the file's bytes are not decoded.
DECODE_FAILED = "decode_failed"
# A file the dump's listing named that was gone when it was opened (a live broker's retention or
# cleaner deleting it while the dump was listed or copied, a dangling symlink a copy left): its
# bytes cannot be told, not damaged (docs/findings.md).
FILE_VANISHED = "file_vanished"


class DecodeError(ValueError):
    """Raised inside a decoder when bytes do not follow the format; callers turn it into a row."""


class UnknownVersion(DecodeError):
    """A record, key or value version this decoder does not know: an ``unknown_version`` row."""


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """One problem at an exact place in one file."""

    file: str
    position: int
    length: int
    kind: str
    reason: str
    offset: int | None = None
