"""The Spark session of a job: embedded defaults from conf/default.yaml, a master from the
command line (or spark-submit), and the kafka-segments source registered."""

from __future__ import annotations

import os
import pathlib
import sys

import yaml

DEFAULT_CONF = pathlib.Path(__file__).resolve().parents[1] / "conf" / "default.yaml"


def load_defaults(path: pathlib.Path = DEFAULT_CONF) -> dict:
    with open(path) as f:
        return yaml.safe_load(f) or {}


def spark_session(master: str | None = None, app_name: str | None = None):
    """getOrCreate a session. Under spark-submit the submitted master wins; in a plain Python
    process the embedded default (local mode) applies unless `master` is given."""
    from pyspark.sql import SparkSession

    conf = load_defaults().get("spark", {})
    # Python workers must import this project: run them with this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name or conf.get("app_name", "logreplay"))
    submitted = (
        os.environ.get("SPARK_ENV_LOADED") == "1"
    )  # exported by spark-submit's launcher scripts
    if master or not submitted:
        builder = builder.master(master or conf.get("master", "local[2]"))
    for key, value in (conf.get("config") or {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    from decoders.spark import register

    register(spark)
    return spark
