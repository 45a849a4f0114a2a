"""The audit in one process, without Spark: the scan's units in a loop, then the stages across
partitions over rows.

Every replica is read and replayed by the unit the Spark scan's tasks run
(:class:`replay.scan_task.ScanTask`), the replica kept per partition is chosen by the same
rule (:func:`replay.replicas.chosen_replicas`), and the stages across partitions call the same
functions as the Spark plan (:func:`replay.crosslog_stream.crosslog_tables`,
:func:`replay.leakage.judge_partition`) and the same row rules (:mod:`replay.rules`), grouping
here in Python. For tests (a property test replays dozens of simulated dumps in seconds) and
small dumps; both must give the same findings: the test suite runs scenarios through both.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import decoders
from decoders.layout import dump_layout
from replay import tables as T
from replay.coverage import (
    coverage_rows,
    leakage_counts,
    partition_bytes,
    replica_counts,
    shares,
)
from replay.crosslog_stream import crosslog_tables, producer_inputs
from replay.grouped import INTERNAL_TOPICS, with_shares
from replay.incarnations import commit_windows, routed_commits
from replay.leakage import NOT_COMMITTED, judge_partition
from replay.remediation import filled, target_of
from replay.replicas import (
    REPLAY_TABLES,
    REPLICA_BROKER,
    chosen_replicas,
    cleaned_bounds,
    replay_spec,
)
from replay.rules import CLEANED_IDENTITY, DIVERGENCE, INTEGRITY, PROPAGATION
from replay.scan_task import ScanTask, audit_options, replica_units
from replay.settings import AuditConfig
from replay.tables import CLUSTER


def _by(rows: list[dict], *keys: str) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        out[tuple(r[k] for k in keys)].append(r)
    return out


def scanned(
    paths: list[str], config: AuditConfig, spec=None, listed: tuple | None = None
) -> tuple[dict[str, pa.Table], set[tuple], list]:
    """Every replica of the dump read and replayed as the scan's tasks do, one unit (a
    partition directory, or a file outside one) at a time: the scan's tables (decoded ones with
    their broker's cluster, the replays' with their replica's keys), the replicas kept and
    every replica replayed. ``listed``: the dump's listing, if the caller made it."""
    listed = listed if listed is not None else dump_layout(paths)
    files = listed[0]
    opts = audit_options(files, config, spec or replay_spec(paths, config, listed))
    parts: dict[str, list[pa.RecordBatch]] = {t: [] for t in opts.tables}
    replicas = []
    for unit in replica_units(files):
        report = ScanTask(opts, lambda table, b: parts[table].append(b)).run(unit)
        replicas += report.replicas
    tables = {}
    for t, batches in parts.items():
        schema = REPLAY_TABLES.get(t) or decoders.TABLES[t].append(pa.field(CLUSTER, pa.string()))
        tables[t] = pa.Table.from_batches(batches, schema=schema)
    return tables, chosen_replicas(replicas), replicas


def _kept(table: pa.Table, chosen: set[tuple] | None) -> pa.Table:
    """A replay table's rows of the chosen replicas (None: every replica's), without the
    replica's keys."""
    if chosen is not None:
        keys = zip(*(table.column(c).to_pylist() for c in
                     (CLUSTER, "replica_topic", "replica_partition", REPLICA_BROKER)), strict=True)  # fmt: skip
        table = table.filter(pa.array([k in chosen for k in keys], pa.bool_()))
    return table.drop_columns([REPLICA_BROKER, "replica_topic", "replica_partition"])


def _rows(table: pa.Table, out: str, schema: pa.Schema) -> list[dict]:
    """One output table's rows of a replay table (``out`` naming each row's table)."""
    mine = table.filter(pc.equal(table.column("out"), out))
    return mine.select([CLUSTER, *schema.names]).to_pylist()


