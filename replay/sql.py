"""Spark SQL text for the plan's projections: literals and names written as SQL, handed to
Spark as one expression list (``selectExpr``).

Why: a PySpark column expression (``F.col``, ``F.lit``, ``.cast``, ``.alias``) is an object in
the driver's JVM, each made by a call over the py4j gateway (several for some: ~10 for
``F.col(c).cast(t).alias(c)``) and released by another. The audit of a 52 KB dump made ~24,000
such calls for its plan, its gate and its report, most of them column expressions of wide
projections; the same projections as SQL text cost one call per expression
(docs/benchmarks.md, "The plan as SQL text").
"""

from __future__ import annotations


def quoted(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def name(column: str) -> str:
    """A column name as SQL (backquoted: ``partition`` is a keyword)."""
    return "`" + column.replace("`", "``") + "`"


def names(columns) -> list[str]:
    """Each of ``columns`` as SQL, for ``selectExpr``."""
    return [name(c) for c in columns]


def named(columns) -> dict[str, str]:
    """Each of ``columns`` -> the SQL that names it."""
    return {c: name(c) for c in columns}


def case(whens: list[tuple[str, str]], otherwise: str = "NULL") -> str:
    """``CASE WHEN c THEN v ... ELSE otherwise END`` of (condition, value) pairs, the first
    condition that holds winning; ``otherwise`` alone where there are none (SQL's CASE needs a
    WHEN: a dump whose scan replayed no replica has no cluster to rank)."""
    if not whens:
        return otherwise
    return f"CASE {' '.join(f'WHEN {c} THEN {v}' for c, v in whens)} ELSE {otherwise} END"
