"""KRaft's `__cluster_metadata` log, read for what it says of topics: which topic id a name
holds now, and which ids were removed (the authority on topic deletions and re-creations).

A record's value is a frame (AbstractApiMessageSerde): frame version (unsigned varint, 1),
API key (unsigned varint), record version (unsigned varint), then the record.
`TopicRecord` (API key 2): Name (string), TopicId (uuid); `RemoveTopicRecord` (API key 9):
TopicId (uuid). Metadata records are flexible (compact strings, tagged fields after the
fields) in the versions brokers write; a record is read both ways and kept where exactly one
reading consumes its bytes. Anything else is skipped: this module never raises on bad bytes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from decoders.errors import DecodeError
from decoders.primitives import ByteReader

FRAME_VERSION = 1
TOPIC_RECORD = 2
REMOVE_TOPIC_RECORD = 9


@dataclass
class TopicAuthority:
    """What the metadata log says of topics at its end: name -> live topic id, and the ids it
    removed."""

    live: dict[str, str] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)

    def apply(self, value: bytes | None) -> None:
        event = topic_event(value)
        if event is None:
            return
        kind, name, topic_id = event
        if kind == "topic":
            self.live[name] = topic_id
            self.removed.discard(topic_id)
        else:
            self.removed.add(topic_id)
            for n in [n for n, i in self.live.items() if i == topic_id]:
                del self.live[n]


def _reading(value: bytes, at: int, flexible: bool, tail) -> tuple | None:
    """The fields read from ``at`` one way, if that consumes the record exactly."""
    r = ByteReader(value, at)
    try:
        out = tail(r)
        if flexible:
            r.tagged_fields()
    except DecodeError:
        return None
    return out if r.remaining == 0 else None


def topic_event(value: bytes | None) -> tuple[str, str | None, str] | None:
    """("topic", name, id) for a TopicRecord, ("remove", None, id) for a RemoveTopicRecord,
    else None."""
    if not value:
        return None
    head = ByteReader(value)
    try:
        frame, key = head.unsigned_varint(), head.unsigned_varint()
        head.unsigned_varint()  # the record's version: the bytes tell which layout it has
    except DecodeError:
        return None
    if frame != FRAME_VERSION or key not in (TOPIC_RECORD, REMOVE_TOPIC_RECORD):
        return None
    if key == REMOVE_TOPIC_RECORD:
        fields = lambda r, flexible: (None, r.uuid())  # noqa: E731
    else:
        fields = lambda r, flexible: (r.string(flexible), r.uuid())  # noqa: E731
    readings = [
        got
        for flexible in (True, False)
        if (got := _reading(value, head.pos, flexible, lambda r, f=flexible: fields(r, f)))
    ]
    if len(readings) != 1:
        return None
    name, raw = readings[0]
    return ("topic" if key == TOPIC_RECORD else "remove", name, str(uuid.UUID(bytes=raw)))


def read_authority(files) -> TopicAuthority | None:
    """The authority of one replica of `__cluster_metadata-0` (its DumpFiles): its newest
    snapshot (`<end offset>-<epoch>.checkpoint`, the whole state below its end offset), then
    the log's records from there on, in offset order; None when nothing decodes."""
    from decoders import read_segment

    snaps = [f for f in files if f.kind == "kraft_snapshot" and f.info.base_offset is not None]
    logs = sorted((f for f in files if f.kind == "log"), key=lambda f: f.info.base_offset or 0)
    newest = max(snaps, key=lambda f: f.info.base_offset, default=None)
    start = newest.info.base_offset if newest is not None else 0
    authority, seen = TopicAuthority(), 0
    for f in ([newest] if newest is not None else []) + logs:
        try:
            t = read_segment(f, "records")
        except (OSError, DecodeError):
            continue
        offsets = t.column("offset").to_pylist()
        controls = t.column("is_control").to_pylist()
        for v, o, c in zip(t.column("value").to_pylist(), offsets, controls, strict=True):
            if c or (f.kind == "log" and o is not None and o < start):
                continue
            authority.apply(v)
            seen += 1
    return authority if seen else None
