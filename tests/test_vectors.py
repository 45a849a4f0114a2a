"""The byte vectors of docs/formats.md Appendix A decode to the stated values."""

from __future__ import annotations

import pytest

import decoders
from decoders import consumer_offsets as co
from decoders import transaction_log as tl
from decoders.compression import compress
from decoders.constants import ABORT, COMMIT
from decoders.partitioning import java_string_hash, partition_for
from simulator.writer import control_batch


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", "").replace("|", ""))


@pytest.mark.parametrize(
    "group,hash_,part",
    [
        ("my-group", -1906497762, 12),
        ("console-consumer-12345", 158455506, 6),
        ("polygenelubricants", -2147483648, 0),
        ("grüppe-😀", -1039948164, 14),
        ("my-txn-id", 1405732511, 11),
        ("", 0, 0),
    ],
)
def test_a1_partition_of_group(group, hash_, part):
    assert java_string_hash(group) == hash_
    assert partition_for(group, 50) == part


A2 = h(
    "000000000000002a 00000042 00000003 02 40d514e9 0030 00000000 0000018bcfe56800 0000018bcfe56800"
    " 00000000000003e8 0005 ffffffff 00000001 20 00 00 00 08 00000001 0c 000000000007 00"
)


def test_a2_commit_marker_decodes(tmp_path):
    f = tmp_path / "00000000000000000042.log"
    f.write_bytes(A2)
    b = decoders.read_segment(str(f), "batches").to_pylist()
    assert len(b) == 1
    m = b[0]
    assert (m["base_offset"], m["last_offset"], m["partition_leader_epoch"]) == (42, 42, 3)
    assert (m["producer_id"], m["producer_epoch"], m["base_sequence"]) == (1000, 5, -1)
    assert (m["control_type"], m["coordinator_epoch"], m["size"]) == ("COMMIT", 7, 78)
    assert m["crc_valid"] and m["crc"] == 0x40D514E9
    assert m["is_transactional"] and m["is_control"] and m["compression"] == "none"
    assert m["max_timestamp"].timestamp() == 1700000000.0


def test_a2_writer_reproduces_the_marker():
    assert (
        control_batch(COMMIT, 1000, 5, 7, 1700000000000, base_offset=42, partition_leader_epoch=3)
        == A2
    )


def test_a3_offset_commit():
    key = h("00 01 | 00 08 6d 79 2d 67 72 6f 75 70 | 00 06 6f 72 64 65 72 73 | 00 00 00 03")
    value = h("00 03 | 00 00 00 00 00 00 04 d2 | 00 00 00 05 | 00 00 | 00 00 01 8b cf e5 68 00")
    assert co.decode_key(key) == {
        "key_type": 1,
        "group_id": "my-group",
        "topic": "orders",
        "partition": 3,
    }
    v = co.decode_offset_commit(value)
    assert (v["committed_offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"]) == (
        1234,
        5,
        "",
        1700000000000,
    )
    assert co.encode_offset_commit_key("my-group", "orders", 3) == key
    assert co.encode_offset_commit(1234, 1700000000000, leader_epoch=5) == value


def test_a4_transaction_log():
    assert tl.decode_key(h("00 00 | 00 09 6d 79 2d 74 78 6e 2d 69 64")) == "my-txn-id"
    v0 = tl.decode_value(
        h(
            "00 00 | 00 00 00 00 00 00 03 e8 | 00 05 | 00 00 ea 60 | 01 | 00 00 00 01 | 00 06 6f 72 64 65 72 73 |"
            " 00 00 00 02 00 00 00 00 00 00 00 03 | 00 00 01 8b cf e5 69 f4 | 00 00 01 8b cf e5 68 00"
        )
    )
    assert v0["state"] == "Ongoing" and v0["partitions"] == [
        {"topic": "orders", "partitions": [0, 3]}
    ]
    assert (v0["producer_id"], v0["producer_epoch"], v0["timeout_ms"]) == (1000, 5, 60000)
    assert (v0["last_update_timestamp"], v0["start_timestamp"]) == (1700000000500, 1700000000000)
    v1 = tl.decode_value(
        h(
            "00 01 | 00 00 00 00 00 00 03 e8 | 00 06 | 00 00 ea 60 | 02 | 02 | 07 6f 72 64 65 72 73 |"
            " 03 00 00 00 00 00 00 00 03 | 00 | 00 00 01 8b cf e5 69 f4 | 00 00 01 8b cf e5 68 00 | 01 02 02 00 02"
        )
    )
    assert v1["state"] == "PrepareCommit" and v1["client_transaction_version"] == 2
    assert v1["previous_producer_id"] == -1 and v1["next_producer_id"] == -1


def test_a4_unknown_tags_are_skipped():
    body = h(
        "00 01 | 00 00 00 00 00 00 03 e8 | 00 06 | 00 00 ea 60 | 04 | 01 | 00 00 01 8b cf e5 69 f4 | ff ff ff ff ff ff ff ff"
    )
    tags = h(
        "03 | 00 08 00 00 00 00 00 00 00 07 | 02 02 00 02 | 09 03 aa bb cc"
    )  # tag 0, tag 2, unknown tag 9
    v = tl.decode_value(body + tags)
    assert (
        v["previous_producer_id"] == 7
        and v["client_transaction_version"] == 2
        and v["partitions"] == []
    )


@pytest.mark.parametrize(
    "codec,magic,prefix",
    [
        (1, 2, "1f8b08"),
        (2, 2, "82534e41505059000000000100000001"),
        (3, 2, "04224d18604082"),
        (3, 1, "04224d18604082"),
        (3, 0, "04224d1860401a"),
        (4, 2, "28b52ffd"),
    ],
)
def test_a5_compression_headers(codec, magic, prefix):
    assert compress(codec, b"kafka" * 100, magic=magic).hex().startswith(prefix)


def test_xxh32_matches_the_reference_implementation():
    import xxhash

    from decoders.compression import xxh32

    for data in (b"", b"\x60\x40", b"\x04\x22\x4d\x18\x60\x40", bytes(range(37)), b"x" * 100):
        assert xxh32(data) == xxhash.xxh32_intdigest(data)


@pytest.mark.parametrize("mixed", [False, True])
def test_a_log_of_markers_decodes_each_one(tmp_path, mixed):
    """A log of markers (a long-lived producer's COMMITs, all alike, or COMMITs and ABORTs of
    several coordinator epochs): each batch its own type and epoch (decoders.batch_tables
    decodes each distinct records area once)."""
    want = [((ABORT if i % 3 == 0 else COMMIT), 1 + i % 4) if mixed else (COMMIT, 7)
            for i in range(500)]  # fmt: skip
    f = tmp_path / "00000000000000000000.log"
    f.write_bytes(b"".join(control_batch(t, 1000, 5, e, 1700000000000 + i, base_offset=i)
                           for i, (t, e) in enumerate(want)))  # fmt: skip
    got = decoders.read_segment(str(f), "batches").to_pylist()
    names = {COMMIT: "COMMIT", ABORT: "ABORT"}
    assert [(b["control_type"], b["coordinator_epoch"]) for b in got] == [
        (names[t], e) for t, e in want
    ]
