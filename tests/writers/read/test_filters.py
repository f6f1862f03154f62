"""``read_arrow(filters=...)`` (``writers.read.filters``): the rows are exactly those of the
whole read that pyarrow's expression of the filters keeps (the reference: the unfiltered
read, filtered by pyarrow), whatever the filters (random conjunctions and disjunctions over
integers, doubles with NaN, -0.0, infinities and nulls, strings, dates and the record key,
literals of other types, ``None`` in value lists), on copy-on-write and merge-on-read tables
of several files; pruning reads fewer files; filters pyarrow cannot apply are refused naming
the problem, with nothing read."""

from __future__ import annotations

import datetime as dt
import math
import tempfile
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError
from lakebraid.writers.read import plan

SCHEMA = pa.schema(
    [("id", pa.string()), ("ts", pa.int64()), ("n", pa.int64()), ("v", pa.float64()),
     ("s", pa.string()), ("d", pa.date32()), ("m", pa.decimal128(9, 2)),
     ("t", pa.timestamp("us", tz="UTC"))]
)  # fmt: skip
FLOATS = [0.0, -0.0, 1.5, -2.5, math.inf, -math.inf, math.nan, None, 3.0, 7.25]
TEXTS = ["a", "b", "ab", "z", "é", "", None, "k"]
DAY = dt.date(2024, 1, 1)
NOON = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)


