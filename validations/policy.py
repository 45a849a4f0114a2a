"""The gate policy: which findings stop a pipeline.

A finding fails the gate when its severity is at or above the threshold of its kind: the
kind's own (``gate.kinds``) or the default (``gate.fail_at``, error unless configured).
``never`` exempts a kind. Pure Python: the Spark column that applies it is built from
:meth:`GatePolicy.thresholds`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.config import defaults
from replay.findings import KINDS, SEVERITIES

NEVER = "never"


@dataclass(frozen=True)
class GatePolicy:
    """The `gate` section of the configuration (defaults: conf/default.yaml)."""

    fail_at: str
    kinds: dict[str, str]
    data_expectations: bool
    data_docs: bool
    sample_findings: int
    driver_rows: int  # a table of at most this many rows is validated on the driver (gate.py)
    min_coverage: dict[str, float] = field(default_factory=dict)  # family -> least share judged
    waivers: list[dict] = field(default_factory=list)  # gate.waivers (validations.waivers)
    on: str = "new"  # new: findings a previous run (--since) had do not fail it; all: they do

    @classmethod
    def from_conf(cls, conf: dict) -> GatePolicy:
        return cls(**{**defaults()["gate"], **(conf.get("gate") or {})})

    def threshold(self, kind: str) -> str:
        return self.kinds.get(kind, self.fail_at)

    def thresholds(self) -> dict[str, str]:
        """Every known kind's threshold (unknown kinds found in data get the default)."""
        return {k: self.threshold(k) for k in KINDS}

    def fails(self, kind: str, severity: str) -> bool:
        t = self.threshold(kind)
        return t != NEVER and SEVERITIES.index(severity) >= SEVERITIES.index(t)

    def blocking_severities(self, kind: str) -> list[str]:
        t = self.threshold(kind)
        return [] if t == NEVER else list(SEVERITIES[SEVERITIES.index(t) :])

    def describe(self, kind: str) -> str:
        t = self.threshold(kind)
        if t == NEVER:
            return f"{kind} never fails the gate"
        return f"no {kind} finding of severity {t} or above"
