"""`logreplay synth`: write a simulated dump with its ground truth (truth.json)."""

from __future__ import annotations

import os
import time

from rich.console import Console
from rich.table import Table


def add_arguments(p) -> None:
    from simulator import SCENARIOS

    p.add_argument(
        "--scenario",
        required=True,
        help=f"all, or one of: {', '.join(SCENARIOS)} (production_day*: a production-shaped "
        "cluster with its own clocks per machine, Streams-style EOS apps, compaction, "
        "copies taken at different moments; _faults adds anomalies, _logs_only keeps only "
        ".log files)",
    )
    p.add_argument("--out", required=True, help="directory to write (replaced)")
    from jobs.progress import add_quiet

    add_quiet(p)
    p.add_argument("--seed", type=int, default=0, help="same seed, same bytes")
    p.add_argument(
        "--scale",
        type=float,
        default=0.0,
        help="background volume: about 8 MiB per unit per scenario (grows linearly)",
    )


def run(args) -> int:
    from jobs.exits import OK, USAGE
    from simulator import SCENARIOS, synth

    console = Console(stderr=True)
    if args.scenario != "all" and args.scenario not in SCENARIOS:
        console.print(
            f"logreplay synth: unknown scenario {args.scenario!r}; "
            f"known: all, {', '.join(SCENARIOS)}"
        )
        return USAGE
    if args.scale < 0:
        console.print("logreplay synth: --scale must be >= 0")
        return USAGE
    started = time.perf_counter()
    from jobs import progress

    progress.phase(f"simulating {args.scenario}")
    truths = synth(args.scenario, args.out, args.seed, args.scale)
    progress.phase("measuring")
    elapsed = time.perf_counter() - started
    size = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(args.out) for f in files
    )
    table = Table(title=f"{args.out}: {size / 1e6:.1f} MB in {elapsed:.1f} s")
    for col in ("scenario", "kind", "severity", "where", "records"):
        table.add_column(col)
    for t in truths:
        if not t.anomalies:
            table.add_row(t.scenario, "(clean)", "", "", "")
        for a in t.anomalies:
            where = " ".join(
                str(x)
                for x in (
                    f"{a.topic}-{a.partition}" if a.topic else None,
                    f"pid={a.producer_id}" if a.producer_id is not None else None,
                    f"group={a.group_id}" if a.group_id else None,
                    f"@{a.first_offset}" if a.first_offset is not None else None,
                )
                if x
            )
            table.add_row(t.scenario, a.kind, a.severity, where, str(a.record_count or ""))
    console.print(table)
    return OK


def main(argv: list[str] | None = None) -> int:
    from jobs.exits import job_main

    return job_main("synth", __doc__, add_arguments, run, argv)


if __name__ == "__main__":  # spark-submit jobs/synth.py --scenario NAME --out DIR (no Spark used)
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jobs.exits import ended

    sys.exit(ended(main()))
