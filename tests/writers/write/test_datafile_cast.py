"""``datafile.cast_column`` (what ``conform`` casts with) gives exactly Arrow's cast: text
dictionaries decoded by numpy (one value, values of one width in bytes, others; nulls,
slices), and every other column."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.writers.write import datafile
from lakebraid.writers.write.datafile import cast_column

texts = st.text(max_size=20)


@st.composite
def dictionary_chunks(draw: st.DrawFn) -> pa.Array:
    width = draw(st.none() | st.integers(1, 17))  # values of one width: the numpy gather
    text = texts if width is None else st.text("abc", min_size=width, max_size=width)
    values = draw(st.lists(text, min_size=1, max_size=3, unique=True))
    count = draw(st.integers(0, 40))
    nullable = draw(st.booleans())
    index = st.integers(0, len(values) - 1)
    indices = draw(
        st.lists(st.none() | index if nullable else index, min_size=count, max_size=count)
    )
    chunk = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(values))
    start = draw(st.integers(0, count))
    return chunk.slice(start, draw(st.integers(0, count - start)))  # offsets not at zero


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(dictionary_chunks(), max_size=4), limit=st.sampled_from([0, 64, 1 << 20]))
def test_dictionary_columns_decode_as_arrow_casts_them(chunks: list, limit: int) -> None:
    kind = pa.dictionary(pa.int32(), pa.string())
    column = pa.chunked_array(chunks, kind)
    original = datafile.REPEAT_BYTES
    datafile.REPEAT_BYTES = limit  # 0: Arrow's cast everywhere; 64: only short chunks built
    try:
        got = cast_column(column, pa.string())
    finally:
        datafile.REPEAT_BYTES = original
    got.validate(full=True)
    assert got.type == pa.string()
    assert got.to_pylist() == column.to_pylist()
    assert got.equals(column.cast(pa.string()))


def test_other_casts_are_arrows() -> None:
    numbers = pa.chunked_array([pa.array([1, 2, None], pa.int32())])
    assert cast_column(numbers, pa.int64()).equals(numbers.cast(pa.int64()))
    binary = pa.chunked_array([pa.DictionaryArray.from_arrays([0, 0], pa.array([b"x"]))])
    assert cast_column(binary, pa.binary()).to_pylist() == [b"x", b"x"]


@pytest.mark.parametrize("bad", [-1, 2])
def test_an_index_outside_the_dictionary_is_arrows_error_not_a_value(bad: int) -> None:
    indices = pa.array([0, bad], pa.int32())
    kind = pa.dictionary(pa.int32(), pa.string())
    words = pa.array(["ab", "cd"])
    chunk = pa.DictionaryArray.from_buffers(kind, 2, indices.buffers(), dictionary=words)
    with pytest.raises(pa.ArrowException):
        cast_column(pa.chunked_array([chunk]), pa.string())
