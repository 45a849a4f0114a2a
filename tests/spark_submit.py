"""Run a job file of jobs/ under Spark's own spark-submit, as a cluster would."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spark_submit(job: str, *args: str, master: str = "local[1]") -> subprocess.CompletedProcess:
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    env = dict(os.environ, SPARK_HOME=home, PYSPARK_PYTHON=sys.executable)
    submit = os.path.join(home, "bin", "spark-submit")
    return subprocess.run(
        [submit, "--master", master, os.path.join(REPO, "jobs", job), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
