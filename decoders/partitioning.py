"""Which internal-topic partition holds a group or transactional id (docs/formats.md 6.9)."""

from __future__ import annotations

DEFAULT_OFFSETS_TOPIC_PARTITIONS = 50  # offsets.topic.num.partitions
DEFAULT_TXN_TOPIC_PARTITIONS = 50  # transaction.state.log.num.partitions


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Utils.abs: 0 for Integer.MIN_VALUE, |n| otherwise (not toPositive's n & 0x7fffffff)."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(key: str, partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS) -> int:
    return kafka_abs(java_string_hash(key)) % partitions
