"""Remediation (replay.remediation): a next step for every finding kind, and every command it
writes parsed against the options of Kafka's tools as docs/remediation.md keeps them from
Kafka's sources (TransactionsCommand, ConsumerGroupCommandOptions). No Spark."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

from replay.findings import VOCABULARY, finding
from replay.local import audit_local
from replay.remediation import BUILDERS, NEXT_CHECK, Target, remediation
from simulator import synth

DOC = Path(__file__).resolve().parent.parent / "docs" / "remediation.md"
PLAN_LINE = re.compile(r"^[A-Za-z0-9._-]+,\d+,\d+$")  # topic,partition,offset (parseResetPlan)


class Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # a command the tool would refuse
        raise Refused(message)


def _tools() -> dict[str, _Parser]:
    """The tools' parsers from docs/remediation.md's options table."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("kafka-") and cells[2].startswith("--"):
            rows.append(cells)
    assert len(rows) > 15
    parsers: dict[str, _Parser] = {}
    subs: dict[str, dict[str, _Parser]] = {}
    for tool, sub, option, value in rows:
        top = parsers.setdefault(tool, _Parser(prog=tool, add_help=False))
        target = top
        if sub:
            if tool not in subs:
                subs[tool] = {}
                subs[tool]["_"] = top.add_subparsers(dest="command", required=True)
            if sub not in subs[tool]:
                subs[tool][sub] = subs[tool]["_"].add_parser(sub, add_help=False)
            target = subs[tool][sub]
        if value:
            target.add_argument(option, type=str if value == "string" else int)
        else:
            target.add_argument(option, action="store_true")
    return parsers


TOOLS = _tools()


def _commands(text: str) -> list[list[str]]:
    """The command lines of a remediation (comments and prose left out), as the shell splits
    them; a plan written with printf is checked for the reset plan's format."""
    out = []
    for line in text.splitlines():
        if line.startswith("printf "):
            words = shlex.split(line)
            assert words[1] == "%s\\n" and words[3] == ">", line
            assert PLAN_LINE.match(words[2]), line
            continue
        if line.startswith(("kafka-", "logreplay ")):
            out.append(shlex.split(line))
    return out


def _parse(words: list[str]) -> argparse.Namespace:
    if words[0] == "logreplay":  # our own command (extract): parsed by our own parser
        from jobs.cli import build_parser

        return build_parser().parse_args(words[1:])
    return TOOLS[words[0]].parse_args(words[1:])


def test_every_kind_has_a_next_step():
    assert set(BUILDERS) | set(NEXT_CHECK) == set(VOCABULARY)
    assert not set(BUILDERS) & set(NEXT_CHECK)


def test_the_commands_parse_and_put_global_options_first():
    """A hanging transaction's commands, with the servers and a client configuration whose
    path needs quoting: the global options before the subcommand (TransactionsCommand reads
    them there), every word as the shell splits it."""
    f = finding("hanging_transaction", "m", {"first_offset": 25}, topic="orders-v2", partition=1,
                producer_id=1003, producer_epoch=4, first_offset=25)  # fmt: skip
    text = remediation(f, Target("b-1:9092,b-2:9092", "/etc/kafka/admin client.properties"))
    cmds = _commands(text)
    assert [c[:5] for c in cmds] == [["kafka-transactions.sh", "--bootstrap-server",
                                      "b-1:9092,b-2:9092", "--command-config",
                                      "/etc/kafka/admin client.properties"]] * 2  # fmt: skip
    hang, abort = (_parse(c) for c in cmds)
    assert (hang.command, hang.topic, hang.partition) == ("find-hanging", "orders-v2", 1)
    assert (abort.command, abort.topic, abort.partition, abort.start_offset) == (
        "abort", "orders-v2", 1, 25)  # fmt: skip
    assert "coordinator epoch of an open transaction is not in the dump" in text
    # the older brokers' form where the evidence gives a coordinator epoch
    f["evidence"] = json.dumps({"coordinator_epoch": 7})
    old = _parse(_commands(remediation(f, Target()))[-1])
    assert (old.producer_id, old.producer_epoch, old.coordinator_epoch) == (1003, 4, 7)
    assert old.bootstrap_server == "<bootstrap-servers>" and old.start_offset is None


def test_identifiers_are_quoted_for_the_shell():
    """A group id with a space and a quote comes back whole from the shell's split."""
    f = finding("offset_regression", "m", {}, topic="audit-log", partition=0,
                group_id="team's readers", first_offset=0, last_offset=31, record_count=32)  # fmt: skip
    text = remediation(f, Target())
    assert "read again" in text and "(32)" in text
    parsed = [_parse(c) for c in _commands(text)]
    assert {p.group for p in parsed} == {"team's readers"}
    reset = parsed[-1]
    assert reset.reset_offsets and reset.dry_run and not reset.execute
    assert reset.from_file == "reset-team's readers-audit-log-0.csv"
    assert "printf '%s\\n' audit-log,0,32 >" in text


