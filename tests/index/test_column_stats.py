"""Data skipping never drops a file that holds a matching row (property tests), and the SQL
text of a filter becomes pruning conditions through sqlglot's Spark dialect exactly where the
meaning is certain; everything else prunes nothing. No Spark here (see
tests/writers/read/test_pruning_differential.py for the same filters against Spark)."""

from __future__ import annotations

import datetime as dt
import math
import operator
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.column_stats import may_match, prune
from lakebraid.index.sql_filter import Condition, SqlSettings, parse_conditions
from lakebraid.metadata.records import ColumnStatsRecord

OPS = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def stats_of(name: str, values: list, column: str = "x") -> ColumnStatsRecord:
    present = [v for v in values if v is not None]
    ordered = [v for v in present if not (isinstance(v, float) and math.isnan(v))]
    return ColumnStatsRecord(
        column,
        "p",
        name,
        min(ordered, default=None),
        max(ordered, default=None),
        len(values) - len(present),
        len(present),
        10,
    )


def stat(lo, hi, column: str = "x") -> ColumnStatsRecord:
    return ColumnStatsRecord(column, "p", "f", lo, hi, 0, 2, 10)


def one(where: str, **options) -> Condition:
    found = parse_conditions(where, SqlSettings(**options))
    assert len(found) == 1, (where, found)
    return found[0]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.one_of(st.none(), st.integers(-5, 5)), min_size=1, max_size=6),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(sorted(OPS)),
    st.integers(-6, 6),
)
def test_pruning_keeps_every_file_with_a_match(
    files: list[list[int | None]], op: str, k: int
) -> None:
    names = [f"f{i}" for i in range(len(files))]
    stats = [stats_of(n, v) for n, v in zip(names, files, strict=True)]
    kept = {name for _, name in prune([("p", n) for n in names], stats, f"x {op} {k}")}
    for name, values in zip(names, files, strict=True):
        if any(v is not None and OPS[op](v, k) for v in values):
            assert name in kept, (name, values, op, k)


def spark_compare(op: str, a: float, b: float) -> bool:
    """Spark's order of doubles: NaN equals NaN and is above everything, -0.0 equals 0.0."""
    key = lambda v: (1, 0.0) if math.isnan(v) else (0, v + 0.0)  # noqa: E731
    return OPS[op](key(a), key(b))


FLOATS = st.one_of(
    st.sampled_from([math.nan, -0.0, 0.0, math.inf, -math.inf, 0.5]), st.integers(-3, 3)
).map(float)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.one_of(st.none(), FLOATS), min_size=1, max_size=5), max_size=5),
    st.sampled_from(sorted(OPS)),
    st.sampled_from(["0", "-0.0", "0.5", "2", "1e0", "-1D", "CAST('NaN' AS DOUBLE)"]),
    st.booleans(),
)
def test_float_pruning_keeps_nan_and_signed_zero_matches(files, op, literal, negate) -> None:
    """Statistics leave NaN out; NaN > every number, NaN = NaN and -0.0 = 0.0 in Spark."""
    where = f"NOT (x {op} {literal})" if negate else f"{literal} {op} x"
    value = {"CAST('NaN' AS DOUBLE)": math.nan, "-1D": -1.0}.get(literal) or float(literal)
    names = [f"f{i}" for i in range(len(files))]
    stats = [stats_of(n, v) for n, v in zip(names, files, strict=True)]
    kept = {name for _, name in prune([("p", n) for n in names], stats, where)}
    for name, values in zip(names, files, strict=True):
        for v in values:
            if v is not None and (
                not spark_compare(op, v, value) if negate else spark_compare(op, value, v)
            ):
                assert name in kept, (where, values)


