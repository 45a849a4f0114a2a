"""Hostile and broken input: no crash, memory bounded by the budget, every byte accounted.

Each test here reproduces one crash signature or blow-up of issue 17 on real bytes; memory is
measured in a fresh process (ru_maxrss) by tests.fuzz.measure. No Spark.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from conftest import denied

import decoders
from decoders import compression
from decoders.constants import COMPRESSION_GZIP, COMPRESSION_ZSTD
from decoders.consumer_offsets import encode_offset_commit, encode_offset_commit_key
from decoders.segment import SegmentDecoder
from decoders.transaction_log import encode_key as txn_key
from jobs.cli import main as cli
from simulator.writer import (
    Record,
    build_batch,
    legacy_message,
    offset_index_bytes,
    time_index_bytes,
)
from tests.fuzz import inputs
from tests.fuzz.measure import in_subprocess

BUDGET_MB = 256
BEYOND_DATETIME = 2**62  # milliseconds: far past datetime.max


def _all(path, budget=None):
    out: dict[str, list] = {}
    kwargs = {"memory_budget": budget} if budget else {}
    for t, b in decoders.iter_file(path, tuple(decoders.TABLES), **kwargs):
        out.setdefault(t, []).append(b)
    return {t: pa.Table.from_batches(bs) for t, bs in out.items()}


def _accounted(seg: pa.Table) -> None:
    r = seg.to_pylist()[0]
    assert r["bytes_valid"] + r["bytes_padding"] + r["bytes_corrupt"] == r["size"], r


# -- crashes ---------------------------------------------------------------------------------
def test_internal_record_timestamp_beyond_datetime(tmp_path):
    commit = build_batch(
        [
            Record(
                encode_offset_commit_key("g", "t", 0),
                encode_offset_commit(5, 1000),
                timestamp=BEYOND_DATETIME,
            )
        ]
    )
    txn = build_batch([Record(txn_key("tx"), None, timestamp=BEYOND_DATETIME)])
    got_c = _all(inputs.place(tmp_path, "__consumer_offsets", commit))
    got_t = _all(inputs.place(tmp_path, "__transaction_state", txn))
    ts = got_c["offset_commits"].column("record_timestamp").cast(pa.int64()).to_pylist()
    assert ts == [BEYOND_DATETIME]
    assert got_c["offset_commits"].column("committed_offset").to_pylist() == [5]
    assert got_t["txn_log"].column("record_timestamp").cast(pa.int64()).to_pylist() == [
        BEYOND_DATETIME
    ]
    _accounted(got_c["segments"])


def test_legacy_wrapper_inner_offsets_beyond_int32(tmp_path):
    inner = legacy_message(0, None, b"a", magic=0) + legacy_message(1, None, b"b", magic=0)
    wrapper = legacy_message(
        2**40, None, compression.compress(COMPRESSION_GZIP, inner), magic=0, attributes=1
    )
    got = _all(inputs.place(tmp_path, "old", wrapper))
    batches = got["batches"].to_pylist()
    assert batches[0]["last_offset_delta"] is None
    assert batches[0]["error"] and "before the wrapper" in batches[0]["error"]
    assert got["records"].column("offset").to_pylist() == [0, 1]
    _accounted(got["segments"])


def test_dump_batch_with_out_of_range_timestamp(tmp_path, capsys):
    b = build_batch([Record(b"k", b"v", timestamp=BEYOND_DATETIME)])
    path = inputs.place(tmp_path, "t", b)
    assert cli(["dump", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{BEYOND_DATETIME}ms" in out
    assert cli(["dump", "--json", str(path)]) == 0
    assert f'"{BEYOND_DATETIME}ms"' in capsys.readouterr().out


def test_unreadable_file_is_an_error_row(tmp_path, monkeypatch):
    path = inputs.place(tmp_path, "t", build_batch([Record(b"k", b"v")]))
    denied(monkeypatch, "open", path)
    got = _all(str(path))
    err = got["errors"].to_pylist()
    assert len(err) == 1 and "Permission denied" in err[0]["reason"]
    seg = got["segments"].to_pylist()[0]
    assert seg["bytes_corrupt"] == seg["size"] == path.stat().st_size


def test_dump_unreadable_file_exits_2_in_one_line(tmp_path, monkeypatch, capsys):
    path = inputs.place(tmp_path, "t", build_batch([Record(b"k", b"v")]))
    denied(monkeypatch, "open", path)
    assert cli(["dump", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "Permission denied" in err[0]


def test_file_that_vanishes_before_it_is_read(tmp_path):
    path = inputs.place(tmp_path, "t", build_batch([Record(b"k", b"v")]))
    (f,) = decoders.discover([str(path)])
    path.unlink()
    got = {t: b for t, b in decoders.iter_file(f, ("batches", "errors", "segments"))}
    (err,) = got["errors"].to_pylist()
    assert err["kind"] == "file_vanished" and "No such file" in err["reason"]
    assert err["length"] == got["segments"].column("bytes_corrupt")[0].as_py() == f.size


def test_a_dangling_symlink_is_listed_not_a_crash(tmp_path):
    """A copy that left a symlink to nothing (or a file deleted between a directory's listing
    and its size): listed with size 0, for the decoding to report it, where the listing's
    size lookup used to end the run with a traceback."""
    part = tmp_path / "broker-1" / "events-0"
    inputs.place(part, "00000000000000000000", build_batch([Record(b"k", b"v")]))
    (part / "00000000000000000007.log").symlink_to(tmp_path / "nowhere.log")
    # a symlinked directory is not entered (as os.walk): this one would list the dump again,
    # without end
    (part / "linked").symlink_to(tmp_path, target_is_directory=True)
    files = {os.path.basename(f.path): f for f in decoders.discover([str(tmp_path)])}
    assert set(files) == {"00000000000000000000.log", "00000000000000000007.log"}
    assert all("linked" not in f.path for f in files.values())
    assert files["00000000000000000007.log"].size == 0
    got = {t: b for t, b in decoders.iter_file(files["00000000000000000007.log"],
                                               ("errors", "segments"))}  # fmt: skip
    assert got["errors"].column("kind").to_pylist() == ["file_vanished"]


def test_an_audit_goes_on_past_files_gone_while_it_runs(tmp_path, monkeypatch):
    """A live broker's retention deleting a partition's oldest segment between the dump's
    listing and its reading, and a dangling symlink beside it: the audit of a clean dump goes
    on, each gone file one ``file_vanished`` finding (info: its bytes cannot be told), and
    nothing of warning or above (absence is not evidence)."""
    from replay import local
    from replay.findings import SEVERITIES
    from simulator import synth

    synth("clean_idempotent", str(tmp_path / "d"), 1)
    part = tmp_path / "d" / "broker-1" / "events-0"
    oldest = part / "00000000000000000000.log"
    size = oldest.stat().st_size
    (part / "00000000000000099999.log").symlink_to(tmp_path / "nowhere.log")
    listing = local.dump_layout

    def listed_then_deleted(paths):
        listed = listing(paths)
        oldest.unlink()
        return listed

    monkeypatch.setattr(local, "dump_layout", listed_then_deleted)
    got = local.audit_local([str(tmp_path / "d")])
    gone = {
        json.loads(f["evidence"])["file"].rsplit("/", 1)[-1]: f
        for f in got["findings"] if f["kind"] == "file_vanished"
    }  # fmt: skip
    assert set(gone) == {oldest.name, "00000000000000099999.log"}
    assert {f["severity"] for f in gone.values()} == {"info"}
    assert json.loads(gone[oldest.name]["evidence"])["length"] == size
    worse = [f for f in got["findings"] if SEVERITIES.index(f["severity"]) >= 1]
    assert worse == []


def test_a_directory_that_cannot_be_listed_is_a_finding_not_left_out(tmp_path, monkeypatch):
    """A partition directory the run's user cannot read: the audit of a clean dump goes on
    with the rest, the directory one ``unlisted_directory`` finding (info) naming its topic,
    partition and cluster, and a line of the layout; nothing of warning or above. ``os.walk``
    left it out in silence."""
    from replay import local
    from replay.findings import SEVERITIES
    from simulator import synth

    synth("clean_idempotent", str(tmp_path / "d"), 1)
    denied(monkeypatch, "scandir", tmp_path / "d" / "broker-1" / "events-1")
    got = local.audit_local([str(tmp_path / "d")])
    why = {"directory": "broker-1/events-1", "reason": "Permission denied"}
    (f,) = [f for f in got["findings"] if f["kind"] == "unlisted_directory"]
    assert (f["severity"], f["topic"], f["partition"]) == ("info", "events", 1)
    assert f["cluster"] == got["partitions"][0]["cluster"]
    assert json.loads(f["evidence"]) == why
    assert got["layout"]["unlisted_directories"] == [why]
    events = {p["partition"] for p in got["partitions"] if p["topic"] == "events"}
    assert events == {0, 2}
    assert [g for g in got["findings"] if SEVERITIES.index(g["severity"]) >= 1] == []


def test_file_that_shrinks_during_the_run(tmp_path):
    data = b"".join(build_batch([Record(b"k", b"x" * 200)], base_offset=i) for i in range(50))
    path = inputs.place(tmp_path, "t", data)
    it = decoders.iter_file(str(path), ("batches", "errors", "segments"), window_bytes=1024)
    first = next(it)
    os.truncate(path, len(data) // 3)
    rest = list(it)
    errors = [b for t, b in rest if t == "errors"]
    seg = [b for t, b in rest if t == "segments"][0].to_pylist()[0]
    assert first[0] == "batches"
    assert errors and "shrank" in errors[0].column("reason")[0].as_py()
    assert seg["size"] == len(data)
    assert seg["bytes_valid"] + seg["bytes_padding"] + seg["bytes_corrupt"] == len(data)


def test_file_that_grows_during_the_run(tmp_path):
    data = b"".join(build_batch([Record(b"k", b"x" * 200)], base_offset=i) for i in range(50))
    path = inputs.place(tmp_path, "t", data)
    it = decoders.iter_file(str(path), ("batches", "errors", "segments"), window_bytes=1024)
    next(it)
    with open(path, "ab") as f:
        f.write(build_batch([Record(b"k", b"late")], base_offset=99))
    rest = list(it)
    reasons = [r for t, b in rest if t == "errors" for r in b.column("reason").to_pylist()]
    assert any("changed size" in r for r in reasons)


@pytest.mark.slow  # compiles every kernel into a fresh cache
def test_numba_caches_outside_the_package(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(tmp_path)
    code = (
        "import decoders.kernels as k, decoders, os;"
        "decoders.read_segment(__import__('tests.fuzz.inputs').fuzz.inputs.batch("
        "__import__('tests.fuzz.inputs').fuzz.inputs.empty_records(3), 3), 'records');"
        "print(k._CACHE_DIR)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    cache = out.stdout.strip().splitlines()[-1]
    assert cache.startswith(str(tmp_path)), cache
    assert any(name.endswith(".nbi") for _, _, files in os.walk(cache) for name in files)
    assert os.path.basename(cache).startswith("logreplay-")  # keyed on the kernel sources


# -- the codec's own errors only, and a corrupt payload tried at most twice ------------------
def test_only_codec_errors_become_decode_errors(monkeypatch):
    def boom(*_a, **_k):
        raise MemoryError("not a codec problem")

    monkeypatch.setattr(compression.cramjam.zstd, "decompress_into", boom)
    with pytest.raises(MemoryError):
        compression.decompress_into(COMPRESSION_ZSTD, b"\x28\xb5\x2f\xfd", np.empty(10, np.uint8))


def test_corrupt_payload_is_decompressed_at_most_twice(monkeypatch):
    area = inputs.empty_records(1000)
    good = inputs.batch(area, 1000, codec=COMPRESSION_ZSTD)
    bad = bytearray(good)
    bad[-8:] = b"\xff" * 8  # the frame's tail: the CRC no longer matches either
    calls = []
    real = compression.cramjam.zstd.decompress_into

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(compression.cramjam.zstd, "decompress_into", counting)
    with SegmentDecoder(bytes(bad), verify_crc=False) as dec:
        for w in dec.windows():
            list(w.records)
    assert dec.acct.corrupt == len(bad)
    assert len(calls) <= 2


# -- blow-ups: memory bounded by the budget --------------------------------------------------
def test_large_valid_zstd_batch_streams_every_record(tmp_path):
    # 4 million records, 38 MB decompressed: more than any single decompression buffer
    rec = inputs.encode_record(0, 0, None, b"value-x", ())
    n = 4_000_000
    area = rec * n
    assert len(area) > 32 << 20
    path = inputs.place(tmp_path, "t", inputs.batch(area, n, codec=COMPRESSION_ZSTD))
    got = in_subprocess(path, BUDGET_MB)
    assert got["rows"]["records"] == n
    assert got["segment"]["bytes_valid"] == got["segment"]["size"]
    assert got["peak_mb"] < BUDGET_MB, got


def test_small_batch_of_millions_of_empty_records_stays_in_budget(tmp_path):
    data = inputs.zstd_bomb(4_600_000)
    assert len(data) < 4096
    got = in_subprocess(inputs.place(tmp_path, "t", data), BUDGET_MB)
    assert got["rows"]["records"] == 4_600_000
    assert got["peak_mb"] < BUDGET_MB, got


def test_a_million_consumer_offsets_tombstones_stay_in_budget(tmp_path):
    data = inputs.tombstones(1_000_000)
    assert len(data) < 4096
    got = in_subprocess(inputs.place(tmp_path, "__consumer_offsets", data), BUDGET_MB)
    assert got["rows"]["offset_commits"] == 1_000_000
    assert got["peak_mb"] < BUDGET_MB, got


def test_zero_filled_txnindex_is_one_error_row(tmp_path):
    good = struct.pack(">hqqqq", 0, 7, 10, 20, 30)
    path = inputs.place(tmp_path, "t", good + bytes(10 << 20), "txnindex")
    got = _all(str(path))
    assert got["aborted_txns"].num_rows == 1
    errs = got["errors"].to_pylist()
    assert len(errs) == 1 and errs[0]["position"] == 34
    assert errs[0]["length"] == 10 << 20
    seg = got["segments"].to_pylist()[0]
    assert seg["bytes_valid"] == 34 and seg["bytes_padding"] == 0
    _accounted(got["segments"])


@pytest.mark.parametrize("ext", ["index", "timeindex"])
def test_sparse_preallocated_index_is_padding_and_in_budget(tmp_path, ext):
    entries = [(10 * i + 10, 4096 * i + 100) for i in range(100)]
    data = offset_index_bytes(entries) if ext == "index" else time_index_bytes(entries)
    path = inputs.place(tmp_path, "t", data, ext)
    size = int(1.2 * (1 << 30))
    os.truncate(path, size)  # sparse: no disk
    got = in_subprocess(path, BUDGET_MB)
    assert got["rows"]["index_entries"] == 100
    seg = got["segment"]
    assert seg["bytes_valid"] == len(data) and seg["bytes_padding"] == size - len(data), seg
    assert got["peak_mb"] < BUDGET_MB, got


def test_accounting_of_files_over_2_gib(tmp_path):
    size = (5 << 30) // 2
    log = inputs.place(tmp_path, "t", build_batch([Record(b"k", b"v")]))
    n = log.stat().st_size
    with open(log, "r+b") as f:  # a valid batch, zeros, a stray batch past 2 GiB, zeros
        f.seek(size - 4096)
        f.write(build_batch([Record(b"k", b"late")], base_offset=9))
        f.truncate(size)
    txn = inputs.place(tmp_path, "t", struct.pack(">hqqqq", 0, 7, 10, 20, 30), "txnindex")
    os.truncate(txn, size)
    for path, valid in ((log, n), (txn, 34)):
        got = in_subprocess(path, BUDGET_MB)
        seg = got["segment"]
        assert seg["size"] == size
        assert seg["bytes_valid"] + seg["bytes_padding"] + seg["bytes_corrupt"] == size, seg
        assert seg["bytes_valid"] >= valid
        assert got["peak_mb"] < BUDGET_MB, got


def test_index_table_outlives_its_file(tmp_path):
    entries = [(10 * i + 10, 4096 * i + 100) for i in range(10)]
    path = inputs.place(tmp_path, "t", offset_index_bytes(entries), "index")
    table = decoders.read_segment(str(path), "index_entries")
    path.write_bytes(bytes(len(offset_index_bytes(entries))))
    path.unlink()
    assert table.column("log_position").to_pylist() == [p for _, p in entries]
