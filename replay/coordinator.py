"""Replay `__transaction_state` per transactional id (kafka-formats.md 8.4, 8.5).

Each record is a state the coordinator moved to; a transition not allowed by 8.4 is a finding.
The walk yields the coordinator's transactions: the producer id and the epoch the data was
written with, the partitions it added, whether it committed or aborted, with which marker epoch,
and when (start, prepare, complete), so :mod:`replay.spark` can check every partition against it.
"""

from __future__ import annotations

from typing import Any

from replay.findings import finding

VALID_PREVIOUS = {  # 8.4: state <- allowed previous states (Dead is the tombstone)
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteCommit", "CompleteAbort"},
}


def _partitions(value: list[dict] | None) -> set[tuple[str, int]]:
    return {(e["topic"], p) for e in value or [] for p in e["partitions"] or []}


def replay_transactional_id(rows: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """rows: one transactional id's txn_log rows in log order. Returns (transactions, findings)."""
    txns: list[dict] = []
    findings: list[dict] = []
    state = None
    current: dict | None = None
    for r in rows:
        new = "Dead" if r["is_tombstone"] else r["state"]
        tid = r["transactional_id"]
        if state is not None and new in VALID_PREVIOUS and state not in VALID_PREVIOUS[new]:
            findings.append(
                finding(
                    "invalid_txn_transition",
                    f"transactional id {tid!r} moved from {state} to {new}",
                    {
                        "from": state,
                        "to": new,
                        "log_partition": r.get("log_partition"),
                        "log_offset": r.get("log_offset"),
                        "producer_id": r["producer_id"],
                        "producer_epoch": r["producer_epoch"],
                    },  # fmt: skip
                    transactional_id=tid,
                    producer_id=r["producer_id"],
                    producer_epoch=r["producer_epoch"],
                    topic="__transaction_state",
                    partition=r.get("log_partition"),
                    first_offset=r.get("log_offset"),
                )
            )
        ts = r["last_update_timestamp"]
        if new == "Ongoing":
            if current is None or current.get("outcome"):
                current = {
                    "transactional_id": tid,
                    "producer_id": r["producer_id"],
                    "data_epoch": r["producer_epoch"],
                    "marker_epoch": None,
                    "outcome": None,
                    "partitions": set(),
                    "start_timestamp": r["start_timestamp"] if r["start_timestamp"] >= 0 else ts,
                    "prepare_timestamp": None,
                    "complete_timestamp": None,
                    "timeout_ms": r["timeout_ms"],
                    "transaction_version": r.get("client_transaction_version") or 0,
                    "fenced": False,
                }
                txns.append(current)
            current["partitions"] |= _partitions(r["partitions"])
        elif new in ("PrepareCommit", "PrepareAbort") and current is not None:
            current["outcome"] = "COMMIT" if new == "PrepareCommit" else "ABORT"
            current["marker_epoch"] = r["producer_epoch"]
            current["prepare_timestamp"] = ts
            current["partitions"] |= _partitions(r["partitions"])
            # TV0/1: an abort with a bumped epoch is the coordinator fencing or timing out (10.4)
            bumped = r["producer_epoch"] > current["data_epoch"]
            current["fenced"] = (
                new == "PrepareAbort" and bumped and current["transaction_version"] < 2
            )
        elif new in ("CompleteCommit", "CompleteAbort") and current is not None:
            current["complete_timestamp"] = ts
            current = None
        state = new
    for t in txns:
        t["state_at_end"] = (
            "Complete" if t["complete_timestamp"] is not None
            else "Prepare" if t["outcome"] else "Ongoing"
        )  # fmt: skip
        t["partitions"] = [{"topic": tp, "partition": p} for tp, p in sorted(t["partitions"])]
    return txns, findings