# ---- SQL text -> conditions ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("where", "value"),
    [
        (r"s = 'it\'s'", "it's"),
        (r"s = '\u00e9'", "é"),
        (r"s = '\U0001F600'", "😀"),
        (r"s = 'a\nb\tc'", "a\nb\tc"),
        (r"s = 'back\\slash'", "back\\slash"),
        (r"s = 'keeps \% and \_'", "keeps \\% and \\_"),
        (r"s = 'drops \q'", "drops q"),
        (r"s = '\101\0'", "A\x00"),
        (r's = "dq\"x"', 'dq"x'),
        ("s = 'é 😀 \"'", 'é 😀 "'),
    ],
)
def test_string_literals_are_unescaped_as_spark_does(where: str, value: str) -> None:
    assert one(where) == Condition("s", "=", (value,), "UTC")


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("v > 5", [("v", ">", (5,))]),
        ("5 < v", [("v", ">", (5,))]),
        ("5 >= v", [("v", "<=", (5,))]),
        ("v == 1 AND v <> 2", [("v", "=", (1,)), ("v", "!=", (2,))]),
        ("NOT v > 5", [("v", "<=", (5,))]),
        ("NOT (a = 1 OR b < 2)", [("a", "!=", (1,)), ("b", ">=", (2,))]),
        ("((a = 1)) AND NOT NOT b = 2", [("a", "=", (1,)), ("b", "=", (2,))]),
        ("a > 1 AND (b < 2 OR c = 3)", [("a", ">", (1,))]),
        ("v IN (1, NULL, 2.5)", [("v", "in", (1, Decimal("2.5")))]),
        ("v BETWEEN 1 AND 1e1", [("v", ">=", (1,)), ("v", "<=", (10.0,))]),
        ("v IS NULL", [("v", "null", ())]),
        ("v IS NOT NULL", [("v", "notnull", ())]),
        ("v <=> NULL", [("v", "null", ())]),
        ("NOT v <=> NULL", [("v", "notnull", ())]),
        ("v <=> 3", [("v", "=", (3,))]),
        ("s LIKE 'ab%'", [("s", "prefix", ("ab",))]),
        ("`odd name` = 1", [("odd name", "=", (1,))]),
        ("v = -5L", [("v", "=", (-5,))]),
        ("v = 5Y AND v = 5S", [("v", "=", (5,)), ("v", "=", (5,))]),
        ("v = 5.50", [("v", "=", (Decimal("5.50"),))]),
        ("v = 5BD", [("v", "=", (Decimal("5"),))]),
        ("v = 5e0 AND v = 5D AND v = .5e1", [("v", "=", (5.0,))] * 3),
        ("v = 9223372036854775808", [("v", "=", (2**63,))]),
        ("b = true", [("b", "=", (True,))]),
        ("d = DATE '2024-01-02'", [("d", "=", (dt.date(2024, 1, 2),))]),
        ("d > CAST('2024-01-02' AS DATE)", [("d", ">", (dt.date(2024, 1, 2),))]),
        ("v = CAST('NaN' AS DOUBLE)", [("v", "=", (math.nan,))]),
        ("v = CAST(7 AS BIGINT)", [("v", "=", (7,))]),
        ("v = CAST('7' AS INT)", [("v", "=", (7,))]),
        ("v = CAST(1.10BD AS DECIMAL(10,2))", [("v", "=", (Decimal("1.10"),))]),
    ],
)
def test_conjuncts_become_conditions(where: str, expected: list) -> None:
    found = [(c.column, c.op, c.values) for c in parse_conditions(where)]
    assert len(found) == len(expected) and str(found) == str(expected), found  # NaN != NaN


def test_timestamp_literals_read_in_the_session_time_zone() -> None:
    paris = "Europe/Paris"
    assert one("t > TIMESTAMP '2024-01-02 10:00:00'").values[0] == dt.datetime(
        2024, 1, 2, 10, tzinfo=dt.UTC
    )
    winter = one("t > TIMESTAMP '2024-01-02 10:00'", time_zone=paris).values[0]
    assert winter == dt.datetime(2024, 1, 2, 9, tzinfo=dt.UTC)
    assert one("t = TIMESTAMP '2024-01-02T10:00:00+02:00'").values[0] == dt.datetime(
        2024, 1, 2, 8, tzinfo=dt.UTC
    )
    assert one("t = TIMESTAMP_NTZ '2024-01-02 10:00:00.5'").values[0] == dt.datetime(
        2024, 1, 2, 10, 0, 0, 500000
    )
    # spark.sql.timestampType=TIMESTAMP_NTZ makes TIMESTAMP '...' a wall-clock time
    ntz = one("t = TIMESTAMP '2024-01-02 10:00'", timestamp_ltz=False).values[0]
    assert ntz == dt.datetime(2024, 1, 2, 10)
    for where, zone in [
        ("t > TIMESTAMP '2024-03-31 02:30'", paris),  # skipped by the DST change
        ("t > TIMESTAMP '2024-10-27 02:30'", paris),  # repeated by the DST change
        ("t > TIMESTAMP '2024-01-02 10:00'", None),  # session time zone unknown
        ("t > TIMESTAMP '2024-01-02 10:00'", "PST"),  # a Java short id: another zone in Python
        ("t > TIMESTAMP_NTZ '2024-01-02 10:00+01:00'", "UTC"),
        ("t > TIMESTAMP '20240102T1000'", "UTC"),  # ISO basic format: not Spark's
    ]:
        assert parse_conditions(where, SqlSettings(time_zone=zone)) == [], where


