"""Every real broker-written file in ../shared/corpus/real decodes cleanly and agrees with
kafka-python's reader and with the corpus MANIFEST."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from kafka_reference import kafka_python_records

import decoders
from decoders.verify import verify


def test_every_log_decodes_with_zero_corrupt_bytes(corpus_tables):
    seg = corpus_tables["segments"]
    logs = seg.filter(pc.equal(seg["kind"], "log"))
    assert logs.num_rows == 1314
    assert pc.sum(logs["bytes_corrupt"]).as_py() == 0
    assert pc.sum(logs["bytes_padding"]).as_py() == 0
    assert pc.all(pc.equal(logs["bytes_valid"], logs["size"])).as_py()
    # every byte of every file of the dump is accounted for
    total = pc.add(pc.add(seg["bytes_valid"], seg["bytes_padding"]), seg["bytes_corrupt"])
    assert pc.all(pc.equal(total, seg["size"])).as_py()
    assert corpus_tables["errors"].num_rows == 0


def test_every_crc_is_valid(corpus_tables):
    b = corpus_tables["batches"]
    assert b.num_rows > 240_000
    assert pc.all(b["crc_valid"]).as_py()
    assert pc.all(pc.is_null(b["error"])).as_py()


@pytest.mark.sweep  # ~1 M records through kafka-python's pure-Python reader: in ./dev test, not the inner loop
def test_records_equal_kafka_python_on_every_log(corpus_logs):
    compared = 0
    for path in corpus_logs:
        if path.stat().st_size == 0:
            continue
        t = decoders.read_segment(str(path), "records")
        t = t.filter(pc.invert(t["is_control"]))
        ts = [
            (-1 if x is None else x) for x in t["timestamp"].cast(pa.int64()).to_pylist()
        ]  # NO_TIMESTAMP
        ours = [
            (o, k, v, [(h["key"], h["value"]) for h in hs], s)
            for o, k, v, hs, s in zip(
                t["offset"].to_pylist(),
                t["key"].to_pylist(),
                t["value"].to_pylist(),
                t["headers"].to_pylist(),
                ts,
                strict=True,
            )
        ]
        theirs, n_batches = kafka_python_records(path.read_bytes())
        assert ours == theirs, path
        assert decoders.read_segment(str(path), "batches", deep=False).num_rows == n_batches, path
        compared += len(theirs)
    assert compared > 970_000


_ROW = re.compile(
    r"^\| `(?P<dir>[^`]+)` \| [^|]* \| (?P<batches>\d+) \| (?P<records>\d+) \| (?P<magic>[\d,]+) \| "
    r"(?P<codecs>[^|]+) \| (?P<txn>\d+) \| (?P<ctrl>[^|]+) \| (?P<pids>[^|]+) \| (?P<offsets>[^|]+) \| (?P<crc>\d+)/(?P<bad>\d+) \|$"
)


def _manifest_rows(corpus):
    """(path to partition dir, expected facts) from MANIFEST.md's per-partition tables."""
    repo, sub, rows = None, None, []
    for line in (corpus / "MANIFEST.md").read_text().splitlines():
        if line.startswith("## ") and "/" in line:
            repo = line[3:].strip().replace("/", "__", 1)
        elif line.startswith("### `"):
            sub = line[5:].rstrip("`").rstrip("/")
        elif (m := _ROW.match(line)) and repo and sub:
            rows.append((corpus / repo / sub / m["dir"], m.groupdict()))
    return rows


def test_partitions_match_the_manifest(corpus, corpus_tables):
    rows = _manifest_rows(corpus)
    assert len(rows) > 150
    b = corpus_tables["batches"]
    b = b.filter(pc.match_substring_regex(b["file"], r"\.log$"))
    by_dir = defaultdict(list)
    for r in b.select(
        [
            "file",
            "record_count",
            "crc_valid",
            "is_control",
            "control_type",
            "producer_id",
            "base_offset",
            "last_offset",
            "compression",
            "magic",
        ]
    ).to_pylist():
        by_dir[r["file"].rsplit("/", 1)[0]].append(r)
    checked = 0
    for pdir, exp in rows:
        key = str(pdir.relative_to(corpus))
        got = by_dir[key]
        assert len(got) == int(exp["batches"]), key
        assert sum(r["record_count"] for r in got) == int(exp["records"]), key
        assert sum(r["crc_valid"] for r in got) == int(exp["crc"]), key
        assert {str(r["magic"]) for r in got} == set(exp["magic"].split(",")), key
        assert {r["compression"] for r in got} == set(exp["codecs"].strip().split(",")), key
        ctrl = Counter(r["control_type"] for r in got if r["is_control"])
        if exp["ctrl"].strip() == "-":
            assert not ctrl, key
        else:
            assert sum(ctrl.values()) == int(exp["ctrl"].split()[0]), key
            for name, n in re.findall(r"([A-Z_]+) (\d+)", exp["ctrl"]):
                assert ctrl[name] == int(n), key
        pids = exp["pids"].strip()
        if pids != "-" and "…" not in pids:
            assert {r["producer_id"] for r in got if r["producer_id"] >= 0} == {
                int(p) for p in pids.split(",")
            }, key
        first, last = exp["offsets"].strip().split("..")
        assert min(r["base_offset"] for r in got) == int(first), key
        assert max(r["last_offset"] for r in got) == int(last), key
        checked += 1
    assert checked == len(rows)


