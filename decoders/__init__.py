"""Decoders for every Kafka on-disk format, bytes to Arrow, no Spark.

Entry points:
- :func:`read_segment` decodes one file into one Arrow table;
- :func:`iter_file` streams any file as bounded Arrow record batches, table by table;
- :func:`read_dump` decodes a whole dump (small dumps and tests; Spark does big ones);
- :func:`discover` lists a dump's files.

Tables and their columns: :mod:`decoders.schemas`.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from decoders import schemas, seams
from decoders.accounting import Accounting, FileInfo
from decoders.batch_tables import HeaderBatch
from decoders.errors import ErrorRow
from decoders.indexes import read_offset_index, read_time_index, read_txn_index
from decoders.internal import decode_internal, internal_tables_for
from decoders.layout import LOG_KINDS, DumpFile, classify, discover, replicas
from decoders.schemas import TABLES
from decoders.segment import SegmentDecoder
from decoders.snapshot import read_snapshot
from decoders.source import open_source

__all__ = [
    "TABLES",
    "DumpFile",
    "FileInfo",
    "SegmentDecoder",
    "decode_file",
    "discover",
    "iter_file",
    "read_dump",
    "read_segment",
    "replicas",
]

RECORD_TABLES = {"records", "offset_commits", "group_metadata", "group_records", "txn_log"}
DEFAULT_MAX_ROWS = 65536


def _info_for(path, info: FileInfo | None) -> FileInfo:
    if info is not None:
        return info
    if isinstance(path, DumpFile):
        return path.info
    if isinstance(path, str) or hasattr(path, "__fspath__"):
        found = discover([path])
        if len(found) == 1:
            return found[0].info
    return FileInfo(file=getattr(path, "name", "<bytes>"))


def iter_file(
    path, tables: Iterable[str] = ("batches",), **options: Any
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Decode one file, yielding (table name, record batch) with at most ``max_rows`` rows each.

    Every table of :data:`TABLES` can be asked for; a file yields rows only for the tables its
    kind has (a `.log` has batches, records, internal tables and errors; an `.index` has
    index_entries...). ``segments`` and ``errors`` rows come last, once the file is accounted for.
    ``options``: the keywords of :func:`decode_file` (``info``, ``deep``, ``verify_crc``,
    ``max_rows``, ``window_bytes``, ``start``, ``stop``, ``memory_budget``,
    ``record_columns``).
    """
    wanted = set(tables)
    segment = yield from decode_file(path, wanted - {"segments"}, **options)
    if "segments" in wanted:
        yield "segments", segments_batch([segment])


def decode_file(
    path,
    tables: Iterable[str] = ("batches",),
    *,
    info: FileInfo | None = None,
    deep: bool = True,
    verify_crc: bool = True,
    max_rows: int = DEFAULT_MAX_ROWS,
    window_bytes: int | None = None,
    start: int = 0,
    stop: int | None = None,
    memory_budget: int | None = None,
    record_columns: Iterable[str] | None = None,
    records_apart: bool = False,
    header_rows: int = 0,
    snapshot_values: bool = False,
) -> Generator[tuple[str, pa.RecordBatch], None, dict]:
    """:func:`iter_file` but for the ``segments`` table: the file's segments row is what the
    generator returns, a dict, for a caller that gathers the rows of many files
    (:func:`segments_batch`): a row's conversion costs more than a small file's decoding (a
    quiet partition has six files).

    ``record_columns``: the columns of ``records`` the caller reads (default all); key, value
    and headers not among them are left null rather than copied out of the records (the
    records table keeps its schema; internal topics' tables, which read them, still get them).
    ``start``/``stop``: the byte range whose entries are decoded; ``info``: the file's place
    when ``path`` does not say it. ``records_apart`` (with ``deep=False``): the tables of
    records decoded too, from the same read, while the batches, errors and segments rows stay
    the header scan's (segment.SegmentDecoder; what the internal tables' decoders reject is
    in none of them either). ``header_rows`` (with ``deep=False``): a window of fewer v2
    batches than this gives its ``batches`` rows as a :class:`batch_tables.HeaderBatch` (its
    table made only where asked); ``snapshot_values``: a producer snapshot's entries as one
    :class:`snapshot.SnapshotEntries` (for a caller that reads them as Python values)."""
    wanted = set(tables) - {"segments"}
    unknown = wanted - TABLES.keys()
    if unknown:
        raise ValueError(f"unknown table(s) {sorted(unknown)}; known: {sorted(TABLES)}")
    if not deep and not records_apart and wanted & RECORD_TABLES:
        raise ValueError(f"tables {sorted(wanted & RECORD_TABLES)} need a deep decode")
    info = _info_for(path, info)
    try:
        src = path.open() if isinstance(path, DumpFile) else open_source(path, info.file)
    except OSError as e:  # unreadable or vanished: an error row, never a traceback
        acct, errors = _unreadable(path, info, e, None)
    else:
        columns = None if record_columns is None else frozenset(record_columns)
        opts = _Options(
            wanted, deep, verify_crc, max_rows, window_bytes, start, stop, memory_budget, columns,
            records_apart and not deep, header_rows, snapshot_values,
        )  # fmt: skip
        try:
            seams.reached(seams.DECODING, info.file)
            acct, errors = yield from _dispatch(src, info, opts)
            errors = errors + _changed(src, info)
        except OSError as e:  # the file went away or changed size while it was read
            acct, errors = _unreadable(path, info, e, src)
        except Exception as e:  # noqa: BLE001 - one file's failure must not end the task
            acct, errors = _failed(info, e, src.size, start, stop)
        finally:
            src.close()
    if "errors" in wanted and errors:
        yield "errors", _errors_batch(info, errors)
    return _segment_row(info, acct, errors)


