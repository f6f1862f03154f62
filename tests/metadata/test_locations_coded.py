"""Record-index rows whose four location columns are dictionaries of one index array (a write's
statuses, ``arrow_records.index_table(coded=True)``): base files written from them are the
files the same rows as plain columns give (same table, same footer note), whatever the
dictionaries repeat or leave unused; other dictionaries, nulls and too many locations take the
plain path."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_base_fixtures import write_index_base as write

from lakebraid.metadata import locations
from lakebraid.metadata.arrow_records import index_table
from lakebraid.metadata.basefile import read_base
from lakebraid.metadata.locations import LOCATION, LOCATIONS_KEY

FS = fsspec.filesystem("file")
INT64 = st.integers(-(2**63), 2**63 - 1)
ENTRIES = st.tuples(st.sampled_from(["", "day=1", "day=2", "ünï/ç=ödé"]), INT64, INT64, INT64)


def coded(keys: list[str], entries: list[tuple], codes: list[int]) -> pa.Table:
    """Rows ``keys`` whose location is entry ``codes[i]`` of ``entries``, as four dictionary
    columns sharing one index array."""
    index = pa.array(codes, pa.int32())
    columns = list(zip(*entries, strict=True))
    return pa.table(
        {"key": pa.array(keys, pa.string())}
        | {
            name: pa.DictionaryArray.from_arrays(index, pa.array(list(values), kind))
            for name, kind, values in zip(locations.COLUMNS, locations.TYPES, columns, strict=True)
        }
    )


def plain(rows: pa.Table) -> pa.Table:
    """The same rows with every dictionary decoded (each entry's values written out)."""
    kinds = [f.type.value_type if pa.types.is_dictionary(f.type) else f.type for f in rows.schema]
    names = rows.column_names
    return pa.table({n: rows.column(n).cast(t) for n, t in zip(names, kinds, strict=True)})


@st.composite
def coded_tables(draw: st.DrawFn) -> pa.Table:
    keys = sorted(draw(st.sets(st.text(min_size=1, max_size=6), max_size=40)))
    entries = draw(st.lists(ENTRIES, min_size=1, max_size=6))
    entries += draw(st.lists(st.sampled_from(entries), max_size=3))  # repeated entries
    codes = [draw(st.integers(0, len(entries) - 1)) for _ in keys]
    return coded(keys, entries, codes)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=coded_tables())
def test_coded_rows_write_the_file_their_plain_rows_write(rows: pa.Table) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        from_codes = write(Path(tmp) / "record_index-0000_20260101000000001.parquet", rows)
        from_plain = write(Path(tmp) / "record_index-0001_20260101000000001.parquet", plain(rows))
        assert pq.read_table(from_codes).equals(pq.read_table(from_plain))
        notes = [pq.read_schema(p).metadata.get(LOCATIONS_KEY) for p in (from_codes, from_plain)]
        assert notes[0] == notes[1] and (notes[0] is not None or not rows.num_rows)
        assert read_base(FS, from_codes).to_pylist() == plain(rows).to_pylist()


def test_each_location_once_in_first_use_order_with_repeated_entries(tmp_path: Path) -> None:
    entries = [("d", 1, 2, 3), ("e", 4, 5, 6), ("d", 1, 2, 3), ("f", 7, 8, 9)]
    rows = coded(["a", "b", "c", "d", "e"], entries, [3, 2, 0, 1, 2])  # codes 2 and 0 are one
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", rows)
    assert pq.read_table(path).column(LOCATION).to_pylist() == [0, 1, 1, 2, 1]
    note = pq.read_schema(path).metadata[LOCATIONS_KEY]
    assert note == b'[["f","d","e"],[7,1,4],[8,2,5],[9,3,6]]'


def test_dictionaries_of_different_index_arrays_are_decoded(tmp_path: Path) -> None:
    rows = coded(["a", "b", "c"], [("d", 1, 2, 3), ("e", 4, 5, 6)], [0, 1, 1])
    other = pa.DictionaryArray.from_arrays(pa.array([1, 1, 0], pa.int32()), pa.array([1, 4]))
    rows = rows.set_column(2, "file_id_hi", other)  # its own codes: rows differ
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", rows)
    assert read_base(FS, path).to_pylist() == plain(rows).to_pylist()
    assert read_base(FS, path).column("file_id_hi").to_pylist() == [4, 4, 1]


def test_past_max_locations_coded_rows_store_the_four_plain_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locations, "MAX_LOCATIONS", 3)
    entries = [("p", i, i, i) for i in range(8)]
    rows = coded([f"k{i}" for i in range(8)], entries, list(range(8)))
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", rows)
    schema = pq.read_schema(path)
    assert LOCATION not in schema.names
    assert [schema.field(n).type for n in locations.COLUMNS] == list(locations.TYPES)
    assert read_base(FS, path).to_pylist() == plain(rows).to_pylist()


def test_a_null_code_is_refused(tmp_path: Path) -> None:
    rows = coded(["a", "b"], [("d", 1, 2, 3)], [0, 0])
    index = pa.array([0, None], pa.int32())
    for at, name in enumerate(locations.COLUMNS, 1):
        column = rows.column(name).chunk(0)
        rows = rows.set_column(at, name, pa.DictionaryArray.from_arrays(index, column.dictionary))
    with pytest.raises(ValueError, match="null"):
        write(tmp_path / "record_index-0000_20260101000000001.parquet", rows)


def test_index_table_coded_holds_the_values_of_the_plain_one() -> None:
    """``coded=True`` over a write's statuses (partitions and file ids of one index array)
    gives dictionaries of that array holding, row by row, the plain table's values; other
    inputs give the plain table."""
    ids = [str(uuid.uuid4()) for _ in range(3)]
    owner = pa.array(np.array([2, 0, 0, 1, 2], np.int32))
    parts = pa.DictionaryArray.from_arrays(owner, pa.array(["d=1", "d=2", "d=1"]))
    files = pa.DictionaryArray.from_arrays(owner, pa.array(ids))
    keys = pa.array(list("abcde"))
    got = index_table(keys, parts, files, "20260101000000001", coded=True)
    want = index_table(keys, parts.cast(pa.string()), files.cast(pa.string()), "20260101000000001")
    assert all(pa.types.is_dictionary(got.schema.field(n).type) for n in locations.COLUMNS)
    assert all(got.column(n).chunk(0).indices.equals(owner) for n in locations.COLUMNS)
    assert plain(got).to_pylist() == plain(want).to_pylist()
    other = pa.DictionaryArray.from_arrays(pa.array([0, 0, 0, 1, 2], pa.int32()), pa.array(ids))
    mixed = index_table(keys, parts, other, "20260101000000001", coded=True)
    assert not pa.types.is_dictionary(mixed.schema.field("file_id_hi").type)
