"""What to do next about a finding: the copy-pasteable command of Kafka's own tools, or what to
check, built from the finding's place and evidence (docs/remediation.md). Never executed.

The commands follow the options of Kafka's tools as their sources declare them
(`org.apache.kafka.tools.TransactionsCommand`, `ConsumerGroupCommandOptions`): global options
(`--bootstrap-server`, `--command-config`) before a `kafka-transactions.sh` subcommand, every
identifier shell-quoted, the servers and the client configuration from
``remediation.bootstrap_servers`` and ``remediation.command_config`` or left as placeholders.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TRANSACTIONS_TOOL = "kafka-transactions.sh"
GROUPS_TOOL = "kafka-consumer-groups.sh"
SERVERS_PLACEHOLDER = "<bootstrap-servers>"
LISTED = 5  # ranges named one by one before "and N more"


@dataclass(frozen=True)
class Target:
    """Where the commands point: the cluster's bootstrap servers and the tools' client
    configuration file (None: a placeholder, and no ``--command-config``)."""

    bootstrap_servers: str | None = None
    command_config: str | None = None

    def options(self) -> list[str]:
        out = ["--bootstrap-server", self.bootstrap_servers or SERVERS_PLACEHOLDER]
        if self.command_config:
            out += ["--command-config", self.command_config]
        return out


def command(*words: Any) -> str:
    """One shell command line, every word quoted as the shell needs it."""
    return " ".join(shlex.quote(str(w)) for w in words)


def remediation(f: dict[str, Any], target: Target, ev: dict | None = None) -> str:
    """The next step for finding row ``f`` (its columns and JSON evidence; ``ev``: that
    evidence already parsed)."""
    ev = evidence_of(f) if ev is None else ev
    build = BUILDERS.get(f["kind"])
    if build is not None:
        text = build(f, ev, target)
    else:
        text = NEXT_CHECK.get(f["kind"], "Check the evidence with `logreplay dump`.")
    if ev.get("known_bug"):  # replay.known_bugs: the trace of a known Kafka bug
        text += f"\n# the trace of a known Kafka bug, {ev['known_bug']}: upgrade the brokers"
    return text


def _tp(f: dict) -> str:
    return f"{f['topic']}-{f['partition']}"


def _hanging(f: dict, ev: dict, target: Target) -> str:
    """KIP-664's tools: find-hanging confirms it live, abort ends it (brokers 3.0 and later by
    its start offset; older ones by producer id, epoch and coordinator epoch)."""
    tools = [TRANSACTIONS_TOOL, *target.options()]
    where = ["--topic", f["topic"], "--partition", f["partition"]]
    lines = [
        f"# confirm that the transaction of producer {f['producer_id']} at offset "
        f"{f['first_offset']} of {_tp(f)} still hangs, then abort it (brokers 3.0 and later):",
    ]
    if ev.get("in_cleaned_range"):
        lines.insert(0, f"# where the cleaner has been: copy {_tp(f)} again first; a copy "
                        "that took its segments before and after a cleaning pass shows this too")  # fmt: skip
    lines += [
        command(*tools, "find-hanging", *where),
        command(*tools, "abort", *where, "--start-offset", f["first_offset"]),
    ]
    coordinator_epoch = ev.get("coordinator_epoch")
    if coordinator_epoch is not None and f.get("producer_epoch") is not None:
        lines += [
            "# brokers older than 3.0:",
            command(
                *tools,
                "abort",
                *where,
                "--producer-id",
                f["producer_id"],
                "--producer-epoch",
                f["producer_epoch"],
                "--coordinator-epoch",
                coordinator_epoch,
            ),  # fmt: skip
        ]
    else:
        lines.append(
            "# brokers older than 3.0 also need --producer-id, --producer-epoch and "
            "--coordinator-epoch: the coordinator epoch of an open transaction is not in the dump"
        )
    return "\n".join(lines)


def _left_open(f: dict, ev: dict, target: Target) -> str | None:
    """A missing marker or an unlisted write that left its data open: the hanging transaction
    it causes (same ``open_transaction`` key) is what to abort."""
    if ev.get("outcome") != "OPEN" or f.get("first_offset") is None:
        return None
    return (
        f"# the records left open here hang {_tp(f)} (see the hanging_transaction with "
        f"open_transaction {ev.get('open_transaction')}); once it is confirmed, abort it:\n"
        + _hanging(f, ev, target)
    )


def _missing_marker(f: dict, ev: dict, target: Target) -> str:
    return _left_open(f, ev, target) or (
        f"The coordinator completed this transaction of {f.get('transactional_id')} but "
        f"{_tp(f)} holds no marker for it: check with `logreplay dump --deep` whether the "
        "partition was added without receiving data (then nothing is wrong)."
    )


def _outside(f: dict, ev: dict, target: Target) -> str:
    return _left_open(f, ev, target) or (
        f"Records {f['first_offset']}..{f['last_offset']} of {_tp(f)} belong to no transaction "
        f"of {f.get('transactional_id')}: find the client that wrote them with producer id "
        f"{f['producer_id']} (upgrade brokers and clients to KIP-890's verification)."
    )


def _regression(f: dict, ev: dict, target: Target) -> str:
    """Records read again, not lost; a forward reset (a plan file `--from-file` reads) where
    the group should be past them."""
    group = f["group_id"]
    line = f"{f['topic']},{f['partition']},{f['last_offset'] + 1}"  # topic,partition,offset
    plan = f"reset-{group}-{f['topic']}-{f['partition']}.csv"
    return "\n".join([
        f"# group {group} committed {_tp(f)} back to {f['first_offset']}: records "
        f"{f['first_offset']}..{f['last_offset']} ({f['record_count']}) were read again "
        "(duplicates downstream, nothing lost).",
        "# to move it forward again: the group must be inactive, and the plan is stale if "
        "--describe already shows it past the offset",
        command(GROUPS_TOOL, *target.options(), "--describe", "--group", group),
        f"printf '%s\\n' {shlex.quote(line)} > {shlex.quote(plan)}",
        command(GROUPS_TOOL, *target.options(), "--group", group, "--reset-offsets",
                "--from-file", plan, "--dry-run"),  # fmt: skip
    ])  # fmt: skip


def _overwrite(f: dict, ev: dict, target: Target) -> str:
    group = f["group_id"]
    return "\n".join([
        f"# members of group {group} overwrite each other's commits of {_tp(f)} (every member "
        "is assigned every partition): records between offsets "
        f"{f['first_offset']} and {f['last_offset']} were read again, {f['record_count']} in all "
        "(duplicates downstream, nothing lost).",
        "# give each reader its own group.id, or subscribe with an assignor that splits the "
        "partitions; see who is assigned what:",
        command(GROUPS_TOOL, *target.options(), "--describe", "--group", group, "--members",
                "--verbose"),  # fmt: skip
    ])  # fmt: skip


def _ranges(transactions: list[dict]) -> str:
    shown = [
        f"{t.get('first_offset')}..{t.get('last_offset')} ({t.get('record_count')} records, "
        f"{t.get('outcome') or 'OPEN'})"
        for t in transactions[:LISTED]
    ]
    more = len(transactions) - LISTED
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _leak(f: dict, ev: dict, target: Target) -> str:
    txns = [t for t in ev.get("transactions") or [] if t.get("outcome") != "COMMIT"]
    return (
        f"Group {f['group_id']} consumed {f['record_count']} records of aborted or open "
        f"transactions in {_tp(f)}: offsets {_ranges(txns) if txns else '(see the evidence)'}. "
        f"Set isolation.level=read_committed for its consumers; the "
        "aborted_data_propagated finding of the same group says where they went next."
    )


def _propagated(f: dict, ev: dict, target: Target) -> str:
    outputs = ", ".join(ev.get("output_partitions") or []) or "(see the evidence)"
    return (
        f"Group {f['group_id']} read aborted records of {_tp(f)} (offsets "
        f"{f['first_offset']}..{f['last_offset']}, {f['record_count']} records) and producer "
        f"{f['producer_id']} ({f.get('transactional_id')}) committed "
        f"{ev.get('committed_transactions')} transactions after it, {ev.get('output_records')} "
        f"records in {outputs}: those outputs may carry the aborted data. Set "
        "isolation.level=read_committed for the group's consumers, then rebuild the outputs "
        "from the committed input."
    )


def _divergence(f: dict, ev: dict, target: Target) -> str:
    brokers = ", ".join(str(b) for b in ev.get("brokers") or []) or "(see the evidence)"
    return (
        f"Replicas of {_tp(f)} on brokers {brokers} hold different batches for offsets "
        f"{f['first_offset']}..{f['last_offset']} ({f.get('record_count')} offsets, "
        f"{ev.get('batches')} batches): compare them with "
        f"`logreplay dump --deep` on each broker's {_tp(f)} directory; the replica that is not "
        "the leader's lost those records when it truncated (an unclean leader election). "
        "To attach both replicas' batches, byte for byte, to a ticket:\n"
        f"{extract_command(f)}"
    )


def extract_command(f: dict) -> str:
    """`logreplay extract finding` for finding ``f`` (docs/extract.md); the audit's output
    directory and the slice's are placeholders: the finding does not know them."""
    return f"logreplay extract finding <audit-output> {fingerprint(f)} --to <slice-dir>"


