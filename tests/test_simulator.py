"""The scenario simulator: broker-faithful bytes, consumers' views, determinism, ground truth."""

from __future__ import annotations

import hashlib
import json
import os

import pyarrow.compute as pc
import pytest
from kafka_reference import kafka_python_batches

import decoders
from decoders.verify import verify
from jobs.cli import main
from replay.findings import KINDS
from simulator import HEALTHY, SCENARIOS, synth
from simulator.clients import Consumer, Producer, TransactionalProducer
from simulator.cluster import Cluster, TopicConfig
from simulator.log import READ_COMMITTED, READ_UNCOMMITTED


def _logs(root):
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith(".log"):
                yield os.path.join(d, f)


def _tree_digest(root) -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_every_scenario_has_truth_with_known_kinds(sim_all):
    index = json.loads((sim_all / "truth.json").read_text())
    assert [s["scenario"] for s in index["scenarios"]] == list(SCENARIOS)
    for s in index["scenarios"]:
        own = json.loads((sim_all / s["scenario"] / "truth.json").read_text())
        assert own == s
        assert all(a["kind"] in KINDS for a in s["anomalies"])
        if s["scenario"] in HEALTHY:
            assert s["anomalies"] == [] and s["clean"], s["scenario"]
        else:
            assert s["anomalies"], s["scenario"]
        # every partition and group of the scenario, so a checker can look everywhere
        listed = {(p["topic"], p["partition"]) for p in s["partitions"]}
        assert {(a["topic"], a["partition"]) for a in s["anomalies"] if "topic" in a} <= listed
        assert {a["group_id"] for a in s["anomalies"] if "group_id" in a} <= set(s["groups"])
    kinds = {a["kind"] for s in index["scenarios"] for a in s["anomalies"]}
    injected = {
        "duplicate_sequence", "sequence_gap", "out_of_order_sequence", "invalid_epoch_start",
        "fenced_epoch_write", "hanging_transaction", "split_outcome", "missing_marker",
        "write_outside_transaction", "non_transactional_write_in_txn", "aborted_read_leak",
        "aborted_data_propagated", "offset_overwrite", "offset_regression", "replica_divergence",
        "crc_mismatch", "truncated_batch", "corrupt_bytes",
    }  # fmt: skip
    assert injected <= kinds


def test_every_log_decodes_with_kafka_python_and_ours(sim_all):
    damaged = {
        os.path.join("corrupt_segments", "broker-1", f"clicks-{p}", "00000000000000000000.log")
        for p in (0, 1, 2)
    }
    checked = 0
    for path in _logs(sim_all):
        with open(path, "rb") as f:
            data = f.read()
        if not data or os.path.relpath(path, sim_all) in damaged:
            continue
        t = decoders.read_segment(path, "batches", deep=False)
        ours = list(
            zip(
                t["base_offset"].to_pylist(),
                t["last_offset"].to_pylist(),
                t["crc_valid"].to_pylist(),
                strict=True,
            )
        )
        theirs = kafka_python_batches(data)
        assert ours == theirs, path
        assert all(x[2] for x in ours), path
        checked += len(ours)
    assert checked > 3000


def test_indexes_txnindex_and_snapshots_agree_with_the_logs(sim_all):
    kinds = set()
    for name in SCENARIOS:
        assert verify([str(sim_all / name)]) == [], name
        kinds |= {f.info.kind for f in decoders.discover([str(sim_all / name)]) if f.size}
    assert {"index", "timeindex", "txnindex", "snapshot"} <= kinds  # something was verified


def test_damaged_files_report_what_truth_says(sim_all):
    truth = json.loads((sim_all / "corrupt_segments" / "truth.json").read_text())
    errors = decoders.read_dump([str(sim_all / "corrupt_segments")], ["errors"])["errors"]
    got = {(e["kind"], int(e["file"].split("clicks-")[1][0])) for e in errors.to_pylist()}
    assert truth["anomalies"]
    for a in truth["anomalies"]:
        assert (a["kind"], a["partition"]) in got


def test_same_seed_same_bytes_and_another_seed_differs(tmp_path):
    for name in ("clean_transactions", "clean_compaction", "aborted_reads"):
        synth(name, str(tmp_path / "a"), seed=11)
        synth(name, str(tmp_path / "b"), seed=11)
        synth(name, str(tmp_path / "c"), seed=12)
        a, b, c = (_tree_digest(tmp_path / x) for x in "abc")
        assert a == b, name
        assert a != c, name


