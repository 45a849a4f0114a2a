"""`__consumer_offsets` keys and values (docs/formats.md section 6).

A key is an int16 record type and a non-flexible key struct; a value is an int16 version and
the value struct at that version, or null (a tombstone). Record types without a layout here
are kept with their raw bytes; types Kafka does not know are reported, as Kafka does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders import consumer_protocol
from decoders.errors import DecodeError, UnknownVersion
from decoders.primitives import ByteReader, ByteWriter

OFFSET_COMMIT_LEGACY = 0
OFFSET_COMMIT = 1
GROUP_METADATA = 2

RECORD_NAMES = {
    0: "OffsetCommit",
    1: "OffsetCommit",
    2: "GroupMetadata",
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    9: "ShareGroupPartitionMetadata",
    10: "ShareGroupMemberMetadata",
    11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata",
    16: "ConsumerGroupRegularExpression",
    17: "StreamsGroupMetadata",
    18: "StreamsGroup18",
    19: "StreamsGroup19",
    20: "StreamsGroup20",
    21: "StreamsGroup21",
    22: "StreamsGroup22",
    23: "StreamsGroup23",
    24: "StreamsGroupTargetAssignmentResolvedTopicIds",
}
MEMBER_KEYS = {5, 7, 8, 10, 13, 14}
MAX_OFFSET_COMMIT_VERSION = 4
MAX_GROUP_METADATA_VERSION = 4


def decode_key(key: bytes) -> dict[str, Any]:
    r = ByteReader(key)
    ktype = r.int16()
    out: dict[str, Any] = {"key_type": ktype}
    if ktype in (OFFSET_COMMIT_LEGACY, OFFSET_COMMIT):
        out.update(group_id=r.string(), topic=r.string(), partition=r.int32())
    elif ktype == GROUP_METADATA:
        out["group_id"] = r.string()
    elif ktype in RECORD_NAMES:
        out["group_id"] = r.string()
        if ktype in MEMBER_KEYS:
            out["member_id"] = r.string()
        elif ktype == 16:
            out["regular_expression"] = r.string()
        elif ktype >= 17 and r.remaining >= 2:
            out["member_id"] = r.string()
    else:
        raise UnknownVersion(f"unknown __consumer_offsets record type {ktype}")
    return out


def decode_offset_commit(value: bytes) -> dict[str, Any]:
    """OffsetCommitValue v0-4."""
    r = ByteReader(value)
    v = r.int16()
    if v < 0 or v > MAX_OFFSET_COMMIT_VERSION:
        raise UnknownVersion(f"OffsetCommitValue version {v}")
    flexible = v >= 4
    out = {
        "value_version": v,
        "committed_offset": r.int64(),
        "leader_epoch": -1,
        "expire_timestamp": None,
    }
    if v >= 3:
        out["leader_epoch"] = r.int32()
    out["metadata"] = r.string(flexible)
    out["commit_timestamp"] = r.int64()
    if v == 1:
        exp = r.int64()
        out["expire_timestamp"] = None if exp == -1 else exp
    if flexible:
        r.tagged_fields()
    return out


# OffsetCommitValue's layout by version, when every variable part has its usual size (the
# metadata string's length in an int16, or for v4 in a one-byte varint, and no tagged field):
# (bytes before the metadata's length, the length's own bytes, bytes after the metadata)
_COMMIT_LAYOUTS = {0: (10, 2, 8), 1: (10, 2, 16), 2: (10, 2, 8), 3: (14, 2, 8), 4: (14, 1, 9)}
OFFSET_COMMIT_COLUMNS = (
    "value_version", "committed_offset", "leader_epoch", "metadata", "commit_timestamp",
    "expire_timestamp",
)  # fmt: skip


def offset_commit_columns(values: pa.Array) -> tuple[np.ndarray, pa.Table]:
    """OffsetCommitValues (non-null) decoded over the column, as :func:`decode_offset_commit`
    decodes each: the values of one length and version share a layout (one metadata length),
    so each field is a column of a byte matrix. Returns which values it decoded (their
    positions in ``values``) and their fields (:data:`OFFSET_COMMIT_COLUMNS`); a value
    outside the usual layouts (another version, tagged fields, a long metadata string, bytes
    that disagree with their length) is left to :func:`decode_offset_commit`."""
    sizes = pc.binary_length(values).to_numpy(zero_copy_only=False)
    parts: list[pa.Table] = []
    done: list[np.ndarray] = []
    for size in np.unique(sizes).tolist():
        rows = np.flatnonzero(sizes == size)
        if size < 2:
            continue
        same = values.take(pa.array(rows)).cast(pa.binary(size))
        data = np.frombuffer(same.buffers()[1], np.uint8)
        m = data[same.offset * size : (same.offset + len(same)) * size].reshape(-1, size)
        version = _big(m, 0, 2, ">i2")
        for v, (head, width, tail) in _COMMIT_LAYOUTS.items():
            length = size - head - width - tail
            if length < 0 or (width == 1 and length + 1 >= 0x80):
                continue
            # the metadata's length as written (a compact string's is length + 1)
            said = _big(m, head, 2, ">i2") if width == 2 else m[:, head].astype(np.int64) - 1
            ok = (version == v) & (said == length)
            if v == 4:
                ok &= m[:, size - 1] == 0  # no tagged field
            at = np.flatnonzero(ok)
            if not len(at):
                continue
            g = m[at]
            start = head + width
            metadata = _texts(g[:, start : start + length])
            if metadata is None:
                continue  # not UTF-8: the one-by-one decoder says so
            ts = start + length
            expire = _big(g, ts + 8, 8, ">i8") if v == 1 else np.full(len(at), -1, np.int64)
            parts.append(pa.table({
                "value_version": pa.array(np.full(len(at), v, np.int16)),
                "committed_offset": _big(g, 2, 8, ">i8"),
                "leader_epoch": _big(g, 10, 4, ">i4") if v >= 3 else np.full(len(at), -1, np.int32),
                "metadata": metadata,
                "commit_timestamp": _big(g, ts, 8, ">i8"),
                "expire_timestamp": pa.array(expire, pa.int64(), mask=expire == -1),
            }))  # fmt: skip
            done.append(rows[at])
    if not done:
        return np.zeros(0, np.int64), pa.table(
            {c: pa.array([], pa.int64()) for c in OFFSET_COMMIT_COLUMNS}
        )
    positions = np.concatenate(done)
    order = np.argsort(positions, kind="stable")
    table = pa.concat_tables(parts, promote_options="permissive").take(pa.array(order))
    return positions[order], table


def _big(m: np.ndarray, at: int, width: int, dtype: str) -> np.ndarray:
    """Big-endian integers of ``width`` bytes at column ``at`` of byte matrix ``m``."""
    return np.ascontiguousarray(m[:, at : at + width]).view(dtype).ravel().astype(dtype[1:])


def _texts(m: np.ndarray) -> pa.Array | None:
    """The rows of byte matrix ``m`` as strings (None when one is not UTF-8)."""
    n, width = m.shape
    offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * width).tobytes())
    texts = pa.StringArray.from_buffers(n, offsets, pa.py_buffer(np.ascontiguousarray(m).tobytes()))
    try:
        texts.validate(full=True)
    except pa.ArrowInvalid:
        return None
    return texts


def decode_group_metadata(value: bytes) -> dict[str, Any]:
    """GroupMetadataValue v0-4, with consumer-protocol member bytes decoded."""
    r = ByteReader(value)
    v = r.int16()
    if v < 0 or v > MAX_GROUP_METADATA_VERSION:
        raise UnknownVersion(f"GroupMetadataValue version {v}")
    flex = v >= 4
    out: dict[str, Any] = {
        "value_version": v,
        "protocol_type": r.string(flex),
        "generation": r.int32(),
    }
    out["protocol"] = r.nullable_string(flex)
    out["leader"] = r.nullable_string(flex)
    out["state_timestamp"] = None
    if v >= 2:
        ts = r.int64()
        out["state_timestamp"] = None if ts == -1 else ts

    def member() -> dict[str, Any]:
        m: dict[str, Any] = {"member_id": r.string(flex), "instance_id": None}
        if v >= 3:
            m["instance_id"] = r.nullable_string(flex)
        m["client_id"] = r.string(flex)
        m["client_host"] = r.string(flex)
        m["rebalance_timeout_ms"] = r.int32() if v >= 1 else None
        m["session_timeout_ms"] = r.int32()
        if (
            m["rebalance_timeout_ms"] is None
        ):  # v0: the session timeout doubles as rebalance timeout
            m["rebalance_timeout_ms"] = m["session_timeout_ms"]
        m["subscription"] = r.bytes_(flex)
        m["assignment"] = r.bytes_(flex)
        if flex:
            r.tagged_fields()
        if out["protocol_type"] == consumer_protocol.CONSUMER_PROTOCOL_TYPE:
            _decode_member_protocol(m)
        return m

    out["members"] = r.array(member, flex)
    if flex:
        r.tagged_fields()
    return out


def _decode_member_protocol(m: dict[str, Any]) -> None:
    errors = []
    try:
        m.update(consumer_protocol.subscription(m["subscription"]))
    except DecodeError as e:
        errors.append(f"subscription: {e}")
    try:
        m.update(consumer_protocol.assignment(m["assignment"]))
    except DecodeError as e:
        errors.append(f"assignment: {e}")
    m["protocol_error"] = "; ".join(errors) or None


# -- KIP-848 / KIP-932 values (all version 0, flexible) -----------------------------------------
def _uuid(r: ByteReader) -> str:
    return str(uuid.UUID(bytes=r.uuid()))


def _struct_array(r: ByteReader, fields) -> list[dict]:
    def one() -> dict:
        d = fields()
        r.tagged_fields()
        return d

    return r.array(one, flexible=True)


def decode_group_value(ktype: int, value: bytes) -> dict[str, Any]:
    """Decode a value of record types 3-16 into a plain dict (JSON-able)."""
    r = ByteReader(value)
    v = r.int16()
    if v < 0:
        raise UnknownVersion(f"negative value version {v} for record type {ktype}")
    out: dict[str, Any] = {"value_version": v}
    read = _GROUP_VALUE_READERS.get(ktype)
    if read is None:
        out["raw"] = value.hex()  # streams-group records: layout not covered, kept verbatim
        return out
    out.update(read(r))
    if ktype not in _READS_OWN_TAGS:
        tags = r.tagged_fields()
        if "unknown_tags" in tags:
            out["unknown_tags"] = tags["unknown_tags"]
    return out


def _topic_partitions(r: ByteReader) -> list[dict]:
    """A list of (topic id, partitions): how assignments name the partitions they hold."""
    return _struct_array(r, lambda: {"topic_id": _uuid(r), "partitions": r.array(r.int32, True)})


def _group_metadata_fields(r: ByteReader) -> dict[str, Any]:
    """Consumer/ShareGroupMetadataValue (3, 11): the group epoch; the metadata hash and the
    creation time are tagged fields, read here with the rest of the tags."""
    out: dict[str, Any] = {"epoch": r.int32()}
    tags = r.tagged_fields({0: lambda s: s.int64(), 1: lambda s: s.int64()})
    if 0 in tags:
        out["metadata_hash"] = tags[0]
    if 1 in tags:
        out["creation_time_ms"] = tags[1]
    return out


def _partition_metadata_fields(r: ByteReader) -> dict[str, Any]:
    """Consumer/ShareGroupPartitionMetadataValue (4, 9): the subscribed topics with their
    partition counts and racks."""
    return {
        "topics": _struct_array(
            r,
            lambda: {
                "topic_id": _uuid(r),
                "topic_name": r.string(True),
                "num_partitions": r.int32(),
                "partition_metadata": _struct_array(
                    r,
                    lambda: {
                        "partition": r.int32(),
                        "racks": r.array(lambda: r.string(True), True),
                    },
                ),
            },
        )
    }


def _consumer_member_fields(r: ByteReader) -> dict[str, Any]:
    """ConsumerGroupMemberMetadataValue (5); a member that joined with the classic protocol
    carries its session timeout and protocols in tagged field 0, read here with the rest."""
    out: dict[str, Any] = dict(
        instance_id=r.nullable_string(True),
        rack_id=r.nullable_string(True),
        client_id=r.string(True),
        client_host=r.string(True),
        subscribed_topic_names=r.array(lambda: r.string(True), True),
        subscribed_topic_regex=r.nullable_string(True),
        rebalance_timeout_ms=r.int32(),
        server_assignor=r.nullable_string(True),
    )
    tags = r.tagged_fields({0: _classic_member_metadata})
    if 0 in tags:
        out["classic_member_metadata"] = tags[0]
    return out


def _classic_member_metadata(s: ByteReader) -> dict | None:
    """Tagged field 0 of a type-5 value (null when its first byte is negative): a classic
    member's session timeout and supported protocols, their subscriptions decoded when the
    consumer protocol reads them (the metadata kept as hex either way)."""
    if s.int8() < 0:
        return None
    d = {"session_timeout_ms": s.int32()}

    def proto() -> dict:
        p = {"name": s.string(True), "metadata": s.bytes_(True)}
        s.tagged_fields()
        try:
            p["subscription"] = consumer_protocol.subscription(p["metadata"])
            p["subscription"]["subscription_user_data"] = None
        except DecodeError:
            pass
        p["metadata"] = p["metadata"].hex()
        return p

    d["supported_protocols"] = s.array(proto, True)
    s.tagged_fields()
    return d


def _target_assignment_metadata_fields(r: ByteReader) -> dict[str, Any]:
    """Consumer/ShareGroupTargetAssignmentMetadataValue (6, 12): the target assignment's epoch."""
    return {"assignment_epoch": r.int32()}


