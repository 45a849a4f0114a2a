"""The finding vocabulary (replay.findings.VOCABULARY) holds together with what reads it: every
kind has its documentation (docs/findings.md's summary table, with its severity), a rule that
emits it, and a context plot the report knows (or none, declared); adding a kind and
forgetting one of these fails here, not silently in a report. No Spark."""

from __future__ import annotations

import pathlib
import re

from replay.findings import (
    FAMILIES,
    INTEGRITY_KINDS,
    KINDS,
    LOWERED,
    SEVERITIES,
    VOCABULARY,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `(?P<kind>[a-z_]+)` \| (?P<severity>[a-z]+)(?: \((?P<lowered>[a-z]+)\))? \|")


def _documented() -> dict[str, tuple[str, str | None]]:
    """kind -> (severity, lowered severity) of docs/findings.md's summary table."""
    text = (ROOT / "docs" / "findings.md").read_text()
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    rows = (ROW.match(line) for line in summary.splitlines())
    return {m["kind"]: (m["severity"], m["lowered"]) for m in rows if m}


def test_every_kind_is_declared_whole():
    for kind, k in VOCABULARY.items():
        assert k.severity in SEVERITIES, kind
        assert k.family is None or k.family in FAMILIES, kind
    assert set(LOWERED) <= set(KINDS) and set(INTEGRITY_KINDS) <= set(KINDS)
    assert {kind: k.severity for kind, k in VOCABULARY.items()} == KINDS


def test_every_kind_is_documented_with_its_severity():
    documented = _documented()
    assert set(documented) == set(VOCABULARY), set(documented) ^ set(VOCABULARY)
    for kind, (severity, lowered) in documented.items():
        assert severity == KINDS[kind], kind
        assert lowered == LOWERED.get(kind), kind


def test_every_family_has_its_plot_in_the_report():
    from jobs.report import PLOTS, selection

    assert set(PLOTS) == set(FAMILIES)
    for kind, k in VOCABULARY.items():
        assert selection.family(kind) == k.family, kind


def test_every_kind_is_emitted_by_a_rule():
    """Each kind's name stands in the code that finds it (the replay's rules, the decoders'
    error kinds), not only in the vocabulary."""
    code = "\n".join(
        p.read_text()
        for package in ("replay", "decoders", "jobs")
        for p in (ROOT / package).rglob("*.py")
        if p.name != "findings.py"
    )
    missing = [kind for kind in VOCABULARY if f'"{kind}"' not in code]
    assert not missing, missing
