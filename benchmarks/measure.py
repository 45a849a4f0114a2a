"""Wall time, CPU seconds and peak RSS of a command and every process it starts (Linux /proc).

Spark's driver JVM, the Python driver and the Python workers are all descendants of the command:
a sampler thread walks the process tree every 0.1 s and keeps, per process, its CPU time and the
kernel's own peak RSS (``VmHWM``), so a peak between two samples is not missed; only the CPU of
a process living less than one sampling period can be.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field

TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Proc:
    role: str
    cpu: float = 0.0
    peak_rss: int = 0


@dataclass
class Measured:
    wall: float
    returncode: int
    stdout: str
    stderr: str
    procs: dict[int, Proc] = field(default_factory=dict)

    @property
    def cpu(self) -> float:
        return sum(p.cpu for p in self.procs.values())

    def peak(self, role: str) -> int:
        return max((p.peak_rss for p in self.procs.values() if p.role == role), default=0)


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def _role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ")
    except OSError:
        return "other"
    if cmd.split(b" ")[0].endswith(b"/java") or b"org.apache.spark" in cmd:
        return "jvm"
    if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
        return "python_worker"
    return "python_driver" if b"python" in cmd or b"logreplay" in cmd else "other"


def _sample(root: int, procs: dict[int, Proc]) -> None:
    kids = _children()
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/status") as f:
                hwm = next((int(x.split()[1]) for x in f if x.startswith("VmHWM")), 0)
        except (OSError, StopIteration):
            continue
        p = procs.setdefault(pid, Proc("other"))
        p.role = _role(pid)  # each time: a launcher script exec()s the JVM under the same pid
        p.cpu = max(p.cpu, (int(fields[11]) + int(fields[12])) / TICK)
        p.peak_rss = max(p.peak_rss, hwm << 10)


def run(cmd: list[str], env: dict | None = None) -> Measured:
    """Run ``cmd`` to completion, measuring it and its descendants."""
    procs: dict[int, Proc] = {}
    started = time.perf_counter()
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as child:
        done = threading.Event()

        def sampler() -> None:
            while not done.is_set():
                _sample(child.pid, procs)
                done.wait(0.1)

        t = threading.Thread(target=sampler, daemon=True)
        t.start()
        out, err = child.communicate()
        done.set()
        t.join()
    return Measured(time.perf_counter() - started, child.returncode, out, err, procs)
