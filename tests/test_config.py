"""Configuration layering and validation, the gate policy, and the CLI's exit 2 on bad keys."""

from __future__ import annotations

import pytest

from jobs.cli import main
from replay.config import ConfigError, load
from validations.policy import GatePolicy


def test_defaults_are_valid_and_complete():
    conf = load()
    assert conf["spark"]["master"] == "local[2]"
    assert conf["audit"]["clock_tolerance_ms"] == 2000
    assert conf["gate"]["fail_at"] == "error"
    assert conf["output"]["layout"] == "flat"
    assert conf["topics"] == {} and conf["groups"] == {}


def test_user_file_then_overrides_are_layered(tmp_path):
    user = tmp_path / "site.yaml"
    user.write_text(
        "audit: {clock_tolerance_ms: 250}\n"
        "groups: {billing: {isolation: read_uncommitted, assignor: broadcast}}\n"
        "topics: {orders: {cleanup_policy: compact, transaction_timeout_ms: 60000}}\n"
    )
    conf = load(str(user), ["audit.clock_tolerance_ms=500", "gate.kinds.offset_regression=warning"])
    assert conf["audit"]["clock_tolerance_ms"] == 500  # the override wins over the file
    assert conf["audit"]["producer_id_expiration_ms"] == 86_400_000  # defaults stay
    assert conf["groups"]["billing"] == {"isolation": "read_uncommitted", "assignor": "broadcast"}
    assert conf["topics"]["orders"]["transaction_timeout_ms"] == 60000
    assert conf["gate"]["kinds"] == {"offset_regression": "warning"}


@pytest.mark.parametrize(
    "override, key, words",
    [
        ("audit.clock_skew=5", "audit.clock_skew", "clock_tolerance_ms"),
        ("audit.clock_tolerance_ms=soon", "audit.clock_tolerance_ms", "integer"),
        ("audit.clock_tolerance_ms=-1", "audit.clock_tolerance_ms", ">= 0"),
        ("gate.fail_at=erorr", "gate.fail_at", "'error'"),
        (
            "gate.kinds.duplicate_sequenc=warning",
            "gate.kinds.duplicate_sequenc",
            "duplicate_sequence",
        ),
        ("groups.g.isolation=read_dirty", "groups.g.isolation", "read_uncommitted"),
        ("decode.verify_crc=maybe", "decode.verify_crc", "true or false"),
        ("topics.t.avro.schema=missing.avsc", "topics.t.avro.schema", "no such file"),
        ("topics.t.avro.encoding=confluent", "topics.t.avro.schema_dir", "schemas by id"),
        ("nonsense", "nonsense", "key=value"),
    ],
)
def test_bad_configuration_names_the_key_and_the_fix(override, key, words):
    with pytest.raises(ConfigError) as e:
        load(None, [override])
    assert e.value.key == key
    assert words in str(e.value)