def _plain(table: pa.Table) -> list[dict]:
    """A decoded table's rows, timestamps as epoch milliseconds (as the replays hold them)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(pa.int64()))
    return table.to_pylist()


def audit_local(paths: list[str], conf: dict | AuditConfig | None = None,
                since: dict[str, list[dict]] | None = None) -> dict[str, list[dict]]:  # fmt: skip
    """Replay a dump in this process; rows by table name (findings, transactions, partitions,
    coordinator_transactions, offset_timeline, group_generations, lso_changes, replay_states,
    checks), each row with its ``cluster``. ``since``: the result of a previous run over an
    earlier copy of the dump, which this one goes on from (`--since`: replay.previous)."""
    config = AuditConfig.of(conf)
    listed = dump_layout(paths)  # once: the spec's small files and the scan's
    spec = replay_spec(paths, config, listed)
    if since is not None:
        from replay.previous import in_memory

        points, previous = in_memory(since)
        spec = replace(spec, points=points, previous=previous)
    tables, chosen, replicas = scanned(paths, config, spec, listed)
    replayed = {t: _kept(tables[t], chosen) for t in REPLAY_TABLES}
    part, coord, groups = replayed["replayed"], replayed["coordinated"], replayed["grouped"]
    transactions = _rows(part, "transaction", T.TRANSACTIONS)
    partitions = _rows(part, "partition", T.PARTITIONS)
    coord_txns = _rows(coord, "coord_txn", T.COORDINATOR_TXNS)
    timeline = _rows(groups, "timeline", T.TIMELINE)
    findings = [r for t in (part, coord, groups) for r in _rows(t, "finding", T.FINDINGS)]
    checks = _rows(part, "count", T.CHECK_COUNTS)
    facts = replace(config.facts(), anchors=spec.layout.anchors)
    cross_findings, cross_counts = _cross_log(transactions, coord_txns, partitions, facts)
    leaks = _leakage(transactions, timeline, partitions, config)
    findings += cross_findings + leaks + _propagation(leaks, transactions, coord_txns)
    findings += [
        {**INTEGRITY.finding({**e, "first_offset": e["offset"]}), CLUSTER: e[CLUSTER]}
        for e in _plain(tables["errors"])
    ]
    batches = [b for b in _plain(tables["batches"]) if b["topic"] is not None]
    # a previous run's divergence findings (replay.previous) go on with this run's
    carried = [f for f in findings if f["kind"] == DIVERGENCE.kind]
    findings = [f for f in findings if f["kind"] != DIVERGENCE.kind]
    findings += _divergence(batches, cleaned_bounds(replicas), carried) + spec.layout.findings
    findings = filled(findings, target_of(config.remediation))
    routed, routing = routed_commits(
        timeline, commit_windows(partitions, config.clock_tolerance_ms)
    )
    checks += cross_counts + spec.layout.counts + replica_counts(replicas) + routing
    checks += _leakage_counts(transactions, routed)
    return {
        "findings": findings,
        "transactions": transactions,
        "partitions": partitions,
        "coordinator_transactions": coord_txns,
        "offset_timeline": timeline,
        "group_generations": _rows(groups, "generation", T.GENERATIONS),
        "lso_changes": _rows(part, "lso", T.LSO_CHANGES),
        "replay_states": _rows(_kept(tables["replayed"], None), "carried", T.REPLAY_STATES),
        "replicas": replicas,
        "checks": checks,
        "coverage": _coverage(checks, replicas),
        "layout": spec.layout.described,
    }


def _cross_log(transactions, coord_txns, partitions, facts) -> tuple[list[dict], list[dict]]:
    """Partitions against the coordinator, per producer id (the Spark plan's
    ``Audit._cross_log``): (findings, check counts)."""
    by_cluster = _by(partitions, CLUSTER)
    by_pid_txn = _by(transactions, CLUSTER, "producer_id")
    by_pid_coord = _by(coord_txns, CLUSTER, "producer_id")
    findings, counts = [], []
    for cluster, pid in sorted(set(by_pid_txn) | set(by_pid_coord)):
        left, coord = producer_inputs(by_pid_txn.get((cluster, pid), []),
                                      by_pid_coord.get((cluster, pid), []),
                                      by_cluster.get((cluster,), []))  # fmt: skip
        out = crosslog_tables(pid, left, coord, facts, cluster)
        findings += _rows(T.with_cluster(out, cluster), "finding", T.FINDINGS)
        counts += _rows(T.with_cluster(out, cluster), "count", T.CHECK_COUNTS)
    return findings, counts


def _leakage(transactions, timeline, partitions, config) -> list[dict]:
    """Aborted reads per partition (the Spark plan's ``Audit._leakage``)."""
    declared = config.declared_isolation()
    ends = {(p[CLUSTER], p["topic"], p["partition"]): p["copy_end_timestamp"] for p in partitions}
    data_txns = [
        {**x, "copy_end_timestamp": ends.get((x[CLUSTER], x["topic"], x["partition"]))}
        for x in transactions
        if x["record_count"] and x["topic"] not in INTERNAL_TOPICS
    ]
    leaks = []
    windows = commit_windows(partitions, config.clock_tolerance_ms)
    timeline, _ = routed_commits(timeline, windows)
    commits_by = _by(timeline, CLUSTER, "topic", "partition")
    for (cluster, topic, partition), txns in sorted(_by(data_txns, CLUSTER, "topic", "partition").items()):  # fmt: skip
        rows = judge_partition(
            topic, partition, txns, commits_by.get((cluster, topic, partition), []), declared,
            config.clock_tolerance_ms,
        )  # fmt: skip
        leaks += [{**r, CLUSTER: cluster} for r in rows]
    return leaks


def _leakage_counts(transactions: list[dict], commits: list[dict]) -> list[dict]:
    """The "leakage" coverage family (the Spark plan's ``Audit._leakage_counts``)."""
    exposed: dict[tuple, int] = defaultdict(int)
    for x in transactions:
        if x["record_count"] and x["topic"] not in INTERNAL_TOPICS and x["outcome"] in NOT_COMMITTED:  # fmt: skip
            exposed[(x[CLUSTER], x["topic"], x["partition"])] += 1
    committed = {(c[CLUSTER], c["topic"], c["partition"]) for c in commits
                 if c["committed_offset"] is not None}  # fmt: skip
    rows = [{"cluster": k[0], "topic": k[1], "partition": k[2], "count": n} for k, n in sorted(exposed.items())]  # fmt: skip
    return leakage_counts(rows, committed)


def _propagation(leaks: list[dict], txns: list[dict], coord: list[dict]) -> list[dict]:
    """replay.rules.PROPAGATION over rows (replay.checks.propagation in Spark)."""
    ids = {(a[CLUSTER], a["producer_id"]): a["transactional_id"] for a in coord}
    out = []
    for lk in leaks:
        if lk["kind"] != "aborted_read_leak":
            continue
        step = (json.loads(lk["evidence"]).get("commit_producer_ids") or [None])[0]
        if step is None:
            continue
        committed = [x for x in txns if x["producer_id"] == step and x["outcome"] == "COMMIT"
                     and x["record_count"] and x["topic"] not in INTERNAL_TOPICS
                     and x[CLUSTER] == lk[CLUSTER]]  # fmt: skip
        if not committed:
            continue
        row = {
            **{c: lk[c] for c in ("topic", "partition", "group_id", "first_offset",
                                  "last_offset", "record_count")},
            "producer_id": step, "transactional_id": ids.get((lk[CLUSTER], step)),
            "output_partitions": sorted({f"{x['topic']}-{x['partition']}" for x in committed}),
            "committed_transactions": len(committed),
            "output_records": sum(x["record_count"] for x in committed), "leak": lk["evidence"],
        }  # fmt: skip
        out.append({**PROPAGATION.finding(row), CLUSTER: lk[CLUSTER]})
    return out


def _divergence(batches: list[dict], cleaned: dict[tuple, int], carried: list[dict] = ()
                ) -> list[dict]:  # fmt: skip
    """replay.rules.DIVERGENCE over rows (replay.checks.divergence in Spark); inside a cleaned
    range (``cleaned``: replay.replicas.cleaned_bounds) by CLEANED_IDENTITY; with the
    ``carried`` findings of a previous run, one finding per partition."""
    spans: dict[tuple, list[dict]] = defaultdict(list)  # (first, last, records, batches, brokers)
    for (cluster, topic, partition), rows in sorted(_by(batches, CLUSTER, "topic", "partition").items()):  # fmt: skip
        bound = cleaned.get((cluster, topic, partition), 0)
        for (base,), at in sorted(_by(rows, "base_offset").items()):
            if base < bound:
                kept = {tuple(r[c] for c in CLEANED_IDENTITY) for r in at}
            else:
                kept = {(r["crc"], r["last_offset"]) for r in at}
            if len({r["broker"] for r in at}) > 1 and len(kept) > 1:
                spans[(cluster, topic, partition)].append({
                    "first": base, "last": max(r["last_offset"] for r in at),
                    "records": max(r["record_count"] for r in at), "batches": 1,
                    "brokers": {r["broker"] for r in at},
                })  # fmt: skip
    for f in carried:
        ev = json.loads(f["evidence"])
        spans[(f[CLUSTER], f["topic"], f["partition"])].append({
            "first": f["first_offset"], "last": f["last_offset"], "records": f["record_count"],
            "batches": ev["batches"], "brokers": set(ev["brokers"]),
        })  # fmt: skip
    out = []
    for (cluster, topic, partition), bad in sorted(spans.items()):
        row = {
            "topic": topic, "partition": partition, "batches": sum(b["batches"] for b in bad),
            "brokers": sorted(set().union(*(b["brokers"] for b in bad))),
            "first_offset": min(b["first"] for b in bad),
            "last_offset": max(b["last"] for b in bad),
            "record_count": sum(b["records"] for b in bad),
        }  # fmt: skip
        out.append({**DIVERGENCE.finding(row), CLUSTER: cluster})
    return out


def _coverage(checks: list[dict], replicas) -> list[dict]:
    """The coverage table's rows (the Spark plan's ``Audit._coverage``)."""
    largest = partition_bytes(replicas)
    rows = coverage_rows(checks)
    for r in rows:
        r["bytes"] = largest.get((r[CLUSTER], r["topic"], r["partition"]))
    return rows


def summary(result: dict[str, list[dict]]) -> dict[str, Any]:
    checks: dict[str, dict[str, int]] = {}
    for r in result["checks"]:
        c = checks.setdefault(r[CLUSTER], {})
        c[r["check"]] = c.get(r["check"], 0) + (r["count"] or 0)
    return {
        "clusters": sorted({p[CLUSTER] for p in result["partitions"]}),
        "checks": {c: with_shares(v) for c, v in checks.items()},
        "coverage": shares(result["coverage"]),
        "dump_layout": result["layout"],
    }