def batch(first: int, ts: int) -> pa.Table:
    """Twenty rows whose ``n`` lie in ``[first, first + 20)`` (files' ranges apart)."""
    rows = []
    for i in range(first, first + 20):
        rows.append(
            {
                "id": f"k{i:03d}",
                "ts": ts,
                "n": None if i % 7 == 3 else i,
                "v": FLOATS[i % len(FLOATS)],
                "s": TEXTS[i % len(TEXTS)],
                "d": DAY + dt.timedelta(days=i // 10),
                "m": None if i % 11 == 4 else Decimal(i) / 4,
                "t": NOON + dt.timedelta(hours=i),
            }
        )
    return pa.Table.from_pylist(rows, SCHEMA)


@pytest.fixture(scope="module", params=["copy_on_write", "merge_on_read"])
def client(request) -> WriteClient:
    """Five commits of twenty rows each (a file each); merge-on-read: then an upsert of
    rows across the files (logs to merge)."""
    path = tempfile.mkdtemp() + "/t"
    c = WriteClient.create(path, "id", [], "ts", table_type=request.param)
    for k in range(5):
        WriteClient.open(path).bulk_insert(batch(20 * k, 1))
    if request.param == "merge_on_read":
        changed = (
            batch(0, 2)
            .take(pa.array([1, 5, 9]))
            .set_column(2, "n", pa.array([500, None, 501], pa.int64()))
        )
        WriteClient.open(path).upsert(pa.concat_tables([changed, batch(10, 2).slice(0, 2)]))
    return WriteClient.open(c.path)


def canonical(table: pa.Table) -> list[str]:
    fix = lambda x: "NaN" if isinstance(x, float) and math.isnan(x) else x  # noqa: E731
    rows = table.select(SCHEMA.names).to_pylist()
    return sorted(repr({k: fix(x) for k, x in row.items()}) for row in rows)


LITERALS = {
    "n": st.one_of(st.integers(-5, 120), st.sampled_from([2.5, 19.0, 40.5, 10**20])),
    "v": st.one_of(st.sampled_from(FLOATS[:-3]), st.integers(-3, 8)),
    "s": st.sampled_from([*TEXTS[:-2], "aa", "c"]),
    "d": st.sampled_from([DAY + dt.timedelta(days=k) for k in (-1, 0, 3, 5, 9, 12)]),
    "id": st.sampled_from(["k000", "k007", "k050", "k099", "k100", "x"]),
    "m": st.one_of(
        st.sampled_from([Decimal("2.25"), Decimal("10.5"), Decimal("-1"), Decimal("24.75")]),
        st.integers(-1, 30),
        st.sampled_from([2.25, 10.3]),
    ),
    "t": st.sampled_from(
        [NOON + dt.timedelta(hours=h, minutes=m) for h, m in ((0, 0), (30, 0), (59, 59), (99, 1))]
        + [dt.datetime(2024, 1, 2, 18)]  # naive: pyarrow refuses it against a zoned column
    ),
}


@st.composite
def term(draw) -> tuple:
    column = draw(st.sampled_from(sorted(LITERALS)))
    op = draw(st.sampled_from(["=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"]))
    if op in ("in", "not in"):
        values = draw(st.lists(LITERALS[column], min_size=0, max_size=3))
        if draw(st.booleans()) and column != "d":
            values.append(None)
        return (column, op, values)
    return (column, op, draw(LITERALS[column]))


FILTERS = st.one_of(
    st.lists(term(), min_size=1, max_size=3),
    st.lists(st.lists(term(), min_size=1, max_size=3), min_size=1, max_size=3),
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(filters=FILTERS)
def test_a_filtered_read_returns_what_pyarrow_keeps_of_the_whole_read(client, filters) -> None:
    whole = client.read_arrow()
    try:
        expected = canonical(whole.filter(pq.filters_to_expression(filters)))
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        with pytest.raises(InputError, match="cannot be applied"):
            client.read_arrow(filters=filters)
        return
    assert canonical(client.read_arrow(filters=filters)) == expected


def units(client: WriteClient, filters: list) -> int:
    point = client.table.read_point(None)
    return len(plan.filtered_units(client.table, point, filters)[0])


def test_files_that_cannot_match_are_not_read(client) -> None:
    # merge-on-read: the first slice's log holds n from 10 to 501, so it may match too
    logged = int(client.table.config.merge_on_read)
    assert units(client, [("ts", ">=", 0)]) == 5
    assert units(client, [("n", ">=", 40), ("n", "<", 60)]) == 1 + logged  # one file's range
    assert units(client, [("id", "=", "k061")]) == 1  # the record index: one group
    assert units(client, [[("n", "<", 5)], [("n", "in", [95, 96])]]) == 2  # either
    assert units(client, [("n", "in", [95, None])]) == 5  # None: nulls match, no pruning
    assert units(client, [("n", ">=", 40), ("v", "<", 1.0)]) == 3 + logged  # own types
    assert units(client, [("n", ">=", 40), ("v", "<", 1)]) == 5  # an int for a double
    got = client.read_arrow(filters=[("n", ">=", 40), ("n", "<", 60)]).column("n").to_pylist()
    assert sorted(got) == [n for n in range(40, 60) if n % 7 != 3]


@pytest.mark.parametrize(
    ("filters", "problem"),
    [
        ([("zz", "=", 1)], r"name \['zz'\], which are no columns"),
        ([("n", "=", "1")], "cannot be applied"),
        ([("n", "~", 1)], "cannot be applied"),
        ([("n", "=", 2**70)], "cannot be applied"),
        ("n = 1", "non-empty list"),
        ([], "non-empty list"),
        ([[("n", "=", 1)], ["n"]], "is not a non-empty list"),
    ],
)
def test_filters_pyarrow_cannot_apply_are_refused(client, filters, problem) -> None:
    with pytest.raises(InputError, match=problem):
        client.read_arrow(filters=filters)


@pytest.mark.parametrize(
    ("filters", "tried"),
    [
        ([("n", ">=", 40), ("n", "<", 60)], False),
        ([[("s", "=", "a")], [("d", "<", DAY), ("t", ">", NOON), ("v", "!=", 1.5)]], False),
        ([("n", "in", [40, 41])], True),  # a value set: tried
        ([("v", "<", 1)], True),  # an int for a double
        ([("m", "<", Decimal(1))], True),  # a decimal column
        ([("n", "=", None)], True),
    ],
)
def test_only_comparisons_with_own_types_skip_the_trial(client, monkeypatch, filters, tried):
    """A comparison of an integer, floating, text, date or timestamp column with a value of
    its own type always applies: the trial on a row of nulls (an Acero plan) is skipped for
    it, and the rows are still pyarrow's."""
    from lakebraid.writers.read import filters as module

    calls = []
    real = module._trial
    monkeypatch.setattr(module, "_trial", lambda *a: (calls.append(a), real(*a))[1])
    got = client.read_arrow(filters=filters)
    assert bool(calls) is tried
    expected = client.read_arrow().filter(pq.filters_to_expression(filters))
    assert canonical(got) == canonical(expected)