BUILDERS: dict[str, Callable[[dict, dict, Target], str]] = {
    "hanging_transaction": _hanging,
    "missing_marker": _missing_marker,
    "write_outside_transaction": _outside,
    "offset_regression": _regression,
    "offset_overwrite": _overwrite,
    "aborted_read_leak": _leak,
    "aborted_data_propagated": _propagated,
    "replica_divergence": _divergence,
}

# every other kind: what to check next, in one sentence (tests/test_remediation.py holds it to
# the vocabulary)
NEXT_CHECK: dict[str, str] = {
    "committed_data_truncated": "Look in the controller's log for an unclean leader election "
    "of this partition (or a restore of its broker's disk): consumers whose committed offsets "
    "lie above the new log end reset by auto.offset.reset, and the committed records between "
    "are gone unless another copy (a replica not elected, a mirror) still holds them.",
    "offset_overlap": "Compare the two batches holding these offsets with `logreplay dump "
    "--deep` and with another replica's copy: a log never assigns an offset twice, so one of "
    "them was appended with a stale log end offset (consumers saw either, depending on when "
    "they fetched).",
    "crc_mismatch": "Read the batch with `logreplay dump --verify` on another replica's copy of "
    "the segment: if that one holds, this copy was damaged after the broker wrote it.",
    "truncated_batch": "A write cut short (a crash or a torn copy): check whether the broker "
    "truncated its log there on restart, and take the copy again.",
    "corrupt_bytes": "Compare the file with another replica's or a fresh copy: bytes that are "
    "no batch are damage in this copy, not something a client wrote.",
    "unknown_version": "Check the broker version that wrote the segment: a newer record format "
    "than this logreplay knows.",
    "index_inconsistent": "Rebuild the index (delete it and restart the broker) or ignore it: "
    "the log is the truth, the index only speeds reads.",
    "file_vanished": "Take the copy again if these bytes matter (a live broker's retention or "
    "cleaner deleted the file while the dump was listed or copied), or point the dangling "
    "link at its file: nothing in them was audited.",
    "decode_failed": "Open the batch with `logreplay dump --deep` and report the bytes: a batch "
    "whose header holds but whose records cannot be read.",
    "duplicate_sequence": "Check whether the broker lost the producer's state (a restart without "
    "its snapshot, or more than five batches in flight): consumers saw these records twice.",
    "sequence_gap": "Records the producer sent never reached the log: check the producer's logs "
    "for OutOfOrderSequence or expired batches at that time.",
    "out_of_order_sequence": "Check the producer for retries with max.in.flight above 5 or a "
    "client bug: the broker should have refused this batch.",
    "invalid_epoch_start": "A new producer epoch that did not start at sequence 0: check the "
    "client version and whether the broker lost the producer's state.",
    "fenced_epoch_write": "A zombie wrote after its producer was fenced: find the old instance "
    "(same producer id, lower epoch) still running and stop it.",
    "orphan_marker": "Look the marker's producer up in `__transaction_state` with `logreplay dump "
    "--deep`: a marker no transaction explains, written again after a failover or by a bug.",
    "non_transactional_write_in_txn": "The producer wrote without its transactional flag while "
    "a transaction was open: check the client for mixed transactional and plain sends.",
    "split_outcome": "One transaction committed in one partition and aborted in another: "
    "collect the brokers' logs around the markers' times and report it to Kafka with this "
    "evidence.",
    "aborted_read_exposure": "Declare the group's isolation level (groups.<g>.isolation) if "
    "you know it: a read_uncommitted group would have consumed these aborted records.",
    "invalid_txn_transition": "Read the transactional id's records in `__transaction_state` "
    "with `logreplay dump --deep`: the coordinator moved between states Kafka does not allow.",
    "unlisted_directory": "Give the run's user read access to the directory (a broker's log "
    "directories are often its own user's alone) or copy it readable, and audit again: what "
    "it holds was not audited.",
    "stale_replica": "A leftover of a deleted or moved partition: nothing to do unless its "
    "broker still serves it (then check the controller's view of the topic).",
}


