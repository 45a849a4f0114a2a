"""Run many fuzzed inputs, deterministically from a seed, in a few worker processes.

Input i is made from ``random.Random(f"{seed}:{i}")``: the same seed gives the same inputs
whatever the number of workers, and a failure names the input that reproduces it.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import multiprocessing
import pathlib
import random
import time

from tests.fuzz import checks, mutators

REGRESSIONS = pathlib.Path(__file__).resolve().parent / "regressions"
CORPUS = pathlib.Path(__file__).resolve().parents[3] / "shared" / "corpus" / "real"

_POOL: list[mutators.Case] = []


def pool(seed: int) -> list[mutators.Case]:
    """The seeds, each checked once (which also compiles every kernel before timing starts)."""
    if not _POOL:
        _POOL.extend(mutators.seeds(CORPUS, per_kind=20, rng_seed=seed))
        for case in _POOL:
            checks.check(case)
    return _POOL


def make(seed: int, i: int) -> mutators.Case:
    cases = pool(seed)
    rng = random.Random(f"{seed}:{i}")
    return mutators.mutate(rng, rng.choice(cases), cases)


@dataclasses.dataclass
class Stats:
    inputs: int = 0
    seconds: float = 0.0
    by_class: dict = dataclasses.field(default_factory=lambda: collections.Counter())
    worst_s_per_mb: dict = dataclasses.field(default_factory=dict)
    failures: dict = dataclasses.field(default_factory=dict)  # signature -> (index, detail)

    def merge(self, other: Stats) -> None:
        self.inputs += other.inputs
        self.by_class.update(other.by_class)
        for k, v in other.worst_s_per_mb.items():
            self.worst_s_per_mb[k] = max(v, self.worst_s_per_mb.get(k, 0.0))
        for k, v in other.failures.items():
            self.failures.setdefault(k, v)


def _work(args) -> Stats:
    seed, start, stop, step, deadline = args
    st = Stats()
    for i in range(start, stop, step):
        if deadline and time.time() > deadline:
            break
        case = make(seed, i)
        cls = f"{case.kind}:{case.origin.split(':', 1)[-1].split('+')[0]}"
        t = time.perf_counter()
        try:
            checks.check(case)
        except checks.Failure as f:
            st.failures.setdefault(f.signature, (i, str(f)))
        dt = time.perf_counter() - t
        st.inputs += 1
        st.by_class[cls] += 1
        st.worst_s_per_mb[f"{case.kind} (s per input)"] = max(
            st.worst_s_per_mb.get(f"{case.kind} (s per input)", 0.0), dt
        )
        if len(case.data) >= 64 * 1024:  # per MB only where the size, not call overhead, counts
            key = f"{case.kind} (s per MB)"
            st.worst_s_per_mb[key] = max(st.worst_s_per_mb.get(key, 0.0), dt * 1e6 / len(case.data))
    return st


def run(seed: int, count: int | None, seconds: float | None, workers: int = 2, first: int = 0):
    """Check inputs first..first+count (or until ``seconds`` pass) with ``workers`` processes."""
    pool(seed)  # built once, inherited by the forked workers
    t = time.time()
    deadline = t + seconds if seconds else None
    stop = first + count if count else 1 << 62
    jobs = [(seed, first + k, stop, workers, deadline) for k in range(workers)]
    total = Stats()
    if workers == 1:
        total.merge(_work(jobs[0]))
    else:
        with multiprocessing.get_context("fork").Pool(workers) as p:
            for st in p.map(_work, jobs):
                total.merge(st)
    total.seconds = time.time() - t
    return total


def save_regression(case: mutators.Case, signature: str) -> pathlib.Path:
    """Write a failing input (and where it sits) for the suite to replay."""
    import hashlib

    REGRESSIONS.mkdir(exist_ok=True)
    slug = "".join(c if c.isalnum() else "_" for c in signature)[:60]
    name = f"{slug}-{hashlib.sha256(case.data).hexdigest()[:10]}"
    path = REGRESSIONS / f"{name}.bin"
    path.write_bytes(case.data)
    meta = {"kind": case.kind, "topic": case.topic, "signature": signature, "origin": case.origin}
    (REGRESSIONS / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    return path


def regressions() -> list[mutators.Case]:
    out = []
    for meta_path in sorted(REGRESSIONS.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        data = meta_path.with_suffix(".bin").read_bytes()
        out.append(mutators.Case(data, meta["kind"], meta["topic"], meta_path.stem))
    return out


def minimise(case: mutators.Case, signature: str, budget_s: float = 30.0) -> mutators.Case:
    """Shrink a failing input while it fails the same way: cut halves, then smaller pieces."""

    def fails(data: bytes) -> bool:
        try:
            checks.check(dataclasses.replace(case, data=data))
        except checks.Failure as f:
            return f.signature == signature
        return False

    data = case.data
    end = time.time() + budget_s
    chunk = max(1, len(data) // 2)
    while chunk >= 1 and time.time() < end:
        i, shrunk = 0, False
        while i < len(data) and time.time() < end:
            cand = data[:i] + data[i + chunk :]
            if cand != data and fails(cand):
                data, shrunk = cand, True
            else:
                i += chunk
        if not shrunk:
            chunk //= 2
    return dataclasses.replace(case, data=data)
