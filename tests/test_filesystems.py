"""Remote storage is not dead code: the same dump read through a URI (pyarrow's filesystems) and
through fsspec's in-memory filesystem (wrapped in pyarrow's PyFileSystem) decodes identically."""

from __future__ import annotations

import os

import fsspec
import pyarrow.compute as pc

import decoders

TABLES = [
    "segments",
    "batches",
    "records",
    "offset_commits",
    "txn_log",
    "aborted_txns",
    "errors",
    "index_entries",
]


def _normalised(tables):
    return {
        t: tables[t].sort_by([("file", "ascending")])
        if "file" in tables[t].column_names
        else tables[t]
        for t in tables
    }


def _upload(local_root, memfs, prefix):
    for dirpath, _, filenames in os.walk(local_root):
        for name in filenames:
            src = os.path.join(dirpath, name)
            rel = os.path.relpath(src, local_root)
            with open(src, "rb") as f:
                memfs.pipe(f"{prefix}/{rel}", f.read())


def test_memory_filesystem_equals_local(sample_dump):
    out, _ = sample_dump
    memfs = fsspec.filesystem("memory")
    _upload(out, memfs, "/dumps/sample")
    local = _normalised(decoders.read_dump([str(out)], TABLES))
    remote = _normalised(decoders.read_dump(["memory://dumps/sample"], TABLES))
    for t in TABLES:
        assert remote[t].equals(local[t]), t
    assert remote["records"].num_rows > 200
    files = decoders.discover(["memory://dumps/sample"])
    assert {f.info.broker for f in files} == {"1", "2"}
    assert all(f.filesystem is not None for f in files)


def test_file_uri_equals_local_path(corpus):
    root = corpus / "dschne27__kafka-streams"
    local = decoders.read_dump([str(root)], ["batches", "segments"])
    uri = decoders.read_dump([f"file://{root}"], ["batches", "segments"])
    assert uri["batches"].equals(local["batches"])
    assert (
        pc.sum(uri["segments"]["bytes_valid"]).as_py()
        == pc.sum(local["segments"]["bytes_valid"]).as_py()
    )


def test_single_file_under_a_uri(sample_dump):
    out, _ = sample_dump
    memfs = fsspec.filesystem("memory")
    _upload(out, memfs, "/one")
    (f,) = decoders.discover(["memory://one/broker-1/orders-1/00000000000000000000.log"])
    assert (f.info.topic, f.info.partition, f.info.broker) == ("orders", 1, "1")
    assert decoders.read_segment(f, "records").num_rows == 17


def test_glob_paths_local_and_remote(sample_dump):
    out, _ = sample_dump
    local = decoders.discover([f"{out}/broker-*"])
    assert {f.info.broker for f in local} == {"1", "2"}
    only_two = decoders.discover([f"{out}/broker-[2]"])
    assert {f.info.broker for f in only_two} == {"2"} and {f.info.topic for f in only_two} == {
        "orders",
        None,
    }
    memfs = fsspec.filesystem("memory")
    _upload(out, memfs, "/globbed")
    remote = decoders.discover(["memory://globbed/broker-*/orders-*"])
    assert {(f.info.broker, f.info.topic, f.info.partition) for f in remote} == {
        ("1", "orders", 0),
        ("1", "orders", 1),
        ("2", "orders", 1),
    }
    assert decoders.discover([f"{out}/nothing-*"]) == []
