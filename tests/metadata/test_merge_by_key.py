"""``arrow_records.merge_by_key``: two key-sorted tables with disjoint keys become one sorted table
holding every row once, whether the keys share one width (the numpy merge) or not (a sort)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.arrow_records import merge_by_key

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
