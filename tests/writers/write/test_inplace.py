"""A base column with rows replaced in place (``writers.write.inplace``) equals a plain Python
model (the column's values as a list, cast, the rows replaced), for every way the module
takes: fixed-width values, text of one width, text dictionaries, nulls, several chunks,
buffers that may or may not be written; and a column the caller still holds is never changed.
"""

from __future__ import annotations

import datetime
import decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.writers.write.datafile import _decoded
from lakebraid.writers.write.inplace import replaced

KINDS = {
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "float64": (pa.float64(), st.floats(allow_nan=False)),
    "bool": (pa.bool_(), st.booleans()),
    "timestamp": (
        pa.timestamp("us"),
        st.datetimes(datetime.datetime(1900, 1, 1), datetime.datetime(2100, 1, 1)),
    ),
    "decimal": (
        pa.decimal128(10, 2),
        st.decimals(-(10**7), 10**7, places=2, allow_nan=False, allow_infinity=False),
    ),
    "text one width": (pa.string(), st.sampled_from(["2024-01-01", "2024-01-02", "abcdefghij"])),
    "text": (pa.string(), st.text(max_size=6)),
    "binary": (pa.binary(), st.binary(max_size=5)),
}


@st.composite
def cases(draw: st.DrawFn) -> tuple:
    name = draw(st.sampled_from(sorted(KINDS)))
    kind, values = KINDS[name]
    nulls = draw(st.booleans())
    item = st.one_of(st.none(), values) if nulls else values
    sizes = draw(st.lists(st.integers(0, 12), min_size=1, max_size=4))
    chunks = [draw(st.lists(item, min_size=n, max_size=n)) for n in sizes]
    total = sum(sizes)
    rows = sorted(draw(st.sets(st.integers(0, max(total - 1, 0)), max_size=total)))
    new = draw(st.lists(item, min_size=len(rows), max_size=len(rows)))
    encode = kind == pa.string() and draw(st.booleans())  # as Parquet decodes low-cardinality text
    return kind, chunks, rows, new, encode


def column_of(kind: pa.DataType, chunks: list[list], encode: bool) -> pa.ChunkedArray:
    arrays = [pa.array(c, kind) for c in chunks]
    if encode:
        arrays = [a.dictionary_encode() for a in arrays]
        return pa.chunked_array(arrays, pa.dictionary(pa.int32(), kind))
    return pa.chunked_array(arrays, kind)


@settings(max_examples=300, deadline=None)
@given(case=cases(), owned=st.booleans(), picked=st.randoms(use_true_random=False))
def test_replaced_equals_the_model(case: tuple, owned: bool, picked) -> None:
    """Also with the new values picked out of a larger array (``picks``: a log's rows), the
    other rows of that array holding values the result must not show."""
    kind, chunks, rows, new, encode = case
    column = column_of(kind, chunks, encode)
    before = column.to_pylist()
    if picked.random() < 0.5:
        got = replaced(column, np.array(rows, np.int64), pa.array(new, kind), kind, owned=owned)
    else:  # the values at shuffled places among decoys (copies of the chunks' values)
        decoys = [v for c in chunks for v in c][: len(new) + 3]
        places = list(range(len(new) + len(decoys)))
        picked.shuffle(places)
        source: list = [None] * len(places)
        for place, value in zip(places, new + decoys, strict=True):
            source[place] = value
        picks = np.array(places[: len(new)], np.int64)
        got = replaced(
            column, np.array(rows, np.int64), pa.array(source, kind), kind, owned=owned, picks=picks
        )
    model = [v for c in chunks for v in c]
    for row, value in zip(rows, new, strict=True):
        model[row] = value
    assert got.type == kind
    assert got.to_pylist() == model
    got.validate(full=True)
    if not owned:
        assert column.to_pylist() == before  # a column the caller holds is left as it was


def test_an_owned_column_is_patched_in_its_own_buffer() -> None:
    """The point of ``owned``: no copy of a fixed-width column (its buffer is written)."""
    column = pa.chunked_array([pa.array(np.arange(1000, dtype=np.int64))])
    got = replaced(
        column, np.array([3, 500]), pa.array([-1, -2], pa.int64()), pa.int64(), owned=True
    )
    assert got.chunk(0).buffers()[1].address == column.chunk(0).buffers()[1].address
    assert got.to_pylist()[3] == -1 and got.to_pylist()[500] == -2


def test_a_one_value_text_dictionary_is_patched_in_its_decoded_buffer() -> None:
    """A base file's partition or commit-time column (one dictionary value in every row) is
    decoded into a buffer of its own, which an owned patch writes without a copy."""
    indices = pa.array(np.zeros(1000, dtype=np.int32))
    column = pa.chunked_array([pa.DictionaryArray.from_arrays(indices, pa.array(["day-1"]))])
    got = replaced(
        column, np.array([3, 999]), pa.array(["day-2", "day-3"]), pa.string(), owned=True
    )
    decoded = _decoded(column.chunk(0))  # the decode the patch starts from
    assert decoded.buffers()[2].is_mutable
    assert decoded.to_pylist() == column.to_pylist()
    want = ["day-1"] * 1000
    want[3], want[999] = "day-2", "day-3"
    assert got.to_pylist() == want


@pytest.mark.parametrize("owned", [False, True])
def test_a_buffer_arrow_holds_read_only_is_copied(owned: bool) -> None:
    """Bytes Arrow did not allocate (a memory map, a bytes object) are never written."""
    data = np.arange(8, dtype=np.int64).tobytes()  # immutable
    chunk = pa.Array.from_buffers(pa.int64(), 8, [None, pa.py_buffer(data)])
    got = replaced(
        pa.chunked_array([chunk]),
        np.array([1]),
        pa.array([99], pa.int64()),
        pa.int64(),
        owned=owned,
    )
    assert got.to_pylist() == [0, 99, 2, 3, 4, 5, 6, 7]
    assert np.frombuffer(data, np.int64).tolist() == list(range(8))


def test_text_of_one_width_stays_text_of_that_width() -> None:
    column = pa.chunked_array([pa.array(["20240101", "20240102", "20240103"]).dictionary_encode()])
    got = replaced(column, np.array([1]), pa.array(["20991231"]), pa.string(), owned=True)
    assert got.to_pylist() == ["20240101", "20991231", "20240103"]
    assert got.type == pa.string()


def test_decimals_keep_their_value() -> None:
    kind = pa.decimal128(10, 2)
    column = pa.chunked_array([pa.array([decimal.Decimal("1.50"), decimal.Decimal("2.25")], kind)])
    got = replaced(column, np.array([0]), pa.array([decimal.Decimal("-7.01")], kind), kind)
    assert got.to_pylist() == [decimal.Decimal("-7.01"), decimal.Decimal("2.25")]


@pytest.mark.parametrize("same", [True, False])
def test_a_one_value_dictionary_given_its_own_value_again_is_left_as_decoded(same: bool) -> None:
    """A partition column: every log row holds the base's one value, so no row is patched
    (the result is the plain decode); one other value among them is patched as usual."""
    indices = pa.array(np.zeros(6, dtype=np.int32))
    column = pa.chunked_array([pa.DictionaryArray.from_arrays(indices, pa.array(["day-1"]))])
    values = ["day-1", "day-1", "day-1" if same else "day-9"]
    got = replaced(column, np.array([0, 2, 5]), pa.array(values), pa.string(), owned=True)
    want = ["day-1"] * 6
    want[5] = values[2]
    assert got.to_pylist() == want
