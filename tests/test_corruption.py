"""Bad input is normal input: each class of damage gives an error row at the exact position,
every byte is accounted as valid, padding or corrupt, and everything else still decodes."""

from __future__ import annotations

import struct

import crc32c
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import decoders
from decoders import consumer_offsets as co
from decoders.accounting import FileInfo
from decoders.constants import CONSUMER_OFFSETS_TOPIC
from simulator.writer import (
    Record,
    SnapshotEntry,
    build_batch,
    legacy_message,
    legacy_wrapper,
    offset_index_bytes,
    snapshot_bytes,
    txn_index_bytes,
)

T0 = 1_700_000_000_000


def batch(i: int, n: int = 5, codec: int = 0) -> bytes:
    recs = [
        Record(f"k{i}-{j}".encode(), f"value {i}-{j} ".encode() * 3, [("h", b"x")], T0 + j)
        for j in range(n)
    ]
    return build_batch(
        recs, i * n, codec=codec, producer_id=1, producer_epoch=0, base_sequence=i * n
    )


def decode(data: bytes, info: FileInfo | None = None, **kw) -> dict[str, pa.Table]:
    out: dict[str, list] = {t: [] for t in decoders.TABLES}
    for t, b in decoders.iter_file(
        data, list(decoders.TABLES), info=info or FileInfo("seg.log"), **kw
    ):
        out[t].append(b)
    return {t: pa.Table.from_batches(bs, schema=decoders.TABLES[t]) for t, bs in out.items()}


def account(tables) -> dict:
    return tables["segments"].to_pylist()[0]


def errors(tables) -> list[dict]:
    return tables["errors"].to_pylist()


def offsets(tables) -> list[int]:
    return tables["records"]["offset"].to_pylist()


def check_accounting(tables, size: int) -> None:
    a = account(tables)
    assert a["size"] == size
    assert a["bytes_valid"] + a["bytes_padding"] + a["bytes_corrupt"] == size


GOOD = [batch(i) for i in range(4)]
CLEAN = b"".join(GOOD)


def test_clean_segment():
    t = decode(CLEAN)
    assert offsets(t) == list(range(20)) and not errors(t)
    assert account(t)["bytes_valid"] == len(CLEAN)


def test_truncated_tail():
    data = CLEAN + batch(4)[:50]
    t = decode(data)
    check_accounting(t, len(data))
    (e,) = errors(t)
    assert (e["kind"], e["position"], e["length"]) == ("truncated_batch", len(CLEAN), 50)
    assert offsets(t) == list(range(20))
    assert account(t)["bytes_corrupt"] == 50


def test_short_tail_below_entry_header():
    data = CLEAN + b"\x01\x02\x03"
    t = decode(data)
    (e,) = errors(t)
    assert e["kind"] == "truncated_batch" and e["position"] == len(CLEAN) and e["length"] == 3


def test_zero_padded_preallocated_segment():
    data = CLEAN + bytes(10_000)
    t = decode(data)
    assert not errors(t)
    a = account(t)
    assert (a["bytes_valid"], a["bytes_padding"], a["bytes_corrupt"]) == (len(CLEAN), 10_000, 0)
    assert offsets(t) == list(range(20))


def test_crc_mismatch_still_decodes_and_flags():
    bad = bytearray(CLEAN)
    pos = len(GOOD[0])
    bad[pos + 100] ^= 0x01  # inside a value of batch 1
    t = decode(bytes(bad))
    check_accounting(t, len(bad))
    (e,) = errors(t)
    assert (e["kind"], e["position"], e["offset"]) == ("crc_mismatch", pos, 5)
    assert account(t)["bytes_corrupt"] == len(GOOD[1])
    assert offsets(t) == list(range(20))  # decoded, but flagged
    crc_ok = dict(zip(offsets(t), t["records"]["crc_valid"].to_pylist(), strict=True))
    assert [o for o, ok in crc_ok.items() if not ok] == [5, 6, 7, 8, 9]
    assert t["batches"]["crc_valid"].to_pylist() == [True, False, True, True]


