"""``arrow_records.merge_by_key``: two key-sorted tables with disjoint keys become one sorted table
holding every row once, whether the keys share one width (the numpy merge) or not (a sort);
``arrow_records.joined_runs``: key-sorted tables whose key ranges do not overlap, joined in key
order (and None when two ranges overlap)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.arrow_records import first_per_key, joined_runs, merge_by_key

KEYS = st.one_of(
    st.sets(st.text("ab\u00e9", min_size=3, max_size=3), max_size=40),  # one width (bytes vary)
    st.sets(st.text("abc", min_size=1, max_size=4), max_size=40),  # widths vary
    st.sets(st.from_regex(r"k[0-9]{6}", fullmatch=True), max_size=40),
)


def table(keys: list[str], tag: str) -> pa.Table:
    keys = sorted(keys, key=lambda k: k.encode())  # Arrow's order: UTF-8 bytes
    return pa.table({"key": pa.array(keys, pa.string()), "side": [tag] * len(keys)})


@settings(max_examples=300, deadline=None)
@given(KEYS, st.data())
def test_every_row_once_in_key_order(keys: set[str], data) -> None:
    left = data.draw(st.sets(st.sampled_from(sorted(keys)))) if keys else set()
    merged = merge_by_key(table(sorted(left), "l"), table(sorted(keys - left), "r"))
    rows = merged.to_pylist()
    assert [r["key"] for r in rows] == sorted(keys, key=lambda k: k.encode())
    assert all((r["side"] == "l") == (r["key"] in left) for r in rows)


@settings(max_examples=200, deadline=None)
@given(KEYS, st.data())
def test_runs_that_do_not_overlap_are_joined_in_order(keys: set[str], data) -> None:
    """One side's keys all after the other's (a fold of appended ever larger keys): the
    merged table is the two one after the other, whichever side comes first."""
    ordered = sorted(keys, key=lambda k: k.encode())
    cut = data.draw(st.integers(0, len(ordered)))
    low, high = ordered[:cut], ordered[cut:]
    for left, right in ((low, high), (high, low)):
        merged = merge_by_key(table(left, "l"), table(right, "r")).to_pylist()
        assert [r["key"] for r in merged] == ordered
        assert [r["side"] for r in merged] == ["l" if left is low else "r"] * len(low) + [
            "r" if left is low else "l"
        ] * len(high)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sets(st.from_regex(r"k[0-9]{2}", fullmatch=True), max_size=6), max_size=5))
def test_runs_join_in_key_order_unless_their_ranges_overlap(runs: list[set[str]]) -> None:
    tables = [
        pa.table(
            {
                "key": pa.array(sorted(r), pa.string()),
                "side": pa.array([str(i)] * len(r), pa.string()),
            }
        )
        for i, r in enumerate(runs)
    ]
    joined = joined_runs(tables)
    filled = [sorted(r) for r in runs if r]
    overlap = any(
        a[0] <= b[-1] and b[0] <= a[-1] for i, a in enumerate(filled) for b in filled[i + 1 :]
    )
    if overlap:
        assert joined is None
        return
    if not tables:
        assert joined is None
        return
    assert joined is not None
    every = [k for r in runs for k in r]
    assert joined.column("key").to_pylist() == sorted(every)
    tags = {k: str(i) for i, r in enumerate(runs) for k in r}
    assert [r["side"] for r in joined.to_pylist()] == [tags[k] for k in sorted(every)]
    if every:  # what a merge of them gives (each key in one run: nothing to prefer)
        merged = first_per_key(pa.concat_tables(tables), "key", [("side", "ascending")])
        assert merged.to_pylist() == joined.to_pylist()