@pytest.fixture(scope="module")
def faulted(tmp_path_factory):
    """The feature scenarios with faults of every family, audited in one process."""
    root = tmp_path_factory.mktemp("remedies")
    names = ("transaction_faults", "offset_resets", "broadcast_groups", "aborted_reads",
             "replica_divergence", "idempotence_faults", "corrupt_segments")  # fmt: skip
    found = []
    for name in names:
        synth(name, str(root / name), seed=3)
        found += audit_local([str(root / name)])["findings"]
    return found


def test_every_finding_of_the_faulted_scenarios_has_a_next_step_that_parses(faulted):
    kinds = {f["kind"] for f in faulted}
    assert {"hanging_transaction", "offset_regression", "offset_overwrite", "aborted_read_leak",
            "aborted_data_propagated", "replica_divergence"} <= kinds  # fmt: skip
    commands = 0
    for f in faulted:
        assert f["remediation"], f["kind"]
        for c in _commands(f["remediation"]):
            _parse(c)  # raises Refused on an option the tool does not have
            commands += 1
        if f["kind"] == "replica_divergence":
            extract = _parse(_commands(f["remediation"])[-1])
            assert (extract.command, extract.what, extract.id) == ("extract", "finding",
                                                                  f["fingerprint"])  # fmt: skip
        if f["kind"] == "aborted_data_propagated":
            ev = json.loads(f["evidence"])
            assert all(p in f["remediation"] for p in ev["output_partitions"])
    assert commands > 10


def test_findings_export_as_json_lines_and_csv():
    """`logreplay findings`: JSON lines with the evidence as an object, or CSV with a header
    and the evidence as its JSON text, a row at a time."""
    import csv
    import io

    from jobs.findings import export
    from replay.remediation import filled

    rows = filled([
        finding("sequence_gap", "a gap", {"expected_sequence": 3}, topic="t", partition=0,
                producer_id=7, first_offset=10, last_offset=11, record_count=2),
        finding("orphan_marker", 'a "quoted", comma', {}, topic="t", partition=1),
    ], Target())  # fmt: skip
    sink = io.StringIO()
    assert export(iter(rows), "jsonl", sink) == 2
    docs = [json.loads(line) for line in sink.getvalue().splitlines()]
    assert docs[0]["evidence"] == {"expected_sequence": 3} and docs[0]["fingerprint"]
    sink = io.StringIO()
    assert export(iter(rows), "csv", sink) == 2
    back = list(csv.DictReader(io.StringIO(sink.getvalue())))
    assert back[1]["message"] == 'a "quoted", comma' and back[0]["remediation"]
    assert json.loads(back[0]["evidence"]) == {"expected_sequence": 3}


def test_a_fingerprint_names_the_finding_not_its_wording():
    from replay.remediation import fingerprint

    a = finding("sequence_gap", "one wording", {"x": 1}, topic="t", partition=0, first_offset=5)
    b = {**a, "message": "another", "evidence": "{}"}
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint({**a, "first_offset": 6})


def test_a_growing_anomaly_keeps_its_fingerprint_across_runs():
    """A divergence, a hanging transaction and a group's aborted reads found again by three
    daily runs, each time larger (further last offset, more records, another producer passed
    over): one fingerprint. A fixed event's own extent still tells two events apart."""
    from replay.remediation import fingerprint

    base = {"cluster": "c", "topic": "t", "partition": 3, "transactional_id": None,
            "first_offset": 1000, "producer_id": 7}  # fmt: skip
    grown = [{"last_offset": 1000 + 500 * day, "record_count": 10 * day} for day in range(3)]
    for kind, group in (("replica_divergence", None), ("hanging_transaction", None),
                        ("aborted_read_leak", "g"), ("aborted_read_exposure", "g")):  # fmt: skip
        reads = group is not None  # a group's reads pass over more producers' aborts too
        prints = {fingerprint({**base, "kind": kind, "group_id": group, **g,
                               **({"producer_id": 7 - day} if reads else {})})
                  for day, g in enumerate(grown)}  # fmt: skip
        assert len(prints) == 1, kind
    split = [fingerprint({**base, "kind": "split_outcome", "group_id": None, "producer_id": 7,
                          "last_offset": last}) for last in (1002, 1005)]  # fmt: skip
    assert split[0] != split[1]
