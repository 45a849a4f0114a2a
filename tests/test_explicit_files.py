"""Files the user names explicitly, whatever their names: `read_segment("suspect.log")`,
`iter_file`, `logreplay dump suspect.bin` decode by name, extension or content."""

from __future__ import annotations

import shutil
import struct

import pyarrow as pa
import pytest

import decoders
from jobs.cli import main

LOCATION = ("broker", "topic", "partition", "file")


def _first_entry_kind(path) -> tuple[int, int, bool] | None:
    """(magic, codec, transactional) of a segment's first entry, read from its header."""
    with open(path, "rb") as f:
        head = f.read(23)
    if len(head) < 23:
        return None
    magic = head[16]
    if magic == 2:
        (attrs,) = struct.unpack_from(">h", head, 21)
        return magic, attrs & 0x07, bool(attrs & 0x10)
    return magic, head[17] & 0x07, False


@pytest.fixture(scope="module")
def corpus_segments(corpus):
    """One real segment of each (magic, codec, transactional) the corpus holds, plus segments
    whose base offset is not 0 (their names give it; a renamed copy must find it)."""
    picked: dict = {}
    nonzero = []
    for p in sorted(corpus.rglob("*.log"), key=lambda p: (p.stat().st_size, p)):  # small first
        k = _first_entry_kind(p)
        if k is None:
            continue
        picked.setdefault(k, p)
        if not p.name.startswith("0" * 20) and len(nonzero) < 2:
            nonzero.append(p)
    assert len(picked) >= 4 and nonzero
    return sorted(set(picked.values()) | set(nonzero))


def _without_location(t: pa.Table) -> pa.Table:
    return t.drop_columns([c for c in LOCATION if c in t.column_names])


def _same_decode(original, copy, tables=("batches", "records", "segments", "errors")) -> None:
    for table in tables:
        want = decoders.read_segment(str(original), table)
        got = decoders.read_segment(str(copy), table)
        assert got.num_rows == want.num_rows, (copy, table)
        if table == "segments":
            w, g = want.to_pylist()[0], got.to_pylist()[0]
            for k in ("size", "bytes_valid", "bytes_padding", "bytes_corrupt", "entries"):
                assert g[k] == w[k], (copy, k)
            assert g["kind"] == "log"
            continue
        assert _without_location(got).equals(_without_location(want)), (copy, table)
        assert got.column("topic").null_count == got.num_rows
        assert got.column("partition").null_count == got.num_rows


@pytest.mark.parametrize("name", ["suspect.log", "suspect.bin", "no-extension"])
def test_renamed_real_segments_decode_as_the_originals(corpus_segments, tmp_path, name):
    for i, original in enumerate(corpus_segments):
        d = tmp_path / f"copy{i}"
        d.mkdir()
        copy = d / name
        shutil.copyfile(original, copy)
        _same_decode(original, copy)
        seg = decoders.read_segment(str(copy), "segments").to_pylist()[0]
        first = decoders.read_segment(str(original), "batches")["base_offset"][0].as_py()
        assert seg["base_offset"] == first  # from the first batch: the name gives none
        assert seg["topic"] is None and seg["partition"] is None


def test_renamed_generated_segments_of_every_codec(sample_dump, tmp_path):
    root, _ = sample_dump
    logs = sorted(p for p in root.rglob("*.log") if p.stat().st_size)
    codecs = set()
    for i, original in enumerate(logs):
        copy = tmp_path / f"{i}.bin"
        shutil.copyfile(original, copy)
        want = decoders.read_segment(str(original), "batches")
        if want.num_rows and want["crc_valid"][0].as_py():
            _same_decode(original, copy, ("batches", "records"))
            codecs |= set(want["compression"].to_pylist())
    assert {"none", "gzip", "snappy", "lz4", "zstd"} <= codecs


