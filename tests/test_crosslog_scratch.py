"""The job's cross-log judgement by Python tasks over the scratch area (jobs.crosslog_scratch:
sorted runs merged, no row through the JVM) gives every table exactly as the Spark plan's
sorted stream does (replay.plan.Audit._cross_log, a session's path), on every scenario at
once: spread over buckets (the runs written as files and merged) and as one task."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_the_scratch_judgement_equals_the_spark_stream(spark, sim_all, tmp_path, monkeypatch):
    import decoders
    import replay.plan as plan
    from jobs.output import OutputDir
    from jobs.scan import Scratch, decoded_once
    from replay.config import default
    from replay.replicas import replay_spec
    from replay.settings import AuditConfig

    roots = sorted(str(p) for p in sim_all.iterdir() if p.is_dir())
    files = decoders.discover(roots)
    config = AuditConfig.from_conf(None)
    spec = replay_spec(roots, config)
    judged = []
    python_path = Scratch.judged_cross

    def counted(self, *args):
        judged.append(args[1].buckets)
        return python_path(self, *args)

    def tables(single_rows: int, scratch_judge: bool) -> dict:
        monkeypatch.setattr(plan, "SINGLE_ROWS", single_rows)
        monkeypatch.setattr(Scratch, "judged_cross", counted if scratch_judge else None)
        t = plan.Audit(spark, config, sc).run()
        return {name: t[name].toArrow() for name in sorted(t)}

    out = OutputDir(str(tmp_path / "out"))
    with decoded_once(spark, files, default("decode"), out, "0000cccc", None, spec) as sc:
        want = tables(-1, False)
        spread = tables(-1, True)
        one = tables(10**9, True)  # every scenario's batches: one task
    assert len(judged) == 2 and judged[0] > 1 and judged[1] == 1, judged
    assert want["findings"].num_rows > 100
    kinds = set(want["findings"].column("kind").to_pylist())
    assert {"split_outcome", "missing_marker", "hanging_transaction"} <= kinds
    for got in (spread, one):
        assert set(got) == set(want)
        for name, w in want.items():
            g = got[name]
            assert g.schema == w.schema, name
            assert sorted(map(repr, g.to_pylist())) == sorted(map(repr, w.to_pylist())), name
