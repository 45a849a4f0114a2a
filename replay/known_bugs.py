"""Known Kafka bugs by the traces they leave on disk (docs/known-bugs.md): a finding whose
evidence matches a trace names the JIRA issue in its evidence (``known_bug``) and its next
step. The releases that carry each fix are those whose tags hold its commit in Kafka's
repository.

A match says "this is what that bug leaves", not "that bug did it": the same bytes can have
another cause (a client bug, a zombie), and the finding stands either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Bug:
    jira: str
    fixed_in: str  # the first releases whose tags hold the fix
    what: str  # what happens
    kind: str  # the finding that reports its trace
    matches: Callable[[dict[str, Any], dict[str, Any]], bool]  # (finding row, its evidence)


def _after_own_marker(f: dict, ev: dict) -> bool:
    """Open data of a producer right after its own marker in the partition, with that
    transaction's epoch (TV0/1: the marker's epoch; TV2: the marker carries epoch + 1)."""
    if ev.get("outcome") != "OPEN" or ev.get("previous_marker_offset") is None:
        return False
    epoch, marker = f.get("producer_epoch"), ev.get("previous_marker_epoch")
    return epoch is not None and marker in (epoch, epoch + 1)


def _never_listed(f: dict, ev: dict) -> bool:
    return ev.get("outcome") == "OPEN" and not _after_own_marker(f, ev)


def _coordinator_epoch_back(f: dict, ev: dict) -> bool:
    return ev.get("coordinator_epoch_before") is not None


def _cleaned_open(f: dict, ev: dict) -> bool:
    """Open data where the cleaner has been (replay.crosslog_stream._hanging)."""
    return ev.get("in_cleaned_range") is True


def _left_in_prepare(f: dict, ev: dict) -> bool:
    """A coordinator transaction whose log ends at its Prepare record (no Complete) more than
    the transaction timeout before the partition's copy does, with a partition that has no
    marker: a commit stuck half way (replay.crosslog_stream._left_in_prepare)."""
    return ev.get("coordinator_state") == "Prepare"


KNOWN_BUGS = (
    Bug("KAFKA-12671", "KIP-890 part 1: brokers 3.6.0 and later verify the partition",
        "a produce request reaches the partition after its transaction's markers and opens a "
        "transaction nothing will end", "write_outside_transaction", _after_own_marker),
    Bug("KAFKA-14402", "KIP-890 part 1: brokers 3.6.0 and later "
        "(transaction.partition.verification.enable)",
        "transactional data appended to a partition the coordinator never added to the "
        "transaction", "write_outside_transaction", _never_listed),
    Bug("KAFKA-9144", "2.4.1 and 2.5.0",
        "a producer's state expired early, so the broker accepted a marker from an older "
        "coordinator epoch", "fenced_epoch_write", _coordinator_epoch_back),
    Bug("KAFKA-18660", "transaction version 2 stuck transactions (also KAFKA-19999)",
        "the coordinator is left in PrepareCommit or PrepareAbort with markers missing in some "
        "partitions", "missing_marker", _left_in_prepare),
    Bug("KAFKA-8351", "2.2.2 and 2.3.0",
        "the log cleaner removed a transaction's marker before its data (a transaction spanning "
        "several segments)", "hanging_transaction", _cleaned_open),
    Bug("KAFKA-7866", "2.2.1 and 2.3.0",
        "a failed append to the transaction index left the log end offset behind, and the next "
        "append reused its offsets", "offset_overlap", lambda f, ev: True),
)  # fmt: skip


def known_bug(f: dict[str, Any], ev: dict[str, Any]) -> Bug | None:
    """The known bug whose trace finding ``f`` shows, if any."""
    return next((b for b in KNOWN_BUGS if b.kind == f["kind"] and b.matches(f, ev)), None)


def cite(b: Bug) -> str:
    return f"{b.jira}: {b.what} (fixed: {b.fixed_in})"
