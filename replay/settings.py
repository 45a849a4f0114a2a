"""The settings the replay uses, taken from a validated configuration (replay.config)."""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.crosslog import Bounds
from replay.grouped import Facts


@dataclass
class AuditConfig:
    """The settings the replay uses, taken from a validated configuration (replay.config)."""

    clock_tolerance_ms: int = 2000
    order_window_ms: int = 600_000
    cluster: str | None = None  # names the cluster of directories without a cluster.id
    producer_id_expiration_ms: int = 86_400_000
    default_transaction_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    groups: dict[str, dict] = field(default_factory=dict)  # group -> {isolation, assignor}
    topics: dict[str, dict] = field(default_factory=dict)  # topic -> {cleanup_policy, ...}
    range_bytes: int | None = None
    window_bytes: int | None = None
    memory_budget_mb: int | None = None
    verify_crc: bool = True

    @classmethod
    def from_conf(cls, conf: dict | None) -> AuditConfig:
        conf = conf or {}
        decode = conf.get("decode") or {}
        return cls(
            **(conf.get("audit") or {}),
            groups=conf.get("groups") or {},
            topics=conf.get("topics") or {},
            range_bytes=decode.get("range_bytes"),
            window_bytes=decode.get("window_bytes"),
            memory_budget_mb=decode.get("memory_budget_mb"),
            verify_crc=decode.get("verify_crc", True),
        )

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
