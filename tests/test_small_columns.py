"""The replay's column helpers that skip Arrow's compute calls where a quiet partition's few
rows make each call cost more than the work (numpy, or the buffers seen as another type):
equal to Arrow's semantics, nulls and out-of-range values included."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from decoders.columns import (
    TIMESTAMP_MS,
    epoch_millis,
    in_spark_range,
    outside_spark_range,
    timestamps,
)
from decoders.constants import NO_TIMESTAMP, SPARK_MAX_MS, SPARK_MIN_MS
from replay.partition import _from_segments, cleaner_leftovers_end
from replay.replicas import millis

SEEDS = range(40)


def _chunked(arr: pa.Array, rng: random.Random) -> pa.ChunkedArray:
    cut = rng.randint(0, len(arr))
    return pa.chunked_array([arr.slice(0, cut), arr.slice(cut)], arr.type)


def _millis_by_mask(column) -> pa.Array:
    ms = column.cast(pa.int64())
    return pc.if_else(outside_spark_range(ms), pa.scalar(None, pa.int64()), ms)


@pytest.mark.parametrize("seed", SEEDS)
def test_millis_equal_arrow_s_mask(seed):
    rng = random.Random(seed)
    n = rng.randint(0, 12)
    picks = [0, 1_700_000_000_000, -1, SPARK_MIN_MS, SPARK_MAX_MS, SPARK_MAX_MS + 1,
             SPARK_MIN_MS - 1, 2**62, -(2**62), None]  # fmt: skip
    values = [rng.choice(picks) for _ in range(n)]
    column = pa.array(values, pa.int64()).cast(TIMESTAMP_MS)
    for c in (column, _chunked(column, rng), column.slice(min(1, n))):
        assert millis(c).equals(_millis_by_mask(c)), values
        ms = c.cast(pa.int64())
        assert in_spark_range(ms) == (not pc.any(outside_spark_range(ms)).as_py())


@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_epoch_millis_equal_a_cast(unit):
    typ = pa.timestamp(unit, tz="UTC") if unit != "s" else pa.timestamp(unit)
    column = pa.array([5, None, -3, 1_700_000_000_000], pa.int64()).cast(typ)
    chunked = pa.chunked_array([column.slice(0, 1), column.slice(1)], typ)
    for c in (column, chunked, column.slice(2)):
        assert epoch_millis(c).equals(c.cast(pa.int64()))


def test_timestamps_null_where_absent_or_masked():
    values = np.array([NO_TIMESTAMP, 0, 1_700_000_000_000, 7], np.int64)
    got = timestamps(values, mask=np.array([False, False, False, True]))
    assert got.type == TIMESTAMP_MS
    assert got.cast(pa.int64()).to_pylist() == [None, 0, 1_700_000_000_000, None]


def _leftovers_by_rows(t: pa.Table) -> int:
    """The rule of cleaner_leftovers_end row by row: a row with a null number is none."""
    end = 0
    horizon = (
        t.column("has_delete_horizon").to_pylist()
        if "has_delete_horizon" in t.column_names
        else None
    )
    for i, r in enumerate(t.select(["magic", "base_offset", "last_offset", "record_count",
                                    "is_control"]).to_pylist()):  # fmt: skip
        if None in (r["magic"], r["base_offset"], r["last_offset"], r["record_count"]):
            continue
        short = r["record_count"] < r["last_offset"] - r["base_offset"] + 1 and not r["is_control"]
        if r["magic"] >= 2 and ((horizon is not None and horizon[i]) or short):
            end = max(end, r["last_offset"] + 1)
    return end


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("nulls", [False, True])
def test_cleaner_leftovers_end_equal_the_row_rule(seed, nulls):
    rng = random.Random(seed)
    n = rng.randint(0, 10)

    def maybe(v):
        return None if nulls and rng.random() < 0.15 else v

    base = [rng.randint(0, 100) for _ in range(n)]
    columns = {
        "magic": pa.array([maybe(rng.choice([0, 1, 2, 2, 2])) for _ in range(n)], pa.int8()),
        "base_offset": pa.array([maybe(b) for b in base], pa.int64()),
        "last_offset": pa.array([maybe(b + rng.randint(0, 3)) for b in base], pa.int64()),
        "record_count": pa.array([maybe(rng.randint(0, 4)) for _ in range(n)], pa.int32()),
        "is_control": pa.array([maybe(rng.random() < 0.2) for _ in range(n)], pa.bool_()),
    }
    if rng.random() < 0.7:
        columns["has_delete_horizon"] = pa.array(
            [maybe(rng.random() < 0.2) for _ in range(n)], pa.bool_()
        )
    t = pa.table(columns)
    expected = _leftovers_by_rows(t)
    assert cleaner_leftovers_end(t) == expected
    assert cleaner_leftovers_end(t.to_batches()[0] if n else t) == expected


@pytest.mark.parametrize("seed", SEEDS)
def test_rows_from_segments_equal_a_suffix_test(seed):
    rng = random.Random(seed)
    names = ["/d/t-0/00000000000000000000.log", "/d/t-0/00000000000000000042.snapshot",
             "/d/t-0/00000000000000000042.log.deleted", None]  # fmt: skip
    files = pa.array([rng.choice(names) for _ in range(rng.randint(0, 9))], pa.string())
    expected = [f is None or f.endswith(".log") for f in files.to_pylist()]
    for c in (files, pc.dictionary_encode(files), _chunked(pc.dictionary_encode(files), rng)):
        assert _from_segments(c).tolist() == expected


@pytest.mark.parametrize(
    ("values", "typ", "expected"),
    [
        ([5, 3, 9], pa.int64(), 3),
        ([None, 7, -1, 4], pa.int64(), 4),
        ([-1, None], pa.int64(), None),
        ([None, None], pa.null(), None),  # a column of nothing but nulls, as from_pylist makes
        ([], pa.int64(), None),
    ],
)
def test_first_timestamp_skips_nulls_and_negatives(values, typ, expected):
    from replay.partition import PartitionReplay

    r = PartitionReplay("t", 0)
    t = pa.table({"max_timestamp": pa.array(values, typ)})
    if t.num_rows:
        r._first_timestamp(t)
    assert r.first_timestamp == expected


def test_timestamps_spark_cannot_hold_become_null_on_the_way_into_spark():
    """decoders.spark: a value outside years 1..9999 (a garbage header's) is nulled, the rest
    kept as they are; a batch wholly in range is passed on untouched. (The decoders' timestamp
    columns are all milliseconds: TIMESTAMP_MS.)"""
    from decoders.spark import _spark_safe

    good = pa.array([0, 1_700_000_000_000, None], pa.int64()).cast(TIMESTAMP_MS)
    batch = pa.RecordBatch.from_arrays([good, pa.array([1, 2, 3])], names=["t", "n"])
    assert _spark_safe(batch) is batch
    for far in (SPARK_MAX_MS + 1, SPARK_MIN_MS - 1):
        bad = pa.array([far, 5, None], pa.int64()).cast(TIMESTAMP_MS)
        safe = _spark_safe(pa.RecordBatch.from_arrays([bad, pa.array([1, 2, 3])], names=["t", "n"]))
        assert safe.column(0).cast(pa.int64()).to_pylist() == [None, 5, None]
        assert safe.column(1).to_pylist() == [1, 2, 3]