def test_scale_grows_the_volume_linearly(tmp_path):
    sizes = []
    for scale in (1, 2, 4):
        synth("clean_idempotent", str(tmp_path / f"s{scale}"), seed=1, scale=scale)
        sizes.append(sum(os.path.getsize(p) for p in _logs(tmp_path / f"s{scale}")))
    unit = sizes[1] - sizes[0]
    assert 7 << 20 < unit < 10 << 20
    assert abs((sizes[2] - sizes[1]) - 2 * unit) < 0.05 * unit


def test_compaction_leaves_what_the_cleaner_leaves(sim_all):
    root = sim_all / "clean_compaction"
    tables = decoders.read_dump([str(root)], ["batches", "records"])
    b = tables["batches"]
    profiles = b.filter(pc.equal(b["topic"], "profiles"))
    empty = profiles.filter(pc.equal(profiles["record_count"], 0))
    assert empty.num_rows >= 1  # a producer's last batch, kept as a header
    assert pc.all(pc.greater(empty["last_offset"], pc.subtract(empty["base_offset"], 1))).as_py()
    assert pc.any(b["has_delete_horizon"]).as_py()  # markers stamped for removal
    # fewer records than offsets: superseded keys and aborted data are gone
    recs = tables["records"].filter(pc.equal(tables["records"]["topic"], "profiles"))
    last = pc.max(profiles["last_offset"]).as_py()
    assert recs.num_rows < last + 1
    checkpoint = (root / "broker-1" / "cleaner-offset-checkpoint").read_text().split("\n")
    assert int(checkpoint[1]) >= 3 and any(line.startswith("profiles 0 ") for line in checkpoint)


# -- consumers' views (docs/formats.md 10.7) -------------------------------------------------------
def _reference_view(part_dir: str, isolation: str, high_watermark: int) -> list[int]:
    """The fetch rules applied to the decoded files: read_uncommitted returns every data record
    below the HW; read_committed stops at the LSO and drops batches of aborted transactions
    named by the .txnindex entries, as the consumer's CompletedFetch does."""
    tables = decoders.read_dump([part_dir], ["batches", "aborted_txns"])
    batches = sorted(tables["batches"].to_pylist(), key=lambda r: r["base_offset"])
    if isolation == READ_UNCOMMITTED:
        return [
            o
            for b in batches
            if not b["is_control"] and b["last_offset"] < high_watermark
            for o in range(b["base_offset"], b["last_offset"] + 1)
        ]
    open_first: dict[int, int] = {}
    for b in batches:  # LSO: the first offset of every transaction without a marker
        if b["is_transactional"] and not b["is_control"]:
            open_first.setdefault(b["producer_id"], b["base_offset"])
        elif b["is_control"]:
            open_first.pop(b["producer_id"], None)
    lso = min(open_first.values(), default=high_watermark)
    aborted = sorted(
        (a["first_offset"], a["producer_id"]) for a in tables["aborted_txns"].to_pylist()
    )
    aborting: set[int] = set()
    out = []
    for b in batches:
        if b["last_offset"] >= lso:
            break
        while aborted and aborted[0][0] <= b["last_offset"]:
            aborting.add(aborted.pop(0)[1])
        if b["is_control"]:
            if b["control_type"] == "ABORT":
                aborting.discard(b["producer_id"])
            continue
        if b["is_transactional"] and b["producer_id"] in aborting:
            continue
        out.extend(range(b["base_offset"], b["last_offset"] + 1))
    return out


