"""`logreplay dump`: look inside a segment, index, snapshot or a whole partition directory.

Like Kafka's DumpLogSegments, but every field is decoded (internal-topic keys and values,
markers, header values) and the output is either readable lines or JSON lines.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from collections.abc import Iterable
from typing import Any, TextIO

import pyarrow as pa

import decoders
from decoders.control import control_key, control_type_name, is_txn_marker, kraft_control_value
from decoders.errors import DecodeError, ErrorRow
from decoders.layout import NOT_RECOGNISED, resolve
from decoders.verify import verify
from jobs.exits import FAILED, OK, USAGE

DEEP_TABLES = ("batches", "records", "offset_commits", "group_metadata", "group_records", "txn_log")
ALWAYS = ("index_entries", "aborted_txns", "producer_snapshots", "errors", "segments")


class Millis(int):
    """A timestamp kept as int64 milliseconds since the epoch, as Kafka stores it: shown as
    ISO-8601 when Python's datetime can hold it, as the raw number otherwise (never raises)."""

    def iso(self) -> str:
        try:
            t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=int(self))
        except OverflowError:
            return f"{int(self)}ms"
        return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rows(batch: pa.RecordBatch) -> list[dict]:
    """Rows of a batch with timestamp columns as :class:`Millis`, never through datetime."""
    cols = {}
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_timestamp(col.type):
            cols[name] = [
                None if v is None else Millis(v) for v in col.cast(pa.int64()).to_pylist()
            ]
        else:
            cols[name] = col.to_pylist()
    return [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]


def _jsonable(v: Any) -> Any:
    if isinstance(v, Millis):
        return v.iso()
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(v).decode()}
    if isinstance(v, dt.datetime):
        return v.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def _short(v: Any, width: int = 60) -> str:
    if v is None:
        return "null"
    if isinstance(v, Millis):
        text = v.iso()
    elif isinstance(v, bytes):
        try:
            s = v.decode("utf-8")
            text = repr(s)
        except UnicodeDecodeError:
            text = "0x" + v.hex()
    elif isinstance(v, dt.datetime):
        text = v.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    else:
        text = str(v)
    return text if len(text) <= width else text[: width - 3] + "..."


class Printer:
    """Writes rows as readable lines or JSON lines, records under their batch."""

    def __init__(self, out: TextIO, as_json: bool, limit: int | None) -> None:
        self.out, self.as_json, self.limit = out, as_json, limit
        self.pending: dict[str, list[dict]] = {}
        self.count = 0

    def emit(self, table: str, batch: pa.RecordBatch) -> None:
        if table == "batches":
            self.flush()
        self.pending.setdefault(table, []).extend(rows(batch))

    def flush(self) -> None:
        tables, self.pending = self.pending, {}
        by_pos: dict[int, list[tuple[str, dict]]] = {}
        for t in ("records", "offset_commits", "group_metadata", "group_records", "txn_log"):
            for row in tables.pop(t, []):
                by_pos.setdefault(row["batch_position"], []).append((t, row))
        for row in tables.pop("batches", []):
            self.row("batch", row)
            for t, child in by_pos.pop(row["position"], []):
                self.row(t.rstrip("s") if t != "records" else "record", child)
        for children in by_pos.values():
            for t, child in children:
                self.row(t, child)
        for t, rows in tables.items():
            for row in rows:
                self.row(t, row)

    def row(self, kind: str, row: dict) -> None:
        if self.limit is not None and kind in ("batch", "record") and self.count >= self.limit:
            return
        if kind in ("batch", "record"):
            self.count += 1
        if self.as_json:
            self.out.write(json.dumps({"type": kind, **_jsonable(row)}, sort_keys=False) + "\n")
            return
        self.out.write(_TEXT.get(kind, _generic)(kind, row) + "\n")


