"""The finding vocabulary of docs/findings.md: kinds, severities, and the columns every finding has.

Shared by the replay (which emits findings), the simulator (whose ground truth names the
findings a correct replay must produce) and the gates (which judge them).
"""

from __future__ import annotations

import json
from typing import Any

SEVERITIES = ("info", "warning", "error", "critical")

# Default severity per kind. Context may lower or raise one (an offset reset while the group
# was empty is info, a rewind while it was stable a warning).
KINDS: dict[str, str] = {
    "crc_mismatch": "error",
    "truncated_batch": "warning",
    "corrupt_bytes": "error",
    "unknown_version": "warning",
    "index_inconsistent": "warning",
    "decode_failed": "error",
    "duplicate_sequence": "error",
    "sequence_gap": "error",
    "out_of_order_sequence": "error",
    "invalid_epoch_start": "error",
    "fenced_epoch_write": "critical",
    "hanging_transaction": "error",
    "orphan_marker": "warning",
    "non_transactional_write_in_txn": "error",
    "split_outcome": "critical",
    "missing_marker": "error",
    "write_outside_transaction": "error",
    "aborted_read_exposure": "info",
    "aborted_read_leak": "error",
    "aborted_data_propagated": "critical",
    "offset_overwrite": "error",
    "offset_regression": "warning",
    "replica_divergence": "error",
    # added by the replay (docs/findings.md: not in the original vocabulary): a `__transaction_state` record
    # whose state cannot follow the previous one (docs/formats.md 8.4)
    "invalid_txn_transition": "error",
}

FINDING_COLUMNS = (
    "kind",
    "severity",
    "topic",
    "partition",
    "producer_id",
    "producer_epoch",
    "transactional_id",
    "group_id",
    "first_offset",
    "last_offset",
    "record_count",
    "message",
    "evidence",
)


def finding(
    kind: str,
    message: str,
    evidence: dict[str, Any],
    *,
    severity: str | None = None,
    **columns: Any,
) -> dict[str, Any]:
    """One findings row: every column present, evidence as sorted JSON."""
    unknown = set(columns) - set(FINDING_COLUMNS)
    if unknown:
        raise TypeError(f"not finding columns: {sorted(unknown)}")
    row: dict[str, Any] = dict.fromkeys(FINDING_COLUMNS)
    row.update(columns)
    row["kind"] = kind
    row["severity"] = severity or KINDS[kind]
    row["message"] = message
    row["evidence"] = json.dumps(evidence, sort_keys=True, default=str)
    return row


def at_least(severity: str, floor: str) -> bool:
    return SEVERITIES.index(severity) >= SEVERITIES.index(floor)