def test_internal_topics_decode_with_no_unknown_versions(corpus_tables):
    commits, groups, txn = (
        corpus_tables["offset_commits"],
        corpus_tables["group_metadata"],
        corpus_tables["txn_log"],
    )
    assert commits.num_rows > 39_000 and groups.num_rows > 1000
    assert txn.num_rows == 44  # NOVA-RICS 36, dschne27 4, ItumelengMogase 4
    assert pc.all(pc.is_valid(txn["state"])).as_py()
    assert set(pc.unique(commits["value_version"]).drop_null().to_pylist()) == {1, 3, 4}
    assert set(pc.unique(groups["value_version"]).drop_null().to_pylist()) == {1, 2, 3}
    assert pc.sum(commits["is_tombstone"]).as_py() > 0  # mscaldas2012, smartassets
    assert pc.sum(groups["is_tombstone"]).as_py() > 0
    # every consumer-protocol member decoded (subscription and assignment)
    members = pc.list_flatten(
        groups.filter(pc.equal(groups["protocol_type"], "consumer"))["members"]
    )
    assert len(members) > 0
    assert pc.all(pc.is_null(pc.struct_field(members, "protocol_error"))).as_py()
    assert pc.all(pc.is_valid(pc.struct_field(members, "subscription_version"))).as_py()


def test_transaction_state_of_the_ksql_producer(corpus):
    part = corpus / "NOVA-RICS-Open-Lab__agentic-data-pipelines/broker/data/__transaction_state-4"
    t = decoders.read_dump([str(part)], ["txn_log"])["txn_log"]
    assert t.num_rows == 36
    assert Counter(t["state"].to_pylist()) == {
        "Empty": 9,
        "Ongoing": 9,
        "PrepareCommit": 9,
        "CompleteCommit": 9,
    }
    assert set(t["transactional_id"].to_pylist()) == {"agentic_ksql_"}
    ongoing = t.filter(pc.equal(t["state"], "Ongoing")).to_pylist()[0]
    assert ongoing["partitions"] == [
        {"topic": "_confluent-ksql-agentic_ksql__command_topic", "partitions": [0]}
    ]


def test_commit_markers_carry_coordinator_epochs(corpus_tables):
    b = corpus_tables["batches"]
    markers = b.filter(pc.equal(b["control_type"], "COMMIT"))
    assert markers.num_rows == 15  # 9 + 4 + 1 + 1, all from ksqlDB command topics
    assert pc.all(pc.equal(markers["size"], 78)).as_py()
    assert pc.all(pc.is_valid(markers["coordinator_epoch"])).as_py()
    assert pc.all(pc.equal(markers["base_sequence"], -1)).as_py()


def test_producer_snapshots_and_indexes(corpus_tables):
    snaps = corpus_tables["producer_snapshots"]
    assert snaps.num_rows > 100
    per_file = Counter(snaps["file"].to_pylist())
    assert max(per_file.values()) == 24  # NOVA-RICS: a snapshot with 24 producers
    idx = corpus_tables["index_entries"]
    assert idx.num_rows > 9000
    assert set(idx["kind"].to_pylist()) == {"index", "timeindex"}


def test_indexes_and_snapshots_verify_against_the_logs(corpus):
    assert verify([str(corpus)]) == []


def test_two_log_dirs_with_one_node_id_stay_apart(corpus):
    files = decoders.discover([str(corpus / "Danielowo2000__BigDataTechnologies-Version-2")])
    brokers = {f.info.broker for f in files if f.info.topic == "__cluster_metadata"}
    assert len(brokers) == 2


@pytest.mark.parametrize("repo,magic", [("xpxwo100__bullShit", 1), ("BiggerBrain__kafka", 2)])
def test_magic_per_repo(corpus, repo, magic):
    b = decoders.read_dump([str(corpus / repo)], ["batches"])["batches"]
    assert set(b["magic"].to_pylist()) == {magic}
