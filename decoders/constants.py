"""Kafka's own constants for the on-disk formats, named as in the Java client.

Sources: apache/kafka clients/.../record/RecordBatch.java, DefaultRecordBatch.java,
LegacyRecord.java, ControlRecordType.java, CompressionType.java.
"""

from __future__ import annotations

import struct

# RecordBatch special values (RecordBatch.java).
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# the largest producer epoch (a Java short); TransactionMetadata.isEpochExhausted: from
# MAX_PRODUCER_EPOCH - 1 on, no epoch is bumped for a new transaction (the last value stays
# for fencing) and a transaction version 2 coordinator rotates to a new producer id (docs/formats.md 8.3)
MAX_PRODUCER_EPOCH = 32767
EXHAUSTED_PRODUCER_EPOCH = MAX_PRODUCER_EPOCH - 1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

# Magic values.
MAGIC_VALUE_V0 = 0
MAGIC_VALUE_V1 = 1
MAGIC_VALUE_V2 = 2
CURRENT_MAGIC_VALUE = MAGIC_VALUE_V2

# -- the log entry framing shared by every format (Records.java) --------------------------------
#
#   offset => int64    the batch's base offset (v2) or the message's offset (v0/v1)
#   size   => int32    bytes that follow
#   ...    => the record batch (v2) or the message (v0/v1); byte 16 is its magic in both
#
OFFSET_OFFSET = 0
OFFSET_LENGTH = 8
SIZE_OFFSET = OFFSET_OFFSET + OFFSET_LENGTH
SIZE_LENGTH = 4
LOG_OVERHEAD = SIZE_OFFSET + SIZE_LENGTH
MAGIC_OFFSET = 16
MAGIC_LENGTH = 1
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + MAGIC_LENGTH

# -- the legacy message, v0 and v1 (LegacyRecord.java), offsets from the message start -----------
#
#   crc        => uint32   CRC-32 of magic..end
#   magic      => int8     0 or 1
#   attributes => int8     bits 0-2 codec, bit 3 timestamp type (v1)
#   timestamp  => int64    v1 only
#   key        => int32 length (-1 null) + bytes
#   value      => int32 length (-1 null) + bytes
#
LEGACY_CRC_OFFSET = 0
LEGACY_CRC_LENGTH = 4
LEGACY_MAGIC_OFFSET = LEGACY_CRC_OFFSET + LEGACY_CRC_LENGTH
LEGACY_MAGIC_LENGTH = 1
LEGACY_ATTRIBUTES_OFFSET = LEGACY_MAGIC_OFFSET + LEGACY_MAGIC_LENGTH
LEGACY_ATTRIBUTES_LENGTH = 1
LEGACY_TIMESTAMP_OFFSET = LEGACY_ATTRIBUTES_OFFSET + LEGACY_ATTRIBUTES_LENGTH
LEGACY_TIMESTAMP_LENGTH = 8
LEGACY_KEY_SIZE_OFFSET_V0 = LEGACY_ATTRIBUTES_OFFSET + LEGACY_ATTRIBUTES_LENGTH
LEGACY_KEY_SIZE_OFFSET_V1 = LEGACY_TIMESTAMP_OFFSET + LEGACY_TIMESTAMP_LENGTH
LEGACY_KEY_SIZE_LENGTH = 4
LEGACY_VALUE_SIZE_LENGTH = 4
LEGACY_HEADER_SIZE_V0 = LEGACY_KEY_SIZE_OFFSET_V0
LEGACY_HEADER_SIZE_V1 = LEGACY_KEY_SIZE_OFFSET_V1
# crc + magic + attributes (+ timestamp) + key length + value length
RECORD_OVERHEAD_V0 = LEGACY_HEADER_SIZE_V0 + LEGACY_KEY_SIZE_LENGTH + LEGACY_VALUE_SIZE_LENGTH
RECORD_OVERHEAD_V1 = LEGACY_HEADER_SIZE_V1 + LEGACY_KEY_SIZE_LENGTH + LEGACY_VALUE_SIZE_LENGTH
LEGACY_COMPRESSION_CODEC_MASK = 0x07
LEGACY_TIMESTAMP_TYPE_MASK = 0x08
# Attribute bits no legacy message sets (LegacyRecord uses bits 0-3 only).
LEGACY_UNUSED_ATTRIBUTES_MASK = 0xF0
# The same offsets from the start of the log entry (the message follows the entry framing).
LEGACY_ENTRY_CRC_OFFSET = LOG_OVERHEAD + LEGACY_CRC_OFFSET
LEGACY_ENTRY_MAGIC_OFFSET = LOG_OVERHEAD + LEGACY_MAGIC_OFFSET
LEGACY_ENTRY_ATTRIBUTES_OFFSET = LOG_OVERHEAD + LEGACY_ATTRIBUTES_OFFSET
LEGACY_ENTRY_TIMESTAMP_OFFSET = LOG_OVERHEAD + LEGACY_TIMESTAMP_OFFSET
# Smallest size field of a legacy entry: an empty v0 message.
MIN_LEGACY_ENTRY_SIZE = RECORD_OVERHEAD_V0

