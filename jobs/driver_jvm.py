"""The driver JVM's own facts (its process id, ``java.home``, ``java.class.path``), asked of
the JVM over PySpark's py4j gateway.

Why: the class-data archive (jobs.jvm_archive) is written by the claiming session's JVM as it
exits, and is then checked by a probe JVM of the same Java and class path; so the claim must
record which process will write it, and that process's Java and class path. Only the JVM knows
them, and PySpark has no public way to ask it anything: its py4j view of the JVM is private
(``SparkContext._jvm``). Spark's configuration holds none of the three, and the JVM's
``java.lang.management`` and ``ProcessHandle`` are reachable only through py4j.

This module is the one place that reaches it. A PySpark release that renames or drops it makes
:func:`driver_jvm` raise, and tests/test_jvm_archive.py fail, rather than the archive silently
never being made (its caller treats any failure as "no archive"). Checked against PySpark
4.3.0 with py4j 0.10.9.9.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DriverJvm:
    pid: int
    java_home: str
    class_path: str


def driver_jvm(spark: Any) -> DriverJvm:
    """The facts of the JVM behind ``spark`` (a classic session: Spark Connect has no JVM
    here). Raises whatever a missing gateway raises."""
    jvm = spark.sparkContext._jvm  # PySpark's private py4j JVMView
    system = jvm.java.lang.System
    return DriverJvm(
        pid=int(jvm.java.lang.ProcessHandle.current().pid()),
        java_home=str(system.getProperty("java.home")),
        class_path=str(system.getProperty("java.class.path")),
    )


def loaded_classes(spark: Any) -> int:
    """How many classes the JVM behind ``spark`` holds loaded now (its class-loading MXBean):
    what a class-data archive made from it would hold (jobs.jvm_archive)."""
    jvm = spark.sparkContext._jvm
    return int(
        jvm.java.lang.management.ManagementFactory.getClassLoadingMXBean().getLoadedClassCount()
    )
