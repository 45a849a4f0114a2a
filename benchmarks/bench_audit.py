"""Audit wall time on simulated dumps of growing size (target: <= 60 s for 1 GB on 2 cores,
Spark start-up included, cost linear in size).

Usage: python benchmarks/bench_audit.py [--scales 128 512] [--scenario demo]
Each scale unit adds about 8 MiB; dumps go under benchmarks/data/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from simulator import synth  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", type=float, nargs="+", default=[128, 512])
    ap.add_argument("--scenario", default="demo")
    args = ap.parse_args()
    exe = os.path.join(os.path.dirname(sys.executable), "logreplay")
    for scale in args.scales:
        dump = os.path.join(HERE, "data", f"audit-{args.scenario}-{scale:g}")
        out = dump + "-out"
        synth(args.scenario, dump, seed=1, scale=scale)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(dump) for f in fs)
        started = time.perf_counter()
        res = subprocess.run([exe, "audit", dump, "--out", out], capture_output=True, text=True)
        wall = time.perf_counter() - started
        if res.returncode != 0:
            print(res.stderr[-3000:])
            raise SystemExit(res.returncode)
        summary = json.loads(res.stdout.strip().splitlines()[-1])
        print(
            f"{args.scenario} scale {scale:g}: {size / 1e9:.2f} GB audited in {wall:.1f} s wall "
            f"({size / 1e6 / wall:.0f} MB/s), {summary['findings']['total']} findings"
        )
        shutil.rmtree(dump)
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
