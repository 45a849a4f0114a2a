"""The finding vocabulary of docs/findings.md: kinds, severities, and the columns every finding has.

Shared by the replay (which emits findings), the simulator (whose ground truth names the
findings a correct replay must produce) and the gates (which judge them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from replay.tables import FINDINGS

SEVERITIES = ("info", "warning", "error", "critical")
# the report's context plot of a finding (jobs/report): the producer's sequences in its
# partition, a transaction across the logs, aborted data and the commits past it, a group's
# commit timeline
FAMILIES = ("sequences", "transactions", "reads", "commits")


@dataclass(frozen=True)
class Kind:
    """A finding kind as the vocabulary declares it: its default severity (context may lower
    or raise one: an offset reset while the group was empty is info, a rewind while it was
    stable a warning) and the report's context plot of its findings (:data:`FAMILIES`; None:
    the evidence alone shows it, as for a file's damaged bytes or a diverging replica)."""

    severity: str
    family: str | None


# Every kind, declared once. Adding one: docs/architecture.md, "Adding a finding kind"
# (tests/test_vocabulary.py holds this, docs/findings.md and the report together).
VOCABULARY: dict[str, Kind] = {
    "crc_mismatch": Kind("error", None),
    "truncated_batch": Kind("warning", None),
    "corrupt_bytes": Kind("error", None),
    "unknown_version": Kind("warning", None),
    "index_inconsistent": Kind("warning", None),
    "decode_failed": Kind("error", None),
    "file_vanished": Kind("info", None),
    "duplicate_sequence": Kind("error", "sequences"),
    "sequence_gap": Kind("error", "sequences"),
    "out_of_order_sequence": Kind("error", "sequences"),
    "invalid_epoch_start": Kind("error", "sequences"),
    "fenced_epoch_write": Kind("critical", "sequences"),
    "hanging_transaction": Kind("error", "transactions"),
    "orphan_marker": Kind("warning", "transactions"),
    "non_transactional_write_in_txn": Kind("error", "transactions"),
    "split_outcome": Kind("critical", "transactions"),
    "missing_marker": Kind("error", "transactions"),
    "write_outside_transaction": Kind("error", "transactions"),
    "aborted_read_exposure": Kind("info", "reads"),
    "aborted_read_leak": Kind("error", "reads"),
    "aborted_data_propagated": Kind("critical", "reads"),
    "offset_overwrite": Kind("error", "commits"),
    "offset_regression": Kind("warning", "commits"),
    "replica_divergence": Kind("error", None),
    # a batch reusing offsets an earlier batch of the same log holds (KAFKA-7866's trace)
    "offset_overlap": Kind("error", None),
    # added by the replay (not in the original vocabulary): a `__transaction_state` record
    # whose state cannot follow the previous one (docs/formats.md 8.4); the record is its
    # evidence
    "invalid_txn_transition": Kind("error", None),
    # added with the dump's layout (decoders.brokers, docs/layouts.md): a partition directory
    # of a topic's other incarnation, or a deletion's leftover, audited apart from the live one
    "stale_replica": Kind("info", None),
    "unlisted_directory": Kind("info", None),
    # added with carried state (`--since`, docs/incremental.md): a log that ends below the high
    # watermark its broker had checkpointed when the previous audit's copy was taken
    "committed_data_truncated": Kind("error", None),
}

# default severity per kind
KINDS: dict[str, str] = {kind: k.severity for kind, k in VOCABULARY.items()}

# Lowered severity per kind, where the context makes a finding less serious than its default
# (docs/findings.md, the severity in parentheses): an offset moved back while the group was
# empty is an operator's reset; a coordinator transaction without any entry in a listed
# partition (whose later markers are there) may have added the partition and sent it nothing.
LOWERED: dict[str, str] = {
    "offset_regression": "info",
    "missing_marker": "warning",
    # open data in a cleaned range: the cleaner removed its marker (KAFKA-8351's trace), or a
    # copy took its segment before a cleaning pass and the marker's after it
    "hanging_transaction": "info",
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
    "file_vanished",
)

# Findings whose proof rests on where a copy ended (docs/incremental.md, "Provisional
# findings"): an open transaction's marker may yet be written, and a later copy then shows it
# closed. A run given --since marks such a finding, the first time it finds it, provisional
# (findings_history); a later run confirms it (still present) or withdraws it (gone). Per kind:
# None (every finding of the kind), or the evidence's (key, value) that makes one so.
ON_COPY_END: dict[str, tuple[str, str] | None] = {
    "hanging_transaction": None,  # open at the end of the copy, past its timeout
    "missing_marker": ("outcome", "OPEN"),  # the partition's entry still open at its end
}


def rests_on_copy_end(kind: str, evidence: str | None) -> bool:
    """Whether a finding (its kind and evidence JSON) is provisional when first found
    (:data:`ON_COPY_END`)."""
    if kind not in ON_COPY_END:
        return False
    rule = ON_COPY_END[kind]
    if rule is None:
        return True
    try:
        ev = json.loads(evidence or "{}")
    except ValueError:
        return False
    return isinstance(ev, dict) and ev.get(rule[0]) == rule[1]


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
