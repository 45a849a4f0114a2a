"""The test seams (decoders.seams): every point production code names is declared, every
declared point is reached somewhere, and a point does nothing unless a test arms it. No Spark."""

from __future__ import annotations

import pathlib
import re

import pytest

from decoders import seams

ROOT = pathlib.Path(__file__).resolve().parents[1]
PRODUCTION = ("decoders", "replay", "jobs", "validations")
NAMED = re.compile(r"""["']((?:decode|audit|gate|commit):[a-z-]+)["']""")


def _named_in_code() -> set[str]:
    names = set()
    for package in PRODUCTION:
        for path in (ROOT / package).rglob("*.py"):
            if path.name != "seams.py":
                names |= set(NAMED.findall(path.read_text()))
    return names


def test_every_point_named_in_code_is_declared_and_every_declared_one_is_named():
    named = _named_in_code()
    # a scan's kill point names its job, the staged point after it follows from it
    staged = {f"{p.split(':')[0]}:staged-table" for p in named if p.endswith(":decoding")}
    assert named | staged == set(seams.KILL_POINTS)


def test_the_kill_tests_reach_declared_points():
    from tests.test_kill import POINTS, S3_POINTS

    assert {p for _, p in POINTS} | S3_POINTS <= set(seams.KILL_POINTS)


def test_a_point_does_nothing_unless_armed(monkeypatch):
    for var in (seams.KILL_AT, seams.KILL_PID, seams.FAIL_FILE, seams.FAIL_MODE):
        monkeypatch.delenv(var, raising=False)
    for point in seams.KILL_POINTS:
        seams.reached(point)  # the test process is still alive
    seams.reached(seams.DECODING, "orders-0/00000000000000000000.log")
    assert seams.armed() == {}
    monkeypatch.setenv(seams.KILL_AT, "commit:done")
    seams.reached("audit:staged")  # another point: nothing
    assert seams.armed()[seams.KILL_AT] == "commit:done"


def test_a_decoding_fault_hits_its_file_only(monkeypatch):
    monkeypatch.setenv(seams.FAIL_FILE, "orders-0/00000000000000000000.log")
    monkeypatch.setenv(seams.FAIL_MODE, "memory")
    seams.reached(seams.DECODING, "orders-1/00000000000000000000.log")
    with pytest.raises(MemoryError, match="orders-0"):
        seams.reached(seams.DECODING, "orders-0/00000000000000000000.log")
