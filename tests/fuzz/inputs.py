"""Valid and hostile inputs built byte by byte: batches from a records area, records areas of
millions of records without a Python object per record, files laid out as a broker names them.

The simulator's writer builds batches from Record objects; the blow-up inputs need millions of
records, so here a records area is built by repeating one encoded record.
"""

from __future__ import annotations

import pathlib
import struct

import cramjam
import crc32c

from decoders.compression import compress
from decoders.constants import COMPRESSION_NONE, COMPRESSION_ZSTD
from decoders.consumer_offsets import encode_offset_commit_key
from simulator.writer import encode_record


def batch(
    area: bytes,
    count: int,
    *,
    codec: int = COMPRESSION_NONE,
    base_offset: int = 0,
    last_offset_delta: int | None = None,
    base_timestamp: int = 0,
    max_timestamp: int = 0,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = 0,
    compressed: bytes | None = None,
) -> bytes:
    """A v2 batch around an uncompressed records area (compressed with ``codec``), CRC right."""
    payload = compressed if compressed is not None else compress(codec, area)
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    body = (
        struct.pack(
            ">hiqqqhii",
            attributes | codec,
            delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + payload
    )
    head = struct.pack(">qiibI", base_offset, len(body) + 9, leader_epoch, 2, crc32c.crc32c(body))
    return head + body


def repeated(record: bytes, n: int) -> bytes:
    return record * n


def empty_records(n: int) -> bytes:
    """n records without key, value or headers (offset delta 0: all share the base offset)."""
    return repeated(encode_record(0, 0, None, None, ()), n)


def zstd_bomb(n: int) -> bytes:
    """A small zstd batch of n empty records (a few KiB for millions)."""
    area = empty_records(n)
    return batch(area, n, codec=COMPRESSION_ZSTD, compressed=bytes(cramjam.zstd.compress(area, 19)))


def tombstones(n: int, group: str = "g", topic: str = "t") -> bytes:
    """A zstd __consumer_offsets batch of n offset-commit tombstones for one key."""
    rec = encode_record(0, 0, encode_offset_commit_key(group, topic, 0), None, ())
    area = repeated(rec, n)
    return batch(area, n, codec=COMPRESSION_ZSTD, compressed=bytes(cramjam.zstd.compress(area, 19)))


def place(root: pathlib.Path, topic: str, data: bytes | None, ext: str = "log", base: int = 0):
    """Write ``data`` where a broker keeps it: <root>/<topic>-0/<20-digit base>.<ext>."""
    d = root / f"{topic}-0"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{base:020d}.{ext}"
    if data is not None:
        p.write_bytes(data)
    return p
