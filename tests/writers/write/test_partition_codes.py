"""``writers.write.partition_codes``: string and dictionary columns as codes of one shared
dictionary, and rows' partition paths, against plain per-row models."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.timeline.layout import partition_path
from lakebraid.writers.write.partition_codes import (
    SPLIT_ROWS,
    codes,
    encode_partitions,
    partition_paths,
)

TEXTS = st.lists(st.sampled_from(["a", "b", "é", ""]) | st.none(), max_size=20)


@settings(max_examples=100, deadline=None)
@given(first=TEXTS, second=TEXTS, encoded=st.tuples(st.booleans(), st.booleans()))
def test_codes_share_one_dictionary(
    first: list[str | None], second: list[str | None], encoded: tuple[bool, bool]
) -> None:
    columns = []
    for values, as_dictionary in zip((first, second), encoded, strict=True):
        parts = [pa.array(values[:3], pa.string()), pa.array(values[3:], pa.string())]
        column = pa.chunked_array(parts)
        columns.append(pc.dictionary_encode(column) if as_dictionary else column)
    (a, b), dictionary = codes(columns)
    names = dictionary.to_pylist()
    assert len(set(names)) == len(names)
    for values, got in ((first, a), (second, b)):
        assert [None if c < 0 else names[c] for c in got.tolist()] == values


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["a", "b/c", "", "é"]) | st.none(),
            st.integers(-2, 2) | st.none(),
            st.booleans() | st.none(),
        ),
        max_size=30,
    ),
    fields=st.sampled_from([["s"], ["i"], ["s", "i"], ["i", "b", "s"]]),
    split=st.integers(0, 30),
)
def test_partition_paths_match_a_path_per_row(
    rows: list[tuple[str | None, int | None, bool | None]], fields: list[str], split: int
) -> None:
    columns = {
        "s": [r[0] for r in rows],
        "i": [r[1] for r in rows],
        "b": [r[2] for r in rows],
    }
    types = {"s": pa.string(), "i": pa.int64(), "b": pa.bool_()}
    table = pa.table(
        {
            name: pa.chunked_array(
                [pa.array(values[:split], types[name]), pa.array(values[split:], types[name])]
            )
            for name, values in columns.items()
        }
    )
    texts = {f: pc.cast(table.column(f), pa.string()).to_pylist() for f in fields}
    want = [partition_path(fields, [texts[f][n] for f in fields]) for n in range(len(rows))]
    assert partition_paths(table, fields).cast(pa.string()).to_pylist() == want
    paths, coded = encode_partitions(table, fields)
    assert paths.cast(pa.string()).to_pylist() == want
    assert sorted(coded) == (["s"] if "s" in fields else [])  # only text fields are coded
    for name, column in coded.items():
        assert pa.types.is_dictionary(column.type)
        assert column.cast(pa.string()).to_pylist() == columns[name]  # nulls stay nulls


def test_partition_paths_of_many_high_cardinality_fields() -> None:
    """Six fields of about 3,000 values each: more combinations than 64-bit codes hold."""
    rng = np.random.default_rng(0)
    n = 3000
    table = pa.table({f"f{i}": pa.array(rng.integers(0, 10**9, n)) for i in range(6)})
    fields = table.column_names
    texts = {f: pc.cast(table.column(f), pa.string()).to_pylist() for f in fields}
    want = [partition_path(fields, [texts[f][i] for f in fields]) for i in range(n)]
    assert partition_paths(table, fields).cast(pa.string()).to_pylist() == want


@settings(max_examples=100, deadline=None)
@given(values=TEXTS, encoded=st.booleans())
def test_codes_of_one_chunk_match_its_values(values: list[str | None], encoded: bool) -> None:
    """One chunk (a write's partition paths: its indices are viewed, not copied, when none is
    null) gives the same codes as the model: -1 for null, else the value's place."""
    column = pa.array(values, pa.string())
    column = pc.dictionary_encode(column) if encoded else column
    (got,), dictionary = codes([column])
    names = dictionary.to_pylist()
    assert got.dtype == np.int32
    assert [None if c < 0 else names[c] for c in got.tolist()] == values


@settings(max_examples=100, deadline=None)
@given(picks=st.lists(st.integers(0, 3) | st.none(), max_size=20))
def test_codes_of_a_dictionary_naming_a_value_twice_are_equal_for_equal_values(
    picks: list[int | None],
) -> None:
    """One chunk passes through Arrow's unification as it is; a dictionary that names a value
    twice still gives one code per value."""
    names = pa.array(["a", "b", "a", None], pa.string())
    column = pa.DictionaryArray.from_arrays(pa.array(picks, pa.int32()), names)
    (got,), dictionary = codes([column])
    found = dictionary.to_pylist()
    assert len(set(found)) == len(found)
    want = [None if p is None else names[p].as_py() for p in picks]
    assert [None if c < 0 else found[c] for c in got.tolist()] == want
    valued = [c for c, w in zip(got.tolist(), want, strict=True) if w is not None]
    assert all(found[c] is not None for c in valued)


def test_a_large_column_encodes_in_pieces_as_one() -> None:
    """Past ``SPLIT_ROWS`` plain rows a column is encoded in pieces on threads: the paths and
    the coded column still give every row's own value (nulls too, chunks of any length)."""
    n = SPLIT_ROWS + 12_345
    days = np.array(["d00", "d07", "d13", None, "dé"], dtype=object)
    rng = np.random.default_rng(3)
    values = days[rng.integers(0, len(days), n)]
    column = pa.chunked_array(  # a small chunk kept whole, a large one cut
        [pa.array(values[:999].tolist(), pa.string()), pa.array(values[999:].tolist())]
    )
    paths, coded = encode_partitions(pa.table({"day": column}), ["day"])
    expected = [partition_path(["day"], [v]) for v in values.tolist()]
    assert paths.to_pylist() == expected
    assert pc.cast(coded["day"], pa.string()).to_pylist() == values.tolist()
