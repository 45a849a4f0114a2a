"""Avro payloads: records written with fastavro, schemaless and in the Confluent wire format,
decode to the original values through the data source and the decode job; bad payloads are
counted, never fatal."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pyarrow as pa
import pytest

import decoders
from decoders.avro import TopicAvro, decode_batch
from simulator.writer import PartitionWriter, Record, build_batch

PAYMENT = {
    "type": "record",
    "name": "Payment",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {
            "name": "currency",
            "type": {"type": "enum", "name": "Currency", "symbols": ["EUR", "USD"]},
        },
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "raw", "type": "bytes"},
    ],
}
CLICK_V1 = {"type": "record", "name": "Click", "fields": [{"name": "url", "type": "string"}]}
CLICK_V2 = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "url", "type": "string"}, {"name": "ms", "type": "int"}],
}
PAYMENTS = [
    {"id": i, "amount": i * 1.5, "currency": "EUR" if i % 2 else "USD",
     "note": None if i % 3 else f"note {i}", "raw": bytes([i, 255 - i])}
    for i in range(40)
]  # fmt: skip
CLICKS = [(1, {"url": f"/p/{i}"}) if i % 2 else (2, {"url": f"/q/{i}", "ms": i}) for i in range(30)]


def _avro(schema: dict, datum: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return buf.getvalue()


def _confluent(schema_id: int, schema: dict, datum: dict) -> bytes:
    return struct.pack(">bI", 0, schema_id) + _avro(schema, datum)


BAD = [b"\x00\x00\x00\x00\x09" + b"x", b"\x07garbage", b"\x00\x00"]  # unknown id, magic, short


@pytest.fixture(scope="module")
def avro_dump(tmp_path_factory):
    root = tmp_path_factory.mktemp("avro") / "dump"
    broker = root / "broker-1"
    pay = PartitionWriter(str(broker), "payments", 0)
    for chunk in range(0, len(PAYMENTS), 10):
        records = [Record(key=str(p["id"]).encode(), value=_avro(PAYMENT, p), timestamp=1_700_000_000_000)
                   for p in PAYMENTS[chunk:chunk + 10]]  # fmt: skip
        pay.append(build_batch(records))
    pay.append(build_batch([Record(key=b"tomb", value=None, timestamp=1_700_000_000_000)]))
    pay.close()
    clicks = PartitionWriter(str(broker), "clicks", 0)
    schemas = {1: CLICK_V1, 2: CLICK_V2}
    clicks.append(build_batch([Record(value=_confluent(i, schemas[i], d), timestamp=1_700_000_000_000)
                               for i, d in CLICKS]))  # fmt: skip
    clicks.append(build_batch([Record(value=b, timestamp=1_700_000_000_000) for b in BAD]))
    clicks.close()
    schema_dir = root.parent / "schemas"
    schema_dir.mkdir()
    (schema_dir / "1.avsc").write_text(json.dumps(CLICK_V1))
    (schema_dir / "2.avsc").write_text(json.dumps(CLICK_V2))
    (root.parent / "payment.avsc").write_text(json.dumps(PAYMENT))
    conf = root.parent / "avro.yaml"
    conf.write_text(
        "topics:\n"
        "  payments: {avro: {encoding: schemaless, schema: payment.avsc}}\n"
        "  clicks: {avro: {encoding: confluent, schema_dir: schemas}}\n"
    )
    return root, conf


def _expected_payment(p: dict) -> dict:
    return {**p, "raw": p["raw"].decode("latin-1")}


def _check(rows: list[dict]) -> None:
    pay = [r for r in rows if r["topic"] == "payments" and r["value"] is not None]
    assert [json.loads(r["decoded"]) for r in pay] == [_expected_payment(p) for p in PAYMENTS]
    tomb = [r for r in rows if r["topic"] == "payments" and r["value"] is None]
    assert len(tomb) == 1 and tomb[0]["decoded"] is None and tomb[0]["decode_error"] is None
    clicks = [r for r in rows if r["topic"] == "clicks"]
    assert [json.loads(r["decoded"]) for r in clicks[: len(CLICKS)]] == [d for _, d in CLICKS]
    bad = clicks[len(CLICKS) :]
    assert [r["decoded"] for r in bad] == [None] * 3
    assert "schema id 9" in bad[0]["decode_error"]
    assert "magic byte 7" in bad[1]["decode_error"]
    assert "shorter than the Confluent header" in bad[2]["decode_error"]


def test_decode_batch_in_process(avro_dump):
    from decoders.avro import load_topics
    from replay.config import load

    root, conf = avro_dump
    topics = load_topics(load(str(conf))["topics"])
    table = decoders.read_dump([str(root)], tables=["records"])["records"]
    table = table.sort_by([("topic", "ascending"), ("offset", "ascending")])
    out = pa.Table.from_batches([decode_batch(b, topics) for b in table.to_batches()])
    _check(out.to_pylist())


def test_a_trailing_byte_is_an_error_not_a_value():
    spec = TopicAvro(schema=CLICK_V1)
    assert spec.decode(_avro(CLICK_V1, {"url": "/"})) == {"url": "/"}
    with pytest.raises(ValueError, match="1 bytes left"):
        spec.decode(_avro(CLICK_V1, {"url": "/"}) + b"\x00")


def test_data_source_and_decode_job_decode_avro(spark, avro_dump, tmp_path):
    from decoders.avro import load_topics, to_option
    from jobs.cli import main
    from replay.config import load

    root, conf = avro_dump
    option = to_option(load_topics(load(str(conf))["topics"]))
    df = (
        spark.read.format("kafka-segments")
        .option("table", "records")
        .option("avro", option)
        .load(str(root))
    )
    assert {"decoded", "decode_error"} <= set(df.columns)
    _check([r.asDict() for r in df.orderBy("topic", "offset").collect()])

    out = tmp_path / "decoded"
    assert main(["decode", str(root), "--out", str(out), "--conf", str(conf),
                 "--tables", "records", "segments", "--run-id", "avro"]) == 0  # fmt: skip
    rows = spark.read.parquet(str(out / "records")).orderBy("topic", "offset").collect()
    _check([r.asDict() for r in rows])
    # the gate counts the undecodable payloads and names them
    assert main(["gate", str(out), "--set", "gate.data_docs=false"]) == 1
    result = json.loads((out / "gate" / "result.json").read_text())
    (failure,) = result["failures"]
    assert failure["table"] == "records" and failure["unexpected_count"] == 3
