"""The report's parts that need no dump: payload redaction, the order of kinds, the dump
command; and, with Spark, the windows kept around a finding and the overview's aggregates."""

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


def test_the_header_shows_what_the_audit_could_judge():
    from jobs.report.page import coverage_panel

    summary = {
        "coverage": {
            "transactions": {"share": 0.25, "seen": 8, "judged": 2, "unit": "transactions",
                             "reasons": {"no coordinator history": 6}},
            "replicas": {"share": None, "seen": 0, "judged": 0, "unit": "replicas", "reasons": {}},
        },
        "dump_layout": {"clusters": {"east": {}, "west": {}}, "reasons": ["split <by path>"]},
    }  # fmt: skip
    html = coverage_panel(summary)
    assert "25.0%" in html and "no coordinator history: 6" in html and "8 transactions" in html
    assert "2 cluster(s): east, west" in html and "split &lt;by path&gt;" in html
    assert coverage_panel({}) == ""


def test_the_header_shows_how_the_logs_went_on_since_the_previous_run():
    from jobs.report.page import since_panel

    points = {"points": 12, "went_on": 11, "bytes_after": 2048, "log_bytes": 9000,
              "changes": {"truncated": 1}, "truncated": ["orders-3 (broker 2)"],
              "points_without_replica": 0}  # fmt: skip
    html = since_panel({"since_points": points})
    assert "11 of 12" in html and "2,048 of 9,000" in html
    assert "truncated: 1" in html and "orders-3 (broker 2)" in html
    assert since_panel({}) == ""


def test_the_dump_command_names_the_segment_of_the_finding():
    row = {"topic": "t", "partition": 0, "first_offset": 50}
    cmd = dump_command(row, {"file": "broker-1/t-0/00000000000000000040.log"}, ["/d u/mp"], None)
    assert cmd == "logreplay dump '/d u/mp/broker-1/t-0/00000000000000000040.log' --deep"
    found = dump_command(row, {}, ["/dump"], lambda t, p, o: f"b/{t}-{p}/{o:020d}.log")
    assert found == "logreplay dump /dump/b/t-0/00000000000000000050.log --deep"
    assert dump_command({"topic": None}, {}, ["/dump"], None) is None
    # a run over several roots shows paths relative to their common directory
    several = dump_command(row, {"file": "b/x/t-0/0.log"}, ["/d/a", "/d/b"], None)
    assert several == "logreplay dump /d/b/x/t-0/0.log --deep"
    s3 = dump_command(row, {"file": "a/x/t-0/0.log"}, ["s3://k/d/a", "s3a://k/d/b/"], None)
    assert s3 == "logreplay dump s3://k/d/a/x/t-0/0.log --deep"


def _near(rows: list[int], centre: int | None, window: int) -> list[int]:
    """The window the report keeps around a finding, written out in Python."""
    if centre is None:
        return rows[: 2 * window]
    if len(rows) <= 2 * window:
        return rows
    at = next((i for i, r in enumerate(rows) if r >= centre), len(rows))
    lo = max(0, at - window)
    return rows[lo : lo + 2 * window]


def test_a_hanging_transaction_links_to_what_left_it_open():
    """A hanging transaction and the missing marker (or unlisted write) that left it open
    share an evidence key: each card links to the other, cause and effect."""
    import json

    from jobs.report import _related
    from jobs.report.page import card
    from replay.crosslog_stream import open_transaction_key

    key = open_transaction_key("order-state", 2, 1003, 254)
    rows = [
        {"kind": "missing_marker", "severity": "error", "message": "m", "topic": "order-state",
         "partition": 2, "evidence": json.dumps({"open_transaction": key})},
        {"kind": "hanging_transaction", "severity": "error", "message": "h",
         "topic": "order-state", "partition": 2,
         "evidence": json.dumps({"open_transaction": key})},
        {"kind": "sequence_gap", "severity": "error", "message": "s", "evidence": "{}"},
    ]  # fmt: skip
    cards = [(r["kind"], 0, r) for r in rows]
    ev = {n: evidence(r, False) for n, r in enumerate(rows)}
    related = _related(cards, ev)
    assert related == {0: [(1, "hanging_transaction")], 1: [(0, "missing_marker")]}
    html = card(rows[1], ev[1], None, "", 1, related[1])
    assert "id='card-1'" in html and "href='#card-0'>missing_marker</a>" in html
    # the next step, escaped, above the dump command
    rows[1]["remediation"] = "kafka-transactions.sh --bootstrap-server '<bootstrap-servers>' abort"
    html = card(rows[1], ev[1], "logreplay dump x", "", 1, [])
    assert "next step" in html and "&#x27;&lt;bootstrap-servers&gt;&#x27;" in html
    assert html.index("next step") < html.index("logreplay dump x")


