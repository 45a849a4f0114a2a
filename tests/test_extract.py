"""`logreplay extract` (docs/extract.md): payloads replaced by tokens without changing what the
audit reads, slices cut at entry boundaries, and for every finding of the faulted scenarios a
slice within the size bound whose own audit finds it again. No Spark: the audits here are the
one-process replay (replay.local); tests/test_outputs.py runs the command line on an S3
output and audits the slice with Spark."""

from __future__ import annotations

import json
import os

import pytest

from decoders.constants import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from decoders.rewrite import Entry, Tokens, crc_ok, entries, key_values, tokenised
from decoders.segment import SegmentDecoder
from jobs import extract
from jobs.cli import main
from replay import slices
from replay.local import audit_local
from replay.settings import AuditConfig
from simulator import synth
from simulator.writer import Record, build_batch, control_batch, legacy_message, legacy_wrapper

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]


def _decoded(data: bytes) -> list[dict]:
    with SegmentDecoder(data) as dec:
        return [r for w in dec.windows() for rb in w.records for r in rb.to_pylist()]


@pytest.mark.parametrize("codec", CODECS)
def test_tokens_keep_lengths_offsets_and_equalities(codec):
    """Every key, value and header value is replaced by a token of its length; equal bytes get
    equal tokens, different bytes different ones; the batch's CRC holds and the header fields
    the audit reads are as they were."""
    recs = [Record(b"user-1", b'{"amount": 10}', [("trace", b"abc"), ("none", None)], 1000),
            Record(b"user-2", b'{"amount": 20}', [("trace", b"abd")], 1001),
            Record(b"user-1", None, [], 1002),
            Record(None, b"", [], 1003)]  # fmt: skip
    batch = build_batch(recs, 40, codec=codec, producer_id=7, producer_epoch=2, base_sequence=5)
    tokens = Tokens()
    out = tokenised(batch, tokens)
    assert crc_ok(out) and out[:8] == batch[:8]
    before, after = _decoded(batch), _decoded(out)
    assert [(r["offset"], r["timestamp"]) for r in after] == [
        (r["offset"], r["timestamp"]) for r in before
    ]
    for b, a in zip(before, after, strict=True):
        for col in ("key", "value"):
            assert (a[col] is None) == (b[col] is None)
            if b[col]:
                assert len(a[col]) == len(b[col]) and a[col] != b[col]
    assert after[0]["key"] == after[2]["key"] != after[1]["key"]
    assert after[3]["value"] == b"" and after[3]["key"] is None
    assert tokens.replaced == 8  # 3 keys, 3 non-empty or empty values, 2 header values
    assert b"amount" not in out and b"user" not in out


def test_short_values_never_collide():
    """Tokens of fewer than 8 bytes count in binary: 256 different 1-byte values get 256
    different tokens."""
    t = Tokens()
    assert len({t.token(bytes([i])) for i in range(256)}) == 256
    assert t.token(b"x" * 12) == b"t0.........." and t.token(b"y" * 12) == b"t1.........."


def test_markers_and_legacy_entries():
    """A marker stays byte for byte; legacy messages, plain and in a compressed wrapper, get
    tokens and a CRC that holds."""
    marker = control_batch(0, 7, 2, 3, 1000, base_offset=9)
    assert tokenised(marker, Tokens()) == marker
    plain = legacy_message(3, b"key-1", b"value-1", magic=1, timestamp=5)
    out = tokenised(plain, Tokens())
    assert len(out) == len(plain) and crc_ok(out) and b"value-1" not in out
    wrapper = legacy_wrapper([(b"k1", b"secret-1", 5), (b"k2", b"secret-2", 6)], 11,
                             COMPRESSION_GZIP)  # fmt: skip
    out = tokenised(wrapper, Tokens())
    assert crc_ok(out)
    values = [r["value"] for r in _decoded(out)]
    assert len(values) == 2 and all(len(v) == 8 and b"secret" not in v for v in values)


def test_entries_walk_heads_and_mark_unreadable_runs():
    """Entries from their framing alone; bytes that are no entry are one unreadable run up to
    where a valid entry starts again."""
    a = build_batch([Record(b"k", b"v", timestamp=1)], 0, producer_id=3, producer_epoch=0,
                    base_sequence=0)  # fmt: skip
    b = build_batch([Record(b"k", b"w", timestamp=2)] * 2, 1)
    data = a + b"\x01garbage-bytes" + b
    from decoders.resync import Resync
    from decoders.source import BytesSource

    src = BytesSource(data)
    found = list(entries(src.read_at, len(data), Resync(src, len(data)).next_valid_entry))
    assert [(e.position, e.magic, e.base_offset, e.last_offset) for e in found] == [
        (0, 2, 0, 0), (len(a), -1, -1, -1), (len(a) + 14, 2, 1, 2)]  # fmt: skip
    assert found[0].producer_id == 3 and not found[1].readable
    assert key_values(b) == [(b"k", b"w"), (b"k", b"w")]