def test_garbage_between_batches():
    garbage = bytes((i * 37 + 11) % 256 for i in range(1000))
    data = GOOD[0] + GOOD[1] + garbage + GOOD[2] + GOOD[3]
    t = decode(data)
    check_accounting(t, len(data))
    (e,) = errors(t)
    assert (e["kind"], e["position"], e["length"]) == (
        "corrupt_bytes",
        len(GOOD[0]) + len(GOOD[1]),
        1000,
    )
    assert offsets(t) == list(range(20))


@pytest.mark.parametrize("length", [2**31 - 1, 5, -3])
def test_batch_length_out_of_range(length):
    bad = bytearray(CLEAN)
    pos = len(GOOD[0])
    struct.pack_into(">i", bad, pos + 8, length)
    t = decode(bytes(bad))
    check_accounting(t, len(bad))
    (e,) = errors(t)
    assert e["kind"] == "corrupt_bytes" and e["position"] == pos and e["length"] == len(GOOD[1])
    assert "size" in e["reason"]
    assert offsets(t) == [*range(5), *range(10, 20)]


def test_unknown_magic():
    bad = bytearray(CLEAN)
    pos = len(GOOD[0]) + len(GOOD[1])
    bad[pos + 16] = 7
    t = decode(bytes(bad))
    (e,) = errors(t)
    assert (
        e["kind"] == "corrupt_bytes" and e["position"] == pos and "invalid magic 7" in e["reason"]
    )
    assert offsets(t) == [*range(10), *range(15, 20)]
    check_accounting(t, len(bad))


def _patch_count(b: bytes, delta: int) -> bytes:
    out = bytearray(b)
    (count,) = struct.unpack_from(">i", out, 57)
    struct.pack_into(">i", out, 57, count + delta)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))  # keep the CRC valid
    return bytes(out)


@pytest.mark.parametrize(
    "delta,reason",
    [(1, "before recordsCount"), (-1, "left over"), (2**31 - 10, "before recordsCount")],
)
def test_record_count_disagrees_with_records_area(delta, reason):
    data = GOOD[0] + _patch_count(GOOD[1], delta) + GOOD[2]
    t = decode(data)
    (e,) = errors(t)
    assert e["kind"] == "corrupt_bytes" and e["position"] == len(GOOD[0]) and reason in e["reason"]
    decoded = offsets(t)
    assert decoded[:5] == list(range(5)) and decoded[-5:] == list(range(10, 15))
    check_accounting(t, len(data))


def test_broken_compressed_data():
    z = bytearray(batch(1, codec=4))
    z[70:80] = b"\xff" * 10
    struct.pack_into(">I", z, 17, crc32c.crc32c(bytes(z[21:])))
    data = GOOD[0] + bytes(z) + GOOD[2]
    t = decode(data)
    (e,) = errors(t)
    assert (
        e["kind"] == "corrupt_bytes"
        and e["position"] == len(GOOD[0])
        and "decompress" in e["reason"]
    )
    assert offsets(t) == [*range(5), *range(10, 15)]


def test_unknown_internal_record_versions():
    good_key = co.encode_offset_commit_key("g", "t", 0)
    recs = [
        Record(good_key, co.encode_offset_commit(10, T0), timestamp=T0),
        Record(good_key, b"\x00\x09" + bytes(30), timestamp=T0),  # value version 9
        Record(b"\x00\x63\x00\x01g", b"\x00\x00", timestamp=T0),  # record type 99
        Record(good_key, co.encode_offset_commit(11, T0), timestamp=T0),
    ]
    data = build_batch(recs, 0, base_sequence=0)
    t = decode(data, info=FileInfo("c.log", "1", CONSUMER_OFFSETS_TOPIC, 7, 0))
    assert t["offset_commits"]["committed_offset"].to_pylist() == [10, 11]
    errs = errors(t)
    assert [e["kind"] for e in errs] == ["unknown_version", "unknown_version"]
    assert [e["offset"] for e in errs] == [1, 2]
    assert "version 9" in errs[0]["reason"] and "type 99" in errs[1]["reason"]


def _decoded(data: bytes, info: FileInfo, tables, **kw) -> dict[str, pa.Table]:
    out: dict[str, list] = {t: [] for t in tables}
    decoding = decoders.decode_file(data, tables, info=info, **kw)
    while True:
        try:
            t, b = next(decoding)
        except StopIteration as done:
            segment = done.value
            break
        out[t].append(b)
    got = {t: pa.Table.from_batches(bs, schema=decoders.TABLES[t]) for t, bs in out.items()}
    return got | {"segments": segment}