def test_a_bad_user_file_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("audit: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(str(bad))
    with pytest.raises(ConfigError, match="no such file"):
        load(str(tmp_path / "absent.yaml"))


@pytest.mark.parametrize("command", ["audit", "decode", "gate"])
def test_jobs_exit_2_naming_the_key_before_any_work(tmp_path, capsys, command):
    args = [str(tmp_path)] + (["--out", str(tmp_path / "out")] if command != "gate" else [])
    assert main([command, *args, "--set", "audit.clock_skew=5"]) == 2
    err = capsys.readouterr().err
    assert "audit.clock_skew" in err and "clock_tolerance_ms" in err
    assert not (tmp_path / "out").exists()


def test_the_gate_policy_maps_kinds_and_severities():
    p = GatePolicy.from_conf(load(None, ["gate.kinds.offset_regression=warning",
                                         "gate.kinds.split_outcome=never"]))  # fmt: skip
    assert p.fails("duplicate_sequence", "error") and p.fails("hanging_transaction", "critical")
    assert not p.fails("duplicate_sequence", "warning")
    assert p.fails("offset_regression", "warning") and not p.fails("offset_regression", "info")
    assert not p.fails("split_outcome", "critical")
    assert p.blocking_severities("split_outcome") == []
    lenient = GatePolicy.from_conf(load(None, ["gate.fail_at=never"]))
    assert not lenient.fails("crc_mismatch", "critical")


def test_the_decoders_own_defaults_are_the_embedded_ones():
    """decoders/ may not import replay/ (the layering), so the decoders keep their defaults as
    named constants for direct callers; conf/default.yaml must say the same."""
    from decoders.limits import DEFAULT_MEMORY_BUDGET, DEFAULT_WINDOW_BYTES
    from decoders.planning import DEFAULT_RANGE_BYTES

    decode = load()["decode"]
    assert decode["range_bytes"] == DEFAULT_RANGE_BYTES
    assert decode["window_bytes"] == DEFAULT_WINDOW_BYTES
    assert decode["memory_budget_mb"] << 20 == DEFAULT_MEMORY_BUDGET
    assert decode["verify_crc"] is True


def test_the_defaults_are_read_from_inside_a_zip(tmp_path):
    """As spark-submit --py-files ships the project (`./dev package`): the embedded defaults
    are package data, read through importlib.resources, not a path beside the sources."""
    import os
    import pathlib
    import subprocess
    import sys
    import zipfile

    repo = pathlib.Path(__file__).resolve().parents[1]
    archive = tmp_path / "logreplay.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for package in ("conf", "replay"):
            for f in (repo / package).rglob("*"):
                if f.suffix in (".py", ".yaml"):
                    z.write(f, f.relative_to(repo).as_posix())
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import replay.config as c; assert c.__file__.startswith(sys.argv[1]), c.__file__;"
        "print(c.load(None, ['audit.clock_tolerance_ms=7'])['audit']['clock_tolerance_ms'],"
        " c.default('gate.fail_at'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(archive)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.split() == ["7", load()["gate"]["fail_at"]]


def test_waivers_are_validated_and_matched(tmp_path):
    """gate.waivers (validations.waivers): a fingerprint prefix or a kind with `*` patterns,
    each with a reason, an owner and an expiry date (YAML's date or its text); a waiver holds
    through its expiry day and matches what its patterns say, the same in Python and in the
    SQL condition the gate gives Spark."""
    import datetime as dt

    from validations.waivers import parsed, run_day, sql_condition, waiver_of

    user = tmp_path / "waivers.yaml"
    user.write_text(
        "gate:\n  waivers:\n"
        "    - {fingerprint: 06BB1C87, reason: KAFKA-12671, owner: platform, expires: 2026-12-31}\n"
        "    - {kind: offset_regression, group: 'replay-*', topic: 'orders-?*', reason: backfill,\n"
        "       owner: ml, expires: '2026-11-30'}\n"
    )
    conf = load(str(user))
    fp, pattern = parsed(conf["gate"]["waivers"])
    assert fp.fingerprint == "06bb1c87" and fp.expires == dt.date(2026, 12, 31)
    assert pattern.expires == dt.date(2026, 11, 30) and pattern.group_id == "replay-*"
    regression = {"kind": "offset_regression", "group_id": "replay-7", "topic": "orders-?x",
                  "fingerprint": "ffff0000aaaa1111"}  # fmt: skip
    day = dt.date(2026, 11, 30)
    assert waiver_of([fp, pattern], regression, day) is pattern
    assert waiver_of([fp, pattern], regression, day + dt.timedelta(days=1)) is None  # expired
    assert waiver_of([fp, pattern], {**regression, "group_id": "other"}, day) is None
    assert waiver_of([fp, pattern], {"kind": "split_outcome", "fingerprint": "06bb1c87cfa1467d"},
                     day) is fp  # fmt: skip
    assert run_day("2026-11-21T00:00:00+00:00") == dt.date(2026, 11, 21)
    assert sql_condition(pattern).startswith("true AND kind = 'offset_regression' AND ")
    assert sql_condition(fp) == "startswith(coalesce(fingerprint, ''), '06bb1c87')"
    assert GatePolicy.from_conf(conf).waivers == conf["gate"]["waivers"]


@pytest.mark.parametrize(
    "waiver, key, words",
    [
        ({"fingerprint": "06bb1c87", "owner": "o", "expires": "2026-12-31"}, "reason", "missing"),
        ({"kind": "split_outcome", "reason": "r", "owner": "o", "expires": "soon"}, "expires",
         "a date"),
        ({"reason": "r", "owner": "o", "expires": "2026-12-31"}, "", "either a fingerprint"),
        ({"fingerprint": "06bb", "reason": "r", "owner": "o", "expires": "2026-12-31"},
         "fingerprint", "8 to 16 hex"),
        ({"fingerprint": "06bb1c87", "topic": "x", "reason": "r", "owner": "o",
          "expires": "2026-12-31"}, "fingerprint", "patterns go with a kind"),
        ({"kind": "split_outcom", "reason": "r", "owner": "o", "expires": "2026-12-31"}, "kind",
         "split_outcome"),
    ],
)  # fmt: skip
def test_a_bad_waiver_names_its_key(tmp_path, waiver, key, words):
    import yaml

    user = tmp_path / "w.yaml"
    user.write_text(yaml.safe_dump({"gate": {"waivers": [waiver]}}))
    with pytest.raises(ConfigError) as e:
        load(str(user))
    assert e.value.key == "gate.waivers[0]" + (f".{key}" if key else "")
    assert words in str(e.value)
