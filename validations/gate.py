"""The gate: Great Expectations checkpoints over the tables of an audit (or decode) output.

Each table is validated by a GE 1.x checkpoint. A table of at most ``gate.driver_rows`` rows
is validated on the driver: the columns its expectations read (often none: a row count), read
with pyarrow from the files the output's commit record lists (:func:`jobs.output.read_columns`),
by GE's pandas engine; a larger one is the Spark DataFrame of those files, on any filesystem
(:func:`jobs.output.read_tables`), validated by GE's Spark engine (``persist`` off, so a big
table is scanned, never cached). The expectations are the same objects either way. Why: GE's
Spark engine resolves each expectation's metrics with Spark jobs and hundreds of calls to the
JVM, about 0.1 s a table however small it is; a gate runs on every pipeline run, most of whose
tables hold a row per finding, check or partition. The checkpoints update one Data Docs site
under ``<gate dir>/data_docs``; the verdict, with the findings behind each failed expectation
(always found by Spark, over the whole table), goes to ``<gate dir>/result.json``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from replay.sql import quoted
from replay.tables import HISTORY
from replay.tables import STILL_PRESENT as PRESENT
from validations.policy import GatePolicy
from validations.suites import (
    BLOCKING,
    WAIVED,
    Suite,
    coverage_suite,
    data_suites,
    findings_suite,
    waivers_suite,
)
from validations.waivers import Waiver, parsed, run_day, sql_condition

KNOWN = "gate_known"

DOCS = "data_docs"
RESULT = "result.json"


@dataclass
class Failure:
    table: str
    expectation: str
    description: str
    unexpected_count: int | None
    observed: object
    behind: list[str] = field(default_factory=list)


@dataclass
class GateResult:
    success: bool
    run_id: str
    evaluated: int
    failures: list[Failure]
    docs_index: str | None
    waivers: list[dict] = field(default_factory=list)  # one row per waiver (waiver_rows)
    known: int = 0  # findings at a failing severity the previous run had (gate.on: new)

    def verdict(self) -> str:
        head = "PASS" if self.success else "FAIL"
        lines = [
            f"gate {head}: {self.evaluated - len(self.failures)}/{self.evaluated} expectations met"
        ]
        for f in self.failures:
            count = f" ({f.unexpected_count} rows)" if f.unexpected_count else ""
            lines.append(f"  failed [{f.table}] {f.description}{count}")
            lines += [f"    - {b}" for b in f.behind]
        if self.known:
            lines.append(f"  not counted: {self.known} finding(s) the previous run had too "
                         "(gate.on: new; `--set gate.on=all` counts them)")  # fmt: skip
        for w in self.waivers:
            if not w["expired"] and w["waived"]:
                lines.append(f"  waived {w['waived']} finding(s) under {w['waiver']} until {w['expires']}: {w['sample']}")  # fmt: skip
            elif not w["expired"] and not w["matched"]:
                lines.append(f"  note: {w['waiver']} matches no finding (gone, or a wrong pattern?)")  # fmt: skip
        return "\n".join(lines)

    def summary(self) -> dict:
        return {
            "success": self.success,
            "evaluated": self.evaluated,
            "failed": [f"[{f.table}] {f.description}" for f in self.failures],
            "waived": sum(w["waived"] for w in self.waivers),
            "known": self.known,
            "waivers": [
                {k: w[k] for k in ("waiver", "expires", "expired", "matched", "waived", "sample")}
                for w in self.waivers
            ],
        }


def run_gate(
    spark,
    tables: dict,
    gate_dir: str,
    conf: dict,
    run_id: str,
    logical_date: str | None = None,
    rows: dict[str, int] | None = None,
    on_driver=None,
) -> GateResult:
    """Validate ``tables`` (name -> DataFrame, as :func:`jobs.output.read_tables` reads a
    committed output); write result.json and Data Docs in ``gate_dir``, a local directory.
    ``on_driver(table, columns, most_rows)``: those columns of a committed table as an Arrow
    table (without columns: its number of rows) when it holds at most ``most_rows`` rows, else
    None (:func:`jobs.output.read_columns`); without it every table is validated by Spark."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # no network calls from a gate
    policy = GatePolicy.from_conf(conf)
    frames = dict(sorted(tables.items()))
    rows = rows or {}
    suites: list[Suite] = []
    waiver_rows: list[dict] = []
    known = 0  # findings that would fail the gate but the previous run had them (gate.on: new)
    if "findings" in frames:
        frames["findings"], waiver_rows, known = _blocking_findings(frames, policy, logical_date)
        suites.append(findings_suite(policy, sorted(policy.thresholds()), rows.get("findings")))
    coverage = frames.pop("coverage", None)
    if policy.data_expectations:
        suites += data_suites({t: df.columns for t, df in frames.items()}, rows)
    made = {}  # tables the gate makes on the driver, a row per family or waiver
    if policy.min_coverage and coverage is not None:
        made["coverage"] = coverage_shares(coverage, policy)
        suites.append(coverage_suite(policy))
    if waiver_rows:
        made["waivers"] = pa.Table.from_pylist(waiver_rows, WAIVER_ROWS)
        suites.append(waivers_suite(waiver_rows))
    frames |= {name: spark.createDataFrame(table) for name, table in made.items()}

    context = _context(gate_dir, policy)
    run = _run_identifier(run_id, logical_date)
    data = _driver_data(frames, made, suites, on_driver, policy.driver_rows)
    failures, evaluated, described = _validated(context, suites, frames, data, run, policy)
    docs = None
    if policy.data_docs:
        # the site is built once, from every stored result and suite: a checkpoint's own
        # UpdateDataDocsAction would rebuild the index after each table (~0.35 s each)
        context.build_data_docs()
        settle_docs(os.path.join(gate_dir, DOCS), run.run_time)
        docs = os.path.join(gate_dir, DOCS, "index.html")
    result = GateResult(not failures, run_id, evaluated, failures, docs, waiver_rows, known)
    where = {s.table: "driver" if s.table in data else "spark" for s in suites}
    _write_result(gate_dir, result, policy, logical_date, described, where)
    return result