def test_context_windows_keep_the_rows_around_each_card(spark):
    """Spark's windows (jobs.report.context._windows) keep, per card, what the report means
    to plot: every row of a short history, else 2 * WINDOW rows around the centre (fewer at
    the end), the first ones without a centre, the last ones when asked."""
    from jobs.report.context import WINDOW, _windows

    sizes = {1: 1000, 2: 100, 3: 1000, 4: 1000, 5: 1000}
    centres = {1: 500, 2: 50, 3: None, 4: 990, 5: 3}
    data = [(n, c, centres[c]) for c, size in sizes.items() for n in range(size)]
    df = spark.createDataFrame(data, "offset bigint, _card int, _centre bigint")
    got = _windows(df, "offset")
    for card, size in sizes.items():
        want = _near(list(range(size)), centres[card], WINDOW)
        assert [r["offset"] for r in got[card]] == want, card
    last = _windows(df.where("_card = 1"), "offset", last=True)
    assert [r["offset"] for r in last[1]] == list(range(1000 - 2 * WINDOW, 1000))


class _Frames:
    """An audit output as the overview reads it: tables by name, ``columns`` selected."""

    def __init__(self, frames: dict) -> None:
        self.frames = frames

    def frame(self, name: str, columns: list[str] | None = None):
        df = self.frames.get(name)
        if df is None or columns is None:
            return df
        return df.select(*[c for c in columns if c in df.columns])


def test_the_overview_counts_the_inputs_and_orders_topics_whatever_the_hash_seed(spark):
    """The header's counts (distinct brokers and topics beside the totals, the first of the
    logs' timestamps) and the per-topic bars: by log bytes, ties by records, then by name
    (never by a set's order of strings, which changes from one process to the next)."""
    from jobs.report.overview import _per_topic, inputs

    segs = spark.createDataFrame(
        [("b1", "t-small", "log", 10, 10, 0, 0), ("b1", "t-b", "log", 50, 50, 0, 0),
         ("b2", "t-a", "log", 50, 40, 10, 0), ("b2", "t-c", "log", 50, 50, 0, 0),
         ("b2", "t-c", "index", 7, 7, 0, 0), (None, None, "checkpoint", 3, 3, 0, 0)],
        "broker string, topic string, kind string, size bigint, bytes_valid bigint, "
        "bytes_padding bigint, bytes_corrupt bigint",
    )  # fmt: skip
    parts = spark.createDataFrame(
        [("t-small", 0, 5, 1_000), ("t-b", 0, 7, 2_000), ("t-a", 0, 7, 3_000),
         ("t-c", 0, 9, None), ("t-c", 1, 0, 500)],
        "topic string, partition int, data_records bigint, last_timestamp bigint",
    )  # fmt: skip
    txns = spark.createDataFrame([(400,), (None,)], "first_timestamp bigint")
    lso = spark.createDataFrame([(300,)], "timestamp bigint")
    src = _Frames({"segments": segs, "partitions": parts, "transactions": txns,
                   "lso_changes": lso})  # fmt: skip
    got = inputs(src)
    assert (got["brokers"], got["files"], got["bytes"], got["log_bytes"]) == (2, 6, 170, 160)
    assert (got["topics"], got["partitions"], got["records"]) == (4, 5, 28)
    assert (got["first_timestamp"], got["last_timestamp"]) == (300, 3_000)
    fig = _per_topic(src)
    assert fig["data"][0]["x"] == ["t-c", "t-a", "t-b", "t-small"]
    assert fig["data"][1]["y"] == [9, 7, 7, 5]