def test_internal_records_read_beside_the_header_scan():
    """The audit reads an internal topic once, its records decoded beside the header scan
    (decode_file's records_apart): the batches, errors and segments rows are the header
    scan's (a record's failure, and a record the internal decoders reject, in none of them),
    the internal tables the deep decode's; v2 batches and legacy entries alike."""
    from decoders.constants import COMPRESSION_GZIP, MAGIC_VALUE_V1

    key = co.encode_offset_commit_key("g", "t", 0)

    def commits(first: int, n: int, codec: int = 0) -> bytes:
        recs = [Record(key, co.encode_offset_commit(first + j, T0), timestamp=T0 + j)
                for j in range(n)]  # fmt: skip
        return build_batch(recs, first, codec=codec)

    broken = bytearray(commits(10, 5, codec=4))
    broken[70:80] = b"\xff" * 10  # zstd that does not decompress, its CRC valid
    struct.pack_into(">I", broken, 17, crc32c.crc32c(bytes(broken[21:])))
    unknown = build_batch([Record(key, b"\x00\x09" + bytes(30), timestamp=T0)], 15)
    legacy = legacy_wrapper(
        [(key, co.encode_offset_commit(16 + j, T0), T0) for j in range(3)], 18, COMPRESSION_GZIP
    )
    bad_legacy = legacy_message(19, None, b"not gzip", magic=MAGIC_VALUE_V1, timestamp=T0,
                                attributes=COMPRESSION_GZIP)  # fmt: skip
    data = b"".join([commits(0, 5), _patch_count(commits(5, 5), -1), bytes(broken), unknown,
                     legacy, bad_legacy, commits(20, 2)])  # fmt: skip
    info = FileInfo("c.log", "1", CONSUMER_OFFSETS_TOPIC, 7, 0)
    internal = ("group_metadata", "group_records", "offset_commits")
    header = _decoded(data, info, ("batches", "errors"), deep=False)
    deep = _decoded(data, info, ("batches", "errors", *internal), deep=True)
    apart = _decoded(data, info, ("batches", "errors", *internal), deep=False,
                     records_apart=True)  # fmt: skip
    assert len(deep["errors"]) > len(header["errors"])  # the records' failures are there to leave
    assert deep["batches"] != header["batches"]
    for t in ("batches", "errors", "segments"):
        assert apart[t] == header[t], t
    for t in internal:
        assert apart[t] == deep[t], t
    committed = apart["offset_commits"]["committed_offset"].to_pylist()
    assert committed == [*range(0, 9), 16, 17, 18, 20, 21]


def test_unreadable_index_entries():
    idx = (
        offset_index_bytes([(5, 4100), (10, 8200), (9, 9000)])
        + b"\x00\x01\x02\x03\x04\x05\x06\x07"
        + bytes(16)
    )
    t = decode(idx, info=FileInfo("00000000000000000100.index", kind="index", base_offset=100))
    assert t["index_entries"]["offset"].to_pylist() == [105, 110]
    (e,) = errors(t)
    assert e["kind"] == "index_inconsistent" and e["position"] == 16
    a = account(t)
    assert (a["bytes_valid"], a["bytes_corrupt"], a["bytes_padding"]) == (16, 16, 16)


def test_txn_index_bad_version_and_partial_entry():
    data = txn_index_bytes([(1, 0, 10, 11), (2, 12, 20, 21)])
    bad = bytearray(data)
    bad[34:36] = b"\x00\x05"
    bad += b"\x00" * 10
    t = decode(bytes(bad), info=FileInfo("x.txnindex", kind="txnindex"))
    assert t["aborted_txns"]["producer_id"].to_pylist() == [1]
    assert sorted(e["kind"] for e in errors(t)) == ["corrupt_bytes", "unknown_version"]
    check_accounting(t, len(bad))