def _blocking_findings(frames: dict, policy: GatePolicy, logical_date: str | None):
    """The findings with the column that says which block the gate (a finding of a kind and
    severity the policy fails on, not waived, and under ``gate.on: new`` not known from the
    previous run); the waivers' rows; how many blocking findings the previous run had."""
    from pyspark.sql import functions as F

    findings = frames["findings"]
    blocking = _blocking(policy, sorted(policy.thresholds()), F)
    waivers = parsed(policy.waivers)
    waiver_rows: list[dict] = []
    known = 0
    if waivers:
        day = run_day(logical_date)
        for c in ("fingerprint", "group_id", "transactional_id", "topic"):
            if c not in findings.columns:  # an output written before the column existed
                findings = findings.withColumn(c, F.lit(None).cast("string"))
        findings = findings.withColumn(WAIVED, _waived(waivers, day, F))
        waiver_rows = _waiver_rows(findings, waivers, day, F)
        blocking = F.when(F.col(WAIVED).isNull(), blocking)
    history = frames.get(HISTORY)
    if policy.on == "new" and history is not None:  # what the previous run had: known
        seen = history.filter(F.col("status") == PRESENT).select("fingerprint").distinct()
        findings = findings.join(seen.withColumn(KNOWN, F.lit(True)), "fingerprint", "left")
        known = findings.filter(F.col(KNOWN) & blocking.isNotNull()).count()
        blocking = F.when(F.col(KNOWN).isNull(), blocking)
    return findings.withColumn(BLOCKING, blocking), waiver_rows, known


def _driver_data(frames: dict, made: dict, suites: list[Suite], on_driver, most_rows: int):
    """table -> the pandas DataFrame the gate validates on the driver (the columns its suite's
    expectations read), for every table of at most ``most_rows`` rows; the others are not in
    it. The findings with their blocking column are derived by Spark, then only the columns
    the suite reads come to the driver; the tables the gate ``made`` are there already."""
    from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

    times = (DateType, TimestampType, TimestampNTZType)
    data = {}
    if on_driver is None or most_rows <= 0:
        return data
    for suite in suites:
        name = suite.table
        types = {f.name: f.dataType for f in frames[name].schema.fields}
        # times stay in Spark: a broker's timestamp can lie beyond what pandas (or Python's
        # datetime) holds; a suite of row counts alone still reads one column, as GE's pandas
        # engine counts no rows in a frame of none
        timed = {c for c, t in types.items() if isinstance(t, times)}
        reads = suite.reads() or [c for c in types if c not in timed][:1]
        if not reads or timed & set(reads):
            continue
        if name in made:
            got = made[name].select(reads)
        elif name == "findings":
            small = on_driver(name, [], most_rows) is not None
            got = frames[name].select(*reads).toArrow() if small else None
        else:
            got = on_driver(name, reads, most_rows)
        if got is not None:
            data[name] = got.to_pandas()
    return data


