"""The expectation suites of the gate, one per table of an output directory.

- ``findings``: one expectation per finding kind, "no finding of this kind at or above its
  threshold" (the gate policy), over a ``gate_blocking`` column that names the kind of each
  finding the policy blocks on; plus the row count that `summary.json` promised.
- data expectations on the decoded tables: every CRC valid, no corrupt bytes, no unknown
  record versions, no undecodable Avro payloads, and every table's row count as the run's
  `summary.json` / `_manifest.json` recorded it (a partial or duplicated output fails).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.sql import quoted
from validations.policy import GatePolicy

BLOCKING = "gate_blocking"
WAIVED = "gate_waived"  # the waiver in force a finding falls under (validations.waivers)


@dataclass
class Check:
    """One expectation, the sentence the verdict uses for it (also its GE description, unique
    within a suite), a Spark SQL condition selecting the rows behind a failure, and the
    columns the expectation reads (its column, its row condition's): all the gate needs of a
    table it validates on the driver (validations.gate)."""

    expectation: object
    description: str
    culprits: str | None = None
    reads: tuple[str, ...] = ()


def check(name: str, description: str, culprits: str | None = None, **kwargs) -> Check:
    import great_expectations as gx

    cls = getattr(gx.expectations, name)
    reads = [kwargs["column"]] if "column" in kwargs else []
    condition = kwargs.get("row_condition")
    if condition is not None:  # a comparison of one column (row_conditions.Column)
        reads.append(condition.column.name)
    return Check(cls(description=description, **kwargs), description, culprits, tuple(reads))


@dataclass
class Suite:
    table: str
    checks: list[Check] = field(default_factory=list)

    def reads(self) -> list[str]:
        """Every column an expectation of the suite reads, in name order."""
        return sorted({c for check in self.checks for c in check.reads})


def findings_suite(policy: GatePolicy, kinds: list[str], rows: int | None) -> Suite:
    suite = Suite("findings")
    for kind in kinds:
        if policy.blocking_severities(kind):
            suite.checks.append(
                check(
                    "ExpectColumnValuesToNotBeInSet",
                    policy.describe(kind),
                    f"{BLOCKING} = '{kind}'",
                    column=BLOCKING,
                    value_set=[kind],
                )
            )
    _row_count(suite, rows)
    return suite


def _family_is(family: str):
    from great_expectations.expectations.row_conditions import Column

    return Column("family") == family


def coverage_suite(policy: GatePolicy) -> Suite:
    """One expectation per family ``gate.min_coverage`` names: its share judged at least the
    one required, over the per-family shares of the `coverage` table (coverage_shares)."""
    suite = Suite("coverage")
    for family, need in sorted(policy.min_coverage.items()):
        suite.checks.append(
            check(
                "ExpectColumnValuesToBeBetween",
                f"the audit judged at least {need:.0%} of {family}",
                f"family = '{family}' AND share < {need}",
                column="share",
                min_value=need,
                max_value=1,
                row_condition=_family_is(family),
            )
        )
    return suite


def waivers_suite(rows: list[dict]) -> Suite:
    """Over the `waivers` rows (one per configured waiver: its name, whether it has expired,
    how many findings it matches and waives): each waiver in force says what it waives (the
    Data Docs show the waived findings so, marked), each expired one fails, naming itself."""
    from great_expectations.expectations.row_conditions import Column

    suite = Suite("waivers")
    for r in rows:
        if r["expired"]:
            suite.checks.append(
                check(
                    "ExpectColumnValuesToBeInSet",
                    f"{r['waiver']} has not expired (it expired after {r['expires']})",
                    f"waiver = {quoted(r['waiver'])}",
                    column="expired",
                    value_set=[False],
                    row_condition=Column("waiver") == r["waiver"],
                )
            )
        else:
            waived = r["waived"]
            what = f": {r['sample']}" if r["sample"] else " (it matches no finding)"
            suite.checks.append(
                check(
                    "ExpectColumnValuesToBeBetween",
                    f"{r['waiver']} waives {waived} finding(s) until {r['expires']}{what}",
                    column="waived",
                    min_value=0,
                    row_condition=Column("waiver") == r["waiver"],
                )
            )
    return suite


ERROR_KINDS = (
    ("crc_mismatch", "every CRC valid"),
    ("corrupt_bytes", "no corrupt byte ranges"),
    ("unknown_version", "no unknown record versions"),
    ("decode_failed", "every file decoded to the end"),
)


def data_suites(columns: dict[str, list[str]], rows: dict[str, int]) -> list[Suite]:
    """Suites for the decoded tables present (``columns``: table -> its column names)."""
    suites = []
    for table, cols in sorted(columns.items()):
        if table == "findings":
            continue
        suite = Suite(table)
        if table == "segments":
            suite.checks.append(
                check(
                    "ExpectColumnValuesToBeBetween",
                    "no corrupt bytes in any file",
                    "bytes_corrupt > 0",
                    column="bytes_corrupt",
                    min_value=0,
                    max_value=0,
                )
            )
        if table == "errors":
            for kind, words in ERROR_KINDS:
                suite.checks.append(
                    check(
                        "ExpectColumnValuesToNotBeInSet",
                        words,
                        f"kind = '{kind}'",
                        column="kind",
                        value_set=[kind],
                    )
                )
        if table == "batches" and "crc_valid" in cols:
            suite.checks.append(
                check(
                    "ExpectColumnValuesToBeInSet",
                    "every batch CRC valid",
                    "NOT crc_valid",
                    column="crc_valid",
                    value_set=[True],
                )
            )
        if table == "records" and "decode_error" in cols:
            suite.checks.append(
                check(
                    "ExpectColumnValuesToBeNull",
                    "every Avro payload decodes",
                    "decode_error IS NOT NULL",
                    column="decode_error",
                )
            )
        _row_count(suite, rows.get(table))
        if suite.checks:
            suites.append(suite)
    return suites


def _row_count(suite: Suite, rows: int | None) -> None:
    if rows is not None:
        suite.checks.append(
            check(
                "ExpectTableRowCountToEqual",
                f"{suite.table} holds the {rows} rows the run recorded",
                value=rows,
            )
        )
