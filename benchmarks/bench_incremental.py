"""The cost of a scheduled audit that goes on from the day before (docs/incremental.md).

A production-shaped dump (benchmarks/prodshape.py) of ``--days + 1`` days' traffic is copied as
it stood at the end of each day (every partition's log cut at the same share of its batches,
as a day's traffic spreads over every partition); then, in one run on the same machine:

- **one day, full**: the first day's copy audited in full (a dump of one day's size);
- **week, full**: the copy holding ``--days`` days audited in full (what every daily run would
  cost without a previous run to go on from);
- **week + 1, incremental**: the next day's copy audited with ``--since`` the week's output:
  it reads only the day's new bytes and hands on the week's rows;
- with ``--fewer-days K``, also the copy of K days audited in full and the next day's going
  on from it: an incremental run carrying K days against one carrying ``--days`` (does its
  memory grow with the days carried?).

Each run is `python -m jobs.cli audit` measured with its descendants (benchmarks/measure.py):
wall and CPU seconds, bytes read (``summary.json``'s ``bytes_read``), peak RSS of the driver
(JVM and Python) and of the largest Python worker. Usage:

    .venv/bin/python benchmarks/bench_incremental.py --gb-per-day 1.0 --days 7
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import measure  # noqa: E402
import prodshape  # noqa: E402


def day_copies(whole: str, out: str, days: int) -> list[str]:
    """The copies of ``whole`` at the end of each of ``days`` days: each partition's log cut at
    day/days of its batches (tests/daily_copies.py: hard links but for the cut segment; later
    segments, the cut segment's indexes and later snapshots not there yet)."""
    from tests.daily_copies import daily_copies

    done = os.path.join(out, ".complete")
    roots = [os.path.join(out, f"day-{day}") for day in range(1, days + 1)]
    if not os.path.exists(done):
        shutil.rmtree(out, ignore_errors=True)
        shares = tuple(day / days for day in range(1, days + 1))
        daily_copies([Path(whole)], Path(out), days, shares=shares)
        open(done, "w").close()
    return roots


def audit(dump: str, out: str, *extra: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    m = measure.run([sys.executable, "-m", "jobs.cli", "audit", dump, "--out", out, "--quiet",
                     *extra], env)  # fmt: skip
    if m.returncode not in (0, 1):
        print(m.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"audit of {dump} failed ({m.returncode})")
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    return {
        "wall": m.wall, "cpu": m.cpu, "bytes": summary["bytes"],
        "bytes_read": summary["bytes_read"], "findings": summary["rows"]["findings"],
        "driver": m.peak("jvm") + m.peak("python_driver"), "worker": m.peak("python_worker"),
        "since": summary.get("since_points"),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gb-per-day", type=float, default=0.15)
    p.add_argument("--days", type=int, default=7)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--scratch", default=os.path.join(ROOT, "benchmarks", "data", "incremental"))
    p.add_argument("--fewer-days", type=int, default=None,
                   help="also K days in full and day K+1 going on from them")  # fmt: skip
    args = p.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    whole = os.path.join(args.scratch, "whole")
    if not os.path.exists(whole + ".complete"):
        print(f"generating {whole}", file=sys.stderr)
        prodshape.generate(whole, args.gb_per_day * (args.days + 1), seed=args.seed)
        open(whole + ".complete", "w").close()
    roots = day_copies(whole, os.path.join(args.scratch, "copies"), args.days + 1)
    outs = os.path.join(args.scratch, "out")
    runs = {
        "one day, full": audit(roots[0], os.path.join(outs, "one")),
        f"{args.days} days, full": audit(roots[args.days - 1], os.path.join(outs, "week")),
    }
    runs[f"day {args.days + 1}, incremental"] = audit(
        roots[args.days], os.path.join(outs, "next"), "--since", os.path.join(outs, "week")
    )
    k = args.fewer_days
    if k:
        runs[f"{k} days, full"] = audit(roots[k - 1], os.path.join(outs, f"days-{k}"))
        runs[f"day {k + 1}, incremental"] = audit(
            roots[k], os.path.join(outs, f"next-{k}"), "--since", os.path.join(outs, f"days-{k}")
        )
    print("| run | dump MB | read MB | wall s | CPU s | driver MB | largest worker MB | findings |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in runs.items():
        print(f"| {name} | {r['bytes'] / 1e6:,.0f} | {r['bytes_read'] / 1e6:,.0f} | "
              f"{r['wall']:.1f} | {r['cpu']:.1f} | {r['driver'] / 2**20:,.0f} | "
              f"{r['worker'] / 2**20:,.0f} | {r['findings']} |")  # fmt: skip
    one, inc = runs["one day, full"], runs[f"day {args.days + 1}, incremental"]
    print(
        f"\nincremental / one day full: wall {inc['wall'] / one['wall']:.2f}x, "
        f"CPU {inc['cpu'] / one['cpu']:.2f}x (target: 1.25x)"
    )


if __name__ == "__main__":
    main()