@pytest.mark.parametrize(
    "where",
    [
        "s = 'it''s'",  # Spark: it's; sqlglot: 'it' 's' concatenated
        "s = 'a' 'b'",
        "a = 1 OR b = 2",
        "a = b",
        "a + 1 > 2",
        "upper(s) = 'A'",
        "t.a = 1",
        "a = NULL",
        "a NOT IN (1, 2)",
        "a IN (SELECT 1)",
        "a NOT BETWEEN 1 AND 2",
        "NOT a <=> 3",
        "s NOT LIKE 'a%'",
        "s LIKE 'a_b%'",
        "s LIKE 'a%' ESCAPE '!'",
        "s ILIKE 'a%'",
        "a = 1 /* a comment */",
        "a = 1; DROP TABLE t",
        "a = CAST(300 AS TINYINT)",
        "a = CAST(1.105 AS DECIMAL(10,2))",
        "a = CAST(' 7' AS INT)",
        "a = 5F",
        "a = X'01'",
        "a = INTERVAL 1 DAY",
        "d = DATE '2024-1-2'",
        "CAST(a AS INT) = 1",
        "a = 1 AND",
        "((a = 1)",
        "",
        "(" * 3000 + "a = 1" + ")" * 3000,  # too deep for the parser: no error, no pruning
        "a = " + "-" * 5000 + "1",
    ],
)
def test_what_is_not_understood_prunes_nothing(where: str) -> None:
    assert parse_conditions(where) == []
    files = [("p", "f")]
    assert prune(files, [stat(5, 5, "a"), stat("x", "x", "s")], where) == files


def test_a_long_and_chain_is_read_without_recursion() -> None:
    assert len(parse_conditions("a = 1" + " AND a = 1" * 3000)) == 3001


def test_session_settings_change_what_text_means() -> None:
    # spark.sql.parser.escapedStringLiterals keeps backslashes; doubleQuotedIdentifiers makes
    # "x" a column: such text prunes nothing
    assert parse_conditions(r"s = 'a\nb'", SqlSettings(escaped_string_literals=True)) == []
    assert parse_conditions("s = 'ab'", SqlSettings(escaped_string_literals=True)) != []
    assert parse_conditions('s = "x"', SqlSettings(double_quoted_identifiers=True)) == []
    # names match regardless of case unless spark.sql.caseSensitive is on
    types = {"Amount": "double", "n": "bigint"}
    assert one("AMOUNT > 1", column_types=types).column == "Amount"
    assert one("AMOUNT > 1", column_types=types, case_sensitive=True).column == "AMOUNT"
    # a cast of a column to its own type (as Spark's analyzer writes) is the column
    assert one("CAST(n AS BIGINT) IN (1, 2)", column_types=types).column == "n"
    assert parse_conditions("CAST(n AS INT) = 1", SqlSettings(column_types=types)) == []
    assert parse_conditions("CAST(amount AS BIGINT) = 1", SqlSettings(column_types=types)) == []


def test_functions_written_without_parentheses_are_no_columns() -> None:
    """``user``, ``current_schema``...: Spark calls the function unless a column holds the
    name."""
    assert parse_conditions("user = 'x' AND current_catalog = 'y' AND a = 1") == [
        Condition("a", "=", (1,), "UTC")
    ]
    held = SqlSettings(column_types={"user": "string"})
    assert parse_conditions("user = 'x'", held) == [Condition("user", "=", ("x",), "UTC")]


# ---- conditions against statistics -----------------------------------------------------------
def test_literals_compare_with_statistics_as_spark_compares_them() -> None:
    big = 2**53 + 1  # not a double: Spark compares a long with a double literal as doubles
    assert may_match(stat(big, big), one(f"x = {float(2**53)}D"))
    assert not may_match(stat(big, big), one(f"x = {2**53}"))  # exact with an int literal
    assert not may_match(stat(1, 3), one("x > 3.5"))  # decimal: exact
    assert may_match(stat(1, 3), one("x > 2.5"))
    assert may_match(stat(1.0, 2.0), one(f"x = {2**24 + 1}"))  # float32 may round it
    assert not may_match(stat(1.0, 2.0), one("x = 0.5"))
    assert not may_match(stat(0.5, 2.0), one("x < -0.0"))
    assert may_match(stat(1, 3), one("x = CAST('NaN' AS DOUBLE)"))
    assert may_match(stat(1, 3), one("x < CAST('NaN' AS DOUBLE)"))  # every number is < NaN
    assert may_match(stat(False, False), one("x = 1"))  # boolean and int: not compared
    assert not may_match(stat(False, False), one("x = true"))
    assert may_match(stat("a", "b"), one("x = 5"))  # Spark casts: not compared here
    assert may_match(stat(5, 5), one("x = '7'"))
    assert not may_match(stat("a", "b"), one(r"x = '\u00e9'"))
    assert may_match(stat("a", "é"), one(r"x = '\u00e9'"))
    assert may_match(stat(1.0, 2.0), one("x = 'NaN'"))  # the text 'NaN' is NaN to Spark


