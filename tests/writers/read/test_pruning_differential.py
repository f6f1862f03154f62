"""Every read path returns the same rows for the same filter (issue 11, case 5): the pruned
read ``read(where=p)`` and, as the reference, Spark filtering the table's rows in memory (no
file pruning, no Parquet reader); the unpruned reads (``read()``, the data source) return the
table's rows.
Strings with quotes, backslashes and unicode written with Spark's escapes; doubles with NaN,
-0.0, infinities and nulls."""

from __future__ import annotations

import datetime as dt
import math
import tempfile
from decimal import Decimal
from itertools import count

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from lakebraid.index.sql_filter import parse_conditions
from lakebraid.writers.client import WriteClient

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]
SCHEMA = pa.schema(
    [("id", pa.string()), ("ts", pa.int64()), ("s", pa.string()), ("v", pa.float64()),
     ("n", pa.int64())]
)  # fmt: skip


def table(spark, batches: list[list[tuple]]) -> WriteClient:
    """A table with one commit (and so at least one data file) per batch of (s, v, n) rows."""
    c = WriteClient.create(tempfile.mkdtemp() + "/t", "id", [], "ts", spark=spark)
    ids = count()
    for rows in batches:
        data = [(f"k{next(ids)}", 1, *row) for row in rows]
        c.bulk_insert(
            pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in data], SCHEMA)
        )
    return c


def canonical(frame) -> list[str]:
    """Rows in a comparable form: NaN as a word (NaN != NaN), sorted."""
    rows = frame.select(*[c for c in frame.columns if not c.startswith("_")]).toArrow()
    rows = rows.to_pylist()
    fix = lambda x: "NaN" if isinstance(x, float) and math.isnan(x) else x  # noqa: E731
    return sorted(repr({k: fix(x) for k, x in row.items()}) for row in rows)


def every_read(spark, c: WriteClient, wheres: list) -> list[dict[str, list[str]]]:
    """Each filter's rows by every read path. The table's rows and the reference frame made of
    them are made once for all filters (the table does not change). The full reads (``read()``
    and the data source, which prune nothing: Spark filters what they return) are checked once
    against the table's rows; each filter is then applied to the reference frame and by the
    pruned read, ``read(where=)``."""
    rows = c.read_arrow()
    reference = spark.createDataFrame(rows, from_arrow_schema(rows.schema))
    everything = canonical(reference)
    assert canonical(c.read()) == everything
    assert canonical(spark.read.format("lakebraid").load(c.path)) == everything
    return [
        {
            "reference": canonical(reference.where(where)),
            "read(where=)": canonical(c.read(where=where)),
        }
        for where in wheres
    ]


def assert_all_same(spark, c: WriteClient, wheres: list) -> None:
    for where, found in zip(wheres, every_read(spark, c, wheres), strict=True):
        assert len({tuple(v) for v in found.values()}) == 1, (where, found)


def assert_same(spark, c: WriteClient, where, rows: int | None = None) -> None:
    (found,) = every_read(spark, c, [where])
    assert len({tuple(v) for v in found.values()}) == 1, (where, found)
    if rows is not None:
        assert len(found["reference"]) == rows, (where, found)


def files_read(c: WriteClient, where) -> int:
    return len(c.file_paths(where=where))


# ---- the cases of issue 11 -------------------------------------------------------------------
def test_spark_string_escapes_in_where_find_their_rows(spark):
    c = table(spark, [[("it's", 1.0, 1), ("a", 2.0, 2)], [("é", 3.0, 3), ("b", 4.0, 4)]])
    for where in [r"s = 'it\'s'", r"s = '\u00e9'", "s = 'it''s'", r's = "it\'s"']:
        assert_same(spark, c, where, rows=1)
    assert files_read(c, r"s = '\u00e9'") == 1  # and still prunes


def test_nan_and_signed_zero_rows_are_found_by_every_read_path(spark):
    nan = float("nan")
    c = table(spark, [[("a", 1.0, 1), ("b", nan, 2)], [("c", 6.0, 3), ("d", 7.0, 4)],
                      [("e", -0.0, 5), ("f", 8.0, None)]])  # fmt: skip
    assert_same(spark, c, "v > 5", rows=4)  # NaN is above every number
    assert_same(spark, c, "v >= 'NaN'", rows=1)
    assert_same(spark, c, "v = CAST('NaN' AS DOUBLE)", rows=1)
    assert_same(spark, c, "v = 0.0", rows=1)  # -0.0 = 0.0
    assert_same(spark, c, "v <= 0", rows=1)
    assert_same(spark, c, F.col("v") > 5, rows=4)
    assert_same(spark, c, F.col("v") == nan, rows=1)
    assert files_read(c, "v < 0.5") == 1  # the file of -0.0


