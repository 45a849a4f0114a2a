"""The report's Spark-free parts: payload redaction, the order of kinds, the dump command."""

from __future__ import annotations

import hashlib

from jobs.report.selection import dump_command, evidence, kinds_worst_first


def test_payloads_are_length_and_hash_unless_asked():
    row = {"evidence": '{"key": "user-42", "nested": [{"value": "secret"}], "offset": 7}'}
    hidden = evidence(row, include_payloads=False)
    digest = hashlib.sha256(b"secret").hexdigest()[:16]
    assert hidden["key"] == f"7 bytes, sha256 {hashlib.sha256(b'user-42').hexdigest()[:16]}"
    assert hidden["nested"] == [{"value": f"6 bytes, sha256 {digest}"}]
    assert hidden["offset"] == 7
    shown = evidence(row, include_payloads=True)
    assert shown["key"] == "user-42" and shown["nested"] == [{"value": "secret"}]


def test_kinds_are_ordered_worst_first_then_by_count():
    counts = {
        "offset_regression": {"warning": 9},
        "split_outcome": {"critical": 1},
        "sequence_gap": {"error": 2},
        "duplicate_sequence": {"error": 5},
        "aborted_read_exposure": {"info": 50},
    }
    assert kinds_worst_first(counts) == [
        "split_outcome", "duplicate_sequence", "sequence_gap", "offset_regression",
        "aborted_read_exposure",
    ]  # fmt: skip


def test_the_dump_command_names_the_segment_of_the_finding():
    row = {"topic": "t", "partition": 0, "first_offset": 50}
    cmd = dump_command(row, {"file": "broker-1/t-0/00000000000000000040.log"}, ["/d u/mp"], None)
    assert cmd == "logreplay dump '/d u/mp/broker-1/t-0/00000000000000000040.log' --deep"
    found = dump_command(row, {}, ["/dump"], lambda t, p, o: f"b/{t}-{p}/{o:020d}.log")
    assert found == "logreplay dump /dump/b/t-0/00000000000000000050.log --deep"
    assert dump_command({"topic": None}, {}, ["/dump"], None) is None