# -- the record batch, v2 (DefaultRecordBatch.java), offsets from the batch start --------------
#
#   baseOffset           => int64
#   batchLength          => int32    bytes after this field
#   partitionLeaderEpoch => int32
#   magic                => int8     2
#   crc                  => uint32   CRC-32C of attributes..end
#   attributes           => int16    see the masks below
#   lastOffsetDelta      => int32
#   baseTimestamp        => int64    the delete horizon when that flag is set
#   maxTimestamp         => int64
#   producerId           => int64
#   producerEpoch        => int16
#   baseSequence         => int32
#   recordsCount         => int32
#   records              => [Record]
#
BASE_OFFSET_OFFSET = 0
BASE_OFFSET_LENGTH = 8
LENGTH_OFFSET = BASE_OFFSET_OFFSET + BASE_OFFSET_LENGTH
LENGTH_LENGTH = 4
PARTITION_LEADER_EPOCH_OFFSET = LENGTH_OFFSET + LENGTH_LENGTH
PARTITION_LEADER_EPOCH_LENGTH = 4
BATCH_MAGIC_OFFSET = PARTITION_LEADER_EPOCH_OFFSET + PARTITION_LEADER_EPOCH_LENGTH
BATCH_MAGIC_LENGTH = 1
CRC_OFFSET = BATCH_MAGIC_OFFSET + BATCH_MAGIC_LENGTH
CRC_LENGTH = 4
ATTRIBUTES_OFFSET = CRC_OFFSET + CRC_LENGTH
ATTRIBUTE_LENGTH = 2
LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + ATTRIBUTE_LENGTH
LAST_OFFSET_DELTA_LENGTH = 4
BASE_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + LAST_OFFSET_DELTA_LENGTH
BASE_TIMESTAMP_LENGTH = 8
MAX_TIMESTAMP_OFFSET = BASE_TIMESTAMP_OFFSET + BASE_TIMESTAMP_LENGTH
MAX_TIMESTAMP_LENGTH = 8
PRODUCER_ID_OFFSET = MAX_TIMESTAMP_OFFSET + MAX_TIMESTAMP_LENGTH
PRODUCER_ID_LENGTH = 8
PRODUCER_EPOCH_OFFSET = PRODUCER_ID_OFFSET + PRODUCER_ID_LENGTH
PRODUCER_EPOCH_LENGTH = 2
BASE_SEQUENCE_OFFSET = PRODUCER_EPOCH_OFFSET + PRODUCER_EPOCH_LENGTH
BASE_SEQUENCE_LENGTH = 4
RECORDS_COUNT_OFFSET = BASE_SEQUENCE_OFFSET + BASE_SEQUENCE_LENGTH
RECORDS_COUNT_LENGTH = 4
RECORDS_OFFSET = RECORDS_COUNT_OFFSET + RECORDS_COUNT_LENGTH
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET
# The low byte of the big-endian attributes field holds every flag Kafka defines.
ATTRIBUTES_LOW_BYTE_OFFSET = ATTRIBUTES_OFFSET + ATTRIBUTE_LENGTH - 1
# Smallest batchLength field value of a valid v2 batch (header only, no records).
MIN_BATCH_LENGTH_V2 = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
# The header as big-endian structs, for writers and one-batch readers (fields in the order drawn
# above): up to and with the CRC (baseOffset and partitionLeaderEpoch, which the broker assigns on
# append, are not covered by it), then what the CRC covers (attributes..recordsCount, then the
# records).
BATCH_HEADER_UP_TO_CRC_FORMAT = ">qiibI"
BATCH_HEADER_AFTER_CRC_FORMAT = ">hiqqqhii"
BATCH_HEADER_FORMAT = BATCH_HEADER_UP_TO_CRC_FORMAT + BATCH_HEADER_AFTER_CRC_FORMAT[1:]

