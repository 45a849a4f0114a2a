"""The scenario simulator: a small broker model that writes broker-faithful dumps with truth.

:func:`synth` writes one scenario (or all of them) and its ``truth.json``; see
:mod:`simulator.scenarios` for what each scenario holds.
"""

from __future__ import annotations

import json
import os

from simulator.cluster import CLOSED, SCENARIO_CLUSTER_ID, cluster_id_for
from simulator.scenarios import CLEAN, SCENARIOS
from simulator.truth import Truth

# scenarios whose truth lists no anomaly: the clean feature scenarios and the healthy
# production days
HEALTHY = [*CLEAN, "production_day", "production_day_logs_only", "long_lived_producer",
           "production_layouts", "production_compacted"]  # fmt: skip

__all__ = ["CLEAN", "HEALTHY", "SCENARIOS", "synth"]


def synth(name: str, out: str, seed: int = 0, scale: float = 0.0,
          workers: int | None = None) -> list[Truth]:  # fmt: skip
    """Write scenario ``name`` (or ``all``: each under ``out/<scenario>/``) and truth.json.
    ``all`` writes its scenarios in ``workers`` processes (default: one per core, at most
    one per scenario): each is its own seeded simulation, so the bytes are the same however
    many write them."""
    if name != "all" and name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: all, {', '.join(SCENARIOS)}")
    if name != "all":
        return [_scenario(name, out, seed, scale)]
    names = list(SCENARIOS)
    workers = min(len(names), workers or os.cpu_count() or 1)
    jobs = [(n, os.path.join(out, n), seed, scale) for n in names]
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawned, not forked: the caller may hold threads (a test's Spark gateway, numba)
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
            truths = list(pool.map(_scenario, *zip(*jobs, strict=True)))
    else:
        truths = [_scenario(*job) for job in jobs]
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump({"scenarios": [t.to_json() for t in truths]}, f, indent=2)
        f.write("\n")
    return truths


def _scenario(name: str, where: str, seed: int, scale: float) -> Truth:
    """One scenario written under ``where`` with its truth.json."""
    CLOSED.clear()
    token = SCENARIO_CLUSTER_ID.set(cluster_id_for(name))
    try:
        truth = SCENARIOS[name](where, seed, scale)
    finally:
        SCENARIO_CLUSTER_ID.reset(token)
    if CLOSED:
        truth.describe(*CLOSED)
    truth.write(os.path.join(where, "truth.json"))
    return truth
