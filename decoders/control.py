"""Control records: transaction markers and KRaft control types (docs/formats.md section 5)."""

from __future__ import annotations

from decoders.constants import ABORT, COMMIT, CONTROL_TYPE_NAMES
from decoders.errors import DecodeError
from decoders.primitives import ByteReader

CONTROL_KEY_SIZE = 4
END_TXN_MARKER_VALUE_SIZE = 6


def control_key(key: bytes | None) -> tuple[int, int]:
    """(version, type) of a control record key; a newer version is read as version 0."""
    if key is None or len(key) < CONTROL_KEY_SIZE:
        raise DecodeError("control record key shorter than 4 bytes")
    r = ByteReader(key)
    version, ctype = r.int16(), r.int16()
    if version < 0:
        raise DecodeError(f"control record key with negative version {version}")
    return version, ctype


def control_type_name(ctype: int) -> str:
    return CONTROL_TYPE_NAMES.get(ctype, "UNKNOWN")


def end_txn_marker(value: bytes | None) -> tuple[int, int]:
    """(version, coordinatorEpoch) of a COMMIT/ABORT value (EndTransactionMarker)."""
    if value is None or len(value) < END_TXN_MARKER_VALUE_SIZE:
        raise DecodeError("transaction marker value shorter than 6 bytes")
    r = ByteReader(value)
    version, epoch = r.int16(), r.int32()
    if version < 0:
        raise DecodeError(f"transaction marker with negative version {version}")
    return version, epoch


def is_txn_marker(ctype: int) -> bool:
    return ctype in (ABORT, COMMIT)


def kraft_control_value(ctype: int, value: bytes) -> dict:
    """Decode a KRaft control record value (flexible messages, all versions flexible)."""
    r = ByteReader(value)
    version = r.int16()
    name = control_type_name(ctype)
    if name == "LEADER_CHANGE":

        def voter() -> dict:
            v = {"voter_id": r.int32()}
            if version >= 1:
                v["voter_directory_id"] = r.uuid().hex()
            r.tagged_fields()
            return v

        out = {"version": version, "leader_id": r.int32()}
        out["voters"] = r.array(voter, flexible=True)
        out["granting_voters"] = r.array(voter, flexible=True)
    elif name == "SNAPSHOT_HEADER":
        out = {"version": version, "last_contained_log_timestamp": r.int64()}
    elif name == "SNAPSHOT_FOOTER":
        out = {"version": version}
    elif name == "KRAFT_VERSION":
        out = {"version": version, "kraft_version": r.int16()}
    elif name == "KRAFT_VOTERS":

        def endpoint() -> dict:
            e = {"name": r.string(True), "host": r.string(True), "port": r.uint16()}
            r.tagged_fields()
            return e

        def voter() -> dict:
            v = {"voter_id": r.int32(), "voter_directory_id": r.uuid().hex()}
            v["endpoints"] = r.array(endpoint, flexible=True)
            v["kraft_version_feature"] = {"min": r.int16(), "max": r.int16()}
            r.tagged_fields()
            r.tagged_fields()
            return v

        out = {"version": version, "voters": r.array(voter, flexible=True)}
    else:
        return {"version": version, "raw": value.hex()}
    r.tagged_fields()
    return out
