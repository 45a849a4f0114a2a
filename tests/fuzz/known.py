"""The regression inputs of tests/fuzz/regressions/ that earlier rounds found, rebuilt.

``python -m tests.fuzz.known`` writes them again (the same bytes every time). Each is a crash
signature or blow-up found by hand or by fuzzing (issue 17, the atheris engine) and fixed since;
tests/test_hostile.py and tests/test_corruption.py hold the ordinary tests of the same fixes.

An input is built with the simulator's writer or the byte builders of those tests, from the
smallest records that reach the code that failed (empty names, null values), then shrunk: byte
ranges are cut while what the fixed decoder makes of it, its *witness*, stays the same. The
witness is stored beside it (``expect`` in the JSON file: rows per table, error kinds, the
values that failed) and replayed by tests/fuzz/test_fuzz.py with the campaign's checks
(tests.fuzz.checks): an input that no longer reaches that code fails its replay too.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import struct
import sys

import crc32c
import pyarrow as pa

import decoders
from decoders import compression
from decoders.constants import COMPRESSION_GZIP
from decoders.consumer_offsets import encode_offset_commit_key
from decoders.transaction_log import encode_key as txn_key
from simulator.writer import Record, build_batch, legacy_message
from tests.fuzz import checks
from tests.fuzz.mutators import Case
from tests.fuzz.runner import REGRESSIONS

BEYOND_DATETIME = 2**62  # milliseconds: far past datetime.max (year 9999)


@dataclasses.dataclass(frozen=True)
class Known:
    name: str  # the files' stem in tests/fuzz/regressions/
    signature: str  # how it failed before its fix
    origin: str  # where it was found and which test holds the fix
    case: Case
    values: tuple[str, ...] = ()  # "table.column" whose values are part of the witness
    shrink: bool = True  # False: built as small as it can be for what it must reach


def _fix_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def _records_count(batch: bytes, count: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">i", out, 57, count)
    return _fix_crc(out)


def built() -> list[Known]:
    """Every known input as built, before shrinking."""
    legacy_inner = legacy_message(0, None, None, magic=0) + legacy_message(1, None, None, magic=0)
    # v1 inner offsets are relative to the wrapper's: 2^63 - 1 - 0 + 5 runs past int64
    relative = legacy_message(5, None, None, magic=1, timestamp=0) + legacy_message(
        0, None, None, magic=1, timestamp=0
    )
    return [
        Known(
            "internal-offset-commit-timestamp-2e62",
            "OverflowError@internal.py (a record timestamp past datetime.max)",
            "issue 17; tests/test_hostile.py::test_internal_record_timestamp_beyond_datetime",
            Case(
                build_batch(
                    [Record(encode_offset_commit_key("", "", 0), None, timestamp=BEYOND_DATETIME)]
                ),
                "log",
                "__consumer_offsets",
            ),
            ("offset_commits.record_timestamp",),
        ),
        Known(
            "internal-txn-log-timestamp-2e62",
            "OverflowError@internal.py (a record timestamp past datetime.max)",
            "issue 17; tests/test_hostile.py::test_internal_record_timestamp_beyond_datetime",
            Case(
                build_batch([Record(txn_key(""), None, timestamp=BEYOND_DATETIME)]),
                "log",
                "__transaction_state",
            ),
            ("txn_log.record_timestamp",),
        ),
        Known(
            "batch-timestamp-2e62",
            "OverflowError in `logreplay dump` (exit 3): a batch timestamp past datetime.max",
            "issue 17; tests/test_hostile.py::test_dump_batch_with_out_of_range_timestamp",
            Case(build_batch([Record(None, None, timestamp=BEYOND_DATETIME)])),
            ("records.timestamp", "batches.max_timestamp"),
        ),
        Known(
            "legacy-wrapper-inner-offsets-beyond-int32",
            "ArrowInvalid (last_offset_delta, an int32 column, out of range)",
            "issue 17; tests/test_hostile.py::test_legacy_wrapper_inner_offsets_beyond_int32",
            Case(
                legacy_message(
                    2**40,
                    None,
                    compression.compress(COMPRESSION_GZIP, legacy_inner),
                    magic=0,
                    attributes=COMPRESSION_GZIP,
                )
            ),
            ("batches.last_offset_delta", "records.offset"),
        ),
        Known(
            "legacy-v1-inner-offset-beyond-int64",
            "OverflowError (an absolute inner offset past int64 in the records' offset column)",
            "issue 17, the legacy offset overflow of the same fix (no test of its own before this)",
            Case(
                legacy_message(
                    2**63 - 1,
                    None,
                    compression.compress(COMPRESSION_GZIP, relative),
                    magic=1,
                    attributes=COMPRESSION_GZIP,
                    timestamp=0,
                )
            ),
            ("records.offset",),
        ),
        Known(
            "records-count-2e31",
            "MemoryError: record arrays sized by recordsCount 2^31 - 1, not by the records area",
            "tests/test_corruption.py::test_hostile_lengths_do_not_allocate",
            Case(_records_count(build_batch([Record(None, None)]), 2**31 - 1)),
            ("records.offset",),
        ),
        Known(
            "txnindex-zero-tail",
            "blow-up: one aborted transaction per all-zero .txnindex entry (308,405 for 10 MiB)",
            "issue 17; tests/test_hostile.py::test_zero_filled_txnindex_is_one_error_row",
            # an entry, two of zeros (two rows before the fix) and a partial one of zeros
            Case(struct.pack(">hqqqq", 0, 7, 10, 20, 30) + bytes(2 * 34 + 10), "txnindex"),
            ("errors.position", "errors.length"),
        ),
        Known(
            "short-v2-entry",
            "struct.error@mutators.py: the campaign's own mutators on an entry shorter than a"
            " v2 batch header",
            "the atheris engine (the mutators' fix, not the decoders'); its replay runs them",
            # the smallest entry the mutators take for one (batchLength 14), magic 2
            Case(struct.pack(">qiib", 0, 14, 0, 2) + bytes(9)),
            shrink=False,
        ),
    ]


def _tables(case: Case) -> dict[str, pa.Table]:
    out: dict[str, list] = {}
    for t, b in decoders.iter_file(case.data, tuple(decoders.TABLES), info=checks.info_for(case)):
        out.setdefault(t, []).append(b)
    return {t: pa.Table.from_batches(bs) for t, bs in out.items()}


def _plain(col: pa.ChunkedArray) -> list:
    """Values as JSON keeps them: timestamps as their int64 count, never a datetime."""
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.int64())
    return col.to_pylist()


def witness(case: Case, values: tuple[str, ...] | list[str] = ()) -> dict:
    """What the decoder makes of a case: rows per table (segments aside), the kinds of its
    error rows in order, and the values of the named columns."""
    t = _tables(case)
    out = {
        "rows": {n: x.num_rows for n, x in sorted(t.items()) if x.num_rows and n != "segments"},
        "errors": t["errors"].column("kind").to_pylist() if "errors" in t else [],
    }
    if values:
        out["values"] = {}
        for v in values:
            table, column = v.split(".")
            out["values"][v] = _plain(t[table].column(column)) if table in t else []
    return out


def shrink(case: Case, keeps) -> Case:
    """The case with byte ranges cut, halves first, then smaller ones, while ``keeps(case)``;
    no time limit, so the same input always gives the same result."""
    data = case.data
    chunk = max(1, len(data) // 2)
    while chunk >= 1:
        i, cut = 0, False
        while i < len(data):
            cand = data[:i] + data[i + chunk :]
            if cand != data and keeps(dataclasses.replace(case, data=cand)):
                data, cut = cand, True
            else:
                i += chunk
        if not cut:
            chunk //= 2
    return dataclasses.replace(case, data=data)


def minimised(k: Known) -> tuple[Case, dict]:
    """A known input shrunk with its witness kept, and that witness."""
    checks.check(k.case)  # a witness only of what the decoder gets right
    want = witness(k.case, k.values)

    def keeps(c: Case) -> bool:
        try:
            checks.check(c)
        except checks.Failure:
            return False
        return witness(c, k.values) == want

    return (shrink(k.case, keeps) if k.shrink else k.case), want


def write(directory: pathlib.Path = REGRESSIONS) -> list[pathlib.Path]:
    """Write every known input and its JSON where test_fuzz.py replays them."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in built():
        case, want = minimised(k)
        meta = {
            "kind": case.kind,
            "topic": case.topic,
            "signature": k.signature,
            "origin": k.origin,
            "built_bytes": len(k.case.data),
            "expect": want,
        }
        path = directory / f"{k.name}.bin"
        path.write_bytes(case.data)
        path.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
        paths.append(path)
    return paths


def add_witnesses(directory: pathlib.Path = REGRESSIONS) -> list[pathlib.Path]:
    """Record the witness of every stored input without one (a campaign's, once its fix is
    in): the replay then checks the fixed decoder goes on making the same of it."""
    done = []
    for meta_path in sorted(directory.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        if "expect" in meta:
            continue
        case = Case(meta_path.with_suffix(".bin").read_bytes(), meta["kind"], meta["topic"])
        checks.check(case)  # a witness only of what the decoder gets right
        meta["expect"] = witness(case)
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")
        done.append(meta_path)
    return done


def main(argv: list[str]) -> int:
    """``python -m tests.fuzz.known [DIR]`` writes the known inputs; ``--witness [DIR]`` adds
    the witness of stored inputs that have none."""
    witnesses = "--witness" in argv
    args = [a for a in argv if a != "--witness"]
    directory = pathlib.Path(args[0]) if args else REGRESSIONS
    for p in add_witnesses(directory) if witnesses else write(directory):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
