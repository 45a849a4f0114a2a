"""The finding vocabulary of docs/findings.md: kinds, severities, and the columns every finding has.

Shared by the replay (which emits findings), the simulator (whose ground truth names the
findings a correct replay must produce) and the gates (which judge them).
"""

from __future__ import annotations

import json
from typing import Any

from replay.tables import FINDINGS

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

# Lowered severity per kind, where the context makes a finding less serious than its default
# (docs/findings.md, the severity in parentheses): an offset moved back while the group was
# empty is an operator's reset; a coordinator transaction without any entry in a listed
# partition (whose later markers are there) may have added the partition and sent it nothing.
LOWERED: dict[str, str] = {
    "offset_regression": "info",
    "missing_marker": "warning",
}

# The kinds of the decoders' errors table (decoders/schemas.py ERRORS); any other kind there
# is judged as corrupt bytes.
INTEGRITY_KINDS = (
    "crc_mismatch",
    "truncated_batch",
    "corrupt_bytes",
    "unknown_version",
    "index_inconsistent",
    "decode_failed",
)

# the findings columns, in the order of the findings table (replay/tables.py FINDINGS)
FINDING_COLUMNS: tuple[str, ...] = tuple(FINDINGS.names)


def severity_of(kind: str, lowered: bool = False) -> str:
    """A kind's severity from the vocabulary: its default, or its lowered one (:data:`LOWERED`)."""
    return LOWERED[kind] if lowered else KINDS[kind]


def integrity_severity(kind: str) -> str:
    """The severity of a decoding problem of the errors table (:data:`INTEGRITY_KINDS`)."""
    return KINDS[kind] if kind in INTEGRITY_KINDS else KINDS["corrupt_bytes"]


def finding(
    kind: str,
    message: str,
    evidence: dict[str, Any],
    *,
    lowered: bool = False,
    severity: str | None = None,
    **columns: Any,
) -> dict[str, Any]:
    """One findings row, the one way the pure replay makes a finding: every column of the
    findings schema present, the severity from the vocabulary (``lowered``: its lowered one;
    ``severity``: only :func:`integrity_severity`'s, for the errors table's kinds), evidence as
    sorted JSON."""
    unknown = set(columns) - set(FINDING_COLUMNS)
    if unknown:
        raise TypeError(f"not finding columns: {sorted(unknown)}")
    row: dict[str, Any] = dict.fromkeys(FINDING_COLUMNS)
    row.update(columns)
    row["kind"] = kind
    row["severity"] = severity or severity_of(kind, lowered)
    row["message"] = message
    row["evidence"] = json.dumps(evidence, sort_keys=True, default=str)
    return row


def at_least(severity: str, floor: str) -> bool:
    return SEVERITIES.index(severity) >= SEVERITIES.index(floor)