def _batch_line(_: str, r: dict) -> str:
    flags = [
        x
        for x, on in (
            ("transactional", r["is_transactional"]),
            ("control", r["is_control"]),
            ("delete-horizon", r["has_delete_horizon"]),
        )
        if on
    ]
    parts = [
        f"batch pos={r['position']} offsets={r['base_offset']}..{r['last_offset']} size={r['size']}",
        f"magic={r['magic']} codec={r['compression']} {r['timestamp_type']} max_ts={_short(r['max_timestamp'])}",
        f"pid={r['producer_id']} epoch={r['producer_epoch']} seq={r['base_sequence']}..{r['last_sequence']}",
        f"count={r['record_count']} leader_epoch={r['partition_leader_epoch']}",
    ]
    if flags:
        parts.append(",".join(flags))
    if r["control_type"]:
        ce = (
            f"(coordinator_epoch={r['coordinator_epoch']})"
            if r["coordinator_epoch"] is not None
            else ""
        )
        parts.append(f"marker={r['control_type']}{ce}")
    crc = {True: "ok", False: "BAD", None: "unchecked"}[r["crc_valid"]]
    parts.append(f"crc={crc}")
    if r["error"]:
        parts.append(f"ERROR: {r['error']}")
    return " ".join(parts)


def _record_line(_: str, r: dict) -> str:
    hdrs = ",".join(
        f"{h['key'] if h['key'].isprintable() else repr(h['key'])}={_short(h['value'], 30)}"
        for h in r["headers"]
    )
    s = f"  | offset={r['offset']} ts={_short(r['timestamp'])} seq={r['sequence']} key={_short(r['key'])} value={_short(r['value'])}"
    return s + (f" headers=[{hdrs}]" if hdrs else "") + (_control(r) if r["is_control"] else "")


def _control(r: dict) -> str:
    """A control record named; KRaft control values (leader change, snapshot header...) decoded."""
    try:
        _, ctype = control_key(r["key"])
        name = control_type_name(ctype)
        if is_txn_marker(ctype) or r["value"] is None:
            return f" control={name}"
        return f" control={name} {json.dumps(kraft_control_value(ctype, r['value']))}"
    except DecodeError as e:
        return f" control (undecodable: {e})"


def _commit_line(_: str, r: dict) -> str:
    if r["is_tombstone"]:
        return f"  > offset_commit group={r['group_id']} {r['topic']}-{r['partition']} TOMBSTONE"
    txn = f" transactional pid={r['producer_id']}" if r["is_transactional"] else ""
    return (
        f"  > offset_commit v{r['value_version']} group={r['group_id']} {r['topic']}-{r['partition']} "
        f"offset={r['committed_offset']} leader_epoch={r['leader_epoch']} metadata={r['metadata']!r} "
        f"at={_short(r['commit_timestamp'])}{txn}"
    )


def _group_line(_: str, r: dict) -> str:
    if r["is_tombstone"]:
        return f"  > group_metadata group={r['group_id']} TOMBSTONE"
    lines = [
        f"  > group_metadata v{r['value_version']} group={r['group_id']} generation={r['generation']} "
        f"type={r['protocol_type']} protocol={r['protocol']} leader={r['leader']} members={len(r['members'])}"
    ]
    for m in r["members"]:
        assigned = ";".join(
            f"{tp['topic']}{tp['partitions']}" for tp in (m.get("assigned_partitions") or [])
        )
        lines.append(
            f"      member={m['member_id']} client={m['client_id']} host={m['client_host']} "
            f"topics={m.get('subscribed_topics')} assigned={assigned or '-'}"
        )
    return "\n".join(lines)


def _txn_line(_: str, r: dict) -> str:
    if r["is_tombstone"]:
        return f"  > txn_log id={r['transactional_id']} TOMBSTONE"
    parts = ";".join(f"{tp['topic']}{tp['partitions']}" for tp in (r["partitions"] or []))
    return (
        f"  > txn_log v{r['value_version']} id={r['transactional_id']} pid={r['producer_id']} "
        f"epoch={r['producer_epoch']} state={r['state']} timeout={r['timeout_ms']} partitions={parts or '-'} "
        f"tv={r['client_transaction_version']}"
    )


