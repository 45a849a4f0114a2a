"""Batches and records tables of a run of legacy (v0/v1) entries (docs/formats.md section 2).

Legacy data is rare and small (pre-0.11 topics): entries are decoded one by one by
:mod:`decoders.legacy` and their rows built from Python lists. A legacy entry has no producer,
sequence or leader epoch: those columns hold Kafka's "none" values.
"""

from __future__ import annotations

import pyarrow as pa

from decoders.accounting import Accounting, DecodedWindow, FileInfo
from decoders.constants import (
    COMPRESSION_NAMES,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
)
from decoders.errors import CORRUPT_BYTES, CRC_MISMATCH, DecodeError, ErrorRow
from decoders.legacy import decode_entry
from decoders.schemas import BATCHES, RECORDS

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def decode_legacy_window(
    buf,
    base: int,
    positions,
    sizes,
    *,
    info: FileInfo,
    acct: Accounting,
    verify_crc: bool,
    emit_records: bool,
    max_decompressed: int,
) -> DecodedWindow:
    """Decode whole legacy entries of a window (``positions`` relative to ``buf``, which starts
    at file position ``base``), account for their bytes and add their error rows."""
    rows, recs = [], []
    mv = memoryview(buf)
    for p, s in zip(positions.tolist(), sizes.tolist(), strict=True):
        at, length = base + p, LOG_OVERHEAD + s
        try:
            entry = decode_entry(mv[p : p + length], verify_crc, True, max_decompressed)
        except DecodeError as e:
            acct.errors.append(ErrorRow(info.file, at, length, CORRUPT_BYTES, str(e)))
            acct.corrupt += length
            continue
        m = entry.message
        first = entry.records[0][0] if entry.records else m.offset
        if not _INT32_MIN <= m.offset - first <= _INT32_MAX:
            # lastOffsetDelta is an int32 column: a wrapper whose inner offsets run further
            # from it than that is corrupt, and the column is null for it
            entry.errors.append(
                f"inner offsets start {m.offset - first} before the wrapper's offset {m.offset}"
            )
        problems = list(entry.errors)
        if not m.crc_valid:
            why = f"CRC-32 mismatch: stored {m.crc:#010x}"
            acct.errors.append(ErrorRow(info.file, at, length, CRC_MISMATCH, why, m.offset))
            problems.insert(0, why)
        elif entry.errors:
            acct.errors.append(
                ErrorRow(info.file, at, length, CORRUPT_BYTES, "; ".join(entry.errors), m.offset)
            )
        if problems:
            acct.corrupt += length
        else:
            acct.valid += length
        acct.batches += 1
        acct.records += len(entry.records)
        acct.see_offsets(first, m.offset)
        rows.append((at, length, first, m, len(entry.records), "; ".join(problems) or None))
        if emit_records:
            recs.extend((*r, m.crc_valid, at) for r in entry.records)
    return DecodedWindow(
        _legacy_batches(info, rows, verify_crc),
        [_legacy_records(info, recs, verify_crc)] if recs else [],
    )


def _legacy_batches(info: FileInfo, rows, verify_crc: bool) -> pa.RecordBatch:
    n = len(rows)
    ms = [r[3] for r in rows]
    cols = {
        "broker": [info.broker] * n,
        "topic": [info.topic] * n,
        "partition": [info.partition] * n,
        "file": [info.file] * n,
        "position": [r[0] for r in rows],
        "size": [r[1] for r in rows],
        "base_offset": [r[2] for r in rows],
        "last_offset": [m.offset for m in ms],
        "magic": [m.magic for m in ms],
        "crc": [m.crc for m in ms],
        "crc_valid": [m.crc_valid if verify_crc else None for m in ms],
        "attributes": [m.attributes for m in ms],
        "compression": [COMPRESSION_NAMES.get(m.codec, f"unknown({m.codec})") for m in ms],
        "timestamp_type": [m.timestamp_type for m in ms],
        "is_transactional": [False] * n,
        "is_control": [False] * n,
        "has_delete_horizon": [False] * n,
        "partition_leader_epoch": [NO_PARTITION_LEADER_EPOCH] * n,
        "base_timestamp": [None] * n,
        "max_timestamp": [None if m.timestamp == NO_TIMESTAMP else m.timestamp for m in ms],
        "delete_horizon": [None] * n,
        "producer_id": [NO_PRODUCER_ID] * n,
        "producer_epoch": [NO_PRODUCER_EPOCH] * n,
        "base_sequence": [NO_SEQUENCE] * n,
        "last_sequence": [NO_SEQUENCE] * n,
        "last_offset_delta": [
            d if _INT32_MIN <= (d := m.offset - r[2]) <= _INT32_MAX else None
            for m, r in zip(ms, rows, strict=True)
        ],
        "record_count": [r[4] for r in rows],
        "control_type": [None] * n,
        "coordinator_epoch": [None] * n,
        "error": [r[5] for r in rows],
    }
    return pa.RecordBatch.from_pydict(cols, schema=BATCHES)


def _legacy_records(info: FileInfo, recs, verify_crc: bool) -> pa.RecordBatch:
    n = len(recs)
    cols = {
        "broker": [info.broker] * n,
        "topic": [info.topic] * n,
        "partition": [info.partition] * n,
        "offset": [r[0] for r in recs],
        "timestamp": [None if r[1] == NO_TIMESTAMP else r[1] for r in recs],
        "timestamp_type": [r[2] for r in recs],
        "key": [r[3] for r in recs],
        "value": [r[4] for r in recs],
        "headers": [[] for _ in recs],
        "producer_id": [NO_PRODUCER_ID] * n,
        "producer_epoch": [NO_PRODUCER_EPOCH] * n,
        "sequence": [NO_SEQUENCE] * n,
        "is_transactional": [False] * n,
        "is_control": [False] * n,
        "crc_valid": [r[5] if verify_crc else None for r in recs],
        "batch_position": [r[6] for r in recs],
        "segment": [info.base_offset] * n,
    }
    return pa.RecordBatch.from_pydict(cols, schema=RECORDS)
