"""The settings the replay uses, taken from a validated configuration (replay.config)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from replay.crosslog import Bounds
from replay.grouped import Facts


@dataclass
class AuditConfig:
    """The settings the replay uses, taken from a validated configuration (replay.config);
    their defaults are conf/default.yaml's (:meth:`from_conf`)."""

    clock_tolerance_ms: int
    order_window_ms: int
    producer_id_expiration_ms: int
    default_transaction_timeout_ms: int  # transaction.max.timeout.ms
    range_bytes: int
    window_bytes: int
    memory_budget_mb: int
    verify_crc: bool
    cluster: str | None = None  # names the cluster of directories without a cluster.id
    clusters: dict[str, str] = field(default_factory=dict)  # log dir glob -> cluster name
    groups: dict[str, dict] = field(default_factory=dict)  # group -> {isolation, assignor}
    topics: dict[str, dict] = field(default_factory=dict)  # topic -> {cleanup_policy, ...}
    # where the findings' remediation commands point (replay.remediation): never connected to
    remediation: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_conf(cls, conf: Mapping | None) -> AuditConfig:
        """From a configuration of conf/default.yaml's shape, laid over the defaults and
        validated (a loaded one, replay.config.RunConfig, is read as it is)."""
        from replay.config import load

        conf = load(conf)  # a loaded one comes back as it is
        decode = conf["decode"]
        return cls(
            **conf["audit"],
            groups=conf["groups"],
            topics=conf["topics"],
            remediation=conf.get("remediation") or {},
            range_bytes=decode["range_bytes"],
            window_bytes=decode["window_bytes"],
            memory_budget_mb=decode["memory_budget_mb"],
            verify_crc=decode["verify_crc"],
        )

    @classmethod
    def of(cls, conf: AuditConfig | Mapping | None) -> AuditConfig:
        """``conf`` as the replay's settings: as it is, or from a configuration (from_conf)."""
        return conf if isinstance(conf, AuditConfig) else cls.from_conf(conf)

    def declared_isolation(self) -> dict[str, str]:
        return {g: v["isolation"] for g, v in self.groups.items() if v and v.get("isolation")}

    def declared_broadcast(self) -> set[str]:
        return {g for g, v in self.groups.items() if v and v.get("assignor") == "broadcast"}

    def compacted_topics(self) -> set[str]:
        return {
            t for t, v in self.topics.items() if "compact" in (v or {}).get("cleanup_policy", "")
        }

    def topic_timeouts(self) -> dict[str, int]:
        return {
            t: v["transaction_timeout_ms"]
            for t, v in self.topics.items()
            if v and v.get("transaction_timeout_ms")
        }

    def facts(self) -> Facts:
        return Facts(
            producer_id_expiration_ms=self.producer_id_expiration_ms,
            default_transaction_timeout_ms=self.default_transaction_timeout_ms,
            topic_timeouts=self.topic_timeouts(),
            bounds=Bounds(self.clock_tolerance_ms, self.order_window_ms),
        )
