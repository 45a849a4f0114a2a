"""`spark.read.format("kafka-segments")` and `logreplay decode` against the decoders."""

from __future__ import annotations

import json
import os

import pyarrow.compute as pc
import pytest
from spark_submit import spark_submit

import decoders

pytestmark = pytest.mark.spark

SUBSET = [
    "dschne27__kafka-streams",
    "xpxwo100__bullShit",
    "NOVA-RICS-Open-Lab__agentic-data-pipelines",
    "seanorth__kafka-server",
]


def _read(spark, table, paths, **options):
    r = (
        spark.read.format("kafka-segments")
        .option("table", table)
        .option("paths", json.dumps([str(p) for p in paths]))
    )
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


@pytest.fixture(scope="session")
def subset(corpus):
    return [corpus / name for name in SUBSET]


@pytest.fixture(scope="session")
def subset_tables(subset):
    return decoders.read_dump([str(p) for p in subset], list(decoders.TABLES))


@pytest.mark.parametrize("table", list(decoders.TABLES))
def test_every_table_equals_the_decoders(spark, subset, subset_tables, table):
    df = _read(spark, table, subset)
    want = subset_tables[table]
    assert df.count() == want.num_rows
    if table in ("batches", "records"):
        agg = df.agg({"offset" if table == "records" else "last_offset": "sum"}).collect()[0][0]
        col = "offset" if table == "records" else "last_offset"
        assert agg == pc.sum(want[col]).as_py()
    if table == "records":
        from pyspark.sql import functions as F

        got = df.agg(
            F.sum(F.length("value")), F.sum(F.length("key")), F.sum(F.size("headers"))
        ).collect()[0]
        assert got[0] == pc.sum(pc.binary_length(want["value"])).as_py()
        assert got[1] == pc.sum(pc.binary_length(want["key"])).as_py()
        assert got[2] == pc.sum(pc.list_value_length(want["headers"])).as_py()
        sample = (
            df.where("topic = '_confluent-ksql-agentic_ksql__command_topic'")
            .orderBy("offset")
            .collect()
        )
        local = want.filter(
            pc.equal(want["topic"], "_confluent-ksql-agentic_ksql__command_topic")
        ).sort_by("offset")
        assert [(r.offset, r.key, r.value) for r in sample] == list(
            zip(
                local["offset"].to_pylist(),
                local["key"].to_pylist(),
                local["value"].to_pylist(),
                strict=True,
            )
        )
        assert sample[0].timestamp.timestamp() * 1000 == local["timestamp"][0].value
    if table == "txn_log":
        assert sorted(r.state for r in df.select("state").collect()) == sorted(
            want["state"].to_pylist()
        )


def test_topic_and_partition_filters(spark, subset):
    base = _read(spark, "records", subset)
    by_option = _read(
        spark, "records", subset, topics="_confluent-metrics", partitions="0,1"
    ).count()
    by_where = base.where("topic = '_confluent-metrics' AND partition IN (0, 1)").count()
    assert by_option == by_where == 139 + 140  # MANIFEST: _confluent-metrics-0 and -1


def test_columns_option_gives_those_columns_of_the_same_rows(spark, subset, subset_tables):
    """`.option("columns", ...)`: the table has only those columns, in that order, and their
    values are those of the full table (key and value left out are never built)."""
    got = _read(spark, "records", subset, columns="topic, offset,timestamp")
    assert got.columns == ["topic", "offset", "timestamp"]
    full = _read(spark, "records", subset).select("topic", "offset", "timestamp")
    assert got.exceptAll(full).count() == 0 and full.exceptAll(got).count() == 0
    assert got.count() == subset_tables["records"].num_rows
    keyed = _read(spark, "records", subset, columns="key,partition").agg({"key": "count"})
    assert keyed.collect()[0][0] == pc.count(subset_tables["records"]["key"]).as_py()
    batches = _read(spark, "batches", subset, columns="last_offset")
    assert batches.columns == ["last_offset"]
    assert batches.count() == subset_tables["batches"].num_rows
    with pytest.raises(Exception, match="unknown column"):
        _read(spark, "records", subset, columns="offset,nope").columns  # noqa: B018


def test_offset_commit_filters_are_not_mistaken_for_file_filters(spark, subset):
    df = _read(spark, "offset_commits", subset)
    assert df.where("topic = '_confluent-metrics' AND partition = 3").count() > 0


def test_corrupt_replica_gives_error_rows_and_the_read_succeeds(spark, sample_dump):
    out, facts = sample_dump
    errors = _read(spark, "errors", [out]).orderBy("position").collect()
    assert [(e.kind, e.position) for e in errors] == [
        ("crc_mismatch", facts["damaged"]["crc_position"]),
        ("truncated_batch", facts["damaged"]["torn_position"]),
    ]
    assert (
        _read(spark, "records", [out], topics="orders", partitions="1")
        .where("broker = '2'")
        .count()
        > 0
    )


def test_ranges_give_the_same_rows(spark, corpus):
    path = [corpus / "dipendrasaini__kafka-learnning-series"]
    one = _read(spark, "records", path)
    many = _read(spark, "records", path, range_bytes=150_000)
    assert many.rdd.getNumPartitions() > one.rdd.getNumPartitions() * 3
    assert one.count() == many.count() == 500_000
    assert one.exceptAll(many).count() == 0


def test_uri_paths(spark, corpus):
    root = corpus / "seanorth__kafka-server"
    assert (
        _read(spark, "records", [f"file://{root}"]).count()
        == _read(spark, "records", [root]).count()
        > 0
    )


def test_decode_job_writes_and_reruns_idempotently(spark, sample_dump, tmp_path):
    from jobs.cli import main

    out, _ = sample_dump
    dest = tmp_path / "decoded"
    args = [
        "decode",
        str(out),
        "--out",
        str(dest),
        "--tables",
        "segments",
        "errors",
        "batches",
        "records",
        "txn_log",
    ]
    assert main(args) == 0
    first = json.loads((dest / "_manifest.json").read_text())
    records_first = spark.read.parquet(str(dest / "records"))
    snapshot = records_first.collect()
    assert main(args) == 0
    second = json.loads((dest / "_manifest.json").read_text())
    assert first["rows"] == second["rows"] and first["run_id"] != second["run_id"]
    assert second["rows"]["records"] == len(snapshot) > 200
    assert second["bytes"]["corrupt"] > 0 and second["bytes"]["padding"] > 0
    assert (
        second["bytes"]["valid"] + second["bytes"]["padding"] + second["bytes"]["corrupt"]
        == second["bytes"]["size"]
    )
    again = spark.read.parquet(str(dest / "records"))
    assert (
        again.count() == len(snapshot)
        and again.exceptAll(spark.createDataFrame(snapshot, again.schema)).count() == 0
    )
    assert sorted(os.listdir(dest)) == sorted(
        ["_manifest.json", "segments", "errors", "batches", "records", "txn_log"]
    )
    assert {
        p.split("=")[0] for p in os.listdir(dest / "records") if not p.startswith(("_", "."))
    } == {"topic"}


def test_decode_job_usage_errors(tmp_path):
    from jobs.cli import main

    assert main(["decode", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert main(["decode", str(tmp_path), "--out", str(tmp_path / "o"), "--tables", "nope"]) == 2


def test_spark_submit_runs_the_same_job(sample_dump, tmp_path):
    """`spark-submit jobs/decode.py` with an explicit master, as a cluster would run it."""
    out, _ = sample_dump
    res = spark_submit("decode.py", str(out), "--out", str(tmp_path / "o"), "--tables", "batches")
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["rows"]["batches"] == 70