@pytest.mark.parametrize(
    "damage,kind",
    [("crc", "crc_mismatch"), ("version", "unknown_version"), ("count", "corrupt_bytes")],
)
def test_snapshot_damage(damage, kind):
    data = bytearray(
        snapshot_bytes(
            [SnapshotEntry(5, 1, 9, 100, 4, T0, 3, -1), SnapshotEntry(6, 0, 0, 50, 0, T0)]
        )
    )
    if damage == "crc":
        data[20] ^= 1
    elif damage == "version":
        data[1] = 2
    else:
        data += b"\x01"
    t = decode(
        bytes(data),
        info=FileInfo("00000000000000000200.snapshot", kind="snapshot", base_offset=200),
    )
    assert kind in [e["kind"] for e in errors(t)]
    assert t["producer_snapshots"].num_rows == 2  # still shown, flagged as corrupt
    assert account(t)["bytes_corrupt"] == len(data)


def test_hostile_lengths_do_not_allocate():
    recs = bytearray(build_batch([Record(b"k", b"v")], 0))
    struct.pack_into(">i", recs, 57, 2**31 - 1)  # recordsCount
    struct.pack_into(">I", recs, 17, crc32c.crc32c(bytes(recs[21:])))
    t = decode(bytes(recs))
    assert errors(t)[0]["kind"] == "corrupt_bytes" and offsets(t) == [0]


@pytest.mark.parametrize("window", [64, 200, 333, 1000])
def test_windows_split_anywhere_give_the_same_rows(window):
    data = b"".join(batch(i, n=3 + i % 4, codec=i % 5) for i in range(30)) + bytes(500)
    whole = decode(data)
    small = decode(data, window_bytes=window)
    for table in ("batches", "records"):
        assert small[table].equals(whole[table])
    assert account(small) == account(whole)


def test_ranges_aligned_on_batch_boundaries_cover_the_file():
    data = b"".join(batch(i) for i in range(10))
    cut = sum(len(batch(i)) for i in range(4))
    left = decode(data, stop=cut)
    right = decode(data, start=cut)
    assert offsets(left) + offsets(right) == offsets(decode(data))
    assert account(left)["bytes_valid"] + account(right)["bytes_valid"] == len(data)


@settings(max_examples=200, deadline=None)
@given(prefix=st.binary(max_size=300), cut=st.integers(0, 400), noise=st.binary(max_size=64))
def test_arbitrary_bytes_never_raise_and_are_accounted(prefix, cut, noise):
    data = prefix + CLEAN[:cut] + noise + GOOD[3]
    t = decode(data)
    check_accounting(t, len(data))
    assert set(offsets(t)) >= set(range(15, 20)) or noise or prefix


def test_cleaned_empty_batches_keep_their_header():
    """The cleaner keeps a header-only batch (recordsCount 0) for producer state (docs/formats.md 3.7)."""
    from simulator.writer import empty_batch

    full = build_batch(
        [Record(b"k", b"v", (), T0 + i) for i in range(4)],
        40,
        codec=3,
        producer_id=7,
        producer_epoch=2,
        base_sequence=100,
        transactional=True,
    )
    empty = empty_batch(full)
    assert len(empty) == 61
    t = decode(GOOD[0] + empty + GOOD[2])
    assert not errors(t)
    b = t["batches"].to_pylist()[1]
    assert (b["record_count"], b["base_offset"], b["last_offset"], b["last_sequence"]) == (
        0,
        40,
        43,
        103,
    )
    assert (b["producer_id"], b["producer_epoch"], b["compression"], b["base_timestamp"]) == (
        7,
        2,
        "none",
        None,
    )
    assert b["crc_valid"] and b["is_transactional"]
    assert offsets(t) == [*range(5), *range(10, 15)]


def test_verify_flags_a_snapshot_ahead_of_its_name(sample_dump):
    from decoders.verify import verify

    out, _ = sample_dump
    part = out / "broker-1" / "orders-1"
    (part / "00000000000000000005.snapshot").write_bytes(
        snapshot_bytes([SnapshotEntry(9, 0, 3, 12, 0, T0, -1, 8)])
    )
    problems = [p for p in verify([str(part)]) if p.file.endswith("00000000000000000005.snapshot")]
    assert [(p.position, p.offset) for p in problems] == [(10, 12), (10, 8)]
