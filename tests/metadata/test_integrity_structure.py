"""``integrity.check_structure``: decoded Arrow data whose every buffer access stays inside
its buffers passes, whatever its types, slicing and chunking; text or binary offsets that
step backwards fail (Arrow itself refuses those past the data), as do dictionary indices past
the dictionary."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.integrity import check_decoded, check_structure

texts = st.lists(st.one_of(st.none(), st.text(max_size=6)), min_size=0, max_size=30)


@settings(max_examples=60, deadline=None)
@given(values=texts, start=st.integers(0, 10), stop=st.integers(0, 10), chunks=st.integers(1, 3))
def test_well_formed_data_of_any_shape_passes(values, start, stop, chunks) -> None:
    text = pa.array(values, pa.string())
    sliced = text.slice(min(start, len(text)), stop)
    n = len(sliced)
    columns = {
        "text": pa.chunked_array([sliced] * chunks, pa.string()),
        "large": pa.chunked_array([sliced.cast(pa.large_string())] * chunks),
        "binary": pa.chunked_array([sliced.cast(pa.binary())] * chunks),
        "dict": pa.chunked_array([sliced.dictionary_encode()] * chunks),
        "ints": pa.chunked_array([pa.array(range(n), pa.int64())] * chunks),
        "flags": pa.chunked_array([pa.array([i % 2 == 0 for i in range(n)])] * chunks),
        "lists": pa.chunked_array([pa.array([[i] for i in range(n)])] * chunks),
    }
    check_structure(pa.table(columns))


def broken(offsets: list[int], data: bytes, kind: pa.DataType | None = None) -> pa.Array:
    kind = kind or pa.string()
    width = np.int64 if kind in (pa.large_string(), pa.large_binary()) else np.int32
    buffer = pa.py_buffer(np.array(offsets, dtype=width).tobytes())
    return pa.Array.from_buffers(kind, len(offsets) - 1, [None, buffer, pa.py_buffer(data)])


@pytest.mark.parametrize(
    "column",
    [
        broken([0, 2, 1, 3], b"abc"),  # steps backwards, first and last offsets in range
        broken([0, 2, 1, 3], b"abc", pa.binary()),
        broken([0, 5, 1, 3], b"abc", pa.large_string()),
        pa.DictionaryArray.from_buffers(
            pa.dictionary(pa.int32(), pa.string()),
            2,
            [None, pa.py_buffer(np.array([0, 7], np.int32).tobytes())],
            dictionary=pa.array(["x"]),
        ),
    ],
)
def test_an_out_of_bounds_access_is_refused(column: pa.Array) -> None:
    with pytest.raises(pa.ArrowInvalid):
        check_structure(pa.table({"c": column}))


@settings(max_examples=200, deadline=None)
@given(
    indices=st.lists(st.one_of(st.none(), st.integers(-3, 8)), min_size=0, max_size=40),
    size=st.integers(0, 6),
    start=st.integers(0, 5),
    chunked=st.booleans(),
)
def test_decoded_dictionaries_are_refused_exactly_when_arrow_refuses_them(
    indices, size, start, chunked
) -> None:
    """``check_decoded`` and ``check_structure`` against Arrow's own full validation, on
    dictionary columns whose indices may point before or past their dictionary, at null
    slots too, sliced."""
    dictionary = pa.array([f"v{i}" for i in range(size)], pa.string())
    mask = np.array([i is None for i in indices], dtype=bool)
    raw = pa.array([0 if i is None else i for i in indices], pa.int32(), mask=mask)
    column = pa.DictionaryArray.from_arrays(raw, dictionary, safe=False).slice(start)
    data = (
        pa.table({"c": pa.chunked_array([column, column])})
        if chunked
        else pa.record_batch([column], names=["c"])
    )
    try:
        column.validate(full=True)
        arrow_refuses = False
    except pa.ArrowException:  # ArrowInvalid, or ArrowIndexError for an index past it
        arrow_refuses = True
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    if arrow_refuses:
        with pytest.raises(pa.ArrowInvalid):
            check_decoded(data)
        with pytest.raises(pa.ArrowInvalid):
            check_structure(table)  # a log block's body: the same dictionary check
    else:
        check_decoded(data)
        check_structure(table)