def target_of(section: dict | None) -> Target:
    """The ``remediation`` section of a validated configuration."""
    section = section or {}
    return Target(section.get("bootstrap_servers"), section.get("command_config"))


# what identifies a finding across runs and versions (its message and evidence may be worded
# differently by another version; `logreplay explain OUT ID` takes it)
IDENTITY = ("cluster", "kind", "topic", "partition", "producer_id", "transactional_id",
            "group_id", "first_offset", "last_offset")  # fmt: skip
# Kinds whose extent grows with the log while the anomaly stays one (a scheduled audit finds
# it again every day, larger): their identity is where they start, not where they end.
# - replica_divergence: the diverging range runs on as both replicas append;
# - hanging_transaction: the open transaction's last offset moves while its producer appends;
# - aborted reads: a group's commits pass over more aborted transactions (last offset), of
#   more producers (the finding names the lowest id).
GROWING: dict[str, tuple[str, ...]] = {
    "replica_divergence": ("last_offset",),
    "hanging_transaction": ("last_offset",),
    "aborted_read_exposure": ("last_offset", "producer_id"),
    "aborted_read_leak": ("last_offset", "producer_id"),
    "aborted_data_propagated": ("last_offset",),
}


def identity_of(f: dict[str, Any]) -> tuple[str, ...]:
    """The columns that identify finding ``f`` across runs (:data:`IDENTITY` less what grows
    for its kind: :data:`GROWING`)."""
    grows = GROWING.get(f.get("kind") or "", ())
    return tuple(c for c in IDENTITY if c not in grows)