assert MAGIC_OFFSET == BATCH_MAGIC_OFFSET == LEGACY_ENTRY_MAGIC_OFFSET
assert struct.calcsize(BATCH_HEADER_UP_TO_CRC_FORMAT) == ATTRIBUTES_OFFSET
assert struct.calcsize(BATCH_HEADER_FORMAT) == RECORD_BATCH_OVERHEAD

# v2 attributes (DefaultRecordBatch.java).
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

# CRC-32C (Castagnoli), the v2 batch checksum (Crc32C.java): its polynomial, bit-reversed.
CRC32C_POLYNOMIAL_REFLECTED = 0x82F63B78

# Compression codecs (CompressionType.java).
COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
# The highest codec each format knows: zstd came with v2 (KIP-110); v0/v1 stop at lz4.
MAX_CODEC_V2 = COMPRESSION_ZSTD
MAX_CODEC_LEGACY = COMPRESSION_LZ4

# snappy-java's stream (SnappyOutputStream, Kafka's Java producer): a 16-byte header (magic,
# int32 version 1, int32 compatible version 1), then blocks of a big-endian int32 length and a
# raw snappy block; librdkafka writes one raw block, no header.
SNAPPY_XERIAL_MAGIC = b"\x82SNAPPY\x00"
SNAPPY_XERIAL_HEADER_SIZE = 16
SNAPPY_XERIAL_BLOCK_SIZE = 32 * 1024  # uncompressed bytes per block, as snappy-java writes them

# The LZ4 frame as Kafka's producers write it (KafkaLZ4BlockOutputStream; the LZ4 frame format:
# magic, FLG, BD, optional fields, HC, then blocks each led by a little-endian int32 size
# whose high bit marks a block stored uncompressed, ended by a size of 0).
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
LZ4_KAFKA_FLG = 0x60  # version 01, independent blocks, no checksums, no content size
LZ4_KAFKA_BD = 0x40  # 64 KiB maximum block size
LZ4_KAFKA_BLOCK_SIZE = 64 * 1024
LZ4_UNCOMPRESSED_BLOCK_FLAG = 0x80000000
LZ4_FLG_VERSION_01 = 0x40
LZ4_FLG_INDEPENDENT_BLOCKS = 0x20
LZ4_BD_SIZE_SHIFT = 4  # BD bits 6-4: a block's maximum size, 4 (64 KiB) to 7 (4 MiB)
LZ4_MIN_MATCH = 4  # a match's length field counts from 4
LZ4_LAST_LITERALS = 5  # a block's last 5 bytes are literals
LZ4_MATCH_FROM_END = 12  # a block's last match starts at least 12 bytes before its end

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

