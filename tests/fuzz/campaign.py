"""A long fuzzing campaign: ``./dev fuzz --minutes N --seed S [--engine mutate|atheris]``.

``mutate`` (default) draws structure-aware mutations of the seeds (tests.fuzz.mutators) on two
worker processes; ``atheris`` runs libFuzzer's coverage-guided loop over Python code with the
same mutators as its custom mutator (coverage sees only Python: the numba kernels are reached
through the structure-aware mutations). Every new failure signature is minimised and written
to tests/fuzz/regressions/, which the suite replays; once it is fixed, ``python -m
tests.fuzz.known --witness`` records what the fixed decoder makes of it, which the replay checks
too (tests/fuzz/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tests.fuzz import checks, mutators, runner

TOPICS = ("t", "__consumer_offsets", "__transaction_state")


def _report(stats: runner.Stats, engine: str, found: dict) -> None:
    print(
        json.dumps(
            {
                "engine": engine,
                "inputs": stats.inputs,
                "seconds": round(stats.seconds, 1),
                "inputs_per_class": dict(sorted(stats.by_class.items())),
                "worst_seconds_per_mb": {k: round(v, 3) for k, v in stats.worst_s_per_mb.items()},
                "failures": found,
            },
            indent=1,
        )
    )


def mutate_campaign(minutes: float, seed: int, workers: int) -> int:
    total = runner.Stats()
    found: dict[str, str] = {}
    first, end = 0, time.time() + minutes * 60
    block = 2000
    while time.time() < end:
        st = runner.run(seed, block, end - time.time(), workers=workers, first=first)
        first += block
        total.merge(st)
        total.seconds += st.seconds
        for sig, (i, detail) in st.failures.items():
            if sig in found:
                continue
            case = runner.minimise(runner.make(seed, i), sig)
            path = runner.save_regression(case, sig)
            found[sig] = f"input {i}: {detail} -> {path.name} ({len(case.data)} bytes)"
            print(f"new failure {sig}: {path}", file=sys.stderr)
    _report(total, "mutate", found)
    return 1 if found else 0


def atheris_campaign(minutes: float, seed: int) -> int:
    import random

    import atheris

    pool = runner.pool(seed)
    kinds = sorted({c.kind for c in pool})
    found: dict[str, str] = {}
    stats = runner.Stats()
    t0 = time.time()

    def decode_input(data: bytes) -> mutators.Case:
        kind = kinds[data[0] % len(kinds)] if data else "log"
        topic = TOPICS[data[1] % 3] if len(data) > 1 else "t"
        return mutators.Case(bytes(data[2:]), kind, topic, "atheris")

    def custom_mutator(data: bytes, max_size: int, rng_seed: int) -> bytes:
        rng = random.Random(rng_seed)
        fresh = len(data) < 3 or rng.random() < 0.05
        base = rng.choice(pool) if fresh else decode_input(data)
        if rng.random() < 0.3:
            out = atheris.Mutate(base.data, max(max_size - 2, 1))
        else:
            out = mutators.mutate(rng, base, pool).data
        topic = TOPICS.index(base.topic) if base.topic in TOPICS else 0
        return (bytes([kinds.index(base.kind), topic]) + out)[:max_size]

    def one(data: bytes) -> None:
        case = decode_input(data)
        stats.inputs += 1
        stats.by_class[case.kind] += 1
        try:
            checks.check(case)
        except checks.Failure as f:
            if f.signature not in found:
                case = runner.minimise(case, f.signature)
                path = runner.save_regression(case, f.signature)
                found[f.signature] = f"{f} -> {path.name}"
                print(f"new failure {f.signature}: {path}", file=sys.stderr)
        if time.time() - t0 > minutes * 60:  # report and leave (libFuzzer would skip atexit)
            stats.seconds = time.time() - t0
            _report(stats, "atheris", found)
            sys.stdout.flush()
            os._exit(1 if found else 0)

    with atheris.instrument_imports():
        import decoders  # noqa: F401 - instrumented for coverage

    atheris.Setup(
        [
            sys.argv[0],
            f"-seed={seed}",
            "-max_len=262144",
            "-rss_limit_mb=4096",
            f"-artifact_prefix={runner.REGRESSIONS}/atheris-",
        ],
        one,
        custom_mutator=custom_mutator,
    )
    atheris.Fuzz()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="./dev fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--engine", choices=("mutate", "atheris"), default="mutate")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    if args.engine == "atheris":
        return atheris_campaign(args.minutes, args.seed)
    return mutate_campaign(args.minutes, args.seed, args.workers)


if __name__ == "__main__":
    sys.exit(main())
