"""A dump's directories read as Kafka lays them out (decoders.brokers, docs/layouts.md):
brokers with several log dirs, moves between them, deleted and re-created topics, copies
without meta.properties, unrelated clusters sharing an id; the coverage table and the
gate's minimum coverage. Directories are built here file by file (no Spark), and the
production_layouts scenarios are swept through the one-process runner."""

from __future__ import annotations

import base64
import json
import os
import uuid

import pytest

from decoders.layout import dump_layout
from replay.coverage import below, coverage_rows, shares
from replay.dumpinfo import layout_facts
from replay.findings import at_least
from replay.local import audit_local, summary
from replay.truthcheck import compare
from simulator import synth

CID = "bGF5b3V0cy10ZXN0LWNsdXN0ZXI"
OTHER = "b3RoZXItY2x1c3Rlci1pZC0x"


def _id(text: str) -> str:
    raw = uuid.uuid5(uuid.NAMESPACE_URL, text).bytes
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def log_dir(path, node=None, cluster=CID, directory=None):
    path.mkdir(parents=True, exist_ok=True)
    if node is not None or cluster is not None:
        lines = [f"node.id={node}"] if node is not None else []
        lines += [f"cluster.id={cluster}"] if cluster else []
        lines += [f"directory.id={directory}"] if directory else []
        (path / "meta.properties").write_text("\n".join(["version=1", *lines]) + "\n")
    return path


def partition(parent, name, topic_id=None, data=b""):
    d = parent / name
    d.mkdir(parents=True)
    (d / "00000000000000000000.log").write_bytes(data)
    if topic_id:
        (d / "partition.metadata").write_text(f"version: 0\ntopic_id: {_id(topic_id)}\n")
    return d


def _labels(root) -> dict[str, tuple[str, str, str]]:
    """Partition directory name (as the test wrote it, under its log dir) -> (cluster,
    broker label, topic label)."""
    files, _ = dump_layout([str(root)])
    out = {}
    for f in files:
        if f.kind == "log":
            parts = f.info.file.split("/")
            out["/".join(parts[:-1])] = (f.cluster, f.info.broker, f.info.topic)
    return out


def test_log_dirs_of_one_broker_are_one_broker_and_a_future_copy_a_lagging_replica(tmp_path):
    """JBOD: both dirs claim node 1 of one cluster, each with its own directory.id; a
    partition moving between them has a -future copy in the other. One cluster, broker 1,
    the -future copy its replica `1~future`; broker 2 beside it."""
    a = log_dir(tmp_path / "broker-1" / "d1", 1, directory="AAAAAAAAAAAAAAAAAAAAAA")
    b = log_dir(tmp_path / "broker-1" / "d2", 1, directory="BBBBBBBBBBBBBBBBBBBBBB")
    c = log_dir(tmp_path / "broker-2", 2)
    partition(a, "orders-0", "orders")
    partition(b, "orders-1", "orders")
    partition(b, "orders-0.0123456789abcdef0123456789abcdef-future", "orders")
    partition(c, "orders-0", "orders")
    labels = _labels(tmp_path)
    assert {v[0] for v in labels.values()} == {CID}
    assert labels["broker-1/d1/orders-0"][1:] == ("1", "orders")
    assert labels["broker-1/d2/orders-1"][1:] == ("1", "orders")
    future = "broker-1/d2/orders-0.0123456789abcdef0123456789abcdef-future"
    assert labels[future][1:] == ("1~future", "orders")
    _, layout = dump_layout([str(tmp_path)])
    assert any("JBOD" in r for r in layout.reasons)


@pytest.mark.parametrize("clash", ["partition", "directory_id"])
def test_one_node_twice_proves_two_clusters_and_says_why(tmp_path, clash):
    """Kafka refuses two current logs of one partition on one broker, and a directory.id is
    one directory's: two dirs claiming node 1 that break either are two deployments."""
    same = "CCCCCCCCCCCCCCCCCCCCCC"
    a = log_dir(tmp_path / "old" / "broker-1", 1, directory=same)
    b = log_dir(tmp_path / "new" / "broker-1", 1, directory=same if clash == "directory_id" else None)  # fmt: skip
    partition(a, "orders-0", "orders")
    partition(b, "orders-0" if clash == "partition" else "orders-1", "orders")
    labels = _labels(tmp_path)
    assert labels["old/broker-1/orders-0"][:2] == (f"{CID}@old", "1@old/broker-1")
    assert {v[0] for v in labels.values()} == {f"{CID}@old", f"{CID}@new"}
    _, layout = dump_layout([str(tmp_path)])
    (why,) = [r for r in layout.reasons if "split" in r]
    assert "both claim node 1" in why and ("orders-0" in why or same in why)