def test_simulated_consumers_see_what_the_broker_rules_allow(tmp_path):
    c = Cluster(str(tmp_path / "views"), seed=3)
    c.create_topic(TopicConfig("t", 1))
    tv1 = TransactionalProducer(c, "v1", version=1)
    tv2 = TransactionalProducer(c, "v2", version=2)
    plain = Producer(c)
    for i in range(12):
        tv1.send("t", 0, 2)
        plain.send("t", 0, 1)
        tv2.send("t", 0, 3)
        tv1.commit() if i % 3 else tv1.abort()
        tv2.abort() if i % 4 == 1 else tv2.commit()
    tv1.send("t", 0, 2)  # still open at the end: pins the LSO
    plain.send("t", 0, 1)
    views = {}
    for iso in (READ_COMMITTED, READ_UNCOMMITTED):
        g = c.group_coordinator.group(f"g-{iso}", "range", iso)
        consumer = Consumer.join(c, g, "c", ["t"])
        got = consumer.poll()
        views[iso] = [o for b in got[0].batches for o in range(b.base, b.last + 1)]
    log = c.log("t", 0)
    hw = log.log_end_offset
    lso = log.lso()
    c.close()
    part = str(tmp_path / "views" / "broker-1" / "t-0")
    assert views[READ_COMMITTED] == _reference_view(part, READ_COMMITTED, hw)
    assert views[READ_UNCOMMITTED] == _reference_view(part, READ_UNCOMMITTED, hw)
    assert lso < hw and max(views[READ_COMMITTED]) < lso
    assert len(views[READ_UNCOMMITTED]) > len(views[READ_COMMITTED])
    # aborted transactions really were in the log and in its .txnindex
    assert os.path.getsize(os.path.join(part, "00000000000000000000.txnindex")) >= 34 * 4


def test_tv2_markers_bump_the_epoch_and_sequences_restart(tmp_path):
    c = Cluster(str(tmp_path / "tv2"), seed=1)
    c.create_topic(TopicConfig("t", 1))
    p = TransactionalProducer(c, "tx", version=2)
    for _ in range(3):
        p.send("t", 0, 2)
        p.send("t", 0, 2)
        p.commit()
    c.close()
    b = decoders.read_segment(
        str(tmp_path / "tv2/broker-1/t-0/00000000000000000000.log"), "batches"
    )
    rows = [(r["is_control"], r["producer_epoch"], r["base_sequence"]) for r in b.to_pylist()]
    assert rows == [
        (False, 0, 0), (False, 0, 2), (True, 1, -1),
        (False, 1, 0), (False, 1, 2), (True, 2, -1),
        (False, 2, 0), (False, 2, 2), (True, 3, -1),
    ]  # fmt: skip
    txn = decoders.read_dump([str(tmp_path / "tv2")], ["txn_log"])["txn_log"].to_pylist()
    assert [(r["state"], r["producer_epoch"]) for r in txn][:5] == [
        ("Empty", 0), ("Ongoing", 0), ("PrepareCommit", 1), ("CompleteCommit", 1), ("Ongoing", 1),
    ]  # fmt: skip
    assert {r["client_transaction_version"] for r in txn} == {2}


def test_snapshots_hold_the_producer_state_at_each_roll(sim_all):
    snaps = decoders.read_dump(
        [str(sim_all / "clean_idempotent" / "broker-1" / "events-0")], ["producer_snapshots"]
    )["producer_snapshots"]
    assert snaps.num_rows > 0
    batches = decoders.read_dump(
        [str(sim_all / "clean_idempotent" / "broker-1" / "events-0")], ["batches"]
    )["batches"].to_pylist()
    for s in snaps.to_pylist():
        mine = [
            b
            for b in batches
            if b["producer_id"] == s["producer_id"] and b["last_offset"] < s["snapshot_offset"]
        ]
        assert mine[-1]["last_sequence"] == s["last_sequence"]
        assert mine[-1]["last_offset"] == s["last_offset"]


def test_truth_offsets_point_at_the_faulty_batches(sim_all):
    root = sim_all / "idempotence_faults"
    truth = json.loads((root / "truth.json").read_text())
    b = decoders.read_dump([str(root)], ["batches"])["batches"].to_pylist()
    by_start = {(r["topic"], r["partition"], r["base_offset"]): r for r in b}
    for a in truth["anomalies"]:
        batch = by_start[(a["topic"], a["partition"], a["first_offset"])]
        assert batch["producer_id"] == a["producer_id"]
        assert batch["producer_epoch"] == a["producer_epoch"]
        assert batch["record_count"] == a["record_count"]
    dup = next(a for a in truth["anomalies"] if a["kind"] == "duplicate_sequence")
    same = [
        r
        for r in b
        if (r["topic"], r["partition"], r["producer_id"]) == ("sensors", 0, dup["producer_id"])
        and r["base_sequence"] == by_start[("sensors", 0, dup["first_offset"])]["base_sequence"]
    ]
    assert len(same) == 2  # the original and its duplicate


def test_synth_usage_errors(tmp_path, capsys):
    assert main(["synth", "--scenario", "nope", "--out", str(tmp_path / "x")]) == 2
    assert "unknown scenario" in capsys.readouterr().err


