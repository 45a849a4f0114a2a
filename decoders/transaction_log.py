"""`__transaction_state` keys and values (docs/formats.md section 8)."""

from __future__ import annotations

import struct
from typing import Any

from decoders.errors import DecodeError, UnknownVersion
from decoders.primitives import ByteReader, ByteWriter

TXN_STATES = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}
STATE_CODES = {v: k for k, v in TXN_STATES.items()}
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT = "Empty", "Ongoing", "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT, DEAD = "CompleteCommit", "CompleteAbort", "Dead"
PREPARE_EPOCH_FENCE = "PrepareEpochFence"

# state <- the states it may follow: TransactionState.VALID_PREVIOUS_STATES (Kafka 4.x,
# transaction-coordinator/.../TransactionState.java), the validPreviousStates of
# TransactionMetadata.scala's states in 3.x; docs/formats.md 8.4. Dead (never written: expiry
# writes a tombstone) follows Empty, CompleteCommit or CompleteAbort in both.
VALID_PREVIOUS_STATES: dict[str, frozenset[str]] = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    PREPARE_ABORT: frozenset({ONGOING, PREPARE_EPOCH_FENCE}),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
}
# Transaction version 2 (KIP-890, Kafka 4.x): an abort may also follow Empty, CompleteCommit or
# CompleteAbort, since a TV2 client can abort with no transaction ongoing (TransactionState.java
# lists them for PREPARE_ABORT "in transaction v2"); earlier versions never write that.
TV2_EXTRA_PREVIOUS_STATES: dict[str, frozenset[str]] = {
    PREPARE_ABORT: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
}


def valid_previous_states(state: str, transaction_version: int = 0) -> frozenset[str] | None:
    """The states ``state`` may follow for a client of ``transaction_version``; None for a
    state Kafka does not know."""
    allowed = VALID_PREVIOUS_STATES.get(state)
    if allowed is not None and transaction_version >= 2:
        allowed = allowed | TV2_EXTRA_PREVIOUS_STATES.get(state, frozenset())
    return allowed


MAX_VALUE_VERSION = 1
TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2


def decode_key(key: bytes) -> str:
    r = ByteReader(key)
    version = r.int16()
    if version != 0:
        raise UnknownVersion(f"TransactionLogKey version {version}")
    return r.string()


def decode_value(value: bytes) -> dict[str, Any]:
    """TransactionLogValue v0 (non-flexible) and v1 (flexible, tagged producer-id fields)."""
    r = ByteReader(value)
    v = r.int16()
    if v < 0 or v > MAX_VALUE_VERSION:
        raise UnknownVersion(f"TransactionLogValue version {v}")
    flex = v >= 1
    out: dict[str, Any] = {
        "value_version": v,
        "producer_id": r.int64(),
        "producer_epoch": r.int16(),
        "timeout_ms": r.int32(),
    }
    status = r.int8()
    if status not in TXN_STATES:
        raise DecodeError(f"unknown transaction status {status}")
    out["state"] = TXN_STATES[status]

    def entry() -> dict:
        e = {"topic": r.string(flex), "partitions": r.array(r.int32, flex)}
        if flex:
            r.tagged_fields()
        return e

    out["partitions"] = r.nullable_array(entry, flex)
    out["last_update_timestamp"] = r.int64()
    start = r.int64()
    out["start_timestamp"] = None if start == -1 else start
    out["previous_producer_id"] = -1
    out["next_producer_id"] = -1
    out["client_transaction_version"] = 0
    if flex:
        tags = r.tagged_fields(
            {
                TAG_PREVIOUS_PRODUCER_ID: lambda s: s.int64(),
                TAG_NEXT_PRODUCER_ID: lambda s: s.int64(),
                TAG_CLIENT_TRANSACTION_VERSION: lambda s: s.int16(),
            }
        )
        out["previous_producer_id"] = tags.get(TAG_PREVIOUS_PRODUCER_ID, -1)
        out["next_producer_id"] = tags.get(TAG_NEXT_PRODUCER_ID, -1)
        out["client_transaction_version"] = tags.get(TAG_CLIENT_TRANSACTION_VERSION, 0)
    return out


# what a v0 value's timestamps take at its end: last update, then transaction start (int64
# each); a TV0/1 producer's values differ in nothing else (decoders.internal decodes the bytes
# before them once per distinct run of bytes)
V0_TIMESTAMPS = struct.Struct(">qq")


def encode_key(transactional_id: str) -> bytes:
    return ByteWriter().int16(0).string(transactional_id).getvalue()


def encode_value(
    producer_id: int,
    producer_epoch: int,
    timeout_ms: int,
    state: str,
    partitions: dict[str, list[int]] | None,
    last_update_timestamp: int,
    start_timestamp: int = -1,
    version: int = 0,
    previous_producer_id: int = -1,
    next_producer_id: int = -1,
    client_transaction_version: int = 0,
) -> bytes:
    flex = version >= 1
    w = ByteWriter().int16(version).int64(producer_id).int16(producer_epoch).int32(timeout_ms)
    w.int8(STATE_CODES[state])
    if partitions is None:
        w.array_length(None, flex)
    else:
        w.array_length(len(partitions), flex)
        for topic, parts in partitions.items():
            w.string(topic, flex).array_length(len(parts), flex)
            for p in parts:
                w.int32(p)
            if flex:
                w.tagged_fields()
    w.int64(last_update_timestamp).int64(start_timestamp)
    if flex:
        tags = {}
        if previous_producer_id != -1:
            tags[TAG_PREVIOUS_PRODUCER_ID] = ByteWriter().int64(previous_producer_id).getvalue()
        if next_producer_id != -1:
            tags[TAG_NEXT_PRODUCER_ID] = ByteWriter().int64(next_producer_id).getvalue()
        if client_transaction_version != 0:
            tags[TAG_CLIENT_TRANSACTION_VERSION] = (
                ByteWriter().int16(client_transaction_version).getvalue()
            )
        w.tagged_fields(tags)
    return w.getvalue()
