"""The audit in one process, without Spark: the same grouped functions as :mod:`replay.plan`,
grouped here in Python over the decoded tables.

For tests (a property test replays dozens of simulated dumps in seconds) and small dumps; the
Spark plan is the audit for real sizes. Both must give the same findings: the test suite runs
scenarios through both.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import decoders
from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from replay import tables as T
from replay.dumpinfo import broker_clusters, cleaner_checkpoints
from replay.grouped import (
    COMMIT_COLUMNS,
    COORDINATOR_COLUMNS,
    INTERNAL_TOPICS,
    MARKER_COLUMNS,
    METADATA_COLUMNS,
    cleaned_upto,
    coordinator_tables,
    crosslog_tables,
    group_partition_tables,
    partition_tables,
    with_shares,
)
from replay.leakage import judge_partition
from replay.rules import DIVERGENCE, INTEGRITY, PROPAGATION
from replay.settings import AuditConfig

# as the Spark plan reads them: batch headers and file accounting from every file, records only
# from the internal topics
SHALLOW = ("batches", "producer_snapshots", "segments", "aborted_txns", "errors")
DEEP = ("txn_log", "offset_commits", "group_metadata")


def _millis(table: pa.Table) -> pa.Table:
    """``table`` with timestamps as int64 milliseconds (as the Spark plan hands them over)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(pa.int64()))
    return table


def _rows(table: pa.Table) -> list[dict]:
    """Rows with timestamps as int64 milliseconds."""
    cols = {
        n: c.to_pylist() for n, c in zip(table.column_names, _millis(table).columns, strict=True)
    }
    return [dict(zip(cols, v, strict=True)) for v in zip(*cols.values(), strict=True)]


def _by(rows: list[dict], *keys: str) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        out[tuple(r[k] for k in keys)].append(r)
    return out


def _read(paths: list[str], config: AuditConfig) -> dict[str, pa.Table]:
    out: dict[str, list[pa.RecordBatch]] = {t: [] for t in SHALLOW + DEEP}
    budget = config.memory_budget_mb << 20 if config.memory_budget_mb else None
    opts = {"verify_crc": config.verify_crc, "memory_budget": budget}
    for f in decoders.discover(paths):
        for t, b in decoders.iter_file(f, SHALLOW, deep=False, **opts):
            out[t].append(b)
        if f.kind == "log" and f.info.topic in INTERNAL_TOPICS:
            for t, b in decoders.iter_file(f, DEEP, deep=True, **opts):
                out[t].append(b)
    return {t: pa.Table.from_batches(bs, schema=decoders.TABLES[t]) for t, bs in out.items()}


def _of_replica(table: pa.Table, broker: str, partition: int, columns) -> pa.Table:
    """An internal topic's records of one replica, ``columns`` only."""
    mine = pc.and_(pc.equal(table.column("broker"), broker),
                   pc.equal(table.column("log_partition"), partition))  # fmt: skip
    return _millis(table.filter(mine).select(list(columns)))


def _split(
    table: pa.Table, out: str, schema: pa.Schema | None = None, cluster: str | None = None
) -> list[dict]:
    """The rows of one output table of a grouped function (``schema``: only its columns; with
    ``cluster`` named)."""
    table = table.filter(pc.equal(table.column("out"), out))
    if schema is None:
        return table.to_pylist()
    return [{"cluster": cluster, **r} for r in table.select(schema.names).to_pylist()]


