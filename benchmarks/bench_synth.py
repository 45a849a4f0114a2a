"""Simulator output rate: MB of dump written per CPU second (target >= 50 MB/s per core).

Usage: python benchmarks/bench_synth.py [--scale 64] [--scenario clean_idempotent]
Writes under benchmarks/data/ (git-ignored) and prints wall and CPU rates.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator import synth  # noqa: E402


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=64)
    ap.add_argument("--scenario", default="clean_idempotent")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "data", "synth"))
    args = ap.parse_args()
    wall, cpu = time.perf_counter(), cpu_seconds()
    synth(args.scenario, args.out, seed=1, scale=args.scale)
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(args.out) for f in fs)
    print(
        f"{args.scenario} --scale {args.scale:g}: {size / 1e6:.0f} MB in {wall:.1f} s wall, "
        f"{cpu:.1f} s CPU = {size / 1e6 / cpu:.0f} MB/s per core ({size / 1e6 / wall:.0f} MB/s wall)"
    )
    shutil.rmtree(args.out)


if __name__ == "__main__":
    main()