def test_brokers_without_a_cluster_id_are_one_cluster_unless_their_bytes_disagree(tmp_path):
    """Copies without meta.properties under one root: one cluster (their replicas are
    compared); internal topics with two topic ids, or replicas whose first batches differ,
    prove two."""
    for b in ("broker-1", "broker-2"):
        d = log_dir(tmp_path / "one" / b, cluster=None)
        partition(d, "__consumer_offsets-0", "offsets-A")
        partition(d, "metrics-0", None, b"\x00" * 8 + b"same first batch")
    assert {v[0] for v in _labels(tmp_path / "one").values()} == {f"dir:{tmp_path / 'one'}"}

    other = log_dir(tmp_path / "two" / "x" / "broker-1", cluster=None)
    partition(other, "__consumer_offsets-0", "offsets-B")
    mine = log_dir(tmp_path / "two" / "y" / "broker-1", cluster=None)
    partition(mine, "__consumer_offsets-0", "offsets-A")
    clusters = {v[0] for v in _labels(tmp_path / "two").values()}
    assert clusters == {f"dir:{tmp_path / 'two' / 'x' / 'broker-1'}", f"dir:{tmp_path / 'two' / 'y' / 'broker-1'}"}  # fmt: skip

    for side, first in (("p", b"first batch of p"), ("q", b"first batch of q")):
        d = log_dir(tmp_path / "three" / side / "broker-1", cluster=None)
        partition(d, "metrics-0", None, b"\x00" * 8 + first)
    _, layout = dump_layout([str(tmp_path / "three")])
    assert len(layout.clusters()) == 2
    assert any("disagree from their first batch" in r for r in layout.reasons)


def test_a_recreated_topic_s_incarnations_are_kept_apart(tmp_path):
    """events deleted and re-created: broker 1 holds the new incarnation and the old one's
    -delete directory (its topic name truncated, as UnifiedLog caps the name at 255
    characters); broker 2 missed the deletion and holds the old incarnation plainly."""
    one, two = log_dir(tmp_path / "broker-1", 1), log_dir(tmp_path / "broker-2", 2)
    long = "events-" + "x" * 230
    partition(one, f"{long}-0", "events-new")
    partition(one, f"{long[:200]}-0.0123456789abcdef0123456789abcdef-delete", "events-old")
    partition(two, f"{long}-0", "events-old")
    labels = _labels(tmp_path)
    old = "~" + uuid.uuid5(uuid.NAMESPACE_URL, "events-old").hex[:8]
    assert labels[f"broker-1/{long}-0"][2] == long
    assert (
        labels[f"broker-1/{long[:200]}-0.0123456789abcdef0123456789abcdef-delete"][2] == long + old
    )
    assert labels[f"broker-2/{long}-0"][2] == long + old
    facts = layout_facts([str(tmp_path)])
    assert len(facts.findings) == 2
    assert {f["kind"] for f in facts.findings} == {"stale_replica"}
    assert all(f["severity"] == "info" for f in facts.findings)


def test_two_leftovers_of_one_incarnation_on_one_broker_stay_two_replicas(tmp_path):
    one = log_dir(tmp_path / "broker-1", 1)
    partition(one, "events-0", "new")
    partition(one, "events-0.0123456789abcdef0123456789abcdef-stray", "old")
    partition(one, "events-0.fedcba9876543210fedcba9876543210-delete", "old")
    labels = _labels(tmp_path)
    assert len({v[1:] for v in labels.values()}) == 3


def test_two_live_candidates_leave_the_incarnation_undecided(tmp_path):
    """Two plain directories of one name with different topic ids and nothing to tell which
    is live: neither keeps the name, and the dump counts them as undecided."""
    partition(log_dir(tmp_path / "broker-1", 1), "events-0", "first")
    partition(log_dir(tmp_path / "broker-2", 2), "events-0", "second")
    labels = _labels(tmp_path)
    assert all("~" in v[2] for v in labels.values())
    facts = layout_facts([str(tmp_path)])
    assert {c["check"] for c in facts.counts} == {"partition directories whose incarnation the dump cannot tell"}  # fmt: skip
    rows = coverage_rows(facts.counts)
    assert {(r["family"], r["judged"], r["reason"]) for r in rows} == {("incarnations", False, "incarnation undecided")}  # fmt: skip


def _metadata_log(log_dir, records: list[tuple[int, bytes]]) -> None:
    """`__cluster_metadata-0` with one batch of metadata records: (API key, body) framed as
    AbstractApiMessageSerde writes them (frame version 1, key, version 0)."""
    from simulator.writer import Record, build_batch

    values = [bytes([1, key, 0]) + body for key, body in records]
    batch = build_batch([Record(None, v, timestamp=1_700_000_000_000) for v in values])
    d = log_dir / "__cluster_metadata-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(batch)