def _segment_line(_: str, r: dict) -> str:
    return (
        f"== {r['file']} kind={r['kind']} broker={r['broker']} size={r['size']} valid={r['bytes_valid']} "
        f"padding={r['bytes_padding']} corrupt={r['bytes_corrupt']} entries={r['entries']} records={r['records']} "
        f"offsets={r['first_offset']}..{r['last_offset']} errors={r['error_count']}"
    )


def _error_line(_: str, r: dict) -> str:
    return f"!! {r['kind']} at {r['file']}:{r['position']} (+{r['length']} bytes): {r['reason']}"


def _generic(kind: str, r: dict) -> str:
    return f"{kind} " + " ".join(
        f"{k}={_short(v)}"
        for k, v in r.items()
        if k not in ("broker", "topic", "partition", "file")
    )


_TEXT = {
    "batch": _batch_line,
    "record": _record_line,
    "offset_commit": _commit_line,
    "group_metadata": _group_line,
    "group_record": _generic,
    "txn_log": _txn_line,
    "segments": _segment_line,
    "errors": _error_line,
}


def run(
    paths: Iterable[str],
    deep: bool,
    as_json: bool,
    do_verify: bool,
    limit: int | None,
    out: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    paths = list(paths)
    files = decoders.discover(paths)
    if not files:
        print(f"no Kafka files found under {', '.join(paths)}", file=sys.stderr)
        return USAGE
    tables = (DEEP_TABLES if deep else ("batches",)) + ALWAYS
    errors = 0
    unrecognised = _unrecognised(paths, files)
    for f in files:
        why = _unreadable(f)
        if why:
            print(why, file=sys.stderr)
            if len(files) == 1:  # the one file asked for cannot be read: one line, exit 2
                return USAGE
    for f in files:
        if f.path in unrecognised:
            print(f"logreplay dump: {unrecognised[f.path]}: {NOT_RECOGNISED}", file=sys.stderr)
            continue
        printer = Printer(out, as_json, limit)
        if not as_json:
            out.write(f"Dumping {f.info.file} ({f.kind}, {f.size} bytes)\n")
        for table, batch in decoders.iter_file(f, tables, deep=deep):
            if table == "segments":
                printer.flush()
                row = rows(batch)[0]
                errors += row["error_count"]
                printer.row("segments", row)
            else:
                printer.emit(table, batch)
        printer.flush()
    status = OK
    if do_verify:
        problems = verify(paths)
        for p in problems:
            _print_problem(p, as_json, out)
        if not as_json:
            out.write(f"verify: {len(problems)} inconsistencies\n")
        status = FAILED if problems else OK
    return USAGE if unrecognised else status


def _unrecognised(paths: list[str], files: list[decoders.DumpFile]) -> dict[str, str]:
    """The files the user named explicitly that nothing recognises (path -> name as given):
    the command says so and exits 2, instead of dumping a page of one error row."""
    named = {resolve(p)[1]: p for p in paths}
    return {f.path: named[f.path] for f in files if f.kind == "other" and f.path in named}


def _unreadable(f) -> str | None:
    """One line saying why a file cannot be read, or None when it can be opened."""
    try:
        f.open().close()
    except OSError as e:
        return f"logreplay dump: cannot read {f.path}: {e.strerror or e}"
    return None


def _print_problem(p: ErrorRow, as_json: bool, out: TextIO) -> None:
    row = {
        "file": p.file,
        "position": p.position,
        "length": p.length,
        "kind": p.kind,
        "reason": p.reason,
        "offset": p.offset,
    }
    if as_json:
        out.write(json.dumps({"type": "verify", **row}) + "\n")
    else:
        out.write(_error_line("verify", row) + "\n")
