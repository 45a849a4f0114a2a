"""Kafka's own constants for the on-disk formats, named as in the Java client.

Sources: apache/kafka clients/.../record/RecordBatch.java, DefaultRecordBatch.java,
LegacyRecord.java, ControlRecordType.java, CompressionType.java.
"""

from __future__ import annotations

# RecordBatch special values (RecordBatch.java).
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

# Magic values.
MAGIC_VALUE_V0 = 0
MAGIC_VALUE_V1 = 1
MAGIC_VALUE_V2 = 2
CURRENT_MAGIC_VALUE = MAGIC_VALUE_V2

# Log entry framing shared by every format (Records.java): offset int64, size int32.
LOG_OVERHEAD = 12
SIZE_OFFSET = 8
MAGIC_OFFSET = 16
HEADER_SIZE_UP_TO_MAGIC = 17

# Legacy message layout (LegacyRecord.java), offsets relative to the entry start.
LEGACY_CRC_OFFSET = 12
LEGACY_MAGIC_OFFSET = 16
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_TIMESTAMP_OFFSET = 18
RECORD_OVERHEAD_V0 = 14  # crc + magic + attributes + key length + value length
RECORD_OVERHEAD_V1 = 22  # v0 + timestamp
LEGACY_COMPRESSION_CODEC_MASK = 0x07
LEGACY_TIMESTAMP_TYPE_MASK = 0x08

# RecordBatch v2 header layout (DefaultRecordBatch.java), offsets from the batch start.
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET
# Smallest batchLength field value of a valid v2 batch (header only, no records).
MIN_BATCH_LENGTH_V2 = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD

# v2 attributes (DefaultRecordBatch.java).
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

# Compression codecs (CompressionType.java).
COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

# Timestamp types (TimestampType.java).
NO_TIMESTAMP_TYPE = "NoTimestampType"
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

# Control record types (ControlRecordType.java); anything else is UNKNOWN.
CONTROL_TYPE_NAMES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}
ABORT = 0
COMMIT = 1

# Sequence numbers wrap from Integer.MAX_VALUE back to 0 (DefaultRecordBatch.incrementSequence).
MAX_SEQUENCE = 2**31 - 1

# Internal topics.
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
CLUSTER_METADATA_TOPIC = "__cluster_metadata"

# Index entry sizes (OffsetIndex.java, TimeIndex.java, AbortedTxn.java).
OFFSET_INDEX_ENTRY_SIZE = 8
TIME_INDEX_ENTRY_SIZE = 12
ABORTED_TXN_ENTRY_SIZE = 34

# Producer snapshot (ProducerStateManager.java, ProducerSnapshot.json).
PRODUCER_SNAPSHOT_VERSION = 1
PRODUCER_SNAPSHOT_HEADER_SIZE = 10
PRODUCER_SNAPSHOT_ENTRY_SIZE = 46

# Default index interval (LogConfig.java, index.interval.bytes).
DEFAULT_INDEX_INTERVAL_BYTES = 4096


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """lastSequence with Kafka's wrap-around at Integer.MAX_VALUE (DefaultRecordBatch.incrementSequence)."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    if base_sequence > MAX_SEQUENCE - last_offset_delta:
        return last_offset_delta - (MAX_SEQUENCE - base_sequence) - 1
    return base_sequence + last_offset_delta