def _validated(context, suites: list[Suite], frames: dict, data: dict, run, policy: GatePolicy):
    """Each suite validated against its table (on the driver when ``data`` holds it): the
    failures (each with the rows behind it, found by Spark), how many expectations were
    evaluated, and each result as Great Expectations describes it."""
    failures, evaluated, described = [], 0, []
    for suite in suites:
        table = data.get(suite.table)
        result = _validate(context, suite, frames[suite.table] if table is None else table, run)
        described.append(result.describe_dict())
        by_description = _expectation_results(result)
        failed = []
        for check in suite.checks:
            r = by_description[check.description]
            evaluated += 1
            if not r.success:
                failed.append((check, r))
        behind = _behind([c for c, _ in failed], frames[suite.table], policy.sample_findings)
        failures += [_failure(suite, c, r, behind.get(c.description, [])) for c, r in failed]
    return failures, evaluated, described


def _write_result(gate_dir: str, result: GateResult, policy: GatePolicy,
                  logical_date: str | None, described: list, where: dict) -> None:  # fmt: skip
    """The gate's result.json: its verdict, the policy it applied, every result, and where
    each table was validated (``driver`` or ``spark``)."""
    with open(os.path.join(gate_dir, RESULT), "w") as f:
        json.dump(
            {
                "run_id": result.run_id,
                "logical_date": logical_date,
                "success": result.success,
                "evaluated": result.evaluated,
                "failures": [asdict(x) for x in result.failures],
                "policy": {
                    "fail_at": policy.fail_at,
                    "kinds": policy.kinds,
                    "min_coverage": policy.min_coverage,
                    "on": policy.on,
                },
                "waivers": result.waivers,
                "known": result.known,
                "validated_on": where,
                "great_expectations": described,
            },
            f,
            indent=2,
            sort_keys=True,
            default=str,
        )


GE_LOGO = re.compile(
    r"https://great-expectations-web-assets\.s3[^\"']*/logo-long\.png\?d=[0-9TZ.]*"
)
STAMP = re.compile(r"\d{8}T\d{6}\.\d{6}Z")
COLLAPSE = re.compile(
    r"collapse-body-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
)


def coverage_shares(coverage, policy: GatePolicy) -> pa.Table:
    """The `coverage` table as one row per family: its share judged and, for a family below
    its ``gate.min_coverage``, the sentence naming why (replay.coverage.below). The table is
    summed by family and reason first (a few rows to the driver)."""
    from pyspark.sql import functions as F

    from replay.coverage import below, shares

    keys = ["family", "judged", "reason", "unit"]
    rows = [
        r.asDict() for r in coverage.groupBy(*keys).agg(F.sum("count").alias("count")).collect()
    ]
    by_family = shares(rows)
    made = []
    for family, f in by_family.items():
        why = below({family: f}, {family: policy.min_coverage.get(family, 0.0)})
        made.append({"family": family, "share": f["share"], "message": why[0] if why else None})
    for family in policy.min_coverage:
        if family not in by_family:  # nothing of it in the dump: nothing it could not judge
            made.append({"family": family, "share": None, "message": None})
    return pa.Table.from_pylist(made, COVERAGE_ROWS)