def _unreadable(path, info: FileInfo, e: OSError, src) -> tuple[Accounting, list[ErrorRow]]:
    """A file that cannot be opened or read to the end: all its bytes skipped, one error row
    (``file_vanished`` where the file is gone: a listed file deleted since, a dangling link)."""
    from decoders.errors import CORRUPT_BYTES, FILE_VANISHED

    size = getattr(src, "size", None)
    if size is None and isinstance(path, DumpFile):
        size = path.size  # as listed: the bytes the dump claims and we could not read
    if size is None:
        try:
            size = os.stat(os.fspath(getattr(path, "path", path))).st_size
        except (OSError, TypeError):
            size = 0
    acct = Accounting(size=size, corrupt=size)
    if isinstance(e, FileNotFoundError):
        why = f"file vanished before it was read: {e.strerror or e}"
        return acct, [ErrorRow(info.file, 0, size, FILE_VANISHED, why)]
    why = f"file cannot be read: {e.strerror or e}" if isinstance(e, OSError) else str(e)
    return acct, [ErrorRow(info.file, 0, size, CORRUPT_BYTES, why)]


def _failed(
    info: FileInfo, e: Exception, size: int, start: int, stop: int | None
) -> tuple[Accounting, list[ErrorRow]]:
    """Decoding raised something other than a format error (out of memory, a bug): the range's
    bytes are counted corrupt and one error row names the file and the reason, so the task (and
    the run) go on with the other files. Rows yielded before the failure stay; the error row says
    that the range is incomplete. Format errors never get here: decoders turn them into rows."""
    from decoders.errors import DECODE_FAILED

    end = size if stop is None else min(stop, size)
    acct = Accounting(size=max(end - start, 0), corrupt=max(end - start, 0))
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:  # where it was raised: a bug report's start
        tb = tb.tb_next
    where = f" at {tb.tb_frame.f_code.co_filename.rsplit('/', 2)[-1]}:{tb.tb_lineno}" if tb else ""
    why = (
        f"decoding stopped with {type(e).__name__}{where}: {e}"[:500]
        + f"; bytes {start}..{end} not fully decoded"
    )
    return acct, [ErrorRow(info.file, start, max(end - start, 0), DECODE_FAILED, why)]


