"""A job's dump listing made in a thread while its Spark session starts
(jobs.session.DumpListing): the same files and layout as the listing made in line, what the
job derives from them made in the same thread, the walk (what the session's options are
chosen by) given first, and every failure said in the job's own thread. No Spark."""

from __future__ import annotations

import threading

import pytest
from s3server import s3  # noqa: F401 (the session's S3 server)

from decoders import layout
from decoders.layout import dump_layout, internal_log_bytes
from jobs.session import DumpListing
from simulator import synth


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    out = tmp_path_factory.mktemp("listing") / "d"
    synth("production_layouts", str(out), seed=3)
    return str(out)


def _same(a, b) -> None:
    assert [(f.path, f.size, f.info, f.cluster, f.topic_id) for f in a[0]] == [
        (f.path, f.size, f.info, f.cluster, f.topic_id) for f in b[0]
    ]
    assert a[1].describe() == b[1].describe()


def test_the_listing_in_a_thread_is_the_listing(dump):
    seen = []
    listing = DumpListing.started("audit", [dump], lambda listed: seen.append(listed) or "spec")
    found = listing.walked()
    assert internal_log_bytes(found) > 0
    listed = listing.result()
    _same(listed, dump_layout([dump]))
    assert listing.derived() == "spec" and seen == [listed]
    assert (
        listing._thread.name == "logreplay-listing"
        and listing._thread is not threading.main_thread()
    )


def test_the_walk_is_given_before_the_layout_is_read(dump, monkeypatch):
    """The session's options wait for the walk only: the layout (its small files read) goes on
    while the session starts."""
    release = threading.Event()
    real = layout.laid_out

    def slow(found):
        assert release.wait(30)
        return real(found)

    monkeypatch.setattr(layout, "laid_out", slow)
    listing = DumpListing.started("audit", [dump])
    try:
        assert listing._walk_done.wait(30)  # while the layout waits
        assert listing.walked() and listing._thread.is_alive()
    finally:
        release.set()
    _same(listing.result(), dump_layout([dump]))


def test_no_such_path_and_no_kafka_files_are_said(tmp_path, capsys):
    assert DumpListing.started("audit", [str(tmp_path / "absent")]) is None
    assert "logreplay audit: no such path" in capsys.readouterr().err
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a dump")
    called = []
    listing = DumpListing.started("decode", [str(tmp_path / "notes")], called.append)
    assert listing.result() is None and listing.derived() is None and called == []
    assert "logreplay decode: no Kafka files under" in capsys.readouterr().err


def test_a_failure_of_the_listing_is_raised_in_the_jobs_thread(dump, monkeypatch):
    def broken(roots):
        raise PermissionError("denied by the test")

    monkeypatch.setattr(layout, "walked", broken)
    listing = DumpListing.started("audit", [dump])
    with pytest.raises(PermissionError, match="denied by the test"):
        listing.walked()
    with pytest.raises(PermissionError):
        listing.result()

    def failing(listed):
        raise ValueError("the spec failed")

    monkeypatch.undo()
    listing = DumpListing.started("audit", [dump], failing)
    listing.walked()
    with pytest.raises(ValueError, match="the spec failed"):
        listing.result()


def test_a_dump_on_s3_is_listed_with_the_runs_storage_settings(s3, tmp_path, monkeypatch):  # noqa: F811
    """A dump on S3 whose endpoint only the configuration names (``storage.s3``) is listed with
    it, as the scan's tasks read it: the settings are exported before the listing starts."""
    import shutil

    from replay.config import load

    synth("clean_idempotent", str(tmp_path / "whole"), seed=1)
    # its broker's meta.properties and user partitions (an upload costs a request a file)
    dump = tmp_path / "d" / "broker-1"
    whole = tmp_path / "whole" / "broker-1"
    shutil.copytree(whole, dump, ignore=lambda d, names: [n for n in names if n.startswith("__")])
    dump = str(tmp_path / "d")
    uri = s3.upload(dump, "listing/dump")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    conf = load(None, [f"storage.s3.endpoint_url={s3.endpoint}"])
    listing = DumpListing.started("audit", [uri], conf=conf)
    files, _ = listing.result()
    local, _ = dump_layout([dump])
    assert len(local) > 5 and sorted((f.info.file, f.size) for f in files) == sorted(
        (f.info.file, f.size) for f in local
    )