def test_decimal_bounds_compare_exactly_with_decimals_and_integers_only() -> None:
    bounds = stat(Decimal("1.10"), Decimal("2.50"))
    assert may_match(bounds, one("x = 1.1")) and may_match(bounds, one("x = 2.500"))
    assert not may_match(bounds, one("x = 2.505"))  # Spark widens the scale: exact
    assert not may_match(bounds, one("x > 2.5")) and may_match(bounds, one("x >= 2.5"))
    assert not may_match(bounds, one("x IN (0, 3)")) and may_match(bounds, one("x < 2L"))
    assert may_match(bounds, one("x = 2.6e0")) and may_match(bounds, one("x > 9D"))  # doubles
    assert may_match(bounds, one(f"x > {'9' * 39}.5"))  # beyond Spark's decimals: kept
    assert not may_match(stat(Decimal("1.10"), Decimal("1.10")), one("x != 1.1"))
    assert may_match(stat(None, Decimal("1")), one("x = 5"))  # a bound unknown: kept


def test_dates_and_timestamps_compare_with_iso_text() -> None:
    dates = stat(dt.date(2024, 1, 1), dt.date(2024, 1, 3), "d")
    files = [("p", "f")]
    assert prune(files, [dates], "d = '2024-01-02'") == files
    assert prune(files, [dates], "d > '2024-01-03'") == []
    assert prune(files, [dates], "d > DATE '2024-01-03'") == []
    assert prune(files, [dates], "d > '20240103'") == files  # not Spark's date text
    assert prune(files, [dates], "d > '2024-01-03 10:00'") == files
    utc = stat(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 1, 2, tzinfo=dt.UTC))
    assert not may_match(utc, one("x > '2024-01-02 00:00:00'"))
    assert may_match(utc, one("x > '2024-01-02 08:00:00'", time_zone="Asia/Tokyo"))
    assert not may_match(utc, one("x > '2024-01-01 20:00:00'", time_zone="America/New_York"))
    assert may_match(utc, one("x > '2024-01-01 23:00'", time_zone=None))  # zone unknown
    assert not may_match(utc, one("x > '2024-01-02T01:00+01:00'", time_zone=None))
    assert may_match(utc, one("x > TIMESTAMP_NTZ '2024-01-03 00:00'"))  # ntz literal, ltz col
    wall = stat(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2))
    assert not may_match(wall, one("x > '2024-01-02 00:00'"))
    assert may_match(wall, one("x > '2024-01-03 00:00+01:00'"))
    assert may_match(wall, one("x > TIMESTAMP '2024-01-03 00:00'"))  # ltz literal, ntz col


def test_float_files_are_kept_where_a_left_out_nan_could_match() -> None:
    """Statistics leave NaN out, but Spark sorts NaN above every number and NaN = NaN."""
    stat = ColumnStatsRecord("amount", "", "f.parquet", 1.0, 2.0, 0, 2, 10)
    for op in (">", ">=", "!="):
        assert may_match(stat, Condition("amount", op, (5.0,)))
    assert may_match(stat, Condition("amount", "=", (float("nan"),)))
    assert not may_match(stat, Condition("amount", "<", (0.5,)))  # NaN is never below
    assert not may_match(stat, Condition("amount", "=", (7.0,)))
    ints = ColumnStatsRecord("n", "", "f.parquet", 1, 2, 0, 2, 10)
    assert not may_match(ints, Condition("n", ">", (5,)))


def test_null_counts_and_prefixes_prune() -> None:
    files = [("p", "f")]
    no_nulls = ColumnStatsRecord("s", "p", "f", "ab", "ad", 0, 3, 10)
    only_nulls = ColumnStatsRecord("s", "p", "f", None, None, 3, 0, 10)
    assert prune(files, [no_nulls], "s IS NULL") == []
    assert prune(files, [only_nulls], "s IS NOT NULL") == []
    assert prune(files, [only_nulls], "s IS NULL") == files
    assert prune(files, [no_nulls], "s LIKE 'ac%'") == files
    assert prune(files, [no_nulls], "s LIKE 'ae%'") == []
    assert prune(files, [no_nulls], "S = 'zz'") == files  # no column_types: no name found
