"""``arrow_records.filtered`` against a Python model: the rows kept, in order, for columns of
every kind, with nulls, all-valid bitmaps (as Parquet decodes a nullable column), chunks and
offsets."""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.arrow_records import bool_array, filtered

KINDS = {
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "float64": (pa.float64(), st.floats(allow_nan=False)),
    "bool": (pa.bool_(), st.booleans()),
    "string": (pa.string(), st.text(max_size=5)),
    "binary": (pa.binary(), st.binary(max_size=5)),
    "large_string": (pa.large_string(), st.text(max_size=5)),
    "decimal": (pa.decimal128(9, 2), st.decimals(-999, 999, places=2).map(decimal.Decimal)),
    "fixed": (pa.binary(3), st.binary(min_size=3, max_size=3)),
    "list": (pa.list_(pa.int32()), st.lists(st.integers(-9, 9), max_size=3)),
    "struct": (pa.struct([("x", pa.int16())]), st.fixed_dictionaries({"x": st.integers(-9, 9)})),
}


def _column(kind: str, values: list[object], pad: bool, cuts: list[int]) -> pa.ChunkedArray:
    """``values`` as chunks split at ``cuts``; ``pad``: each chunk sliced out of a longer
    array with a null on either side (a validity bitmap, an offset, no null of its own when
    ``values`` has none)."""
    kind_type = KINDS[kind][0]
    chunks = []
    for start, end in zip([0, *cuts], [*cuts, len(values)], strict=True):
        part = values[start:end]
        if pad:
            whole = pa.array([None, *part, None], kind_type)
            chunks.append(whole.slice(1, len(part)))
        else:
            chunks.append(pa.array(part, kind_type))
    return pa.chunked_array(chunks, kind_type)


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    n=st.integers(0, 12),
    kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=4),
)
def test_filtered_keeps_the_rows_a_python_model_keeps(
    data: st.DataObject, n: int, kinds: list[str]
) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=2)))
    columns = {}
    for i, kind in enumerate(kinds):
        values = data.draw(st.lists(KINDS[kind][1] | st.none(), min_size=n, max_size=n))
        if data.draw(st.booleans()):  # no nulls of its own
            values = [v if v is not None else data.draw(KINDS[kind][1]) for v in values]
        columns[f"c{i}"] = _column(kind, values, data.draw(st.booleans()), cuts)
    table = pa.table(columns)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    got = filtered(table, keep)
    assert got.schema == table.schema
    rows = table.to_pylist()
    assert got.to_pylist() == [row for row, k in zip(rows, keep.tolist(), strict=True) if k]
    got.validate(full=True)


def test_an_all_valid_bitmap_is_dropped_and_a_null_is_kept() -> None:
    """The filter's output of an all-valid padded column has no bitmap (the fast path ran);
    a column with a null keeps it (the null stays a null)."""
    valid = pa.array([None, 1, 2, 3, None], pa.int64()).slice(1, 3)
    assert valid.null_count == 0 and valid.buffers()[0] is not None
    with_null = pa.array([4, None, 6], pa.int64())
    got = filtered(pa.table({"a": valid, "b": with_null}), np.array([True, True, False]))
    assert got.column("a").chunk(0).buffers()[0] is None
    assert got.to_pylist() == [{"a": 1, "b": 4}, {"a": 2, "b": None}]


@given(st.lists(st.booleans(), max_size=70))
def test_bool_array_holds_the_numpy_booleans_in_order(values: list[bool]) -> None:
    """Packed little-endian, any length (a last byte partly used): equal to Arrow's own."""
    got = bool_array(np.array(values, dtype=bool))
    got.validate(full=True)
    assert got.null_count == 0
    assert got.to_pylist() == values
    assert got.equals(pa.array(values, pa.bool_()))
