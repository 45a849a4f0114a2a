"""replay.sql: the plan's literals and names as Spark SQL text. What it writes must mean, to
Spark's parser, exactly the value or column it stands for, whatever the text holds (a topic
name, a rule's message template, a waiver's pattern)."""

from __future__ import annotations

from replay.sql import case, name, named, names, quoted

AWKWARD = ["plain", "it's", 'say "hi"', "back\\slash", "\\'", "%s at byte %d", "ünïcödé", ""]


def test_literals_and_names_are_escaped():
    assert quoted("it's") == "'it\\'s'"
    assert quoted("a\\b") == "'a\\\\b'"
    assert name("partition") == "`partition`"
    assert name("we`ird") == "`we``ird`"
    assert names(["a", "b"]) == ["`a`", "`b`"]
    assert named(["a"]) == {"a": "`a`"}
    assert case([("x = 1", "'one'"), ("x = 2", "'two'")], "'many'") == (
        "CASE WHEN x = 1 THEN 'one' WHEN x = 2 THEN 'two' ELSE 'many' END"
    )
    assert case([], "'many'") == "'many'"  # SQL's CASE needs a WHEN
    assert case([]) == "NULL"


def test_spark_reads_back_what_the_text_stands_for(spark):
    """Each awkward value, written as a literal, comes back as itself; a column whose name
    needs quoting (a keyword, a backquote) is read by its quoted name."""
    got = spark.range(1).selectExpr(*[f"{quoted(v)} AS c{i}" for i, v in enumerate(AWKWARD)])
    assert list(got.collect()[0]) == AWKWARD
    odd = spark.range(1).selectExpr("1 AS `partition`", "2 AS `we``ird`")
    row = odd.selectExpr(*names(["partition", "we`ird"])).collect()[0]
    assert list(row) == [1, 2]
