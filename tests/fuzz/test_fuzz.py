"""The fuzz tier: 10,000 structure-aware mutations with a fixed seed, every regression input
replayed, and large sparse or expanding inputs decoded under the memory budget."""

from __future__ import annotations

import os
import struct
import time

import pytest

from tests.fuzz import checks, inputs, runner
from tests.fuzz.measure import in_subprocess

pytestmark = pytest.mark.fuzz

SEED = 17
COUNT = 10_000
BUDGET_MB = 256


def test_ten_thousand_mutated_inputs():
    t = time.time()
    st = runner.run(SEED, COUNT, None, workers=2)
    took = time.time() - t
    assert st.inputs == COUNT
    assert not st.failures, "\n".join(f"input {i}: {d}" for i, d in st.failures.values())
    # at most three minutes on two cores (66 s measured here at load 5)
    assert took < 180, f"{COUNT} inputs took {took:.0f} s"


@pytest.mark.parametrize("case", runner.regressions(), ids=lambda c: c.origin)
def test_regression_inputs_replay_clean(case):
    checks.check(case)


def test_regression_inputs_are_replayed():
    # the replay test above is parametrised by the files: an empty directory would test nothing
    assert runner.REGRESSIONS.is_dir()
    metas = list(runner.REGRESSIONS.glob("*.json"))
    assert len(metas) == len(list(runner.REGRESSIONS.glob("*.bin")))


def _sparse(tmp_path, kind: str, head: bytes, size: int, topic: str = "t"):
    path = inputs.place(tmp_path, topic, head, kind)
    os.truncate(path, size)
    return path


@pytest.mark.parametrize(
    "kind,head",
    [
        ("log", inputs.batch(inputs.empty_records(50), 50)),
        ("index", struct.pack(">ii", 5, 100) * 1),
        ("timeindex", struct.pack(">qi", 1000, 5)),
        ("txnindex", struct.pack(">hqqqq", 0, 7, 10, 20, 30)),
        ("snapshot", b"\x00\x01" + bytes(8)),
    ],
)
def test_sparse_files_of_several_gib_within_budget(tmp_path, kind, head):
    size = 3 << 30
    got = in_subprocess(_sparse(tmp_path, kind, head, size), BUDGET_MB)
    seg = got["segment"]
    assert seg["size"] == size
    assert seg["bytes_valid"] + seg["bytes_padding"] + seg["bytes_corrupt"] == size, seg
    assert got["peak_mb"] < BUDGET_MB, got
    assert got["seconds"] < 30, got


def test_decompression_bombs_of_every_codec_within_budget(tmp_path):
    from decoders.compression import compress

    n = 2_000_000
    area = inputs.empty_records(n)
    for codec in (1, 2, 3, 4):
        data = inputs.batch(area, n, codec=codec, compressed=compress(codec, area))
        got = in_subprocess(inputs.place(tmp_path, f"c{codec}", data), BUDGET_MB)
        assert got["rows"]["records"] == n, (codec, got)
        assert got["peak_mb"] < BUDGET_MB, (codec, got)
