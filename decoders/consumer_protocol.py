"""ConsumerProtocol subscription and assignment bytes (docs/formats.md section 7).

Version-prefixed, non-flexible. A version above 3 is read as version 3 and trailing bytes are
ignored (ConsumerProtocol.java); a zero-length assignment means "no assignment".
"""

from __future__ import annotations

from decoders.errors import DecodeError
from decoders.primitives import ByteReader, ByteWriter

CONSUMER_PROTOCOL_TYPE = "consumer"
MAX_KNOWN_VERSION = 3


def _topic_partitions(r: ByteReader) -> list[dict]:
    def one() -> dict:
        return {"topic": r.string(), "partitions": r.array(r.int32)}

    return r.array(one)


def subscription(data: bytes) -> dict:
    """ConsumerProtocolSubscription v0-3."""
    r = ByteReader(data)
    version = r.int16()
    if version < 0:
        raise DecodeError(f"subscription with negative version {version}")
    v = min(version, MAX_KNOWN_VERSION)
    out = {
        "subscription_version": version,
        "subscribed_topics": r.array(r.string),
        "subscription_user_data": r.nullable_bytes(),
        "owned_partitions": [],
        "subscription_generation": -1,
        "rack_id": None,
    }
    if v >= 1:
        out["owned_partitions"] = _topic_partitions(r)
    if v >= 2:
        out["subscription_generation"] = r.int32()
    if v >= 3:
        out["rack_id"] = r.nullable_string()
    return out


def assignment(data: bytes) -> dict:
    """ConsumerProtocolAssignment v0-3 (all versions share the v0 body)."""
    if len(data) == 0:
        return {"assignment_version": None, "assigned_partitions": [], "assignment_user_data": None}
    r = ByteReader(data)
    version = r.int16()
    if version < 0:
        raise DecodeError(f"assignment with negative version {version}")
    return {
        "assignment_version": version,
        "assigned_partitions": _topic_partitions(r),
        "assignment_user_data": r.nullable_bytes(),
    }


# -- encoders (writer, tests) ------------------------------------------------------------------
def _write_topic_partitions(w: ByteWriter, tps: dict[str, list[int]]) -> None:
    w.array_length(len(tps))
    for topic, parts in tps.items():
        w.string(topic).array_length(len(parts))
        for p in parts:
            w.int32(p)


def encode_subscription(
    topics: list[str],
    version: int = 3,
    user_data: bytes | None = None,
    owned: dict[str, list[int]] | None = None,
    generation: int = -1,
    rack_id: str | None = None,
) -> bytes:
    w = ByteWriter().int16(version).array_length(len(topics))
    for t in sorted(topics):
        w.string(t)
    w.nullable_bytes(user_data)
    if version >= 1:
        _write_topic_partitions(w, owned or {})
    if version >= 2:
        w.int32(generation)
    if version >= 3:
        w.nullable_string(rack_id)
    return w.getvalue()


def encode_assignment(
    partitions: dict[str, list[int]], version: int = 3, user_data: bytes | None = None
) -> bytes:
    w = ByteWriter().int16(version)
    _write_topic_partitions(w, partitions)
    w.nullable_bytes(user_data)
    return w.getvalue()