def test_walking_entries_reads_a_window_at_a_time():
    """On an object store each read is a request: walking 200 entries' heads and reading them
    whole costs one read of the source per window, not one per entry."""
    from decoders.source import BytesSource, WindowedSource

    data = b"".join(build_batch([Record(b"k", b"v" * 50, timestamp=i)], i) for i in range(200))

    class Counted(BytesSource):
        reads = 0

        def read_at(self, position, length):
            Counted.reads += 1
            return super().read_at(position, length)

    src = WindowedSource(Counted(data), window=4096)
    found = list(entries(src.read_at, src.size, lambda _: None))
    assert len(found) == 200 and [e.base_offset for e in found] == list(range(200))
    assert all(src.read_at(e.position, e.length) == data[e.position : e.end] for e in found)
    assert Counted.reads <= 2 * (len(data) // 4096 + 1)


def test_a_slice_keeps_whole_runs_and_the_partitions_end():
    """The run the evidence names reaches back to its producer's previous batch and on to the
    marker ending its transaction; the last entries (data, marker, largest timestamp) bound the
    copy's end; nothing in between is thinned out."""
    es = [Entry(i * 100, 100, 2, i, i, 5 if i % 2 else 6, 0, 0x10 if i % 2 else 0, 1000 + i)
          for i in range(20)]  # fmt: skip
    es[15] = Entry(1500, 100, 2, 15, 15, 5, 0, 0x30, 1015)  # producer 5's marker
    want = slices.Want(runs={("t", 0): [(9, 11)]}, pids={5})
    keep = slices.kept(es, want, ("t", 0), ["f"] * 20)
    assert [i for i, k in enumerate(keep) if k] == [7, 8, 9, 10, 11, 12, 13, 14, 15, 19]


# -- every finding of the faulted scenarios --------------------------------------------------
FAULTED = ("transaction_faults", "offset_resets", "broadcast_groups", "aborted_reads",
           "replica_divergence", "idempotence_faults", "corrupt_segments",
           "production_layouts_faults")  # fmt: skip


@pytest.fixture(scope="module")
def faulted(tmp_path_factory):
    root = tmp_path_factory.mktemp("extract")
    out = []
    for name in FAULTED:
        synth(name, str(root / name), seed=3)
        out.append((root / name, audit_local([str(root / name)])))
    return out


def _reproduce(path, result, pinned: bool = True, kinds=None) -> list[tuple[str, extract.Choice]]:
    """Every finding's slice (of ``kinds``, else all) as ``logreplay extract finding`` chooses
    it (``pinned``: with the alignment anchors it takes from the audit's rows)."""
    dump = extract.Dump([str(path)])
    limit = extract.bound(dump.bytes)
    chosen = []
    facts = AuditConfig.of(None).facts()
    for f in result["findings"]:
        if kinds and f["kind"] not in kinds:
            continue
        coord = [r for r in result["coordinator_transactions"]
                 if r["producer_id"] == f["producer_id"]]  # fmt: skip
        commits = [r for r in result["offset_timeline"] if r["group_id"] == f["group_id"]]
        want = slices.for_finding(f, coord, commits)
        anchoring = slices.anchoring(f, result["transactions"], coord, result["partitions"],
                                     facts) if pinned else None  # fmt: skip
        choice = extract.choose(dump, want, f, None, limit, False, result["findings"], anchoring)
        chosen.append((f, choice, limit))
    return chosen


def test_every_finding_comes_back_from_its_slice(faulted):
    """For every finding of every faulted scenario: the slice chosen fits the bound and its
    audit finds the same kind at the same place with the same severity and nothing at warning
    or above that the dump's audit does not have; evidence differs only where it counts the
    partition's context or names the slice's file positions."""
    kinds = set()
    for path, result in faulted:
        for f, choice, limit in _reproduce(path, result):
            kinds.add(f["kind"])
            assert choice.cut.bytes <= limit, (f["kind"], choice.attempts)
            assert choice.reproduced["fingerprint"], (path.name, f["kind"], choice.attempts)
            assert choice.reproduced["severity"]
            assert not choice.reproduced["not_in_the_dump"], (f["kind"], choice.reproduced)
            assert set(choice.reproduced["evidence_differs"]) <= {
                "position", "pinned_records", "coordinator_transactions_listing_partition",
                "directory", "reason"}  # fmt: skip
    assert {"hanging_transaction", "split_outcome", "missing_marker", "write_outside_transaction",
            "aborted_read_leak", "aborted_data_propagated", "offset_overwrite",
            "offset_regression", "replica_divergence", "crc_mismatch", "corrupt_bytes",
            "truncated_batch", "sequence_gap", "duplicate_sequence", "fenced_epoch_write",
            "invalid_epoch_start", "out_of_order_sequence",
            "non_transactional_write_in_txn", "stale_replica"} <= kinds  # fmt: skip


def test_a_slice_starting_at_a_marker_is_no_sequence_gap(faulted):
    """A copy that starts at a producer's marker (retention deleted its earlier batches) knows
    nothing of its sequences: its next batch starts it afresh (KIP-360), as the broker's
    snapshot would have it; the slices above start so and must not invent a sequence_gap."""
    path, _ = next(x for x in faulted if x[0].name == "transaction_faults")
    dump = extract.Dump([str(path)])
    for _, r in dump.replicas.items():
        pairs = r.entries()
        first = next((i for i, (e, _) in enumerate(pairs) if e.is_control), None)
        if r.topic.startswith("__") or first is None or first + 1 >= len(pairs):
            continue
        want = slices.Want(runs={r.place: [(pairs[first][0].base_offset, 1 << 62)]}, tails=False)
        cut = extract.cut(dump, want, False)
        found = audit_local([_written(cut, path.parent / f"from-marker-{r.topic}-{r.partition}")])
        assert not [f for f in found["findings"] if f["kind"] == "sequence_gap"]


def _written(cut: extract.Cut, to) -> str:
    extract.write(cut, str(to))
    return str(to)


def test_with_payloads_the_entries_are_the_dump_s_bytes(faulted):
    """--include-payloads: every entry kept is copied byte for byte (and only then)."""
    from decoders.source import BytesSource

    path, result = next(x for x in faulted if x[0].name == "aborted_reads")
    dump = extract.Dump([str(path)])
    f = next(f for f in result["findings"] if f["kind"] == "aborted_read_leak")
    want = slices.for_finding(f, [], [])
    as_is, tokens = extract.cut(dump, want, True), extract.cut(dump, want, False)
    assert as_is.tokens == 0 and tokens.tokens > 0
    checked = 0
    for log in as_is.logs:
        data, source = as_is.files[log["file"]], (path / log["file"]).read_bytes()
        src = BytesSource(data)
        for e in entries(src.read_at, len(data), lambda _: None):
            assert data[e.position : e.end] in source
            checked += 1
    assert checked > 10 and as_is.files.keys() == tokens.files.keys()


def test_extract_slice_of_a_transactional_id_and_a_group(faulted, tmp_path, capsys):
    """`logreplay extract slice` by transactional id: the coordinator's records of that id
    only, the partitions its transactions list, tokens for payloads, a manifest; by group: the
    group's records and the offsets it committed. Both re-audit without errors of their own."""
    path, result = next(x for x in faulted if x[0].name == "aborted_reads")
    tid = next(r["transactional_id"] for r in result["coordinator_transactions"])
    out = tmp_path / "txn"
    assert main(["extract", "slice", str(path), "--transactional-id", tid, "--to", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kept"]["transactional_ids"] == [tid]
    assert manifest["bytes"] <= manifest["bound_bytes"] and manifest["payload_fields_replaced"] > 0
    ids = set()
    for d in os.listdir(out / "broker-1"):
        if d.startswith("__transaction_state-"):
            seg = out / "broker-1" / d / "00000000000000000000.log"
            if seg.exists():
                data = seg.read_bytes()
                ids |= {r["key"] for r in _decoded(data)}
    assert len(ids) == 1
    audited = audit_local([str(out)])
    assert audited["transactions"]
    assert main(["dump", "--verify", str(out)]) == 0  # the rebuilt indexes hold against the log
    group = next(r["group_id"] for r in result["offset_timeline"])
    out2 = tmp_path / "group"
    assert main(["extract", "slice", str(path), "--group", group, "--from", "0",
                 "--to", "2100-01-01T00:00:00Z", "--to", str(out2)]) == 0  # fmt: skip
    manifest = json.loads((out2 / "manifest.json").read_text())
    assert manifest["selection"]["until_ms"] == 4102444800000
    assert {r["group_id"] for r in audit_local([str(out2)])["offset_timeline"]} == {group}
    assert main(["extract", "slice", str(path), "--topic", "nope", "--partition", "0",
                 "--to", str(tmp_path / "none")]) == 1  # fmt: skip


# -- a producer that lives for the whole dump -------------------------------------------------
@pytest.fixture(scope="module")
def lifelong(tmp_path_factory):
    """A Kafka Streams thread under TV1 for 2,000 transactions (one producer id and epoch for
    life, 100 ms apart), with a split outcome, a missing marker and a late write near its end."""
    path = tmp_path_factory.mktemp("lifelong") / "long_lived_producer_faults"
    synth("long_lived_producer_faults", str(path), seed=3, scale=0.1)
    return path, audit_local([str(path)])


ALIGNED = {"split_outcome", "missing_marker", "write_outside_transaction"}


def test_a_lifelong_producer_s_findings_come_back_from_pinned_slices(lifelong):
    """A slice starts mid-history, where an alignment shifted by one transaction explains a
    split outcome or a missing marker away (its transactions are milliseconds apart, one epoch
    for life): unpinned, those slices do not reproduce. Pinned by the pairs the whole dump's
    audit matched (alignment.json), every finding comes back and nothing is made up."""
    path, result = lifelong
    assert ALIGNED | {"hanging_transaction"} == {f["kind"] for f in result["findings"]}
    chosen = _reproduce(path, result, kinds=ALIGNED)
    for f, choice, limit in chosen:
        assert choice.cut.bytes <= limit, (f["kind"], choice.attempts)
        assert choice.reproduced["fingerprint"], (f["kind"], choice.attempts)
        assert not choice.reproduced["not_in_the_dump"], (f["kind"], choice.reproduced)
        assert f["topic"] in {a["topic"] for a in choice.cut.anchors}
        assert extract.ANCHORS_FILE in choice.cut.files
    # the same slices without their anchors: the shifted alignments win
    for f, choice, _ in chosen:
        bare = extract.Cut({k: v for k, v in choice.cut.files.items()
                            if k != extract.ANCHORS_FILE})  # fmt: skip
        again = extract.reaudit(bare, f, None, roots=[str(path)])
        assert bool(again.get("fingerprint")) is (f["kind"] == "write_outside_transaction")


@pytest.mark.spark
def test_extract_a_lifelong_producer_s_split_outcome_and_audit_it_with_spark(
    spark, lifelong, tmp_path, capsys
):
    """As a user runs it: `logreplay audit` (Spark), `logreplay extract finding` of the split
    outcome, and `logreplay audit` of the slice (Spark, whose streamed judgement reads the
    anchors too) finds it again with the same fingerprint; the run shows the anchors read."""
    path, _ = lifelong
    out, piece, again = tmp_path / "audit", tmp_path / "slice", tmp_path / "again"
    assert main(["audit", str(path), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["findings", str(out), "--kind", "split_outcome"]) == 0
    fid = json.loads(capsys.readouterr().out.splitlines()[0])["fingerprint"]
    assert main(["extract", "finding", str(out), fid, "--to", str(piece)]) == 0
    manifest = json.loads((piece / "manifest.json").read_text())
    assert manifest["alignment_anchors"] and (piece / extract.ANCHORS_FILE).exists()
    assert main(["audit", str(piece), "--out", str(again)]) == 0
    capsys.readouterr()
    assert main(["findings", str(again), "--kind", "split_outcome"]) == 0
    assert fid in {json.loads(line)["fingerprint"] for line in capsys.readouterr().out.splitlines()}
    summary = json.loads((again / "summary.json").read_text())
    assert summary["dump_layout"]["alignment_anchors"] == manifest["alignment_anchors"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["production_day_faults", "production_compacted_faults", "long_lived_producer_faults"]
)
def test_every_finding_of_a_production_day_comes_back_from_its_slice(name, tmp_path):
    """The production-shaped faulted days (several MB, the 1 MiB floor binding): every finding
    comes back from a slice within the bound, and the slices make nothing up."""
    synth(name, str(tmp_path / name), seed=1)
    result = audit_local([str(tmp_path / name)])
    assert result["findings"]
    for f, choice, limit in _reproduce(tmp_path / name, result):
        assert choice.cut.bytes <= limit, (f["kind"], choice.attempts)
        assert choice.reproduced["fingerprint"], (f["kind"], choice.attempts)
        assert not choice.reproduced["not_in_the_dump"], (f["kind"], choice.reproduced)
