"""Avro payloads of the `records` table, decoded with fastavro.

Two encodings are common on Kafka topics:
- schemaless: the bare Avro binary of one datum, written with one known writer schema;
- the Confluent wire format: magic byte 0, the writer schema's registry id (4 bytes, big
  endian), then the Avro binary. Ids resolve against schemas stored locally (``<id>.avsc``).

The decoded datum becomes a JSON text column (``decoded``; the Avro JSON mapping: bytes and
fixed as ISO-8859-1 strings, decimals and UUIDs as strings, timestamps in ISO 8601), so topics
with different schemas share one table and Spark's ``from_json`` can type it. A payload that
does not decode leaves ``decoded`` null and says why in ``decode_error``: counted, reported by
the gate, never fatal.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import io
import json
import os
import struct
import uuid
from dataclasses import dataclass

import pyarrow as pa

CONFLUENT_MAGIC = 0
CONFLUENT_HEADER = struct.Struct(">bI")  # magic byte, schema id
SCHEMALESS, CONFLUENT = "schemaless", "confluent"
DECODED, DECODE_ERROR = "decoded", "decode_error"
COLUMNS = (
    pa.field(
        DECODED, pa.string(), metadata={"doc": "the Avro payload as JSON (conf topics.<t>.avro)"}
    ),
    pa.field(DECODE_ERROR, pa.string(), metadata={"doc": "why the Avro payload did not decode"}),
)


@dataclass
class TopicAvro:
    """How one topic's payloads are encoded."""

    encoding: str = SCHEMALESS
    field: str = "value"
    schema: dict | None = None  # schemaless: the writer schema; confluent: the fallback
    schemas: dict[int, dict] = dataclasses.field(default_factory=dict)  # confluent: by registry id

    def __post_init__(self) -> None:
        from fastavro import parse_schema

        self._parsed = parse_schema(self.schema) if self.schema else None
        self._by_id = {int(i): parse_schema(s) for i, s in self.schemas.items()}

    def decode(self, payload: bytes) -> object:
        from fastavro import schemaless_reader

        if self.encoding == CONFLUENT:
            if len(payload) < CONFLUENT_HEADER.size:
                raise ValueError(f"{len(payload)} bytes: shorter than the Confluent header")
            magic, schema_id = CONFLUENT_HEADER.unpack_from(payload)
            if magic != CONFLUENT_MAGIC:
                raise ValueError(f"magic byte {magic}, not the Confluent wire format's 0")
            writer = self._by_id.get(schema_id, self._parsed if not self._by_id else None)
            if writer is None:
                raise ValueError(f"schema id {schema_id} is not among the local schemas")
            buf = io.BytesIO(payload)
            buf.seek(CONFLUENT_HEADER.size)
        else:
            writer, buf = self._parsed, io.BytesIO(payload)
        datum = schemaless_reader(buf, writer, None)
        if buf.tell() != len(payload):
            raise ValueError(f"{len(payload) - buf.tell()} bytes left after the datum")
        return datum


def load_topics(topics_conf: dict) -> dict[str, TopicAvro]:
    """From the validated configuration's ``topics`` section: schemas read from their files."""
    out = {}
    for topic, facts in (topics_conf or {}).items():
        avro = (facts or {}).get("avro")
        if not avro:
            continue
        schemas = {}
        if avro.get("schema_dir"):
            for name in sorted(os.listdir(avro["schema_dir"])):
                stem, ext = os.path.splitext(name)
                if ext == ".avsc" and stem.isdigit():
                    schemas[int(stem)] = _read_json(os.path.join(avro["schema_dir"], name))
        out[topic] = TopicAvro(
            encoding=avro.get("encoding", SCHEMALESS),
            field=avro.get("field", "value"),
            schema=_read_json(avro["schema"]) if avro.get("schema") else None,
            schemas=schemas,
        )
    return out


def to_option(topics: dict[str, TopicAvro]) -> str:
    """The data source's ``avro`` option: every schema inline, so tasks read no schema files."""
    return json.dumps(
        {
            t: {
                "encoding": a.encoding,
                "field": a.field,
                "schema": a.schema,
                "schemas": {str(i): s for i, s in a.schemas.items()},
            }  # fmt: skip
            for t, a in topics.items()
        },
        sort_keys=True,
    )


def from_option(text: str) -> dict[str, TopicAvro]:
    return {
        t: TopicAvro(
            encoding=v.get("encoding", SCHEMALESS),
            field=v.get("field", "value"),
            schema=v.get("schema"),
            schemas={int(i): s for i, s in (v.get("schemas") or {}).items()},
        )
        for t, v in json.loads(text).items()
    }


def decode_batch(batch: pa.RecordBatch, topics: dict[str, TopicAvro]) -> pa.RecordBatch:
    """``batch`` (records table) with the ``decoded`` and ``decode_error`` columns added."""
    n = batch.num_rows
    decoded: list[str | None] = [None] * n
    errors: list[str | None] = [None] * n
    names = batch.schema.names
    topic_col = batch.column(names.index("topic")).to_pylist()
    control = batch.column(names.index("is_control")).to_pylist()
    wanted = {t for t in set(topic_col) if t in topics}
    if wanted:
        for fld in {topics[t].field for t in wanted}:
            payloads = batch.column(names.index(fld)).to_pylist()
            for i, (topic, payload) in enumerate(zip(topic_col, payloads, strict=True)):
                spec = topics.get(topic)
                if spec is None or spec.field != fld or control[i] or payload is None:
                    continue
                try:
                    decoded[i] = json.dumps(spec.decode(payload), default=_json_default)
                except Exception as e:  # any malformed payload: reported, never fatal
                    errors[i] = f"{type(e).__name__}: {e}"[:500]
    return pa.RecordBatch.from_arrays(
        [*batch.columns, pa.array(decoded, pa.string()), pa.array(errors, pa.string())],
        schema=batch.schema.append(COLUMNS[0]).append(COLUMNS[1]),
    )


def _json_default(v: object) -> object:
    if isinstance(v, bytes):
        return v.decode("latin-1")  # Avro's JSON encoding of bytes and fixed
    if isinstance(v, decimal.Decimal | uuid.UUID):
        return str(v)
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    return base64.b64encode(repr(v).encode()).decode()


def _read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)
