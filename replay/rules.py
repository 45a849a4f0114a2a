"""The findings made from one row of a table, written once for both audits.

The Spark plan (:mod:`replay.checks`) lays a rule out as columns over a DataFrame, the
one-process audit (:mod:`replay.local`) applies it to a dict; both give the same kind,
severity, message and evidence. A rule names its kind, its message (a printf template over
named values; a list value is joined with ", ") and its evidence (named values); the finding's
other columns are the row's values of the same names (docs/findings.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from replay.findings import FINDING_COLUMNS, finding, integrity_severity

OWN = ("kind", "severity", "message", "evidence")


@dataclass(frozen=True)
class RowRule:
    """``kind`` None: the row's own ``kind`` (a decoding problem of the errors table, severity
    by :func:`replay.findings.integrity_severity`)."""

    kind: str | None
    template: str
    args: tuple[str, ...]
    evidence: tuple[str, ...]

    def message(self, row: Mapping[str, Any]) -> str:
        """The message as Spark's ``format_string`` writes it (null for a missing value)."""
        values = []
        for a in self.args:
            v = row[a]
            values.append(", ".join(v) if isinstance(v, list) else "null" if v is None else v)
        return re.sub(r"%[ds]", "%s", self.template) % tuple(values)

    def finding(self, row: Mapping[str, Any]) -> dict[str, Any]:
        kind = self.kind or row["kind"]
        return finding(
            kind,
            self.message(row),
            {k: row[k] for k in self.evidence},
            severity=None if self.kind else integrity_severity(kind),
            **{c: row[c] for c in FINDING_COLUMNS if c in row and c not in OWN},
        )


# A decoding problem: one row of the errors table (``first_offset``: its ``offset``).
INTEGRITY = RowRule(
    None,
    "%s at byte %d of %s: %s",
    ("kind", "position", "file", "reason"),
    ("broker", "file", "position", "length", "reason", "offset"),
)

# Replicas of one cluster disagreeing at the same offsets: one row per partition with
# ``brokers``, ``batches`` (base offsets whose CRC or extent differ between brokers),
# ``first_offset``, ``last_offset`` and ``record_count``.
# Inside a range either replica's log cleaner has been through, replicas are cleaned
# independently (LogCleaner runs per broker): one batch may hold different records, so a
# different CRC and timestamps, in each. What cleaning preserves of a batch it keeps
# (MemoryRecords.filterTo: base offset, the original last offset, producer id, epoch, base
# sequence, control type) is compared there instead of its bytes.
CLEANED_IDENTITY = ("last_offset", "producer_id", "producer_epoch", "base_sequence",
                    "is_control", "control_type")  # fmt: skip

DIVERGENCE = RowRule(
    "replica_divergence",
    "replicas of %s-%d disagree on %d batches between offsets %d and %d",
    ("topic", "partition", "batches", "first_offset", "last_offset"),
    ("brokers", "batches", "first_offset", "last_offset"),
)

# A leaking group whose commits are transactional fed a consume-transform-produce step: one
# row per aborted_read_leak joined with its step producer's committed output transactions.
PROPAGATION = RowRule(
    "aborted_data_propagated",
    "group %s fed %d aborted records of %s-%d to transactional producer %d, which committed "
    "them on into %s",
    ("group_id", "record_count", "topic", "partition", "producer_id", "output_partitions"),
    ("output_partitions", "committed_transactions", "output_records", "leak"),
)
