"""``index.int_bounds.int_keeps`` gives, file by file, exactly ``column_stats.may_match``'s
answer, whatever the statistics and literals hold (integers past 64 bits, booleans, floats,
decimals, nulls, files with no statistics or only nulls) and whatever the op; and it answers
for integer bounds and literals of 64 bits, the case it exists for."""

from __future__ import annotations

import decimal

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.column_stats import keep_files, may_match
from lakebraid.index.int_bounds import int_keeps
from lakebraid.index.sql_filter import Condition
from lakebraid.metadata.records import ColumnStatsRecord

SMALL = st.integers(-5, 5)  # few values: bounds and literals meet often
ODD = st.one_of(
    st.integers(min_value=2**63 - 2, max_value=2**64),
    st.booleans(),
    st.floats(allow_nan=True, width=64),
    st.just(decimal.Decimal("1.5")),
    st.none(),
)
OPS = st.sampled_from(["=", "in", "!=", "<", "<=", ">", ">=", "null", "notnull", "prefix"])


@st.composite
def stat(draw: st.DrawFn, odd: bool) -> ColumnStatsRecord | None:
    if draw(st.integers(0, 9)) == 0:
        return None  # no statistics recorded for this file
    value = st.one_of(SMALL, ODD) if odd else SMALL
    lo, hi = draw(value), draw(value)
    nulls, values = draw(st.integers(0, 2)), draw(st.integers(0, 3))
    return ColumnStatsRecord("c", "", f"f{draw(st.integers())}", lo, hi, nulls, values, 1)


@settings(max_examples=400, deadline=None)
@given(
    stats=st.lists(stat(odd=False), max_size=12),
    op=OPS,
    values=st.lists(SMALL, min_size=1, max_size=4),
)
def test_integer_bounds_answer_as_may_match(stats, op, values) -> None:
    cond = Condition("c", op, tuple(values))
    fast = int_keeps(stats, op, values)
    if op in ("null", "notnull", "prefix"):
        assert fast is None
        return
    assert fast is not None
    assert fast.tolist() == [s is None or may_match(s, cond) for s in stats]


@settings(max_examples=400, deadline=None)
@given(
    stats=st.lists(stat(odd=True), max_size=8),
    op=OPS,
    values=st.lists(st.one_of(SMALL, ODD), min_size=1, max_size=3),
)
def test_other_types_are_left_to_may_match_or_answered_alike(stats, op, values) -> None:
    cond = Condition("c", op, tuple(values))
    fast = int_keeps(stats, op, values)
    if fast is not None:
        assert fast.tolist() == [s is None or may_match(s, cond) for s in stats]
    present = [msgspec.structs.replace(s, file=f"f{i}") for i, s in enumerate(stats) if s]
    files = [("", s.file) for s in present]
    kept = keep_files(files, present, [cond])
    assert kept == [("", s.file) for s in present if may_match(s, cond)]