def _target_assignment_member_fields(r: ByteReader) -> dict[str, Any]:
    """Consumer/ShareGroupTargetAssignmentMemberValue (7, 13): the partitions a member is to
    hold."""
    return {"topic_partitions": _topic_partitions(r)}


def _current_assignment_fields(ktype: int, r: ByteReader) -> dict[str, Any]:
    """Consumer/ShareGroupCurrentMemberAssignmentValue (8, 14): the member's epochs, state and
    partitions; a consumer group's (8) also lists the partitions it is still to revoke."""
    out: dict[str, Any] = dict(
        member_epoch=r.int32(), previous_member_epoch=r.int32(), state=r.int8()
    )
    out["assigned_partitions"] = _topic_partitions(r)
    if ktype == 8:
        out["partitions_pending_revocation"] = _topic_partitions(r)
    return out


def _share_member_fields(r: ByteReader) -> dict[str, Any]:
    """ShareGroupMemberMetadataValue (10)."""
    return dict(
        rack_id=r.nullable_string(True),
        client_id=r.string(True),
        client_host=r.string(True),
        subscribed_topic_names=r.array(lambda: r.string(True), True),
    )


def _share_state_fields(r: ByteReader) -> dict[str, Any]:
    """ShareGroupStatePartitionMetadataValue (15): the topics whose share state is initialised
    and those being deleted."""
    out: dict[str, Any] = {}
    out["initialized_topics"] = _struct_array(
        r,
        lambda: {
            "topic_id": _uuid(r),
            "topic_name": r.string(True),
            "partitions": r.array(r.int32, True),
        },
    )
    out["deleting_topics"] = _struct_array(
        r, lambda: {"topic_id": _uuid(r), "topic_name": r.string(True)}
    )
    return out


