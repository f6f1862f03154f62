"""``metadata.gather``: rows taken by position with text of one width gathered by numpy are
Arrow's take, whatever the columns hold (text of one width or several, nulls, chunks,
binary, numbers, dictionaries)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata import gather
from lakebraid.metadata.gather import fixed_columns, take_rows

WIDE = st.text(alphabet="ab\u00e9\U0001f600", min_size=0, max_size=4)


@settings(max_examples=150, deadline=None)
@given(
    width=st.integers(0, 6),
    ragged=st.lists(WIDE, min_size=1, max_size=30),
    nulls=st.booleans(),
    chunked=st.booleans(),
    data=st.data(),
)
def test_take_rows_equals_arrows_take(
    width: int, ragged: list[str], nulls: bool, chunked: bool, data: st.DataObject
) -> None:
    n = len(ragged)
    fixed = [
        "".join(data.draw(st.lists(st.sampled_from("xyz"), min_size=width, max_size=width)))
        for _ in range(n)
    ]
    table = pa.table(
        {
            "fixed": pa.array(fixed, pa.string()),
            "ragged": pa.array(ragged, pa.string()),
            "nullable": pa.array(
                [None if nulls and i % 3 == 0 else f for i, f in enumerate(fixed)]
            ),
            "binary": pa.array([f.encode() for f in fixed], pa.binary()),
            "number": pa.array(range(n), pa.int64()),
            "coded": pa.array(fixed, pa.string()).dictionary_encode(),
        }
    )
    if chunked:
        table = pa.concat_tables([table.slice(0, n // 2), table.slice(n // 2)])
    views = fixed_columns(table)
    assert ("fixed" in views) == (not chunked and width > 0)  # one chunk, one width, text
    assert "binary" not in views and "coded" not in views
    positions = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=40)), np.int64)
    got = take_rows(table, positions, views)
    expected = table.take(pa.array(positions, pa.int64()))
    assert got.schema == table.schema
    assert got.to_pylist() == expected.to_pylist()
    got.validate(full=True)


def test_a_gather_past_int32_offsets_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text whose gathered bytes would overflow a string array's offsets raises, as Arrow's
    own take does, instead of wrapping around."""
    table = pa.table({"k": pa.array(["abcd"] * 10)})
    monkeypatch.setattr(gather, "_MAX_BYTES", 4 * 10 - 1)
    with pytest.raises(pa.ArrowInvalid, match="overflow"):
        take_rows(table, np.arange(10), fixed_columns(table))
    assert take_rows(table, np.arange(9), fixed_columns(table)).num_rows == 9


def test_a_column_held_twice_is_viewed_once_and_twins_of_one_data_buffer_apart() -> None:
    """The record key and the key column it copies (one array) share one view; two columns
    over one data buffer with other offsets are viewed each by its own offsets."""
    keys = pa.array(["ab", "cd", "ef"])
    validity, _, data = keys.buffers()
    shifted = pa.Array.from_buffers(
        pa.string(), 2, [validity, pa.py_buffer(np.array([2, 4, 6], np.int32)), data]
    )
    table = pa.table({"a": keys.slice(0, 2), "b": keys.slice(0, 2), "c": shifted, "d": keys[1:]})
    views = fixed_columns(table)
    assert views["a"] is views["b"]
    got = take_rows(table, np.array([1, 0]), views)
    assert got.to_pylist() == table.take(pa.array([1, 0])).to_pylist()


@pytest.mark.parametrize("position", [-1, -4, 4], ids=["last", "first from the end", "past"])
def test_a_position_outside_the_rows_is_refused_as_arrow_refuses_it(position: int) -> None:
    """numpy counts negative positions from the end; a gather refuses them (and positions
    past the rows) as Arrow's take does, never a row taken by mistake."""
    table = pa.table({"k": pa.array(["ab", "cd", "ef", "gh"])}).slice(0)
    views = fixed_columns(table)
    assert "k" in views
    with pytest.raises(pa.ArrowIndexError):
        table.take(pa.array([0, position]))
    with pytest.raises(pa.ArrowIndexError):
        take_rows(table, np.array([0, position]), views)


@settings(max_examples=150, deadline=None)
@given(
    codes=st.lists(st.one_of(st.none(), st.integers(0, 2)), min_size=1, max_size=30),
    ordered=st.booleans(),
    sliced=st.integers(0, 3),
    data=st.data(),
)
def test_dictionaries_of_one_index_array_are_taken_as_arrows_take(
    codes: list[int | None], ordered: bool, sliced: int, data: st.DataObject
) -> None:
    """Columns sharing one index array (a record-index entry's locations), one with its own
    indices and one sharing the same buffer at another offset: each equals Arrow's take."""
    both = pa.array(codes + codes, pa.int32())  # one buffer: two index arrays over it
    indices = both.slice(0, len(codes))
    shared = [
        pa.DictionaryArray.from_arrays(indices, pa.array(values), ordered=ordered)
        for values in (["p", "q", "r"], [10, 20, 30], [1.5, 2.5, 3.5])
    ]
    own = pa.DictionaryArray.from_arrays(
        pa.array([2 - (c or 0) for c in codes], pa.int32()), ["x", "y", "z"]
    )
    at = 1 + sliced % len(codes)  # the same buffer at another offset: other indices
    shifted = pa.DictionaryArray.from_arrays(both.slice(at, len(codes)), ["u", "v", "w"])
    table = pa.table({"a": shared[0], "b": shared[1], "own": own, "c": shared[2], "s": shifted})
    positions = np.array(data.draw(st.lists(st.integers(0, len(codes) - 1), max_size=40)), np.int64)
    got = take_rows(table, positions)
    expected = table.take(pa.array(positions, pa.int64()))
    assert got.schema == table.schema
    assert got.to_pylist() == expected.to_pylist()
    got.validate(full=True)
