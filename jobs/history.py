"""Findings with a memory: ``logreplay audit ... --since PREVIOUS_OUT`` (docs/usage.md
"Scheduled audits").

A scheduled audit finds last Tuesday's anomaly again every day until it ages out of the dump;
its gate should fail on the day it appears, not on every day after. Given the previous run's
output, a run tells each finding apart by its fingerprint (replay.findings: kind, cluster and
place, never counts or offsets that grow) as new, still present (with the day it was first
seen), or gone, in the ``findings_history`` table; a new finding whose proof rests on where
the copy ended (an open transaction's marker may yet come: replay.findings.ON_COPY_END) is
provisional until a later run confirms it (still present) or withdraws it (gone). The gate
fails on new and provisional findings only by default (``gate.on``).

The previous output must be one this run can build on: committed (its summary.json written
last), another directory than this run's, of the same output layout and logreplay version,
of the same dump (a cluster id in common: paths change every day, cluster ids do not), and
judged under the same verdict-relevant configuration (:func:`verdict_config`). Anything else
is refused (exit 2, naming the reason); with ``--since auto`` (the latest earlier day's
committed output beside ``--out``, as the daily DAG lays them out) a missing or refused one
falls back to a run without memory, with a warning.

What is carried is the findings' memory only: each run still reads and replays the whole
dump (carrying the replay's state between runs is issue 32's next part)."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass

from replay.tables import GONE, HISTORY, NEW, PROVISIONAL, STATUSES
from replay.tables import STILL_PRESENT as PRESENT
from validations.waivers import run_day

AUTO = "auto"
DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# the configuration that changes what a finding is: a previous run judged under other values
# found other things, and comparing with it would call its findings gone or new for no reason
VERDICT_KEYS = ("audit", "topics", "groups")
CARRIED = ("kind", "severity", "cluster", "topic", "partition", "producer_id",
           "transactional_id", "group_id", "first_offset")  # fmt: skip


class Refused(ValueError):
    """The previous output cannot be built on; the message says why."""


@dataclass(frozen=True)
class Previous:
    """A committed previous output: where, its summary, its day."""

    uri: str
    doc: dict
    day: str


def points_of(previous: Previous | None) -> dict:
    """Where the previous run's replays ended (its ``replay_states`` rows, their states
    included: a replica that goes on from its point is given its partition's), by replica
    (cluster, topic, partition, broker): one row per partition, read on the driver; empty for
    an output without them (an older run's)."""
    from jobs.output import OutputDir, read_rows

    entry = ((previous.doc.get("tables") or {}) if previous else {}).get("replay_states")
    if not entry:
        return {}
    rows = read_rows(OutputDir(previous.uri), entry)
    return {(r["cluster"], r["topic"], r["partition"], r["broker"]): r for r in rows}


def previous_tables(previous: Previous | None):
    """The previous output's tables as the scan's tasks read them back (replay.previous)."""
    from replay.previous import PreviousOutput

    if previous is None:
        return None
    return PreviousOutput(previous.uri, dict(previous.doc.get("tables") or {}))


def verdict_config(conf) -> str:
    """A hash of the configuration keys that affect verdicts (:data:`VERDICT_KEYS`)."""
    chosen = {k: conf.get(k) for k in VERDICT_KEYS}
    text = json.dumps(chosen, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def day_text(logical_date: str | None) -> str:
    """The run's day as text (validations.waivers.run_day: its logical date, else today)."""
    return run_day(logical_date).isoformat()


def previous_output(since: str, out: str | None, day: str, clusters: set[str], conf,
                    version: str, layout: int) -> Previous:  # fmt: skip
    """The previous output ``since`` (a path or URI), checked (:class:`Refused` else);
    ``out``: this run's output, if it writes one."""
    from jobs.output import SUMMARY, OutputDir, normalized

    if out is not None and normalized(since) == normalized(out):
        raise Refused(f"--since {since} is this run's own output (--out)")
    doc, _ = OutputDir(since).read_json(SUMMARY)
    if doc is None:
        raise Refused(f"{since} holds no committed audit (no summary.json: never written, "
                      "or a run killed before its commit)")  # fmt: skip
    if doc.get("layout") != layout:
        raise Refused(f"{since} was written with output layout {doc.get('layout')}, this run "
                      f"writes {layout}")  # fmt: skip
    theirs = (doc.get("versions") or {}).get("logreplay")
    if theirs != version:
        raise Refused(f"{since} was written by logreplay {theirs}, this is {version}")
    if doc.get("verdict_config") != verdict_config(conf):
        raise Refused(f"{since} was judged under another configuration of "
                      f"{', '.join(VERDICT_KEYS)} (or before findings had a memory)")  # fmt: skip
    before = set(doc.get("clusters") or [])
    if clusters and before and not clusters & before:
        from decoders.brokers import UNKNOWN_PREFIX

        hint = ""
        if any(c.startswith(UNKNOWN_PREFIX) for c in clusters | before):
            hint = ("; a cluster whose brokers have no meta.properties is named by its path: "
                    "name it with audit.cluster (the same every day) to go on from a copy "
                    "under another path")  # fmt: skip
        raise Refused(f"{since} audited another dump: clusters {', '.join(sorted(before))}, "
                      f"this dump holds {', '.join(sorted(clusters))}{hint}")  # fmt: skip
    theirs_day = doc.get("day") or (doc.get("logical_date") or "")[:10]
    if theirs_day and theirs_day > day:
        raise Refused(f"{since} is of {theirs_day}, after this run's day {day}")
    return Previous(since, doc, theirs_day or day)


def latest_before(out: str, day: str) -> str | None:
    """``--since auto``: the latest committed output named by a day before ``day`` beside
    ``out`` (the DAG's ``<out_root>/<ds>``), whatever its gate said."""
    from jobs.output import SUMMARY, OutputDir, normalized

    parent = normalized(out).rsplit("/", 1)[0]
    for name in sorted(OutputDir(parent).subdirectories(), reverse=True):
        if DAY.match(name) and name < day:
            uri = f"{parent}/{name}"
            if OutputDir(uri).read_json(SUMMARY)[0] is not None:
                return uri
    return None


def resolved(since: str | None, out: str, day: str, clusters: set[str], conf, version: str,
             layout: int) -> Previous | None:  # fmt: skip
    """The previous output to build on, if any; ``--since auto`` falls back with a warning."""
    if since is None:
        return None
    if since != AUTO:
        return previous_output(since, out, day, clusters, conf, version, layout)
    found = latest_before(out, day)
    if found is None:
        print(f"logreplay audit: --since auto: no committed output before {day} beside {out}; "
              "every finding is new", file=sys.stderr)  # fmt: skip
        return None
    try:
        return previous_output(found, out, day, clusters, conf, version, layout)
    except Refused as e:
        print(f"logreplay audit: --since auto: {e}; every finding is new", file=sys.stderr)
        return None


def history(spark, findings, previous_findings, previous_history, day: str, run_id: str,
            previous_day: str):  # fmt: skip
    """The ``findings_history`` rows of this run (a DataFrame): every finding of this run, new
    (provisional: :func:`on_copy_end`) or still present, and every finding the previous run had
    and this one has not (gone).
    ``previous_history``: the previous run's ``findings_history`` (its first-seen days), or
    None (then its findings were first seen on its day)."""
    from pyspark.sql import functions as F

    from replay.tables import FINDINGS_HISTORY

    def one_per(df):  # a fingerprint once (its first row)
        return df.dropDuplicates(["fingerprint"])

    now = one_per(findings.select("fingerprint", *CARRIED, on_copy_end(F).alias("_provisional")))
    if previous_history is not None:
        before = previous_history.filter(F.col("status") != GONE).select(
            "fingerprint", "first_seen", "last_seen", *[F.col(c).alias(f"p_{c}") for c in CARRIED]
        )
    else:
        before = previous_findings.select(
            "fingerprint", F.lit(previous_day).alias("first_seen"),
            F.lit(previous_day).alias("last_seen"), *[F.col(c).alias(f"p_{c}") for c in CARRIED],
        )  # fmt: skip
    before = one_per(before)
    joined = now.join(before, "fingerprint", "full_outer")
    present = F.col("kind").isNotNull()
    was = F.col("first_seen").isNotNull()
    out = joined.select(
        F.lit(day).alias("logical_date"),
        F.lit(run_id).alias("run_id"),
        "fingerprint",
        F.when(present & was, PRESENT)
        .when(present & F.col("_provisional"), PROVISIONAL)
        .when(present, NEW)
        .otherwise(GONE)
        .alias("status"),
        F.when(was, F.col("first_seen")).otherwise(F.lit(day)).alias("first_seen"),
        F.when(present, F.lit(day)).otherwise(F.col("last_seen")).alias("last_seen"),
        *[F.coalesce(F.col(c), F.col(f"p_{c}")).alias(c) for c in CARRIED],
    )
    names = ["cluster", *FINDINGS_HISTORY.names]
    return out.select(*names)


def on_copy_end(F):
    """A column: whether a finding rests on where the copy ended (replay.findings.ON_COPY_END,
    the same rule as ``rests_on_copy_end``, over the findings' kind and evidence columns)."""
    from replay.findings import ON_COPY_END

    test = F.lit(False)
    for kind, rule in ON_COPY_END.items():
        this = F.col("kind") == kind
        if rule is not None:
            key, value = rule
            this = this & (F.get_json_object(F.col("evidence"), f"$.{key}") == value)
        test = test | F.coalesce(this, F.lit(False))
    return test


def history_of(spark, findings, previous: Previous | None, day: str, run_id: str):
    """This run's ``findings_history`` rows (a DataFrame) from its findings (a DataFrame) and
    the previous output's tables (none: every finding is new)."""
    from pyspark.sql import functions as F

    from jobs.output import OutputDir, read_table

    if previous is None:  # the first of a chain
        empty = findings.select(F.lit(None).cast("string").alias("fingerprint"), *CARRIED)
        return history(spark, findings, empty.limit(0), None, day, run_id, day)
    theirs, tables = OutputDir(previous.uri), previous.doc.get("tables") or {}
    prev_findings = read_table(spark, theirs, "findings", tables["findings"])
    prev_history = (read_table(spark, theirs, HISTORY, tables[HISTORY])
                    if HISTORY in tables else None)  # fmt: skip
    return history(spark, findings, prev_findings, prev_history, day, run_id, previous.day)


def written(spark, out, entries: dict, previous: Previous | None, day: str, run_id: str,
            key: str) -> dict:  # fmt: skip
    """Write this run's ``findings_history`` (from the findings just written); its entry for
    the commit record."""
    from jobs.output import read_table, write_empty, write_table

    findings = read_table(spark, out, "findings", entries["findings"])
    df = history_of(spark, findings, previous, day, run_id)
    before = (
        ((previous.doc.get("tables") or {}).get("findings") or {}).get("rows") if previous else 0
    )
    if entries["findings"]["rows"] == 0 and before == 0:
        # nothing found, now or the run before (whose history rows other than gone ones are
        # its findings): no rows, written without the join's Spark jobs (a healthy chain's
        # every day; four jobs, ~1.2 s)
        return write_empty(df, out, HISTORY, key)
    return write_table(df, out, HISTORY, 1, None, key, "audit:writing")


def statuses(out, entry: dict) -> tuple[dict[str, int], set[str]]:
    """Findings per status, and the fingerprints this run found first, provisional ones
    included (the console lists them first), read back from the table just written (pyarrow,
    two columns, once)."""
    from collections import Counter

    import pyarrow.parquet as pq

    counts: Counter[str] = Counter()
    new: set[str] = set()
    for f in entry["files"]:
        with out.fs.open_input_file(out.path(f["path"])) as src:
            t = pq.read_table(src, columns=["fingerprint", "status"]).to_pydict()
        counts.update(t["status"])
        new.update(fp for fp, st in zip(t["fingerprint"], t["status"], strict=True)
                   if st in (NEW, PROVISIONAL))  # fmt: skip
    return {status: counts.get(status, 0) for status in STATUSES}, new
