"""Text files of a log directory (docs/formats.md 9.5-9.7): leader-epoch-checkpoint,
partition.metadata, meta.properties and the offset checkpoints at the log-dir root.

They are tiny; each reader returns a dict and raises DecodeError with the line at fault.
"""

from __future__ import annotations

import base64
import uuid

from decoders.errors import DecodeError

OFFSET_CHECKPOINT_FILES = (
    "replication-offset-checkpoint",
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
)
MAX_TEXT_BYTES = 64 * 1024 * 1024


def _lines(data: bytes) -> list[str]:
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise DecodeError(f"not UTF-8 text: {e}") from e


def _versioned_entries(data: bytes, fields: int) -> tuple[int, list[list[str]]]:
    """Line 1 version, line 2 count, then `count` lines of whitespace-separated fields."""
    lines = _lines(data)
    if not lines:
        return 0, []
    try:
        version = int(lines[0].strip())
        count = int(lines[1].strip()) if len(lines) > 1 else 0
    except ValueError as e:
        raise DecodeError(f"bad checkpoint header: {e}") from e
    if version != 0:
        raise DecodeError(f"checkpoint version {version}")
    body = [ln.split() for ln in lines[2:] if ln.strip()]
    if count != len(body):
        raise DecodeError(f"header says {count} entries, file holds {len(body)}")
    for i, parts in enumerate(body):
        if len(parts) != fields:
            raise DecodeError(f"line {i + 3}: expected {fields} fields, got {len(parts)}")
    return version, body


def leader_epoch_checkpoint(data: bytes) -> dict:
    """Epoch entries (epoch, start offset), ascending; an empty file has none."""
    if not data.strip():
        return {"version": 0, "entries": []}
    version, body = _versioned_entries(data, 2)
    try:
        entries = [{"epoch": int(e), "start_offset": int(o)} for e, o in body]
    except ValueError as e:
        raise DecodeError(str(e)) from e
    return {"version": version, "entries": entries}


def offset_checkpoint(data: bytes) -> dict:
    """`topic partition offset` lines (replication, recovery point, log start, cleaner)."""
    version, body = _versioned_entries(data, 3)
    try:
        entries = [{"topic": t, "partition": int(p), "offset": int(o)} for t, p, o in body]
    except ValueError as e:
        raise DecodeError(str(e)) from e
    return {"version": version, "entries": entries}


def decode_uuid(text: str) -> str:
    """URL-safe base64 (22 chars, no padding) to the canonical UUID form."""
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except ValueError as e:
        raise DecodeError(f"bad topic id {text!r}") from e
    if len(raw) != 16:
        raise DecodeError(f"topic id {text!r} is not 16 bytes")
    return str(uuid.UUID(bytes=raw))


def partition_metadata(data: bytes) -> dict:
    out: dict = {}
    for ln in _lines(data):
        if not ln.strip():
            continue
        key, sep, value = ln.partition(": ")
        if not sep:
            raise DecodeError(f"line without 'key: value': {ln!r}")
        out[key.strip()] = value.strip()
    try:
        version = int(out["version"])
        topic_id = out["topic_id"]
    except (KeyError, ValueError) as e:
        raise DecodeError(f"partition.metadata lacks {e}") from e
    if version < 0:
        raise DecodeError(f"version {version}")
    canonical = decode_uuid(topic_id)
    if canonical == str(uuid.UUID(int=0)):
        raise DecodeError("topic id is the zero UUID")
    return {"version": version, "topic_id": topic_id, "topic_uuid": canonical}


def meta_properties(data: bytes) -> dict:
    """Java properties: broker.id / node.id, cluster.id, version, directory.id."""
    out = {}
    for ln in _lines(data):
        s = ln.strip()
        if not s or s[0] in "#!":
            continue
        key, _, value = s.partition("=")
        out[key.strip()] = value.strip()
    return out


def broker_id(props: dict) -> str | None:
    return props.get("broker.id") or props.get("node.id")


def quorum_state(data: bytes) -> dict:
    """KRaft's quorum-state: a JSON object (leaderId, leaderEpoch, votedId, currentVoters...)."""
    import json

    try:
        out = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise DecodeError(f"quorum-state is not JSON: {e}") from e
    if not isinstance(out, dict):
        raise DecodeError("quorum-state is not a JSON object")
    return out