def settle_docs(site: str, run_time: dt.datetime) -> None:
    """Make the Data Docs a function of the results alone: GE stamps each page with the clock
    (the batch's ge_load_time, a cache-busting query on a remote logo) and random element ids.
    The logo becomes the site's own copy (the page needs no network), times become the run's
    time and ids are numbered in page order, so a rerun writes the same pages."""
    from validations.offline import install, localise

    when = run_time.strftime("%Y%m%dT%H%M%S.%fZ")
    install(site)  # the CDN assets of GE's templates, shipped with the package
    for folder, _dirs, names in os.walk(site):
        for name in names:
            if not name.endswith(".html"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                html = f.read()
            logo = os.path.relpath(os.path.join(site, "static", "images", "logo-long.png"), folder)
            html = GE_LOGO.sub(logo, html)
            html = localise(site, html, folder)
            html = STAMP.sub(when, html)
            html = _number_ids(html)
            with open(path, "w", encoding="utf-8") as f:
                f.write(html)


def _number_ids(html: str) -> str:
    ids: dict[str, str] = {}
    return COLLAPSE.sub(
        lambda m: "collapse-body-" + ids.setdefault(m.group(1), f"n{len(ids)}"), html
    )


COVERAGE_ROWS = pa.schema([("family", pa.string()), ("share", pa.float64()),
                           ("message", pa.string())])  # fmt: skip
WAIVER_ROWS = pa.schema(
    [(name, pa.string()) for name in ("waiver", "owner", "reason", "expires")]
    + [("expired", pa.bool_()), ("matched", pa.int64()), ("waived", pa.int64())]
    + [("sample", pa.string()), ("message", pa.string())]
)


def _waived(waivers: list[Waiver], day, F):
    """The name of the first waiver in force matching each finding, else null."""
    expr = None
    for w in waivers:
        if not w.in_force(day):
            continue
        cond = F.expr(sql_condition(w))
        expr = F.when(cond, w.name) if expr is None else expr.when(cond, w.name)
    return F.lit(None).cast("string") if expr is None else expr.otherwise(F.lit(None))


def _waiver_rows(findings, waivers: list[Waiver], day, F) -> list[dict]:
    """Per waiver: the findings it matches, those it waives (an earlier waiver may have taken
    some; an expired one waives none), their kinds and the first of them, in one job over the
    findings (a row per waiver to the driver)."""
    example = F.concat_ws(" ", "kind", F.concat_ws("-", "topic", "partition"),
                          F.substring("fingerprint", 1, 8))  # fmt: skip
    aggs = []
    for i, w in enumerate(waivers):
        match = F.expr(sql_condition(w))
        took = F.col(WAIVED) == w.name
        aggs += [
            F.sum(match.cast("long")).alias(f"m{i}"),
            F.sum(F.coalesce(took, F.lit(False)).cast("long")).alias(f"w{i}"),
            F.array_sort(F.collect_set(F.when(took, F.col("kind")))).alias(f"k{i}"),
            F.min(F.when(took, example)).alias(f"e{i}"),
        ]
    (totals,) = findings.agg(*aggs).collect()
    rows = []
    for i, w in enumerate(waivers):
        expired = not w.in_force(day)
        matched, waived = int(totals[f"m{i}"] or 0), int(totals[f"w{i}"] or 0)
        sample = f"{', '.join(totals[f'k{i}'])}, e.g. {totals[f'e{i}']}" if waived else ""
        message = (f"{w.name} expired after {w.expires.isoformat()}; it matches {matched} "
                   f"finding(s), which fail the gate again") if expired else sample  # fmt: skip
        rows.append({"waiver": w.name, "owner": w.owner, "reason": w.reason,
                     "expires": w.expires.isoformat(), "expired": expired, "matched": matched,
                     "waived": waived, "sample": sample, "message": message})  # fmt: skip
    return rows


def _blocking(policy: GatePolicy, kinds: list[str], F):
    """The kind of a finding that fails the gate, else null: one SQL ``CASE`` (built with
    Column calls, its ~250 calls to the JVM took ~1 s of the demo's gate)."""

    def words(values: list[str]) -> str:
        return ", ".join(quoted(v) for v in values)

    cases = []
    for kind in kinds:
        sevs = policy.blocking_severities(kind)
        if sevs:
            cases.append(f"WHEN kind = {quoted(kind)} AND severity IN ({words(sevs)}) THEN kind")
    # a kind this version does not know falls under the default threshold
    default = policy.blocking_severities("") or ["-"]
    known = f"NOT kind IN ({words(kinds)}) AND " if kinds else ""
    cases.append(f"WHEN {known}severity IN ({words(default)}) THEN kind")
    return F.expr(f"CASE {' '.join(cases)} ELSE CAST(NULL AS STRING) END")


def _context(gate_dir: str, policy: GatePolicy):
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    sites = {}
    if policy.data_docs:
        sites["logreplay"] = {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": os.path.join(os.path.abspath(gate_dir), DOCS),
            },
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites=sites,
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    return gx.get_context(project_config=config, mode="ephemeral")


def _run_identifier(run_id: str, logical_date: str | None):
    """GE stamps results and Data Docs paths with a run time: use the logical date (or a
    fixed epoch), never the clock, so a rerun of the same run writes the same files."""
    from great_expectations.core.run_identifier import RunIdentifier

    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    if logical_date:
        try:
            when = dt.datetime.fromisoformat(logical_date)
            when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
        except ValueError:
            pass
    return RunIdentifier(run_name=run_id, run_time=when)


def _validate(context, suite: Suite, df, run):
    """One checkpoint: ``df`` a pandas DataFrame (GE's pandas engine) or a Spark one."""
    import great_expectations as gx
    import pandas as pd

    if isinstance(df, pd.DataFrame):
        source = context.data_sources.add_pandas(name=suite.table)
    else:
        source = context.data_sources.add_spark(name=suite.table, persist=False)
    batch = source.add_dataframe_asset(name=suite.table).add_batch_definition_whole_dataframe(
        "whole"
    )
    gx_suite = context.suites.add(gx.ExpectationSuite(name=f"logreplay.{suite.table}"))
    for check in suite.checks:
        gx_suite.add_expectation(check.expectation)
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(data=batch, suite=gx_suite, name=suite.table)
    )
    checkpoint = context.checkpoints.add(
        gx.Checkpoint(
            name=f"gate.{suite.table}",
            validation_definitions=[definition],
            actions=[],  # the Data Docs are built once, after every table (run_gate)
            result_format={"result_format": "SUMMARY", "partial_unexpected_count": 0},
        )
    )
    return checkpoint.run(batch_parameters={"dataframe": df}, run_id=run)