def test_column_filters_prune_and_match_sql_text(spark):
    c = table(spark, [[("x\\y", 1.0, 1)], [("it's", 2.0, 5)], [("é\n", 3.0, 9)]])
    cases = [
        (F.col("s") == "x\\y", 1),
        (F.col("s") == "it's", 1),
        (F.col("s") == "é\n", 1),
        (F.col("n").isin(5, 6), 1),
        ((F.col("n") > 4) & (F.col("v") < 2.5), 1),
        (F.col("n").between(2, 9), 2),
        (~(F.col("n") >= 5), 1),
        (F.col("s").startswith("it"), 3),  # a function: prunes nothing
        (F.expr(r"s = 'it\'s' OR n = 1"), 3),
        (F.expr(r"N = 9 AND s LIKE 'é%'"), 1),
    ]
    assert_all_same(spark, c, [column for column, _ in cases])
    for column, files in cases:
        assert files_read(c, column) == files, column


def test_typed_literals_compare_as_spark_compares_them(spark):
    """Dates, timestamps (with and without time zone), booleans, float32, decimals and longs
    beyond 2**53 against literals of other types: the same rows as Spark, and still pruned."""
    utc = dt.UTC
    c = WriteClient.create(tempfile.mkdtemp() + "/t", "id", [], "ts", spark=spark)
    for i, row in enumerate([
        (dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 10, tzinfo=utc), True, 0.1, "1.1", 2**53 + 1),
        (dt.date(2024, 2, 1), dt.datetime(2024, 2, 1, tzinfo=utc), False, 2.0**24, "2.50", 5),
        (None,) * 6,
    ]):  # fmt: skip
        d, t, b, f, dec, n = row
        c.bulk_insert(pa.table({
            "id": [f"k{i}"], "ts": [1], "d": pa.array([d], pa.date32()),
            "t": pa.array([t], pa.timestamp("us", tz="UTC")),
            "tn": pa.array([t and t.replace(tzinfo=None)], pa.timestamp("us")),
            "b": pa.array([b], pa.bool_()), "f": pa.array([f], pa.float32()),
            "dec": pa.array([dec and Decimal(dec)], pa.decimal128(10, 2)),
            "n": pa.array([n], pa.int64()),
        }))  # fmt: skip
    # files read: 2 where a condition is not understood (the file of nulls is still skipped),
    # 3 where the filter gives no condition
    cases = [
        ("d = '2024-01-01'", 1), ("d > DATE '2024-01-15'", 1), ("d = '2024-1-1'", 2),
        ("t > '2024-01-31 23:00:00'", 1), ("t >= TIMESTAMP '2024-02-01 09:00:00+09:00'", 1),
        ("t = '2024-01-01T10:00:00Z'", 1), ("tn = '2024-01-01 10:00:00'", 1),
        ("tn > TIMESTAMP_NTZ '2024-01-15 00:00'", 1), ("t > TIMESTAMP_NTZ '2024-01-15'", 2),
        ("b = true", 1), ("b", 3), ("NOT b", 3), ("b IS NULL", 1),
        ("f = 0.1", 0), ("f = CAST(0.1 AS FLOAT)", 3), ("f = 16777217", 2), ("f < 0.5", 1),
        ("dec = 1.1", 1), ("dec > 2", 1), ("dec = 1.105", 0), ("dec > 2.50", 0),
        ("dec IN (2.5, 3)", 1), ("dec BETWEEN 1 AND 2", 1), ("dec != 1.1", 1), ("dec = 2.5e0", 2),
        ("dec < 2L", 1), ("dec < 12345678901234567890.5", 2),
        ("n = 9007199254740993", 1), ("n = 9007199254740992D", 1), ("n > 5.5", 1),
        ("n IN (5, 6)", 1), ("n BETWEEN 4.5 AND 5.5", 1), ("N <=> 5", 1),
        (F.col("d") == dt.date(2024, 1, 1), 1), (F.col("t") > dt.datetime(2024, 1, 15), 1),
        (F.col("n") == 5, 1), (F.col("f") == 0.1, 3),
    ]  # fmt: skip
    assert_all_same(spark, c, [where for where, _ in cases])
    for where, files in cases:
        assert files_read(c, where) == files, where
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        assert_same(spark, c, "t = '2024-01-01 19:00:00'", rows=1)
        assert files_read(c, "t = '2024-01-01 19:00:00'") == 1
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