def _topic_record(name: str, topic: str) -> tuple[int, bytes]:
    """TopicRecord v0, flexible: compact string name, uuid, no tagged fields."""
    raw = name.encode()
    return 2, bytes([len(raw) + 1]) + raw + uuid.uuid5(uuid.NAMESPACE_URL, topic).bytes + b"\x00"


def test_the_metadata_log_is_the_authority_on_incarnations(tmp_path):
    """Two plain directories of events with different topic ids: undecided from the
    directories alone; KRaft's __cluster_metadata (the topic created, removed, created
    again) settles it, and a topic it removed has no live incarnation."""
    one, two = log_dir(tmp_path / "broker-1", 1), log_dir(tmp_path / "broker-2", 2)
    partition(one, "events-0", "second")
    partition(two, "events-0", "first")
    partition(two, "gone-0", "gone")
    partition(one, "gone-0.0123456789abcdef0123456789abcdef-delete", "gone")
    _metadata_log(one, [
        _topic_record("events", "first"), _topic_record("gone", "gone"),
        (9, uuid.uuid5(uuid.NAMESPACE_URL, "first").bytes),  # RemoveTopicRecord v0
        (9, uuid.uuid5(uuid.NAMESPACE_URL, "gone").bytes),
        _topic_record("events", "second"),
    ])  # fmt: skip
    labels = _labels(tmp_path)
    assert labels["broker-1/events-0"][2] == "events"
    assert labels["broker-2/events-0"][2].startswith("events~")
    assert labels["broker-2/gone-0"][2].startswith("gone~")
    _, layout = dump_layout([str(tmp_path)])
    assert layout.undecided == []
    why = {s["directory"]: s["reason"] for s in layout.stale}
    assert "metadata log says events is now topic id" in why["events-0"]
    assert "metadata log removed topic id" in why["gone-0"]


def test_configuration_maps_log_dirs_to_clusters(tmp_path):
    """audit.clusters maps log dirs by a glob on their shown path; audit.cluster names the
    cluster of directories without an id."""
    partition(log_dir(tmp_path / "east" / "broker-1", 1), "orders-0", "orders")
    partition(log_dir(tmp_path / "west" / "broker-1", 1), "orders-0", "orders")
    partition(log_dir(tmp_path / "lost" / "broker-9", cluster=None), "orders-0", "orders")
    facts = layout_facts([str(tmp_path)], "lost-cluster", {"east/*": "east", "west/*": "west"})
    assert set(facts.clusters.values()) == {"east", "west", "lost-cluster"}
    assert set(facts.described["clusters"]) == {"east", "west", "lost-cluster"}


def test_coverage_shares_and_the_gate_s_words():
    rows = coverage_rows([
        {"cluster": "c", "topic": "t", "partition": 0, "check": "partition transactions judged against the coordinator", "count": 3},
        {"cluster": "c", "topic": "t", "partition": 1, "check": "partition transactions without coordinator history", "count": 7},
        {"cluster": "c", "topic": "t", "partition": 0, "check": "replicas alone in the dump (nothing to compare with)", "count": 0},
    ])  # fmt: skip
    assert [(r["family"], r["judged"], r["count"]) for r in rows] == [
        ("transactions", True, 3), ("transactions", False, 7)
    ]  # fmt: skip
    got = shares(rows)
    assert got["transactions"]["share"] == 0.3
    (words,) = below(got, {"transactions": 0.9, "replicas": 0.5})
    assert "30%" in words and "no coordinator history: 7 transactions" in words
    assert below(got, {"transactions": 0.3}) == []


# -- the production_layouts scenarios -------------------------------------------------------------


def _run(tmp_path, scenario: str, seed: int) -> tuple[dict, dict]:
    out = tmp_path / f"{scenario}-{seed}"
    (truth,) = synth(scenario, str(out), seed=seed)
    result = audit_local([str(out)])
    return truth.to_json(), result


@pytest.mark.parametrize("scenario", ["production_layouts", "production_layouts_faults"])
def test_production_layouts_one_seed(tmp_path, scenario):
    """Healthy: nothing of warning or above, the old incarnation's replicas reported as info
    and audited apart; faults: each divergence found; both judge every transaction of the
    re-created topic's producer across its two incarnations."""
    truth, result = _run(tmp_path, scenario, 3)
    res = compare(truth, result["findings"])
    assert res["missed"] == [] and res["unexpected"] == [], (res["missed"], res["unexpected"])
    kinds = {f["kind"] for f in result["findings"]}
    assert "stale_replica" in kinds
    s = summary(result)
    assert len(s["clusters"]) == 3
    assert s["coverage"]["transactions"]["share"] == 1.0
    assert s["coverage"]["replicas"]["judged"] > 0
    assert any("split into 3 clusters" in r for r in s["dump_layout"]["reasons"])
    json.dumps(s)  # summary.json holds it as it is
    if scenario == "production_layouts":
        # indexes against their own directory's segments: the -future copy and the -delete
        # ones hold segments named as the current replica's
        from decoders.verify import verify

        assert verify([str(tmp_path / f"{scenario}-3")]) == []


