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


def synth(name: str, out: str, seed: int = 0, scale: float = 0.0) -> list[Truth]:
    """Write scenario ``name`` (or ``all``: each under ``out/<scenario>/``) and truth.json."""
    if name != "all" and name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: all, {', '.join(SCENARIOS)}")
    names = list(SCENARIOS) if name == "all" else [name]
    truths = []
    for n in names:
        where = os.path.join(out, n) if name == "all" else out
        CLOSED.clear()
        token = SCENARIO_CLUSTER_ID.set(cluster_id_for(n))
        try:
            truth = SCENARIOS[n](where, seed, scale)
        finally:
            SCENARIO_CLUSTER_ID.reset(token)
        if CLOSED:
            truth.describe(*CLOSED)
        truth.write(os.path.join(where, "truth.json"))
        truths.append(truth)
    if name == "all":
        with open(os.path.join(out, "truth.json"), "w") as f:
            json.dump({"scenarios": [t.to_json() for t in truths]}, f, indent=2)
            f.write("\n")
    return truths