def _expectation_results(result) -> dict:
    """The checkpoint's expectation results by description (unique within a suite)."""
    (validation,) = result.run_results.values()
    return {r.expectation_config.description: r for r in validation.results}


def _failure(suite: Suite, check, r, behind: list[str]) -> Failure:
    res = r.result or {}
    return Failure(
        table=suite.table,
        expectation=r.expectation_config.type,
        description=check.description,
        unexpected_count=res.get("unexpected_count"),
        observed=res.get("observed_value"),
        behind=behind,
    )


def _behind(failed: list, df, sample: int) -> dict[str, list[str]]:
    """The first ``sample`` rows behind each failed check of one table, as sentences
    (:func:`_label`): one Spark job for every failed check of the table together, a handful of
    sentences per check to the driver."""
    from functools import reduce

    from pyspark.sql import DataFrame, Window
    from pyspark.sql import functions as F

    failed = [c for c in failed if c.culprits]
    label = _label(df.columns)
    if not failed or label is None or sample <= 0:
        return {}
    order = [c for c in ("first_offset", "offset", "file", "position") if c in df.columns]
    tagged = reduce(
        DataFrame.unionByName,
        [
            df.filter(c.culprits).select(F.lit(i).alias("_check"), *order, label.alias("_label"))
            for i, c in enumerate(failed)
        ],
    )
    first = Window.partitionBy("_check").orderBy(*order, "_label")
    rows = (
        tagged.withColumn("_n", F.row_number().over(first))
        .filter(F.col("_n") <= sample)
        .select("_check", "_n", "_label")
        .collect()  # a handful of sentences per check
    )
    behind: dict[str, list[str]] = {}
    for r in sorted(rows, key=lambda r: (r["_check"], r["_n"])):
        behind.setdefault(failed[r["_check"]].description, []).append(r["_label"])
    return behind


def _label(columns: list[str]):
    """The sentence a row behind a failure is shown as, from the columns its table has."""
    from pyspark.sql import functions as F

    if "message" in columns:
        return F.col("message")
    if {"file", "position", "reason"} <= set(columns):
        return F.format_string("%s at byte %d: %s", "file", "position", "reason")
    if {"topic", "partition", "offset", "decode_error"} <= set(columns):
        return F.format_string("%s-%d@%d: %s", "topic", "partition", "offset", "decode_error")
    if "file" in columns:
        return F.col("file")
    return None