@pytest.mark.slow
def test_production_layouts_over_ten_seeds(tmp_path):
    found = false = 0
    for seed in range(1, 11):
        for scenario in ("production_layouts", "production_layouts_faults"):
            truth, result = _run(tmp_path, scenario, seed)
            res = compare(truth, result["findings"])
            assert res["missed"] == [], (scenario, seed, res["missed"])
            found += len(res["found"])
            false += len([f for f in result["findings"] if at_least(f["severity"], "warning")]) - len(res["found"])  # fmt: skip
    assert false == 0 and found == 30


@pytest.mark.parametrize(
    "start", ["/d/dump", "/d/dump/", "dump", "./dump", "/", "/d/x/../dump", ""]
)
@pytest.mark.parametrize(
    "rest", ["b-1/t-0/0.log", "b-1//t-0/0.log", "b-1/./t-0", "../t-0/0.log", "..", "b/../c", "x"]
)
def test_a_listed_path_is_made_relative_as_relpath_makes_it(start, rest):
    """decoders.layout._relpath's shortcut (a listing's root joined with its names) gives what
    os.path.relpath and posixpath.relpath give, whatever the root and the names."""
    import posixpath

    from decoders.layout import _relpath

    if not start:
        return  # relpath refuses an empty start; the listing never passes one
    p = start + rest if start.endswith("/") else f"{start}/{rest}"
    assert _relpath(None, p, start) == os.path.relpath(p, start)
    assert _relpath(object(), p, start) == posixpath.relpath(p, start)


def test_a_listed_path_s_directory_and_name_are_os_path_s():
    """decoders.layout._dirname and _basename's string shortcuts for a local path give what
    os.path.dirname and os.path.basename (of the path without trailing slashes) give, on
    every path of a few characters, slashes and dots included."""
    import itertools

    from decoders.layout import _basename, _dirname

    for n in range(7):
        for chars in itertools.product("a/.", repeat=n):
            p = "".join(chars)
            assert _dirname(None, p) == os.path.dirname(p), p
            assert _basename(None, p) == os.path.basename(p.rstrip("/")), p


@pytest.mark.parametrize("name", ["day-1", "2026-11-20", "kafka-1"])
def test_a_dump_root_named_like_a_partition_directory_is_shown_from_itself(tmp_path, name):
    """A root is a partition directory by its name and by holding files only: a day's copy
    under `day-1` or `2026-11-20` (a topic `2026-11`, partition 20, by its name alone) holds
    broker directories, and its paths are shown from it, so that a broker without
    meta.properties, named by its path, is named alike in every day's copy."""
    d = log_dir(tmp_path / name / "broker-1", cluster=None)
    partition(d, "events-0", "events")
    labels = _labels(tmp_path / name)
    assert labels == {"broker-1/events-0": (f"dir:{tmp_path / name / 'broker-1'}", "broker-1", "events")}  # fmt: skip
    # a partition directory given as the root is still shown from above its log directory
    (part,) = (f for f in dump_layout([str(d / "events-0")])[0] if f.kind == "log")
    assert part.info.file == "broker-1/events-0/00000000000000000000.log"


def test_each_replicas_topic_id_is_its_own_partition_metadata(tmp_path):
    """What a later run resumes a replica by (replay_states.topic_id) is the id its own
    directory's partition.metadata names: the listing's reading of the file, handed to the
    replay (the file is not read again); the re-created topic's replicas each their own
    incarnation's. A partition.metadata no listing read is read by the replay."""
    from dataclasses import replace

    from decoders.checkpoints import partition_metadata
    from replay.scan_task import topic_id_of

    out = tmp_path / "d"
    synth("production_layouts", str(out), seed=3)
    files, _ = dump_layout([str(out)])
    own = {}
    for f in files:
        if f.kind == "partition_metadata":
            with open(f.path, "rb") as fh:
                own[(f.info.topic, f.info.partition, f.info.broker)] = partition_metadata(
                    fh.read()
                )["topic_uuid"]
            assert (
                f.id_listed and f.topic_id == own[(f.info.topic, f.info.partition, f.info.broker)]
            )
            assert topic_id_of([replace(f, topic_id=None, id_listed=False)]) == f.topic_id
    got = {(r["topic"], r["partition"], r["broker"]): r["topic_id"]
           for r in audit_local([str(out)])["replay_states"]}  # fmt: skip
    assert got and all(got[k] == own[k] for k in got)
    assert len(set(got.values())) > 2  # the internal topics and both incarnations