def test_session_settings_are_honoured_and_left_unchanged(spark):
    c = table(spark, [[("a\\nb", 1.0, 1)], [("a\nb", 2.0, 2)]])
    before = {k: spark.conf.get(k) for k in ("spark.sql.parquet.filterPushdown",)}
    key = "spark.sql.parser.escapedStringLiterals"
    spark.conf.set(key, "true")
    try:
        assert_same(spark, c, r"s = 'a\nb'", rows=1)  # the backslash stays: the first row
    finally:
        spark.conf.unset(key)
    assert_same(spark, c, r"s = 'a\nb'", rows=1)  # a newline: the second row
    assert {k: spark.conf.get(k) for k in before} == before


# ---- differential property test --------------------------------------------------------------
CHARS = ["a", "b", "'", '"', "\\", "%", "_", "é", "😀", "\n", " "]
ESCAPES = {
    "'": [r"\'"],  # '' too inside '...' (a concatenation to sqlglot: prunes nothing)
    '"': ['"', r"\""],
    "\\": [r"\\"],
    "é": ["é", r"\u00e9", r"\u00E9"],
    "😀": ["😀", r"\U0001F600", r"\uD83D\uDE00"],
    "\n": [r"\n"],
    "a": ["a", r"\a"],
    "%": ["%", r"\%"],  # Spark keeps \% and \_ as two characters (for LIKE)
    "_": ["_", r"\_"],
    " ": [" ", r"\ ", r"\040", r"\u0020"],
}
DOUBLES = [math.nan, math.nan, -0.0, 0.0, 1.5, -2.0, 5.0, 6.0, math.inf, -math.inf]
STRINGS = st.text(st.sampled_from(CHARS), max_size=3)
ROWS = st.tuples(
    st.none() | STRINGS,
    st.none() | st.sampled_from(DOUBLES),
    st.none() | st.integers(-3, 8),
)


@st.composite
def string_literal(draw, pool: list[str]) -> str:
    """A Spark SQL literal of a string (often one the table holds), escaped at random."""
    value = draw(st.sampled_from(pool) if pool and draw(st.integers(0, 2)) else STRINGS)
    quote = draw(st.sampled_from(["'", "'", '"']))
    doubled = {"'": [r"\'", "''"], '"': [r"\"", '""']}  # Spark 4 reads a doubled quote as one
    parts = [draw(st.sampled_from(doubled.get(ch, []) if ch == quote else ESCAPES.get(ch, [ch])))
             for ch in value]  # fmt: skip
    return quote + "".join(parts) + quote


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(string_literal([]), min_size=1, max_size=30))
def test_string_literals_are_read_as_spark_reads_them(spark, literals):
    """sqlglot's unescaping against Spark's own: one query selects every literal."""
    query = "SELECT " + ", ".join(f"{lit} AS c{i}" for i, lit in enumerate(literals))
    row = spark.sql(query).collect()[0]
    for i, lit in enumerate(literals):
        found = parse_conditions(f"s = {lit}")
        if found:
            assert found[0].values == (row[i],), (lit, found, row[i])
        else:  # only a doubled quote (a concatenation to sqlglot) is refused
            assert "''" in lit or '""' in lit, lit


NUMBERS = ["5", "0", "-2", "0.0", "-0.0", "1.5", "1e0", "6D", "5L", "2.5BD",
           "CAST('NaN' AS DOUBLE)", "CAST('-Infinity' AS DOUBLE)"]  # fmt: skip
OPS = st.sampled_from(["=", "==", "<=>", "!=", "<>", "<", "<=", ">", ">="])


@st.composite
def number_literal(draw, pool: list) -> str:
    """A numeric literal: a fixed one, or a value the table holds in one of Spark's forms."""
    if not pool or draw(st.booleans()):
        return draw(st.sampled_from(NUMBERS))
    x = draw(st.sampled_from(pool))
    if isinstance(x, float) and not math.isfinite(x):
        return (
            f"CAST('{'NaN' if math.isnan(x) else f'{x:+}'.replace('inf', 'Infinity')}' AS DOUBLE)"
        )
    return draw(
        st.sampled_from(
            [repr(x), f"{x}D", f"{float(x)!r}e0", f"{x}BD", f"{x}L"][
                : 3 if isinstance(x, float) else 5
            ]
        )
    )