def skipped_file(
    file: DumpFile, reason: str, tables: Iterable[str]
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows of a file a run left out because decoding it failed the Spark task after every
    attempt (see jobs.resilience): an error row naming the file and the reason, and a segments
    row counting all its bytes corrupt, so the accounting still covers every byte."""
    from decoders.errors import DECODE_FAILED

    wanted = set(tables)
    errors = [ErrorRow(file.info.file, 0, file.size, DECODE_FAILED, reason)]
    if "errors" in wanted:
        yield "errors", _errors_batch(file.info, errors)
    if "segments" in wanted:
        acct = Accounting(size=file.size, corrupt=file.size)
        yield "segments", segments_batch([_segment_row(file.info, acct, errors)])


def _changed(src, info: FileInfo) -> list[ErrorRow]:
    """An error row when a local file's size is not what it was when decoding started."""
    from decoders.errors import CORRUPT_BYTES

    now = src.current_size() if hasattr(src, "current_size") else src.size
    if now == src.size:
        return []
    return [
        ErrorRow(
            info.file,
            0,
            src.size,
            CORRUPT_BYTES,
            f"file changed size from {src.size} to {now} bytes while it was decoded",
        )
    ]


@dataclass(frozen=True, slots=True)
class _Options:
    """What :func:`iter_file` was asked for, handed on to the decoder of the file's kind."""

    wanted: set[str]
    deep: bool
    verify_crc: bool
    max_rows: int
    window_bytes: int | None
    start: int
    stop: int | None
    memory_budget: int | None
    record_columns: frozenset[str] | None = None
    records_apart: bool = False
    header_rows: int = 0
    snapshot_values: bool = False


def _dispatch(src, info: FileInfo, opts: _Options):
    kind = info.kind if info.kind != "other" else classify(src.name.rsplit("/", 1)[-1])[0]
    kind = kind.split(".")[0]  # a segment scheduled for deletion is still a segment
    wanted, max_rows, memory_budget = opts.wanted, opts.max_rows, opts.memory_budget
    if kind in LOG_KINDS:
        return (yield from _log(src, info, opts))
    readers = {
        "index": (read_offset_index, "index_entries"),
        "timeindex": (read_time_index, "index_entries"),
        "txnindex": (read_txn_index, "aborted_txns"),
        "snapshot": (read_snapshot, "producer_snapshots"),
    }
    if kind in readers:
        reader, table = readers[kind]
        kwargs = {"memory_budget": memory_budget} if memory_budget else {}
        if table == "index_entries":  # the accounting only, unless its rows are asked for
            kwargs["rows"] = table in wanted
        values = table == "producer_snapshots" and opts.snapshot_values
        if values:
            kwargs["as_values"] = True
        res = reader(src, info, **kwargs)
        if table in wanted and values:
            if res.table.num_rows:  # (SnapshotEntries: one, unsplit)
                yield table, res.table
        elif table in wanted:
            for b in res.table.to_batches(max_chunksize=max_rows):
                yield table, b
        return res.acct, res.acct.errors
    acct = Accounting(size=src.size)
    errors = _text_file(src, info, kind, acct)
    return acct, errors


def _text_file(src, info, kind, acct) -> list[ErrorRow]:
    from decoders import checkpoints
    from decoders.errors import CORRUPT_BYTES, DecodeError

    parsers = {
        "leader_epoch_checkpoint": checkpoints.leader_epoch_checkpoint,
        "offset_checkpoint": checkpoints.offset_checkpoint,
        "partition_metadata": checkpoints.partition_metadata,
        "meta_properties": checkpoints.meta_properties,
        "quorum_state": checkpoints.quorum_state,
    }
    if kind not in parsers:
        acct.corrupt = src.size
        return [
            ErrorRow(
                info.file,
                0,
                src.size,
                CORRUPT_BYTES,
                "not a file this decoder recognises (not by its name nor, for a file named "
                "explicitly, by its extension or first bytes); its bytes were not decoded",
            )
        ]
    try:
        parsed = parsers[kind](src.read_at(0, min(src.size, checkpoints.MAX_TEXT_BYTES)))
        acct.valid = src.size
        acct.batches = len(parsed.get("entries", [])) if isinstance(parsed, dict) else 0
        return []
    except DecodeError as e:
        acct.corrupt = src.size
        return [ErrorRow(info.file, 0, src.size, CORRUPT_BYTES, str(e))]


def _log(src, info: FileInfo, opts: _Options):
    wanted, max_rows = opts.wanted, opts.max_rows
    kwargs = {"window_bytes": opts.window_bytes} if opts.window_bytes else {}
    if opts.memory_budget:
        kwargs["memory_budget"] = opts.memory_budget
    internal = [t for t in internal_tables_for(info.topic) if t in wanted]
    extra_errors: list[ErrorRow] = []
    with SegmentDecoder(
        src,
        info,
        deep=opts.deep,
        verify_crc=opts.verify_crc,
        start=opts.start,
        stop=opts.stop,
        emit_records="records" in wanted or bool(internal),
        columns=None if internal else opts.record_columns,
        records_apart=opts.records_apart,
        header_rows=opts.header_rows,
        **kwargs,
    ) as dec:
        for w in dec.windows():
            if "batches" in wanted and w.batches.num_rows:
                if isinstance(w.batches, HeaderBatch):  # (fewer rows than any max_rows)
                    yield "batches", w.batches
                else:
                    yield from _split("batches", w.batches, max_rows)
            for rb in w.records:
                if "records" in wanted:
                    yield from _split("records", rb, max_rows)
                if not internal:
                    continue
                for t, decoded in decode_internal(rb, info.file, extra_errors):
                    if t in internal:
                        for b in decoded.to_batches(max_chunksize=max_rows):
                            yield t, b
    return dec.acct, dec.acct.errors + ([] if opts.records_apart else extra_errors)


def _split(
    table: str, batch: pa.RecordBatch, max_rows: int
) -> Iterator[tuple[str, pa.RecordBatch]]:
    for off in range(0, batch.num_rows, max_rows):
        yield table, batch.slice(off, max_rows)


def _errors_batch(info: FileInfo, errors: list[ErrorRow]) -> pa.RecordBatch:
    rows = [
        {
            "broker": info.broker,
            "topic": info.topic,
            "partition": info.partition,
            "file": e.file,
            "position": e.position,
            "length": e.length,
            "kind": e.kind,
            "reason": e.reason,
            "offset": e.offset,
        }
        for e in errors
    ]
    return schemas.from_rows("errors", rows).to_batches()[0]


def _segment_row(info: FileInfo, acct: Accounting, errors: list[ErrorRow]) -> dict:
    """A file's ``segments`` row: what it holds and how every byte of it was accounted for."""
    return {
        "broker": info.broker,
        "topic": info.topic,
        "partition": info.partition,
        "file": info.file,
        "kind": info.kind,
        "base_offset": info.base_offset,
        "size": acct.size,
        "bytes_valid": acct.valid,
        "bytes_padding": acct.padding,
        "bytes_corrupt": acct.corrupt,
        "entries": acct.batches,
        "records": acct.records,
        "first_offset": acct.first_offset,
        "last_offset": acct.last_offset,
        "error_count": len(errors),
        "error": errors[0].reason if errors else None,
    }


def segments_batch(rows: list[dict]) -> pa.RecordBatch:
    """Files' ``segments`` rows (:func:`decode_file`) as one batch."""
    return schemas.table_of_rows(TABLES["segments"], rows).combine_chunks().to_batches()[0]


def read_segment(
    path,
    table: str = "batches",
    *,
    info: FileInfo | None = None,
    deep: bool = True,
    verify_crc: bool = True,
) -> pa.Table:
    """One table of one file (a `.log`, index, snapshot, checkpoint...)."""
    batches = [
        b
        for t, b in iter_file(path, (table,), info=info, deep=deep, verify_crc=verify_crc)
        if t == table
    ]
    return pa.Table.from_batches(batches, schema=TABLES[table])


def read_dump(
    paths, tables: Iterable[str] = ("batches",), *, deep: bool = True, verify_crc: bool = True
) -> dict[str, pa.Table]:
    """Tables over every file of a dump, in one process (for small dumps; Spark reads big ones)."""
    wanted = tuple(tables)
    out: dict[str, list[pa.RecordBatch]] = {t: [] for t in wanted}
    for f in discover(paths):
        for t, b in iter_file(f, wanted, deep=deep, verify_crc=verify_crc):
            out[t].append(b)
    return {t: pa.Table.from_batches(bs, schema=TABLES[t]) for t, bs in out.items()}