def _regular_expression_fields(r: ByteReader) -> dict[str, Any]:
    """ConsumerGroupRegularExpressionValue (16): the topics a subscribed regex resolved to."""
    return dict(
        topics=r.array(lambda: r.string(True), True), version=r.int64(), timestamp=r.int64()
    )


# Record type -> the reader of its value's fields (after the version); a type without one
# (the streams-group records) is kept raw.
_GROUP_VALUE_READERS: dict[int, Callable[[ByteReader], dict[str, Any]]] = {
    3: _group_metadata_fields,
    11: _group_metadata_fields,
    4: _partition_metadata_fields,
    9: _partition_metadata_fields,
    5: _consumer_member_fields,
    6: _target_assignment_metadata_fields,
    12: _target_assignment_metadata_fields,
    7: _target_assignment_member_fields,
    13: _target_assignment_member_fields,
    8: lambda r: _current_assignment_fields(8, r),
    14: lambda r: _current_assignment_fields(14, r),
    10: _share_member_fields,
    15: _share_state_fields,
    16: _regular_expression_fields,
}
# Types whose reader reads the value's tagged fields itself (it knows some of their tags).
_READS_OWN_TAGS = {3, 11, 5}


def fields_json(d: dict[str, Any]) -> str:
    return json.dumps(
        {k: v for k, v in d.items() if k != "value_version"}, sort_keys=True, default=str
    )