def test_replicas_hold_identical_bytes_except_the_injected_divergence(sim_all):
    root = sim_all / "replica_divergence"
    one, two = root / "broker-1", root / "broker-2"
    for p in (0, 1):
        a = (one / f"inventory-{p}" / "00000000000000000000.log").read_bytes()
        b = (two / f"inventory-{p}" / "00000000000000000000.log").read_bytes()
        assert len(a) == len(b)
        assert (a == b) == (p == 1)
    # the diverged batches are valid batches, not corruption
    assert verify([str(two)]) == []
    assert decoders.read_dump([str(two)], ["errors"])["errors"].num_rows == 0


# -- production-shaped worlds --------------------------------------------------------------------
def _batches(root) -> list[dict]:
    return decoders.read_dump([str(root)], ["batches"])["batches"].to_pylist()


def test_every_timestamp_comes_from_the_clock_of_the_machine_that_wrote_it(tmp_path):
    from decoders.partitioning import partition_for
    from simulator.cluster import MachineClock

    c = Cluster(str(tmp_path / "clocks"), seed=2, brokers=2)
    c.broker_clocks = [MachineClock(0), MachineClock(2_000)]
    c.create_topic(TopicConfig("t", 2))
    c.create_topic(TopicConfig("lat", 2, log_append_time=True))
    tid = next(f"tx-{i}" for i in range(100) if c.txn_log(f"tx-{i}").leader == 1)
    led_by_2 = next(p for p in range(2) if c.log("t", p).leader == 2)
    p = TransactionalProducer(c, tid, version=1)
    g = c.group_coordinator.group("g", "range", READ_COMMITTED)
    for _ in range(5):
        p.send("t", led_by_2, 2)
        p.send_offsets(g, {("t", led_by_2): 1})
        p.commit()
    for part in (0, 1):
        Producer(c).send("lat", part, 2)
    c.close()
    b = _batches(tmp_path / "clocks")
    txn = decoders.read_dump([str(tmp_path / "clocks")], ["txn_log"])["txn_log"].to_pylist()
    completes = [r["record_timestamp"] for r in txn if r["state"] == "CompleteCommit"]
    markers = [r["max_timestamp"] for r in b if r["is_control"] and r["topic"] == "t"]
    assert len(markers) == len(completes) == 5
    for m, done in zip(markers, completes, strict=True):  # the leader runs 2 s ahead
        assert 1_900 < (m - done).total_seconds() * 1000 <= 2_000
    # the group coordinator (leader of the group's offsets partition) stamps its commits
    gc_offset = c.broker_clocks[c.log("__consumer_offsets", partition_for("g", 50)).leader - 1]
    commits = decoders.read_dump([str(tmp_path / "clocks")], ["offset_commits"])
    stamps = commits["offset_commits"]["commit_timestamp"].to_pylist()
    for stamp, done in zip(stamps, completes, strict=True):
        assert abs((stamp - done).total_seconds() * 1000 - gc_offset.offset_ms) < 50
    # CreateTime comes from the client's own clock: data vs the Ongoing record just before it
    ongoing = [r["record_timestamp"] for r in txn if r["state"] == "Ongoing"][::2]
    data = [r["base_timestamp"] for r in b if r["topic"] == "t" and not r["is_control"]]
    assert len(ongoing) == len(data) == 5
    for ts, on in zip(data, ongoing, strict=True):
        assert abs((ts - on).total_seconds() * 1000 - p.clock.offset_ms) < 50
    # LogAppendTime: the leader stamps the batch with its clock, whatever the client's
    lat = {r["partition"]: r for r in b if r["topic"] == "lat"}
    assert {r["timestamp_type"] for r in lat.values()} == {"LogAppendTime"}
    by_leader = {c.log("lat", q).leader: lat[q]["max_timestamp"] for q in (0, 1)}
    assert 1_900 < (by_leader[2] - by_leader[1]).total_seconds() * 1000 < 2_100


