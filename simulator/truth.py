"""Ground truth of a simulated dump: every injected anomaly, the areas that must stay clean,
and the facts a replay may be told (declared isolation levels, transaction versions)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from replay.findings import KINDS


@dataclass
class Anomaly:
    kind: str
    topic: str | None = None
    partition: int | None = None
    producer_id: int | None = None
    producer_epoch: int | None = None
    transactional_id: str | None = None
    group_id: str | None = None
    first_offset: int | None = None
    last_offset: int | None = None
    record_count: int | None = None
    severity: str | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")
        if self.severity is None:
            self.severity = KINDS[self.kind]


@dataclass
class Truth:
    scenario: str
    seed: int
    scale: float
    description: str = ""
    anomalies: list[Anomaly] = field(default_factory=list)
    clean: list[dict] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    partitions: list[dict] = field(default_factory=list)  # every partition of the scenario
    groups: list[str] = field(default_factory=list)  # every consumer group of the scenario

    def describe(self, *clusters) -> None:
        """List every partition (with its replicas' brokers) and group of ``clusters`` (the
        ones a scenario wrote), so that a checker can confirm it looked everywhere."""
        self.partitions = sorted(
            ({"topic": t, "partition": p, "replicas": list(log.replicas)}
             for c in clusters for (t, p), log in c.logs.items()),
            key=lambda r: (r["topic"], r["partition"], r["replicas"]),
        )  # fmt: skip
        self.groups = sorted({g for c in clusters for g in c.group_coordinator.groups})

    def add(self, kind: str, **kw) -> Anomaly:
        a = Anomaly(kind, **kw)
        self.anomalies.append(a)
        return a

    def clean_partition(self, topic: str, partition: int, why: str) -> None:
        self.clean.append({"topic": topic, "partition": partition, "why": why})

    def clean_group(self, group_id: str, why: str) -> None:
        self.clean.append({"group_id": group_id, "why": why})

    def to_json(self) -> dict:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "scale": self.scale,
            "description": self.description,
            "anomalies": [
                {k: v for k, v in asdict(a).items() if v is not None and v != ""}
                for a in self.anomalies
            ],
            "clean": self.clean,
            "facts": self.facts,
            "partitions": self.partitions,
            "groups": self.groups,
        }

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=2, sort_keys=False)
            f.write("\n")
