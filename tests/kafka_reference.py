"""kafka-python's reader as an independent reference for the tests."""

from __future__ import annotations

from kafka.record.memory_records import MemoryRecords


def kafka_python_records(data: bytes) -> tuple[list[tuple], int]:
    """(offset, key, value, headers, timestamp) of every data record, and the batch count."""
    out, batches = [], 0
    mr = MemoryRecords(data)
    while (batch := mr.next_batch()) is not None:
        batches += 1
        if getattr(batch, "is_control_batch", False):
            continue
        for r in batch:
            out.append((r.offset, r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp))
    return out, batches


def kafka_python_batches(data: bytes) -> list[tuple[int, int, bool]]:
    """(base offset, last offset, CRC valid) per batch or legacy entry."""
    out = []
    mr = MemoryRecords(data)
    while (batch := mr.next_batch()) is not None:
        crc_ok = batch.validate_crc()  # before iterating: a legacy wrapper decompresses in place
        if hasattr(batch, "last_offset"):
            first, last = batch.base_offset, batch.last_offset
        else:  # legacy entry: the wrapper's offset is the last inner offset
            inner = [r.offset for r in batch]
            first, last = inner[0], inner[-1]
        out.append((first, last, crc_ok))
    return out
