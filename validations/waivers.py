"""Waivers: findings a team has accepted for a while, so that a known anomaly stops failing the
gate every day until it ages out of the dump, without hiding it.

A waiver names its findings by fingerprint (or a prefix of one, at least 8 characters, as
``logreplay findings`` prints them), or by kind with optional patterns (``*`` matches any run
of characters) on the topic, the group and the transactional id. It must say why (``reason``),
who answers for it (``owner``) and until when it holds (``expires``, a date: it holds through
that day, by the run's logical date, else today's date in UTC). A waiver in force takes its
findings out of the gate's blocking set; they stay in the findings table, in the console, the
report and the Data Docs, marked with the waiver. An expired waiver waives nothing and fails
the gate, naming itself, so that it is renewed or removed on purpose; a waiver that matches
nothing is reported (the anomaly is gone, or the pattern is wrong).

Pure Python: :func:`waiver_of` for a finding's row, :func:`sql_condition` for Spark's column.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from replay.sql import quoted

# what a waiver may match on, as the findings table names the columns
PATTERN_KEYS = ("topic", "group_id", "transactional_id")
MIN_PREFIX = 8  # the fingerprint prefix `logreplay findings` and `explain` accept


@dataclass(frozen=True)
class Waiver:
    """One entry of ``gate.waivers`` (validated by replay.config)."""

    index: int  # its place in the list, from 1: how the verdict names it
    reason: str
    owner: str
    expires: dt.date
    fingerprint: str | None = None
    kind: str | None = None
    topic: str | None = None
    group_id: str | None = None
    transactional_id: str | None = None

    @property
    def name(self) -> str:
        what = self.fingerprint or " ".join(
            [self.kind or "*"]
            + [f"{k}={getattr(self, k)}" for k in PATTERN_KEYS if getattr(self, k) is not None]
        )
        return f"waiver {self.index} ({what}; {self.owner}: {self.reason})"

    def in_force(self, day: dt.date) -> bool:
        return day <= self.expires

    def matches(self, row: Mapping[str, Any]) -> bool:
        fp = row.get("fingerprint") or ""
        if self.fingerprint is not None:
            return fp.startswith(self.fingerprint)
        if self.kind is not None and row.get("kind") != self.kind:
            return False
        for key in PATTERN_KEYS:
            pattern = getattr(self, key)
            if pattern is not None and not fnmatch.fnmatchcase(row.get(key) or "", pattern):
                return False
        return True


def parsed(entries: Iterable[Mapping[str, Any]] | None) -> list[Waiver]:
    """The configuration's waivers (already validated: replay.config.WaiverEntry)."""
    out = []
    for i, e in enumerate(entries or [], start=1):
        expires = e["expires"]
        if isinstance(expires, str):
            expires = dt.date.fromisoformat(expires)
        out.append(
            Waiver(
                i,
                e["reason"],
                e["owner"],
                expires,
                e.get("fingerprint"),
                e.get("kind"),
                e.get("topic"),
                e.get("group"),
                e.get("transactional_id"),
            )  # fmt: skip
        )
    return out


def waiver_of(waivers: list[Waiver], row: Mapping[str, Any], day: dt.date) -> Waiver | None:
    """The first waiver in force that matches a finding's row (an expired one waives nothing)."""
    return next((w for w in waivers if w.in_force(day) and w.matches(row)), None)


def run_day(logical_date: str | None) -> dt.date:
    """The day a run judges waivers by: its logical date (a scheduled run's day, whenever it
    runs), else today in UTC."""
    if logical_date:
        return dt.date.fromisoformat(str(logical_date)[:10])
    return dt.datetime.now(dt.UTC).date()


def _like(pattern: str) -> str:
    """A ``*`` pattern as a Spark SQL regular expression, anchored."""
    return "^" + ".*".join(re.escape(part) for part in pattern.split("*")) + "$"


def sql_condition(w: Waiver) -> str:
    """A Spark SQL condition over the findings table's columns selecting ``w``'s findings."""
    if w.fingerprint is not None:
        return f"startswith(coalesce(fingerprint, ''), {quoted(w.fingerprint)})"
    parts = ["true"]
    if w.kind is not None:
        parts.append(f"kind = {quoted(w.kind)}")
    for key in PATTERN_KEYS:
        pattern = getattr(w, key)
        if pattern is not None:
            parts.append(f"coalesce({key}, '') rlike {quoted(_like(pattern))}")
    return " AND ".join(parts)