@st.composite
def atom(draw, pools: dict[str, list]) -> str:
    column = draw(st.sampled_from(["s", "s", "v", "v", "n"]))
    literal = string_literal(pools[column]) if column == "s" else number_literal(pools[column])
    kind = draw(st.sampled_from(["cmp", "cmp", "flip", "in", "between", "null", "like"]))
    if kind == "in":
        return f"{column} IN ({', '.join(draw(st.lists(literal, min_size=1, max_size=3)))})"
    if kind == "between":
        return f"{column} BETWEEN {draw(literal)} AND {draw(literal)}"
    if kind == "null":
        return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == "like" and column == "s":
        return f"s LIKE '{draw(st.sampled_from(['a', 'é', 'b', '']))}%'"
    op = draw(OPS)
    return f"{draw(literal)} {op} {column}" if kind == "flip" else f"{column} {op} {draw(literal)}"


def predicates(pools: dict[str, list]) -> st.SearchStrategy[str]:
    return atom(pools) | st.recursive(
        atom(pools),
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda p: f"({p[0]}) AND ({p[1]})"),
            st.tuples(inner, inner).map(lambda p: f"{p[0]} AND {p[1]}"),
            st.tuples(inner, inner).map(lambda p: f"({p[0]}) OR ({p[1]})"),
            inner.map(lambda p: f"NOT ({p})"),
        ),
        max_leaves=4,
    )


# a table per example, read by Spark: few examples, no deadline
TABLE_EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@TABLE_EXAMPLES
@given(st.lists(st.lists(ROWS, min_size=1, max_size=3), min_size=2, max_size=3), st.data())
def test_every_read_path_returns_the_same_rows(spark, batches, data):
    c = table(spark, batches)
    rows = [row for batch in batches for row in batch]
    pools = {name: [r[i] for r in rows if r[i] is not None] for i, name in enumerate("svn")}
    assert_all_same(spark, c, [data.draw(predicates(pools), label="where") for _ in range(2)])


DECIMALS = st.none() | st.decimals(Decimal("-99.99"), Decimal("99.99"), places=2)


@st.composite
def decimal_literal(draw, pool: list[Decimal]) -> str:
    """A literal Spark compares with a decimal(6, 2) column: a value of it (or not) as a
    decimal of another scale, an int, a long, a double or a big decimal."""
    x = draw(st.sampled_from(pool)) if pool and draw(st.booleans()) else draw(DECIMALS)
    x = x if x is not None else Decimal("1.5")
    forms = [str(x), f"{x}0", f"{x}5", f"{x}BD", f"{float(x)!r}e0", f"{x}D"]
    if x == x.to_integral_value():
        forms += [str(int(x)), f"{int(x)}L"]
    return draw(st.sampled_from(forms))


@TABLE_EXAMPLES
@given(st.lists(st.lists(DECIMALS, min_size=1, max_size=3), min_size=2, max_size=4), st.data())
def test_decimal_columns_prune_by_exact_bounds(spark, batches, data):
    """A decimal column's statistics prune exactly against decimal and integer literals of
    any scale, never against doubles: the same rows as Spark in every case."""
    c = WriteClient.create(tempfile.mkdtemp() + "/t", "id", [], "ts", spark=spark)
    ids = count()
    for rows in batches:
        c.bulk_insert(pa.table({
            "id": [f"k{next(ids)}" for _ in rows], "ts": [1] * len(rows),
            "d": pa.array(rows, pa.decimal128(6, 2)),
        }))  # fmt: skip
    pool = [x for rows in batches for x in rows if x is not None]
    literal = decimal_literal(pool)
    op = st.sampled_from(["=", "<=>", "!=", "<", "<=", ">", ">="])
    wheres = [
        data.draw(
            st.tuples(op, literal).map(lambda p: f"d {p[0]} {p[1]}")
            | st.lists(literal, min_size=1, max_size=3).map(lambda v: f"d IN ({', '.join(v)})")
            | st.tuples(literal, literal).map(lambda p: f"d BETWEEN {p[0]} AND {p[1]}"),
            label="where",
        )
        for _ in range(3)
    ]
    assert_all_same(spark, c, wheres)