# -- encoders (writer, tests) -------------------------------------------------------------------
def encode_offset_commit_key(
    group: str, topic: str, partition: int, key_type: int = OFFSET_COMMIT
) -> bytes:
    return ByteWriter().int16(key_type).string(group).string(topic).int32(partition).getvalue()


def encode_group_metadata_key(group: str) -> bytes:
    return ByteWriter().int16(GROUP_METADATA).string(group).getvalue()


def encode_offset_commit(
    offset: int,
    commit_timestamp: int,
    version: int = 3,
    metadata: str = "",
    leader_epoch: int = -1,
    expire_timestamp: int = -1,
) -> bytes:
    w = ByteWriter().int16(version).int64(offset)
    if version >= 3:
        w.int32(leader_epoch)
    w.string(metadata, version >= 4).int64(commit_timestamp)
    if version == 1:
        w.int64(expire_timestamp)
    if version >= 4:
        w.tagged_fields()
    return w.getvalue()


def encode_group_metadata(
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    members: list[dict[str, Any]],
    version: int = 3,
    state_timestamp: int = -1,
) -> bytes:
    """members: dicts with member_id, client_id, client_host, session_timeout_ms,
    subscription, assignment and optionally instance_id, rebalance_timeout_ms."""
    flex = version >= 4
    w = ByteWriter().int16(version).string(protocol_type, flex).int32(generation)
    w.nullable_string(protocol, flex).nullable_string(leader, flex)
    if version >= 2:
        w.int64(state_timestamp)
    w.array_length(len(members), flex)
    for m in members:
        w.string(m["member_id"], flex)
        if version >= 3:
            w.nullable_string(m.get("instance_id"), flex)
        w.string(m.get("client_id", ""), flex).string(m.get("client_host", ""), flex)
        if version >= 1:
            w.int32(m.get("rebalance_timeout_ms", 300000))
        w.int32(m.get("session_timeout_ms", 45000))
        w.bytes_(m.get("subscription", b""), flex).bytes_(m.get("assignment", b""), flex)
        if flex:
            w.tagged_fields()
    if flex:
        w.tagged_fields()
    return w.getvalue()
