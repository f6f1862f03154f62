"""Data skipping never drops a file that holds a matching row (property test), and prunes
files for both SQL text and Spark Column filters."""

from __future__ import annotations

import datetime as dt
import operator

from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.records import ColumnStatsRecord
from writers.pruning import Condition, column_conditions, may_match, parse_conditions, prune

OPS = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def stats_of(name: str, values: list[int | None]) -> ColumnStatsRecord:
    present = [v for v in values if v is not None]
    return ColumnStatsRecord(
        "x",
        "p",
        name,
        min(present, default=None),
        max(present, default=None),
        len(values) - len(present),
        len(present),
        10,
    )


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


def test_sql_and_column_forms_give_the_same_conditions() -> None:
    sql = parse_conditions("amount > 10 and day = '2024-01-02' and day in ('a', 'b')")
    column = column_conditions(
        "Column<'and(and(>(amount, 10), =(day, '2024-01-02')), in(day, 'a', 'b'))'>"
    )
    assert sql == column and len(sql) == 3
    assert parse_conditions("amount > 10 or day = 'x'") == []
    assert column_conditions("Column<'or(>(amount, 10), =(day, 'x'))'>") == []
    assert column_conditions("Column<'<(3, y)'>")[0].op == ">"


def test_dates_compare_with_iso_strings() -> None:
    stat = ColumnStatsRecord("d", "p", "f", dt.date(2024, 1, 1), dt.date(2024, 1, 3), 0, 3, 1)
    files = [("p", "f")]
    assert prune(files, [stat], "d = '2024-01-02'") == files
    assert prune(files, [stat], "d > '2024-01-03'") == []


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