def audit_local(paths: list[str], conf: dict | AuditConfig | None = None) -> dict[str, list[dict]]:
    """Replay a dump in this process; rows by table name (findings, transactions, partitions,
    coordinator_transactions, offset_timeline, checks), each row with its ``cluster``."""
    config = conf if isinstance(conf, AuditConfig) else AuditConfig.from_conf(conf)
    facts = config.facts()
    clusters = broker_clusters(paths, config.cluster)
    arrow = _read(paths, config)
    t = {name: _rows(table) for name, table in arrow.items() if name not in DEEP}
    for rows in t.values():
        for r in rows:
            r["cluster"] = clusters.get(r.get("broker"), "")
    batches = [b for b in t["batches"] if b["topic"] is not None]

    # replicas: per partition of a cluster the most complete one
    chosen: dict[tuple, str] = {}
    for key, rows in _by(batches, "cluster", "topic", "partition").items():
        per = _by(rows, "broker")
        (chosen[key],) = min(
            per,
            key=lambda b: (
                -max(r["last_offset"] for r in per[b]),
                -sum(bool(r["crc_valid"]) for r in per[b]),
                b,
            ),
        )

    def replayed(r: dict) -> bool:
        return chosen.get((r["cluster"], r["topic"], r["partition"])) == r["broker"]

    cleaned = cleaner_checkpoints(paths)
    compacted = config.compacted_topics()
    side = (
        [{**r, "_row": "snapshot"} for r in t["producer_snapshots"] if replayed(r)]
        + [{**r, "_row": "txnindex_file"} for r in t["segments"]
           if r["kind"] == "txnindex" and r["topic"] is not None and replayed(r)]
        + [{**r, "_row": "aborted"} for r in t["aborted_txns"] if replayed(r)]
    )  # fmt: skip
    side_by = _by(side, "cluster", "topic", "partition")
    findings, transactions, partitions, checks = [], [], [], []
    for (cluster, topic, partition), rows in sorted(_by(batches, "cluster", "topic", "partition").items()):  # fmt: skip
        mine = [r for r in rows if replayed(r)]
        bt = pa.Table.from_pylist(mine)
        broker = mine[0]["broker"]
        end = max(r["last_offset"] for r in mine) + 1
        upto = cleaned_upto(cleaned, compacted, broker, topic, partition, end)
        out = partition_tables(
            topic, partition, bt, side_by.get((cluster, topic, partition), []), facts, upto
        )
        for name, acc in (("finding", findings), ("transaction", transactions),
                          ("partition", partitions), ("count", checks)):  # fmt: skip
            acc.extend({**r, "cluster": cluster} for r in _split(out, name))

    # the transaction coordinator and the groups: per chosen replica of an internal topic
    # (each id's records live in one partition, replay.grouped)
    complete = {(p["cluster"], p["partition"]): p["complete_from"] for p in partitions
                if p["topic"] == TRANSACTION_STATE_TOPIC}  # fmt: skip
    broadcast = config.declared_broadcast()
    coord_txns, timeline = [], []
    for (cluster, topic, partition), broker in sorted(chosen.items()):
        if topic == TRANSACTION_STATE_TOPIC:
            rows = _of_replica(arrow["txn_log"], broker, partition, COORDINATOR_COLUMNS)
            out = coordinator_tables(rows, {partition: complete[(cluster, partition)]})
            coord_txns += [{**r, "cluster": cluster} for r in _split(out, "coord_txn")]
            findings += [{**r, "cluster": cluster} for r in _split(out, "finding")]
        elif topic == CONSUMER_OFFSETS_TOPIC:
            markers = pa.Table.from_pylist(
                [b for b in batches if b["topic"] == topic and b["partition"] == partition
                 and b["broker"] == broker and b["is_control"] and b["record_count"]],
                schema=_millis(decoders.TABLES["batches"].empty_table().select(list(MARKER_COLUMNS))).schema,
            )  # fmt: skip
            out = group_partition_tables(
                partition,
                _of_replica(arrow["offset_commits"], broker, partition, COMMIT_COLUMNS),
                _of_replica(arrow["group_metadata"], broker, partition, METADATA_COLUMNS),
                markers,
                broadcast,
            )
            timeline += _split(out, "timeline", T.TIMELINE, cluster)
            findings += _split(out, "finding", T.FINDINGS, cluster)

    # partitions against the coordinator, per producer id
    ends = {(p["cluster"], p["partition"]): p["copy_end_timestamp"] for p in partitions
            if p["topic"] == TRANSACTION_STATE_TOPIC}  # fmt: skip
    sides = {(p["cluster"], p["topic"], p["partition"]): p for p in partitions}
    by_pid_txn = _by(transactions, "cluster", "producer_id")
    by_pid_coord = _by(coord_txns, "cluster", "producer_id")
    for cluster, pid in sorted(set(by_pid_txn) | set(by_pid_coord)):
        txns = by_pid_txn.get((cluster, pid), [])
        coord = [
            {**a, "copy_end_ts": ends.get((cluster, a["log_partition"]))}
            for a in by_pid_coord.get((cluster, pid), [])
        ]
        touched = {(x["topic"], x["partition"]) for x in txns} | {
            (tp["topic"], tp["partition"]) for a in coord for tp in a["partitions"] or []
        }
        left = [{**x, "_row": "txn"} for x in txns] + [
            {"_row": "side", "topic": tp[0], "partition": tp[1],
             "complete_from": sides[(cluster, *tp)]["complete_from"],
             "copy_end_timestamp": sides[(cluster, *tp)]["copy_end_timestamp"]}
            for tp in sorted(touched) if (cluster, *tp) in sides
        ]  # fmt: skip
        out = crosslog_tables(pid, left, coord, facts)
        findings += [{**r, "cluster": cluster} for r in _split(out, "finding")]
        checks += [{**r, "cluster": cluster} for r in _split(out, "count")]

    # leakage and its propagation
    declared = config.declared_isolation()
    ends = {(p["cluster"], p["topic"], p["partition"]): p["copy_end_timestamp"] for p in partitions}
    data_txns = [
        {**x, "copy_end_timestamp": ends.get((x["cluster"], x["topic"], x["partition"]))}
        for x in transactions
        if x["record_count"] and x["topic"] not in INTERNAL_TOPICS
    ]
    leaks = []
    commits_by = _by(timeline, "cluster", "topic", "partition")
    for (cluster, topic, partition), txns in sorted(_by(data_txns, "cluster", "topic", "partition").items()):  # fmt: skip
        rows = judge_partition(
            topic, partition, txns, commits_by.get((cluster, topic, partition), []), declared,
            config.clock_tolerance_ms,
        )  # fmt: skip
        leaks += [{**r, "cluster": cluster} for r in rows]
    findings += leaks + _propagation(leaks, data_txns, coord_txns)

    # integrity and replicas
    for e in t["errors"]:
        row = INTEGRITY.finding({**e, "first_offset": e["offset"]})
        findings.append({**row, "cluster": e["cluster"]})
    findings += _divergence(batches)
    return {
        "findings": findings,
        "transactions": transactions,
        "partitions": partitions,
        "coordinator_transactions": coord_txns,
        "offset_timeline": timeline,
        "checks": checks,
    }


