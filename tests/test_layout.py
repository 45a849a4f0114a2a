"""The named byte layouts: Kafka's offsets, the writer and the decoder agreeing on them, and the
compiled kernels' cache keyed on every module they take constants from."""

from __future__ import annotations

import ast
import importlib.resources

from decoders import constants as c
from decoders import kernels, read_segment
from decoders.framing import batch_header, crc_holds, entry_offset, entry_size, iter_entries
from simulator.writer import Record, build_batch, legacy_message, restamp_crc


def test_v2_offsets_are_kafkas():
    # DefaultRecordBatch.java: the offsets its constants evaluate to
    assert [
        c.BASE_OFFSET_OFFSET,
        c.LENGTH_OFFSET,
        c.PARTITION_LEADER_EPOCH_OFFSET,
        c.BATCH_MAGIC_OFFSET,
        c.CRC_OFFSET,
        c.ATTRIBUTES_OFFSET,
        c.LAST_OFFSET_DELTA_OFFSET,
        c.BASE_TIMESTAMP_OFFSET,
        c.MAX_TIMESTAMP_OFFSET,
        c.PRODUCER_ID_OFFSET,
        c.PRODUCER_EPOCH_OFFSET,
        c.BASE_SEQUENCE_OFFSET,
        c.RECORDS_COUNT_OFFSET,
        c.RECORDS_OFFSET,
    ] == [0, 8, 12, 16, 17, 21, 23, 27, 35, 43, 51, 53, 57, 61]
    assert c.RECORD_BATCH_OVERHEAD == 61 and c.MIN_BATCH_LENGTH_V2 == 49


def test_legacy_and_framing_offsets_are_kafkas():
    # Records.java and LegacyRecord.java
    assert (c.SIZE_OFFSET, c.LOG_OVERHEAD, c.MAGIC_OFFSET, c.HEADER_SIZE_UP_TO_MAGIC) == (
        8,
        12,
        16,
        17,
    )
    assert (
        c.LEGACY_CRC_OFFSET,
        c.LEGACY_MAGIC_OFFSET,
        c.LEGACY_ATTRIBUTES_OFFSET,
        c.LEGACY_TIMESTAMP_OFFSET,
    ) == (0, 4, 5, 6)
    assert (c.RECORD_OVERHEAD_V0, c.RECORD_OVERHEAD_V1) == (14, 22)
    assert (c.OFFSET_INDEX_ENTRY_SIZE, c.TIME_INDEX_ENTRY_SIZE, c.ABORTED_TXN_ENTRY_SIZE) == (
        8,
        12,
        34,
    )


def test_writer_and_decoder_read_the_same_fields():
    batch = build_batch(
        [Record(b"k", b"v", timestamp=1_700_000_000_000)] * 3,
        base_offset=42,
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        transactional=True,
        partition_leader_epoch=5,
    )
    h = batch_header(batch)
    row = read_segment(batch).to_pylist()[0]
    assert (h.base_offset, h.partition_leader_epoch, h.producer_id) == (42, 5, 7)
    assert row["base_offset"] == h.base_offset and row["crc"] == h.crc and row["crc_valid"]
    assert (row["producer_epoch"], row["base_sequence"]) == (h.producer_epoch, h.base_sequence)
    assert row["last_offset_delta"] == h.last_offset_delta == 2
    assert row["is_transactional"] and h.attributes & c.TRANSACTIONAL_FLAG_MASK
    assert entry_size(batch) == len(batch) - c.LOG_OVERHEAD


def test_restamped_crc_and_entry_walk():
    data = bytearray(build_batch([Record(b"a", b"b")]) + legacy_message(9, b"k", b"v", magic=1))
    entries = list(iter_entries(data))
    assert [(pos, off) for pos, off, _ in entries] == [(0, 0), (entries[0][2], 9)]
    assert entry_offset(data, entries[1][0]) == 9
    data[entries[0][2] - 1] ^= 0x01  # the last byte of the v2 batch's only record
    assert not crc_holds(bytes(data[: entries[0][2]]), c.MAGIC_VALUE_V2)
    restamp_crc(data, 0)
    assert crc_holds(bytes(data[: entries[0][2]]), c.MAGIC_VALUE_V2)
    legacy = bytes(data[entries[1][0] :])
    assert crc_holds(legacy, c.MAGIC_VALUE_V1)


def test_kernels_cache_is_keyed_on_every_module_they_import_from():
    """numba's cache keys on kernels.py alone: constants baked in from another module would go
    stale, so the cache directory is named for a hash of these modules (kernels._cache_dir)."""
    source = importlib.resources.files("decoders").joinpath("kernels.py").read_text()
    imported = {
        node.module.split(".")[-1] + ".py"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("decoders")
    }
    assert imported and imported <= set(kernels.CACHE_KEY_MODULES)
    assert "kernels.py" in kernels.CACHE_KEY_MODULES


# Kernels shipped in a zip and their cache: tests/test_numba_cache.py