# -- index entries, fixed width, big-endian ------------------------------------------------------
#
#   OffsetIndex.java:  relativeOffset int32 | position int32                       (8 bytes)
#   TimeIndex.java:    timestamp int64 | relativeOffset int32                      (12 bytes)
#   AbortedTxn.java:   version int16 | producerId int64 | firstOffset int64 |
#                      lastOffset int64 | lastStableOffset int64                   (34 bytes)
#
OFFSET_INDEX_RELATIVE_OFFSET_OFFSET = 0
OFFSET_INDEX_POSITION_OFFSET = OFFSET_INDEX_RELATIVE_OFFSET_OFFSET + 4
OFFSET_INDEX_ENTRY_SIZE = OFFSET_INDEX_POSITION_OFFSET + 4
TIME_INDEX_TIMESTAMP_OFFSET = 0
TIME_INDEX_RELATIVE_OFFSET_OFFSET = TIME_INDEX_TIMESTAMP_OFFSET + 8
TIME_INDEX_ENTRY_SIZE = TIME_INDEX_RELATIVE_OFFSET_OFFSET + 4
ABORTED_TXN_VERSION_OFFSET = 0
ABORTED_TXN_PRODUCER_ID_OFFSET = ABORTED_TXN_VERSION_OFFSET + 2
ABORTED_TXN_FIRST_OFFSET_OFFSET = ABORTED_TXN_PRODUCER_ID_OFFSET + 8
ABORTED_TXN_LAST_OFFSET_OFFSET = ABORTED_TXN_FIRST_OFFSET_OFFSET + 8
ABORTED_TXN_LAST_STABLE_OFFSET_OFFSET = ABORTED_TXN_LAST_OFFSET_OFFSET + 8
ABORTED_TXN_ENTRY_SIZE = ABORTED_TXN_LAST_STABLE_OFFSET_OFFSET + 8
ABORTED_TXN_CURRENT_VERSION = 0
ABORTED_TXN_FORMAT = ">hqqqq"

# -- producer snapshot (ProducerStateManager.java, ProducerSnapshot.json) ------------------------
#
#   version int16 | crc uint32 (CRC-32C of count..end) | count int32 | entries
#   entry: producerId int64 | producerEpoch int16 | lastSequence int32 | lastOffset int64 |
#          offsetDelta int32 | timestamp int64 | coordinatorEpoch int32 |
#          currentTxnFirstOffset int64                                             (46 bytes)
#
PRODUCER_SNAPSHOT_VERSION = 1
PRODUCER_SNAPSHOT_VERSION_OFFSET = 0
PRODUCER_SNAPSHOT_CRC_OFFSET = PRODUCER_SNAPSHOT_VERSION_OFFSET + 2
PRODUCER_SNAPSHOT_COUNT_OFFSET = PRODUCER_SNAPSHOT_CRC_OFFSET + 4
PRODUCER_SNAPSHOT_HEADER_SIZE = PRODUCER_SNAPSHOT_COUNT_OFFSET + 4
PRODUCER_SNAPSHOT_HEADER_FORMAT = ">hIi"
PRODUCER_SNAPSHOT_ENTRY_FORMAT = ">qhiqiqiq"
PRODUCER_SNAPSHOT_ENTRY_SIZE = struct.calcsize(PRODUCER_SNAPSHOT_ENTRY_FORMAT)

assert struct.calcsize(PRODUCER_SNAPSHOT_HEADER_FORMAT) == PRODUCER_SNAPSHOT_HEADER_SIZE
assert struct.calcsize(ABORTED_TXN_FORMAT) == ABORTED_TXN_ENTRY_SIZE
assert PRODUCER_SNAPSHOT_ENTRY_SIZE == 46

# Default index interval (LogConfig.java, index.interval.bytes).
DEFAULT_INDEX_INTERVAL_BYTES = 4096


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """lastSequence with Kafka's wrap-around at Integer.MAX_VALUE (DefaultRecordBatch.incrementSequence)."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    if base_sequence > MAX_SEQUENCE - last_offset_delta:
        return last_offset_delta - (MAX_SEQUENCE - base_sequence) - 1
    return base_sequence + last_offset_delta


# Spark timestamps are microseconds in years 1..9999; a garbage header (a CRC-failed batch) can
# hold any int64 milliseconds. Such values become null on the way into Spark instead of failing
# the task (decoders.spark), and the audit's replay in the scan tasks nulls them alike
# (replay.replicas).
SPARK_MIN_MS, SPARK_MAX_MS = -62135596800000, 253402300799999