def test_iter_file_streams_a_renamed_copy(corpus_segments, tmp_path):
    original = corpus_segments[0]
    copy = tmp_path / "evidence.dat"
    shutil.copyfile(original, copy)
    tables = ("batches", "records", "segments")
    want: dict[str, list] = {t: [] for t in tables}
    got: dict[str, list] = {t: [] for t in tables}
    for t, b in decoders.iter_file(str(original), tables, max_rows=100):
        want[t].append(b)
    for t, b in decoders.iter_file(str(copy), tables, max_rows=100):
        got[t].append(b)
    for t in ("batches", "records"):
        w = pa.Table.from_batches(want[t], schema=decoders.TABLES[t])
        g = pa.Table.from_batches(got[t], schema=decoders.TABLES[t])
        assert _without_location(g).equals(_without_location(w)), t


def test_indexes_and_snapshots_by_extension(corpus, tmp_path):
    for ext, table in (
        ("index", "index_entries"),
        ("timeindex", "index_entries"),
        ("snapshot", "producer_snapshots"),
    ):
        original, want = next(
            (p, t)
            for p in sorted(corpus.rglob(f"*.{ext}"))
            if p.stat().st_size and (t := decoders.read_segment(str(p), table)).num_rows
        )
        copy = tmp_path / f"suspect.{ext}"
        shutil.copyfile(original, copy)
        got = decoders.read_segment(str(copy), table)
        assert got.num_rows == want.num_rows > 0, ext
        keep = [c for c in want.column_names if c not in (*LOCATION, "offset", "snapshot_offset")]
        assert got.select(keep).equals(want.select(keep)), ext
        assert decoders.read_segment(str(copy), "segments")["kind"][0].as_py() == ext


def test_a_partition_directory_in_the_path_names_topic_and_partition(corpus_segments, tmp_path):
    d = tmp_path / "orders-3"
    d.mkdir()
    copy = d / "suspect.log"
    shutil.copyfile(corpus_segments[0], copy)
    b = decoders.read_segment(str(copy), "batches")
    assert b.num_rows and set(b["topic"].to_pylist()) == {"orders"}
    assert set(b["partition"].to_pylist()) == {3}


def test_unrecognised_content_is_an_error_row_not_a_traceback(corpus_segments, tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 8)
    # a real segment with one bit of its first batch flipped: the CRC no longer holds
    flipped = bytearray(corpus_segments[0].read_bytes())
    flipped[30] ^= 0x01
    bad = tmp_path / "flipped.bin"
    bad.write_bytes(bytes(flipped))
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    for f in (junk, bad, empty):
        assert decoders.read_segment(str(f), "batches").num_rows == 0
        (err,) = decoders.read_segment(str(f), "errors").to_pylist()
        assert err["kind"] == "corrupt_bytes" and err["length"] == f.stat().st_size
        assert "not a file this decoder recognises" in err["reason"]
        seg = decoders.read_segment(str(f), "segments").to_pylist()[0]
        assert seg["kind"] == "other" and seg["bytes_corrupt"] == f.stat().st_size
    # the extension is taken at its word: a damaged `.log` is a damaged segment
    as_log = tmp_path / "flipped.log"
    as_log.write_bytes(bytes(flipped))
    errs = decoders.read_segment(str(as_log), "errors")
    assert "crc_mismatch" in errs["kind"].to_pylist()


def test_logreplay_dump_a_renamed_file(corpus_segments, tmp_path, capsys):
    copy = tmp_path / "suspect.bin"
    shutil.copyfile(corpus_segments[0], copy)
    assert main(["dump", str(copy), "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "batch pos=0 " in out and f"== {tmp_path.name}/suspect.bin kind=log" in out


def test_logreplay_dump_an_unrecognised_file_exits_2(tmp_path, capsys):
    junk = tmp_path / "notes.txt"
    junk.write_text("hello, not a segment\n")
    assert main(["dump", str(junk)]) == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and str(junk) in lines[0] and "not recognised" in lines[0]
    assert cap.out == ""


def test_a_scheduled_for_deletion_suffix_keeps_the_extension(corpus_segments, tmp_path):
    copy = tmp_path / "suspect.log.deleted"
    shutil.copyfile(corpus_segments[0], copy)
    seg = decoders.read_segment(str(copy), "segments").to_pylist()[0]
    assert seg["kind"] == "log.deleted" and seg["bytes_corrupt"] == 0
    _same_decode(corpus_segments[0], copy, ("batches", "records"))
