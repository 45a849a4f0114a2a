"""The job configuration: embedded defaults (`conf/default.yaml`, the one place a default is
written: code reads them through :func:`defaults`), a user YAML file over them,
then `--set key=value` overrides, validated before any work starts.

A scheduled job that runs for an hour on a misspelt key is worse than one that refuses to
start, so every key is declared here with its type: an unknown key, a wrong type or a missing
path raises :class:`ConfigError` naming the key and how to fix it (the CLI exits 2 on it).
"""

from __future__ import annotations

import copy
import datetime as dt
import difflib
import functools
import os
import pathlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from conf import default_yaml
from replay.coverage import FAMILIES as COVERAGE_FAMILIES
from replay.findings import KINDS, SEVERITIES


class ConfigError(ValueError):
    """A configuration problem: the dotted key, what is wrong, and how to fix it."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        self.key, self.problem, self.fix = key, problem, fix
        super().__init__(f"configuration key {key!r}: {problem}. {fix}")


# -- the declared keys -----------------------------------------------------------------------


@dataclass(frozen=True)
class Int:
    minimum: int | None = 0

    def check(self, key: str, v: Any, base: pathlib.Path) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(key, f"expected an integer, got {v!r}", f"Set it like {key}=1000.")
        if self.minimum is not None and v < self.minimum:
            raise ConfigError(key, f"must be >= {self.minimum}, got {v}", "Use a larger value.")
        return v


@dataclass(frozen=True)
class Share:
    """A share between 0 and 1 (a fraction of what a check could judge)."""

    def check(self, key: str, v: Any, base: pathlib.Path) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise ConfigError(key, f"expected a share from 0 to 1, got {v!r}", f"Set {key}=0.9.")
        return float(v)


@dataclass(frozen=True)
class Bool:
    def check(self, key: str, v: Any, base: pathlib.Path) -> bool:
        if not isinstance(v, bool):
            raise ConfigError(key, f"expected true or false, got {v!r}", f"Set {key}=true.")
        return v


@dataclass(frozen=True)
class Str:
    def check(self, key: str, v: Any, base: pathlib.Path) -> str:
        if not isinstance(v, str) or not v:
            raise ConfigError(key, f"expected a non-empty string, got {v!r}", "Quote the value.")
        return v


@dataclass(frozen=True)
class Scalar:
    """A Spark setting: Spark takes every value as a string."""

    def check(self, key: str, v: Any, base: pathlib.Path) -> str:
        if isinstance(v, dict | list) or v is None:
            raise ConfigError(key, f"expected a single value, got {v!r}", "Give a string.")
        return str(v).lower() if isinstance(v, bool) else str(v)


@dataclass(frozen=True)
class Enum:
    values: tuple[str, ...]

    def check(self, key: str, v: Any, base: pathlib.Path) -> str:
        if v not in self.values:
            near = difflib.get_close_matches(str(v), self.values, n=1)
            hint = f"Did you mean {near[0]!r}? " if near else ""
            raise ConfigError(
                key,
                f"expected one of {', '.join(self.values)}; got {v!r}",
                f"{hint}Use one of the listed values.",
            )
        return v


@dataclass(frozen=True)
class Path:
    """A local file that must exist; relative paths are relative to the file that names them."""

    def check(self, key: str, v: Any, base: pathlib.Path) -> str:
        Str().check(key, v, base)
        if "://" in v:
            return v
        p = (base / v).resolve() if not os.path.isabs(v) else pathlib.Path(v)
        if not p.exists():
            raise ConfigError(
                key, f"no such file or directory: {v} (looked at {p})", "Fix the path."
            )
        return str(p)


@dataclass(frozen=True)
class Section:
    fields: dict[str, Any]

    def check(self, key: str, v: Any, base: pathlib.Path) -> dict:
        if v is None:
            v = {}
        if not isinstance(v, dict):
            raise ConfigError(key, f"expected a mapping, got {v!r}", "Indent its keys under it.")
        out = {}
        for k, sub in v.items():
            where = f"{key}.{k}" if key else str(k)
            if k not in self.fields:
                near = difflib.get_close_matches(str(k), list(self.fields), n=1)
                hint = f"Did you mean {near[0]!r}? " if near else ""
                raise ConfigError(
                    where,
                    "unknown key",
                    f"{hint}Known keys here: {', '.join(self.fields)}.",
                )
            out[k] = self.fields[k].check(where, sub, base)
        return out


@dataclass(frozen=True)
class MapOf:
    """Entries named by the user (topics, groups, Spark settings)."""

    value: Any
    keys: tuple[str, ...] | None = None

    def check(self, key: str, v: Any, base: pathlib.Path) -> dict:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ConfigError(key, f"expected a mapping, got {v!r}", "Indent its entries.")
        if self.keys is not None:
            for k in v:
                Enum(self.keys).check(f"{key}.{k}", k, base)
        return {str(k): self.value.check(f"{key}.{k}", sub, base) for k, sub in v.items()}


@dataclass(frozen=True)
class ListOf:
    """A list of entries of one shape."""

    item: Any

    def check(self, key: str, v: Any, base: pathlib.Path) -> list:
        if v is None:
            return []
        if not isinstance(v, list):
            raise ConfigError(key, f"expected a list, got {v!r}", "Give one '- ' entry per item.")
        return [self.item.check(f"{key}[{i}]", sub, base) for i, sub in enumerate(v)]


@dataclass(frozen=True)
class Day:
    """A date (YAML's 2026-12-31, or the same as a string), kept as its ISO text."""

    def check(self, key: str, v: Any, base: pathlib.Path) -> str:
        if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
            return v.isoformat()
        try:
            return dt.date.fromisoformat(str(v)).isoformat()
        except ValueError:
            raise ConfigError(
                key, f"expected a date, got {v!r}", f"Set {key}: 2026-12-31."
            ) from None


@dataclass(frozen=True)
class WaiverEntry:
    """One of ``gate.waivers`` (validations/waivers.py): a fingerprint (or a prefix of one), or
    a kind with optional ``*`` patterns on topic, group and transactional id; and why, who,
    until when."""

    def check(self, key: str, v: Any, base: pathlib.Path) -> dict:
        shape = Section({
            "fingerprint": Str(), "kind": Enum(tuple(KINDS)), "topic": Str(), "group": Str(),
            "transactional_id": Str(), "reason": Str(), "owner": Str(), "expires": Day(),
        })  # fmt: skip
        out = shape.check(key, v, base)
        for need in ("reason", "owner", "expires"):
            if need not in out:
                raise ConfigError(f"{key}.{need}", "missing", "A waiver says why, who and until when.")  # fmt: skip
        patterns = [k for k in ("topic", "group", "transactional_id") if k in out]
        if ("fingerprint" in out) == ("kind" in out):
            raise ConfigError(key, "needs either a fingerprint or a kind (not both)",
                              "Name the finding by fingerprint, or its kind and patterns.")  # fmt: skip
        if "fingerprint" in out:
            fp = out["fingerprint"].lower()
            if patterns or len(fp) < 8 or any(c not in "0123456789abcdef" for c in fp):
                raise ConfigError(f"{key}.fingerprint", f"expected 8 to 16 hex digits alone, got {fp!r}",  # fmt: skip
                                  "Copy it from `logreplay findings` (patterns go with a kind).")  # fmt: skip
            out["fingerprint"] = fp
        return out


@dataclass(frozen=True)
class GateSection(Section):
    """The gate's section: YAML 1.1 reads a bare ``on:`` key as the boolean true, so that key
    is taken as ``on`` (``gate.on: new``, as the documentation writes it)."""

    def check(self, key: str, v: Any, base: pathlib.Path) -> dict:
        if isinstance(v, dict) and True in v:
            v = {("on" if k is True else k): sub for k, sub in v.items()}
        return super().check(key, v, base)


GATE_THRESHOLDS = (*SEVERITIES, "never")
ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky", "broadcast", "other")

SCHEMA = Section(
    {
        "spark": Section(
            {
                "master": Str(),
                "app_name": Str(),
                "full_jit_from_mb": Int(minimum=0),
                "config": MapOf(Scalar()),
            },
        ),
        "decode": Section(
            {
                "window_bytes": Int(minimum=65536),
                "range_bytes": Int(minimum=1 << 20),
                "verify_crc": Bool(),
                "memory_budget_mb": Int(minimum=16),
            }
        ),
        "output": Section({"layout": Enum(("flat", "per_run"))}),
        "storage": Section(
            {
                "s3": Section(
                    {
                        "endpoint_url": Str(),
                        "region": Str(),
                        "access_key_id": Str(),
                        "secret_access_key": Str(),
                    }
                )
            }
        ),
        "audit": Section(
            {
                "clock_tolerance_ms": Int(),
                "order_window_ms": Int(minimum=1),
                "cluster": Str(),
                "clusters": MapOf(Str()),
                "producer_id_expiration_ms": Int(minimum=1),
                "default_transaction_timeout_ms": Int(minimum=1),
            }
        ),
        "gate": GateSection(
            {
                "on": Enum(("new", "all")),
                "fail_at": Enum(GATE_THRESHOLDS),
                "kinds": MapOf(Enum(GATE_THRESHOLDS), keys=tuple(KINDS)),
                "data_expectations": Bool(),
                "data_docs": Bool(),
                "sample_findings": Int(minimum=1),
                "driver_rows": Int(minimum=0),
                "min_coverage": MapOf(Share(), keys=COVERAGE_FAMILIES),
                "waivers": ListOf(WaiverEntry()),
            }
        ),
        "remediation": Section({"bootstrap_servers": Str(), "command_config": Str()}),
        "topics": MapOf(
            Section(
                {
                    "cleanup_policy": Enum(("delete", "compact", "compact,delete")),
                    "transaction_timeout_ms": Int(minimum=1),
                    "avro": Section(
                        {
                            "encoding": Enum(("schemaless", "confluent")),
                            "schema": Path(),
                            "schema_dir": Path(),
                            "field": Enum(("value", "key")),
                        }
                    ),
                }
            )
        ),
        "groups": MapOf(
            Section(
                {
                    "isolation": Enum(("read_committed", "read_uncommitted")),
                    "assignor": Enum(ASSIGNORS),
                }
            )
        ),
    }
)


# -- loading ---------------------------------------------------------------------------------


class RunConfig(Mapping[str, Any]):
    """A run's configuration, loaded and validated once (:func:`load`) where the run starts and
    passed down whole: a read-only mapping of the validated document (conf/default.yaml's
    shape), with the typed settings the layers read (:attr:`audit`, :attr:`decode`). Loading
    it again gives it back as it is."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self._doc = doc

    def __getitem__(self, key: str) -> Any:
        return self._doc[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._doc)

    def __len__(self) -> int:
        return len(self._doc)

    def __repr__(self) -> str:
        return f"RunConfig({self._doc!r})"

    @functools.cached_property
    def audit(self):
        """The replay's settings (:class:`replay.settings.AuditConfig`)."""
        from replay.settings import AuditConfig

        return AuditConfig.from_conf(self)

    @property
    def decode(self) -> dict[str, Any]:
        """The `decode` section: windows, ranges, CRC checks, the memory budget."""
        return self._doc["decode"]


def load(
    user: str | os.PathLike | Mapping | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> RunConfig:
    """Defaults, then the user's file (or mapping), then `key=value` overrides; validated. A
    :class:`RunConfig` without overrides is already all of that: it comes back as it is."""
    if isinstance(user, RunConfig) and not overrides:
        return user
    if isinstance(user, RunConfig):
        user = dict(user)
    merged = defaults()
    if user is not None:
        if isinstance(user, Mapping):
            doc, base = dict(user), pathlib.Path.cwd()
        else:
            doc, base = _read_user_file(pathlib.Path(user)), pathlib.Path(user).resolve().parent
        merged = _merge(merged, SCHEMA.check("", doc, base))
    for item in overrides:
        merged = _merge(merged, SCHEMA.check("", _override(item), pathlib.Path.cwd()))
    _check_avro(merged)
    return RunConfig(merged)


@functools.cache
def _defaults() -> dict[str, Any]:
    return SCHEMA.check("", yaml.safe_load(default_yaml()) or {}, pathlib.Path.cwd())


def defaults() -> dict[str, Any]:
    """The embedded defaults, validated (a copy: the caller may change it)."""
    return copy.deepcopy(_defaults())


def default(key: str) -> Any:
    """One embedded default by its dotted key, e.g. ``default("audit.clock_tolerance_ms")``."""
    value: Any = _defaults()
    for part in key.split("."):
        value = value[part]
    return copy.deepcopy(value)


def _read_user_file(path: pathlib.Path) -> dict:
    if not path.exists():
        raise ConfigError("--conf", f"no such file: {path}", "Give the path of a YAML file.")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError("--conf", f"{path} is not valid YAML ({e})", "Fix its syntax.") from e
    if doc is not None and not isinstance(doc, dict):
        raise ConfigError("--conf", f"{path} must hold a mapping", "Start it with `audit:`.")
    return doc or {}


def _override(item: str) -> dict:
    """`a.b.c=value` as the nested mapping {a: {b: {c: value}}}; the value is read as YAML so
    numbers and booleans keep their types."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(
            item, "an override must look like key=value", "E.g. audit.clock_tolerance_ms=500."
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    doc: Any = value
    for part in reversed(key.strip().split(".")):
        doc = {part: doc}
    return doc


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _check_avro(conf: dict) -> None:
    for topic, facts in conf.get("topics", {}).items():
        avro = facts.get("avro")
        if not avro:
            continue
        key = f"topics.{topic}.avro"
        encoding = avro.setdefault("encoding", "schemaless")
        avro.setdefault("field", "value")
        if encoding == "schemaless" and "schema" not in avro:
            raise ConfigError(
                f"{key}.schema", "a schemaless topic needs its writer schema", "Give an .avsc path."
            )
        if encoding == "confluent" and "schema_dir" not in avro and "schema" not in avro:
            raise ConfigError(
                f"{key}.schema_dir",
                "the Confluent wire format needs schemas by id",
                "Give a directory of <id>.avsc files (or one schema for every id).",
            )
