"""The fuzz tier: 10,000 structure-aware mutations with a fixed seed, every regression input
replayed, and large sparse or expanding inputs decoded under the memory budget."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import struct
import sys
import time

import pytest

from jobs.cli import main as cli
from tests.fuzz import checks, inputs, known, mutators, runner
from tests.fuzz.measure import in_subprocess

pytestmark = pytest.mark.fuzz

SEED = 17
COUNT = 10_000
BUDGET_MB = 256


def test_ten_thousand_mutated_inputs():
    t = time.perf_counter()
    st = runner.run(SEED, COUNT, None, workers=2)
    print(f"\n{COUNT} inputs in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    assert st.inputs == COUNT  # every input checked: no deadline cut the run short
    assert not st.failures, "\n".join(f"input {i}: {d}" for i, d in st.failures.values())
    kinds = {cls.split(":")[0] for cls in st.by_class}
    assert kinds == {"log", "index", "timeindex", "txnindex", "snapshot"}, st.by_class


REPLAYED = runner.regressions()
MUTANTS_PER_MUTATOR = 20


# an empty directory is one case, None, that fails: never an empty parameter set, skipped
@pytest.mark.parametrize("case", REPLAYED or [None], ids=lambda c: c.origin if c else "none")
def test_regression_inputs_replay_clean(case, tmp_path, capsys):
    """A stored failure, replayed: the campaign's checks (no exception, no `decode_failed`
    row, every byte accounted, the same output twice); what the fixed decoder made of it when
    it was stored (its witness: an input that no longer reaches the code that failed fails
    here too); `logreplay dump` of it as a file; the campaign's mutators over it, and the
    checks again over what they make."""
    assert case is not None, f"no regression input in {runner.REGRESSIONS}"
    checks.check(case)
    meta = json.loads((runner.REGRESSIONS / f"{case.origin}.json").read_text())
    assert "expect" in meta, "add its witness: python -m tests.fuzz.known --witness"
    want = meta["expect"]
    assert known.witness(case, list(want.get("values", {}))) == want

    path = inputs.place(tmp_path, case.topic, case.data, case.kind)
    for flags in ([], ["--json"]):
        assert cli(["dump", "--deep", *flags, str(path)]) == 0
        assert capsys.readouterr().out.strip()

    # its neighbourhood: the mutators must not fail on it, nor the decoder on what they make
    ops = mutators.LOG_MUTATORS if case.kind == "log" else mutators.FILE_MUTATORS
    for op in dict.fromkeys(ops):
        for i in range(MUTANTS_PER_MUTATOR):
            name = f"{case.origin}:{op.__name__}:{i}"
            mutant = dataclasses.replace(case, data=op(random.Random(name), case, [case]))
            try:
                checks.check(mutant)
            except checks.Failure as f:
                pytest.fail(f"mutant {name}: {f}")


def test_regression_inputs_are_replayed():
    """The replay above is parametrised by the files: an empty directory, or a file without
    its pair, would test nothing and pass."""
    metas = sorted(p.stem for p in runner.REGRESSIONS.glob("*.json"))
    assert metas, f"no regression input in {runner.REGRESSIONS}"
    assert metas == sorted(p.stem for p in runner.REGRESSIONS.glob("*.bin"))
    assert sorted(c.origin for c in REPLAYED) == metas
    assert {k.name for k in known.built()} <= set(metas)


def test_the_known_regression_inputs_are_rebuilt_byte_for_byte(tmp_path):
    """tests.fuzz.known makes the stored inputs and their JSON again, the same bytes."""
    written = known.write(tmp_path)
    assert len(written) == len(known.built())
    for p in sorted(tmp_path.iterdir()):
        assert p.read_bytes() == (runner.REGRESSIONS / p.name).read_bytes(), p.name


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
    # holes are skipped, not read: a bound on the work, where a time limit stood
    assert got["read_mb"] < 64, got


def test_decompression_bombs_of_every_codec_within_budget(tmp_path):
    from decoders.compression import compress

    n = 2_000_000
    area = inputs.empty_records(n)
    for codec in (1, 2, 3, 4):
        data = inputs.batch(area, n, codec=codec, compressed=compress(codec, area))
        got = in_subprocess(inputs.place(tmp_path, f"c{codec}", data), BUDGET_MB)
        assert got["rows"]["records"] == n, (codec, got)
        assert got["peak_mb"] < BUDGET_MB, (codec, got)