def test_production_day_batches_are_small(sim_all):
    b = [
        r
        for r in _batches(sim_all / "production_day")
        if not r["is_control"] and not r["topic"].startswith("__")
    ]
    assert len(b) > 5_000
    counts = sorted(r["record_count"] for r in b)
    assert counts[len(counts) // 2] <= 4  # mostly a few records
    assert max(r["size"] for r in b) <= 16_384 + 61


def test_production_day_copies_as_people_take_them(sim_all):
    root = sim_all / "production_day"
    truth = json.loads((root / "truth.json").read_text())
    assert truth["facts"]["files_missing"] > 0  # some index or snapshot files are gone
    assert verify([str(root)]) == []  # what is there agrees with the logs
    only = sim_all / "production_day_logs_only"
    files = [f for _, _, fs in os.walk(only) for f in fs if f != "truth.json"]
    assert files and all(f.endswith(".log") for f in files)
    # each broker's copy was taken at its own moment: replicas of a partition end apart,
    # the shorter one a byte prefix of the longer one
    differ = 0
    for p in truth["partitions"]:
        if len(p["replicas"]) < 2 or p["topic"].startswith("__"):
            continue
        a, b = (root / f"broker-{r}" / f"{p['topic']}-{p['partition']}" for r in p["replicas"])
        la, lb = (sorted(x.glob("*.log"))[-1] for x in (a, b))
        da, db = la.read_bytes(), lb.read_bytes()
        if la.name == lb.name and da != db:
            short, long_ = sorted((da, db), key=len)
            assert long_.startswith(short)
            differ += 1
    assert differ > 0
    assert len(set(truth["facts"]["clocks"]["copy_times"].values())) > 1


def test_compaction_removed_history_from_the_internal_topics(sim_all):
    root = sim_all / "production_day"
    b = _batches(root)
    for topic in ("__transaction_state", "__consumer_offsets"):
        mine = [r for r in b if r["topic"] == topic and r["broker"] == b[0]["broker"]]
        by_part: dict[int, list] = {}
        for r in mine:
            by_part.setdefault(r["partition"], []).append(r)
        gaps = 0
        for rows in by_part.values():
            rows.sort(key=lambda r: r["base_offset"])
            offsets_used = rows[-1]["last_offset"] + 1
            gaps += offsets_used - sum(r["record_count"] for r in rows)
        assert gaps > 50, topic  # superseded records are gone
    ckpt = (root / "broker-1" / "cleaner-offset-checkpoint").read_text()
    assert "__transaction_state" in ckpt or "__consumer_offsets" in ckpt


def test_failover_resends_markers_with_the_new_coordinator_epoch(sim_all):
    root = sim_all / "production_day"
    tables = decoders.read_dump([str(root)], ["batches", "txn_log"])
    b = tables["batches"].to_pylist()
    txn = tables["txn_log"].to_pylist()
    # a marker's coordinator epoch is a leader epoch of its coordinator's partition (its
    # leader-epoch-checkpoint: compaction removed the oldest batches, not the epochs)
    leader_epochs: dict[int, set[int]] = {}
    for ckpt in root.glob("broker-*/__transaction_state-*/leader-epoch-checkpoint"):
        part = int(ckpt.parent.name.rsplit("-", 1)[1])
        lines = ckpt.read_text().split("\n")[2:]
        leader_epochs.setdefault(part, set()).update(int(x.split()[0]) for x in lines if x)
    coordinator = [r for r in b if r["topic"] == "__transaction_state"]
    assert coordinator
    for r in coordinator:
        assert r["partition_leader_epoch"] in leader_epochs[r["partition"]]
    part_of = {r["producer_id"]: r["log_partition"] for r in txn}
    markers = [r for r in b if r["is_control"] and r["control_type"] in ("COMMIT", "ABORT")]
    seen = {r["coordinator_epoch"] for r in markers if r["producer_id"] in part_of}
    assert len(seen) > 1  # the coordinators' epochs moved (restarts, failover)
    mapped = [r for r in markers if part_of.get(r["producer_id"]) in leader_epochs]
    assert mapped
    for r in mapped:
        assert r["coordinator_epoch"] in leader_epochs[part_of[r["producer_id"]]]
    # the same marker twice in one partition, the second from the new coordinator
    twice = 0
    by_tp: dict[tuple, list] = {}
    for r in sorted(b, key=lambda r: (r["broker"], r["topic"], r["partition"], r["base_offset"])):
        if not r["topic"].startswith("__"):  # (cleaning leaves markers without data)
            by_tp.setdefault((r["broker"], r["topic"], r["partition"]), []).append(r)
    for rows in by_tp.values():
        last: dict[int, dict] = {}
        for r in rows:
            prev = last.get(r["producer_id"])
            if (
                r["is_control"]
                and prev is not None
                and prev["is_control"]
                and (prev["control_type"], prev["producer_epoch"])
                == (r["control_type"], r["producer_epoch"])
            ):
                assert r["coordinator_epoch"] > prev["coordinator_epoch"]
                twice += 1
            last[r["producer_id"]] = r
    assert twice >= 1


def test_coordinator_value_versions_follow_the_transaction_version(sim_all):
    truth = json.loads((sim_all / "production_day" / "truth.json").read_text())
    tv = {t: f["transaction_version"] for t, f in truth["facts"]["transactional_ids"].items()}
    assert set(tv.values()) == {0, 1, 2}
    txn = decoders.read_dump([str(sim_all / "production_day")], ["txn_log"])["txn_log"]
    checked = {0: 0, 1: 0, 2: 0}
    for r in txn.to_pylist():
        if r["is_tombstone"] or r["transactional_id"] not in tv:
            continue
        if tv[r["transactional_id"]] >= 2:
            assert (r["value_version"], r["client_transaction_version"]) == (1, 2)
        else:
            assert r["value_version"] == 0
        checked[tv[r["transactional_id"]]] += 1
    assert all(checked.values()), checked  # records of every transaction version


def test_production_faults_truth_points_at_the_evidence(sim_all):
    root = sim_all / "production_day_faults"
    truth = json.loads((root / "truth.json").read_text())
    kinds = sorted(a["kind"] for a in truth["anomalies"])
    for k in ("split_outcome", "missing_marker", "write_outside_transaction",
              "aborted_read_leak", "duplicate_sequence", "offset_regression"):  # fmt: skip
        assert k in kinds, k
    assert kinds.count("hanging_transaction") == 2
    assert len(set(truth["facts"]["clocks"]["brokers_ms"])) == 3
    b = _batches(root)

    def rows(a):
        return sorted(
            (r for r in b if (r["topic"], r["partition"]) == (a["topic"], a["partition"])),
            key=lambda r: r["base_offset"],
        )

    for a in truth["anomalies"]:
        if a["kind"] not in ("split_outcome", "missing_marker", "write_outside_transaction"):
            continue
        part = rows(a)
        mine = [r for r in part if r["producer_id"] == a["producer_id"]]
        first = next(r for r in mine if r["base_offset"] == a["first_offset"])
        assert first["is_transactional"] and not first["is_control"]
        after = [r for r in mine if r["base_offset"] > a["first_offset"]]
        if a["kind"] == "split_outcome":
            m = next(r for r in after if r["is_control"])
            assert (m["base_offset"], m["control_type"]) == (a["last_offset"], "ABORT")
        else:  # never marked, and the producer never writes there again
            assert not any(r["is_control"] for r in after)
            assert all(r["base_offset"] <= a["last_offset"] for r in after)
            before = [r for r in mine if r["base_offset"] < a["first_offset"]]
            if a["kind"] == "write_outside_transaction":  # right after its own marker
                assert before[-1]["is_control"] and before[-1]["control_type"] == "COMMIT"
                assert before[-1]["producer_epoch"] == a["producer_epoch"]
            # others keep committing there for well over 10 s (one leader's clock)
            others = [r for r in part if r["is_control"] and r["producer_id"] != a["producer_id"]
                      and r["base_offset"] > a["last_offset"]]  # fmt: skip
            span = others[-1]["max_timestamp"] - others[0]["max_timestamp"]
            assert span.total_seconds() > 10


@pytest.mark.slow
def test_production_day_same_seed_same_bytes(tmp_path):
    synth("production_day_faults", str(tmp_path / "a"), seed=5)
    synth("production_day_faults", str(tmp_path / "b"), seed=5)
    assert _tree_digest(tmp_path / "a") == _tree_digest(tmp_path / "b")


def test_retention_deleted_the_oldest_segments(sim_all):
    root = sim_all / "production_day"
    starts = {}
    for ckpt in root.glob("broker-*/log-start-offset-checkpoint"):
        for line in ckpt.read_text().split("\n")[2:]:
            if line.startswith("telemetry "):
                _, p, off = line.split()
                starts[int(p)] = int(off)
    assert sum(off > 0 for off in starts.values()) >= 2
    for p, off in starts.items():
        (part,) = root.glob(f"broker-*/telemetry-{p}")
        first = sorted(part.glob("*.log"))[0]
        assert int(first.name[:20]) == off
        epochs = (part / "leader-epoch-checkpoint").read_text().split("\n")
        assert int(epochs[2].split()[1]) == off