def _propagation(leaks: list[dict], txns: list[dict], coord: list[dict]) -> list[dict]:
    """replay.rules.PROPAGATION over rows (replay.checks.propagation in Spark)."""
    ids = {(a["cluster"], a["producer_id"]): a["transactional_id"] for a in coord}
    out = []
    for lk in leaks:
        if lk["kind"] != "aborted_read_leak":
            continue
        step = (json.loads(lk["evidence"]).get("commit_producer_ids") or [None])[0]
        if step is None:
            continue
        committed = [x for x in txns if x["producer_id"] == step and x["outcome"] == "COMMIT"
                     and x["cluster"] == lk["cluster"]]  # fmt: skip
        if not committed:
            continue
        row = {
            **{c: lk[c] for c in ("topic", "partition", "group_id", "first_offset",
                                  "last_offset", "record_count")},
            "producer_id": step, "transactional_id": ids.get((lk["cluster"], step)),
            "output_partitions": sorted({f"{x['topic']}-{x['partition']}" for x in committed}),
            "committed_transactions": len(committed),
            "output_records": sum(x["record_count"] for x in committed), "leak": lk["evidence"],
        }  # fmt: skip
        out.append({**PROPAGATION.finding(row), "cluster": lk["cluster"]})
    return out


def _divergence(batches: list[dict]) -> list[dict]:
    """replay.rules.DIVERGENCE over rows (replay.checks.divergence in Spark)."""
    out = []
    for (cluster, topic, partition), rows in sorted(_by(batches, "cluster", "topic", "partition").items()):  # fmt: skip
        bad = []
        for (base,), at in sorted(_by(rows, "base_offset").items()):
            if (
                len({r["broker"] for r in at}) > 1
                and len({(r["crc"], r["last_offset"]) for r in at}) > 1
            ):
                bad.append((base, at))
        if not bad:
            continue
        row = {
            "topic": topic, "partition": partition, "batches": len(bad),
            "brokers": sorted({r["broker"] for _, at in bad for r in at}),
            "first_offset": bad[0][0],
            "last_offset": max(r["last_offset"] for _, at in bad for r in at),
            "record_count": sum(max(r["record_count"] for r in at) for _, at in bad),
        }  # fmt: skip
        out.append({**DIVERGENCE.finding(row), "cluster": cluster})
    return out


def summary(result: dict[str, list[dict]]) -> dict[str, Any]:
    checks: dict[str, dict[str, int]] = {}
    for r in result["checks"]:
        c = checks.setdefault(r["cluster"], {})
        c[r["check"]] = c.get(r["check"], 0) + (r["count"] or 0)
    return {
        "clusters": sorted({p["cluster"] for p in result["partitions"]}),
        "checks": {c: with_shares(v) for c, v in checks.items()},
    }
