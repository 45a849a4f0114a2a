"""__consumer_offsets and __transaction_state records, every version, through the whole path
(writer -> segment -> decoded tables)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pyarrow as pa
import pytest

import decoders
from decoders import consumer_offsets as co
from decoders import consumer_protocol as cp
from decoders import transaction_log as tl
from decoders.accounting import FileInfo
from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from decoders.errors import DecodeError
from decoders.primitives import ByteWriter
from simulator.writer import Record, build_batch

T0 = 1_700_000_000_000


def tables(records: list[Record], topic: str, **batch_kw) -> dict[str, pa.Table]:
    data = build_batch(records, 100, base_sequence=0, **batch_kw)
    info = FileInfo("seg.log", "1", topic, 3, 0)
    out: dict[str, list] = {}
    for t, b in decoders.iter_file(data, list(decoders.TABLES), info=info):
        out.setdefault(t, []).append(b)
    return {t: pa.Table.from_batches(bs) for t, bs in out.items()}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_offset_commit_versions(version):
    key = co.encode_offset_commit_key("g1", "orders", 4)
    value = co.encode_offset_commit(
        77, T0, version=version, metadata="meta", leader_epoch=9, expire_timestamp=T0 + 5
    )
    t = tables(
        [Record(key, value, timestamp=T0), Record(key, None, timestamp=T0)], CONSUMER_OFFSETS_TOPIC
    )
    rows = t["offset_commits"].to_pylist()
    assert [r["is_tombstone"] for r in rows] == [False, True]
    r = rows[0]
    assert (r["group_id"], r["topic"], r["partition"], r["committed_offset"], r["metadata"]) == (
        "g1",
        "orders",
        4,
        77,
        "meta",
    )
    assert r["leader_epoch"] == (9 if version >= 3 else -1)
    assert (r["expire_timestamp"] is not None) == (version == 1)
    assert (r["log_offset"], r["log_partition"], r["value_version"]) == (100, 3, version)


@pytest.mark.parametrize("gm_version", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("proto_version", [0, 1, 2, 3, 7])
def test_group_metadata_and_consumer_protocol_versions(gm_version, proto_version):
    sub = cp.encode_subscription(
        ["b", "a"],
        version=min(proto_version, 3),
        user_data=b"ud",
        owned={"a": [0, 2]},
        generation=4,
        rack_id="r1",
    )
    if proto_version > 3:  # a future version: read as v3, trailing bytes ignored
        sub = proto_version.to_bytes(2, "big") + sub[2:] + b"future"
    members = [
        {
            "member_id": "m1",
            "instance_id": "i1",
            "client_id": "c1",
            "client_host": "/h1",
            "rebalance_timeout_ms": 1000,
            "session_timeout_ms": 500,
            "subscription": sub,
            "assignment": cp.encode_assignment(
                {"a": [0, 1], "b": [2]}, version=min(proto_version, 3)
            ),
        },
        {
            "member_id": "m2",
            "client_id": "c2",
            "client_host": "/h2",
            "subscription": sub,
            "assignment": b"",
        },
    ]
    value = co.encode_group_metadata(
        "consumer", 5, "range", "m1", members, version=gm_version, state_timestamp=T0
    )
    t = tables(
        [Record(co.encode_group_metadata_key("g"), value, timestamp=T0)], CONSUMER_OFFSETS_TOPIC
    )
    (g,) = t["group_metadata"].to_pylist()
    assert (g["group_id"], g["generation"], g["protocol"], g["leader"], g["value_version"]) == (
        "g",
        5,
        "range",
        "m1",
        gm_version,
    )
    assert (g["state_timestamp"] is not None) == (gm_version >= 2)
    m1, m2 = g["members"]
    assert m1["subscribed_topics"] == ["a", "b"] and m1["subscription_user_data"] == b"ud"
    assert m1["subscription_version"] == proto_version
    assert m1["owned_partitions"] == (
        [{"topic": "a", "partitions": [0, 2]}] if proto_version >= 1 else []
    )
    assert m1["subscription_generation"] == (4 if proto_version >= 2 else -1)
    assert m1["rack_id"] == ("r1" if proto_version >= 3 else None)
    assert m1["assigned_partitions"] == [
        {"topic": "a", "partitions": [0, 1]},
        {"topic": "b", "partitions": [2]},
    ]
    assert m1["instance_id"] == ("i1" if gm_version >= 3 else None)
    assert m1["rebalance_timeout_ms"] == (1000 if gm_version >= 1 else 500)
    assert m2["assigned_partitions"] == [] and m2["protocol_error"] is None
    assert not t.get("errors")


def test_non_consumer_protocol_bytes_stay_opaque():
    value = co.encode_group_metadata(
        "connect",
        1,
        "sessioned",
        "w1",
        [{"member_id": "w1", "subscription": b"\x00\x01opaque", "assignment": b"\xff"}],
    )
    t = tables(
        [Record(co.encode_group_metadata_key("connect-cluster"), value)], CONSUMER_OFFSETS_TOPIC
    )
    (m,) = t["group_metadata"].to_pylist()[0]["members"]
    assert (
        m["subscription"] == b"\x00\x01opaque"
        and m["subscribed_topics"] is None
        and m["protocol_error"] is None
    )


def _kip848_member_value() -> bytes:
    w = ByteWriter().int16(0)
    w.nullable_string("inst", True).nullable_string(None, True).string("client", True).string(
        "/10.0.0.1", True
    )
    w.array_length(2, True).string("orders", True).string("payments", True)
    w.nullable_string(None, True).int32(45000).nullable_string("uniform", True)
    classic = ByteWriter().int8(1).int32(30000).array_length(1, True).string("range", True)
    classic.bytes_(cp.encode_subscription(["orders"]), True).tagged_fields().tagged_fields()
    w.tagged_fields({0: classic.getvalue(), 7: b"\x01\x02"})  # tag 7 is unknown: skipped
    return w.getvalue()


def test_kip848_records():
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    member_key = ByteWriter().int16(5).string("g848").string("member-1").getvalue()
    assign_key = ByteWriter().int16(8).string("g848").string("member-1").getvalue()
    assign = ByteWriter().int16(0).int32(7).int32(6).int8(0)
    assign.array_length(1, True).raw(tid.bytes).array_length(2, True).int32(0).int32(
        3
    ).tagged_fields()
    assign.array_length(0, True).tagged_fields()
    epoch_key = ByteWriter().int16(3).string("g848").getvalue()
    epoch = ByteWriter().int16(0).int32(12).tagged_fields({0: (99).to_bytes(8, "big")}).getvalue()
    t = tables(
        [
            Record(member_key, _kip848_member_value()),
            Record(assign_key, assign.getvalue()),
            Record(epoch_key, epoch),
            Record(member_key, None),
        ],
        CONSUMER_OFFSETS_TOPIC,
    )
    rows = t["group_records"].to_pylist()
    assert [r["record"] for r in rows] == [
        "ConsumerGroupMemberMetadata",
        "ConsumerGroupCurrentMemberAssignment",
        "ConsumerGroupMetadata",
        "ConsumerGroupMemberMetadata",
    ]
    member = json.loads(rows[0]["fields"])
    assert (
        member["subscribed_topic_names"] == ["orders", "payments"]
        and member["server_assignor"] == "uniform"
    )
    assert member["classic_member_metadata"]["supported_protocols"][0]["subscription"][
        "subscribed_topics"
    ] == ["orders"]
    a = json.loads(rows[1]["fields"])
    assert a["member_epoch"] == 7 and a["assigned_partitions"] == [
        {"topic_id": str(tid), "partitions": [0, 3]}
    ]
    assert json.loads(rows[2]["fields"]) == {"epoch": 12, "metadata_hash": 99}
    assert rows[3]["is_tombstone"] and rows[3]["member_id"] == "member-1"


@pytest.mark.parametrize("version", [0, 1])
def test_transaction_log_round_trip(version):
    recs = [
        Record(
            tl.encode_key("tx"), tl.encode_value(5, 1, 60000, "Empty", None, T0, version=version)
        ),
        Record(
            tl.encode_key("tx"),
            tl.encode_value(
                5,
                1,
                60000,
                "Ongoing",
                {"a": [1, 2]},
                T0 + 1,
                T0,
                version=version,
                client_transaction_version=2 if version else 0,
                previous_producer_id=4 if version else -1,
            ),
        ),
        Record(tl.encode_key("tx"), None),
    ]
    rows = tables(recs, TRANSACTION_STATE_TOPIC)["txn_log"].to_pylist()
    assert [r["state"] for r in rows] == ["Empty", "Ongoing", None]
    assert rows[0]["partitions"] is None and rows[1]["partitions"] == [
        {"topic": "a", "partitions": [1, 2]}
    ]
    assert rows[2]["is_tombstone"]
    assert rows[1]["client_transaction_version"] == (2 if version else 0)
    assert rows[1]["previous_producer_id"] == (4 if version else -1)


def test_transaction_state_values_decoded_once_per_state_equal_each_decoded():
    """A TV0/1 producer writes the same few states for life, differing only in their
    timestamps: the decoder decodes each distinct value head once and reads the timestamps
    over the column, and gives exactly what decoding each value alone gives (v0 and v1, no
    start time, bytes after the timestamps, damaged values and keys, tombstones, several ids,
    in batches of many records)."""
    import random

    rng = random.Random(3)
    states = ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "PrepareAbort"]
    records, expected = [], []
    for n in range(3_000):
        tid = rng.choice(["app-0", "app-1", "app-2"])
        key = tl.encode_key(tid)
        version = 0 if rng.random() < 0.8 else 1
        parts = rng.choice([None, {"out": [0]}, {"out": [0, 1], "offsets": [3]}])
        start = rng.choice([-1, T0 + rng.randint(0, 10**6)])
        value = tl.encode_value(7, rng.randint(0, 2), 10_000, rng.choice(states), parts,
                                T0 + n * 100, start, version=version)  # fmt: skip
        roll = rng.random()
        if roll < 0.05:
            value += b"\x00" * rng.randint(1, 20)  # bytes after the timestamps
        elif roll < 0.07:
            value = value[:16] + b"\x09" + value[17:]  # a state Kafka does not know
        elif roll < 0.08:
            value = None  # a tombstone
        elif roll < 0.09:
            key = b"\x00\x07"  # a damaged key
        records.append(Record(key, value))
        try:
            row = {"transactional_id": tl.decode_key(key), "is_tombstone": value is None}
            row.update({} if value is None else tl.decode_value(value))
            expected.append(row)
        except DecodeError:
            expected.append(None)
    got = []
    for i in range(0, len(records), 500):
        got += tables(records[i : i + 500], TRANSACTION_STATE_TOPIC)["txn_log"].to_pylist()
    wanted = [r for r in expected if r is not None]
    assert len(got) == len(wanted) and sum(r is None for r in expected) > 10
    for g, w in zip(got, wanted, strict=True):
        for name, value in w.items():
            if name in ("last_update_timestamp", "start_timestamp") and value is not None:
                value = datetime.fromtimestamp(value / 1000, UTC)
            assert g[name] == value, (name, g, w)


def test_offset_commits_decoded_over_the_column_equal_each_decoded():
    """Offset commits of every value version, with and without metadata (non-ASCII too), as
    tombstones, damaged (a length that lies, bytes after the value, an unknown version),
    between group metadata records and damaged keys: the column decoder gives exactly the
    rows, in the order, and the errors that decoding each record alone gives."""
    import random

    rng = random.Random(5)
    records, expected = [], []
    for n in range(3_000):
        roll = rng.random()
        key = co.encode_offset_commit_key(rng.choice(["g1", "g2"]), "orders", rng.randrange(3))
        value = co.encode_offset_commit(
            n, T0 + n, version=rng.choice([0, 1, 2, 3, 3, 3, 4]),
            metadata=rng.choice(["", "", "", "m", "héllo"]), leader_epoch=rng.randrange(9),
            expire_timestamp=rng.choice([-1, T0]),
        )  # fmt: skip
        if roll < 0.03:
            value = None
        elif roll < 0.05:
            value += b"\x01"  # bytes after the value
        elif roll < 0.06:
            value = b"\x00\x09" + value[2:]  # an unknown version
        elif roll < 0.07:
            value = value[:-9]  # cut short
        elif roll < 0.08:
            value = value[:-1] + b"\x01"  # v4: a tagged field that is not there
        elif roll < 0.1:
            key = co.encode_group_metadata_key("g1")
            value = co.encode_group_metadata("consumer", n, "range", None, [])
        elif roll < 0.11:
            key = b"\x00\x01\x00"  # a damaged key
        records.append(Record(key, value))
    for key, value in ((r.key, r.value) for r in records):
        try:
            k = co.decode_key(key)
            if k["key_type"] not in (0, 1):
                continue
            row = {**k, "is_tombstone": value is None}
            row.update({} if value is None else co.decode_offset_commit(value))
            expected.append(row)
        except DecodeError:
            pass
    got = []
    for i in range(0, len(records), 700):
        got += tables(records[i : i + 700], CONSUMER_OFFSETS_TOPIC)["offset_commits"].to_pylist()
    assert len(got) == len(expected) > 2_500
    for g, w in zip(got, expected, strict=True):
        for name, value in w.items():
            if name in ("commit_timestamp", "expire_timestamp") and value is not None:
                value = datetime.fromtimestamp(value / 1000, UTC)
            assert g[name] == value, (name, g, w)
