"""Daily exactly-once audit of a Kafka dump, then the data-quality gate.

Each run audits the day's dump into a run-specific directory (`<out_root>/<ds>`), with
Airflow's run id and logical date passed on: a retry or a backfill of the same date reruns the
same command, and the job swaps its output in atomically, so it replaces rather than
duplicates. Each audit builds on the latest earlier day's committed output (`--since auto`):
its `findings_history` tells new findings from those an earlier day had, and the gate fails on
new ones (`gate.on`). The gate task fails (exit 1) when the policy's findings or a data
expectation fail, which stops everything downstream; `summary.json` in the run directory
carries the verdict.

Params (defaults below; override them per run or in a copy of this file): `dump_root` (where
each day's dump lands as `<dump_root>/<ds>`, a path or an s3:// / hdfs:// URI), `out_root`
(output root), `conf` (a YAML file laid over the defaults) and `package` (the project as the
executors get it: the archive `./dev package` builds, passed with `--py-files`; default
`$LOGREPLAY_PACKAGE`, else `dist/logreplay.zip` of the checkout). `LOGREPLAY_HOME` is a
checkout of this project where the tasks run spark-submit (default: the one holding this file):
the drivers run its job files, the executors import only the shipped package.

The Spark connection `spark_default` names the master, e.g. the environment variable
`AIRFLOW_CONN_SPARK_DEFAULT='spark://HOST:7077?deploy-mode=client&spark-binary=spark-submit'`
with `spark-submit` on the PATH; settings of the cluster (the executors' Python, memory,
S3 variables as `spark.executorEnv.*`) belong in `$SPARK_CONF_DIR/spark-defaults.conf`.
"""

from __future__ import annotations

import os

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

HOME = os.environ.get(
    "LOGREPLAY_HOME", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)

RUN = [
    "--run-id", "{{ run_id }}",
    "--logical-date", "{{ ds }}",
    "--conf", "{{ params.conf }}",
]  # fmt: skip
OUT = "{{ params.out_root }}/{{ ds }}"

with DAG(
    dag_id="logreplay_daily_audit",
    description="Replay yesterday's Kafka dump: exactly-once findings, then the gate",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": pendulum.duration(minutes=5)},
    params={
        "dump_root": "/data/kafka-dumps",
        "out_root": "/data/logreplay",
        "conf": HOME + "/conf/default.yaml",
        "package": os.environ.get("LOGREPLAY_PACKAGE", HOME + "/dist/logreplay.zip"),
    },
    tags=["kafka", "exactly-once", "data-quality"],
) as dag:
    audit = SparkSubmitOperator(
        task_id="audit",
        conn_id="spark_default",
        application=HOME + "/jobs/audit.py",
        py_files="{{ params.package }}",
        name="logreplay-audit-{{ ds_nodash }}",
        # the findings' memory: the latest earlier day's committed output beside this one
        application_args=["{{ params.dump_root }}/{{ ds }}", "--out", OUT, "--since", "auto", *RUN],
    )
    gate = SparkSubmitOperator(
        task_id="gate",
        conn_id="spark_default",
        application=HOME + "/jobs/gate.py",
        py_files="{{ params.package }}",
        name="logreplay-gate-{{ ds_nodash }}",
        application_args=[OUT, *RUN],
        retries=0,  # a failed gate is a verdict, not a flake
    )
    audit >> gate