def fingerprint(f: dict[str, Any]) -> str:
    """16 hex digits of a SHA-256 over the finding's identity (:func:`identity_of`; a
    column left out of it is hashed as null, so the other kinds' fingerprints stay)."""
    import hashlib

    ids = identity_of(f)
    key = json.dumps([f.get(c) if c in ids else None for c in IDENTITY], default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def filled(rows: list[dict], target: Target) -> list[dict]:
    """Finding rows with the known bug their trace shows named in their evidence
    (replay.known_bugs), their ``remediation`` and their ``fingerprint``."""
    return [_filled(r, target) for r in rows]


def evidence_of(f: dict) -> dict:
    """A finding's evidence as a dict ({} when it is not a JSON object)."""
    try:
        ev = json.loads(f.get("evidence") or "{}")
    except ValueError:
        return {}
    return ev if isinstance(ev, dict) else {}


def _filled(r: dict, target: Target) -> dict:
    from replay.known_bugs import cite, known_bug

    ev = evidence_of(r)
    bug = known_bug(r, ev)
    if bug is not None:
        ev = {**ev, "known_bug": cite(bug)}
        r = {**r, "evidence": json.dumps(ev, sort_keys=True, default=str)}
    return {**r, "remediation": remediation(r, target, ev), "fingerprint": fingerprint(r)}
