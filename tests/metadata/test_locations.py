"""Record-index base files, version 4 (``metadata.locations``): the four location columns of
an entry stored as one ``location`` column indexing a footer table. Round trips against the
rows written, lookups against a dict, the exact fallback when fingerprints collide, the
four-column layout past ``MAX_LOCATIONS`` and of version 3 files, and damaged locations."""

from __future__ import annotations

import tempfile
from pathlib import Path

import fsspec
import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_base_fixtures import write_index_base as write

from lakebraid.metadata import basefile, basewrite, locations
from lakebraid.metadata.basefile import base_info, read_base
from lakebraid.metadata.baselookup import lookup_base
from lakebraid.metadata.errors import CorruptBaseFileError
from lakebraid.metadata.locations import LOCATION, LOCATIONS_KEY

FS = fsspec.filesystem("file")
INT64 = st.integers(-(2**63), 2**63 - 1)
PLACES = st.tuples(st.sampled_from(["", "day=1", "day=2", "ünï/ç=ödé"]), INT64, INT64, INT64)


def index_rows(keys: list[str], places: list[tuple[str, int, int, int]]) -> pa.Table:
    columns = list(zip(*places, strict=True)) if places else [[], [], [], []]
    return pa.table(
        {"key": pa.array(keys, pa.string())}
        | {
            name: pa.array(list(values), kind)
            for name, kind, values in zip(locations.COLUMNS, locations.TYPES, columns, strict=True)
        }
    )


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    keys = sorted(draw(st.sets(st.text(min_size=1, max_size=6), max_size=40)))
    pool = draw(st.lists(PLACES, min_size=1, max_size=6))
    places = [draw(st.sampled_from(pool)) for _ in keys]
    return index_rows(keys, places)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=tables(), wanted=st.lists(st.text(min_size=1, max_size=6), max_size=10))
def test_rows_and_lookups_round_trip(rows: pa.Table, wanted: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp) / "record_index-0000_20260101000000001.parquet", rows)
        stored = pq.read_schema(path)
        assert LOCATION in stored.names and "partition" not in stored.names
        assert read_base(FS, path).to_pylist() == rows.to_pylist()
        assert read_base(FS, path, ["instant", "key"]).to_pylist() == (
            rows.select(["instant", "key"]).to_pylist()
        )
        by_key = {r["key"]: r for r in rows.to_pylist()}
        keys = [*wanted, *list(by_key)[::3]]
        for fraction in (0.0, 1.0):  # seek and scan
            found, _ = lookup_base(FS, path, pa.array(keys, pa.string()), scan_fraction=fraction)
            expected = sorted((by_key[k] for k in set(keys) if k in by_key), key=_utf8)
            assert found.to_pylist() == expected


def as_dictionary(rows: pa.Table, dictionary: list[str]) -> pa.Table:
    """``rows`` with their partitions as a dictionary column over ``dictionary`` (which may
    repeat a value or hold unused ones), the rows of one text taking its copies in turn."""
    copies: dict[str, list[int]] = {}
    for i, text in enumerate(dictionary):
        copies.setdefault(text, []).append(i)
    texts = rows.column("partition").to_pylist()
    codes = pa.array([copies[p][i % len(copies[p])] for i, p in enumerate(texts)], pa.int32())
    column = pa.DictionaryArray.from_arrays(codes, pa.array(dictionary, pa.string()))
    return rows.set_column(1, pa.field("partition", column.type), column)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=tables(), extra=st.lists(st.sampled_from(["day=1", "x", ""]), max_size=3))
def test_dictionary_partitions_are_encoded_as_their_text(rows: pa.Table, extra: list[str]) -> None:
    """Writers hand the record index's partitions as a dictionary: the file is the one the
    same rows as text give (each location once in the footer, duplicated or unused
    dictionary values whatever)."""
    texts = rows.column("partition").to_pylist()
    dictionary = [*extra, *dict.fromkeys(texts), *extra, *texts[:2]]
    with tempfile.TemporaryDirectory() as tmp:
        plain = write(Path(tmp) / "record_index-0000_20260101000000001.parquet", rows)
        coded = write(
            Path(tmp) / "record_index-0001_20260101000000001.parquet",
            as_dictionary(rows, dictionary),
        )
        assert read_base(FS, coded).to_pylist() == rows.to_pylist()
        assert pq.read_table(coded).equals(pq.read_table(plain))
        notes = [pq.read_schema(p).metadata[LOCATIONS_KEY] for p in (plain, coded)]
        assert notes[0] == notes[1]


def test_dictionary_partitions_past_max_locations_are_stored_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locations, "MAX_LOCATIONS", 3)
    rows = index_rows([f"k{i}" for i in range(8)], [(f"p{i % 2}", i, i, i) for i in range(8)])
    path = write(
        tmp_path / "record_index-0000_20260101000000001.parquet", as_dictionary(rows, ["p0", "p1"])
    )
    assert pq.read_schema(path).field("partition").type == pa.string()
    assert read_base(FS, path).to_pylist() == rows.to_pylist()


def test_a_null_dictionary_partition_is_refused(tmp_path: Path) -> None:
    rows = as_dictionary(index_rows(["a", "b"], [("p", 1, 2, 3), ("q", 1, 2, 3)]), ["p", "q"])
    codes = pa.array([0, None], pa.int32())
    column = pa.DictionaryArray.from_arrays(codes, pa.array(["p", "q"]))
    with pytest.raises(ValueError, match="null"):
        write(
            tmp_path / "record_index-0000_20260101000000001.parquet",
            rows.set_column(1, "partition", column),
        )


def _utf8(row: dict) -> bytes:
    return row["key"].encode()


def test_the_footer_lists_each_location_once_in_first_use_order(tmp_path: Path) -> None:
    places = [("day=2", 5, 6, 7), ("day=1", -1, 2**63 - 1, 3), ("day=2", 5, 6, 7), ("", 0, 0, 1)]
    rows = index_rows(["a", "b", "c", "d"], places)
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", rows)
    note = msgspec.json.decode(pq.read_schema(path).metadata[LOCATIONS_KEY])
    assert note == [["day=2", "day=1", ""], [5, -1, 0], [6, 2**63 - 1, 0], [7, 3, 1]]
    assert pq.read_table(path).column(LOCATION).to_pylist() == [0, 1, 0, 2]
    assert base_info(FS, path).version == 4


def test_colliding_fingerprints_fall_back_to_an_exact_grouping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    monkeypatch.setattr(locations, "_MIX", (np.uint64(0),) * 4)  # every fingerprint is 0
    places = [("p", 1, 2, 3), ("p", 1, 2, 4), ("q", 1, 2, 3), ("p", 1, 2, 3), ("p", 9, 2, 3)]
    rows = index_rows(["a", "b", "c", "d", "e"], places)
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", rows)
    assert read_base(FS, path).to_pylist() == rows.to_pylist()
    assert pq.read_table(path).column(LOCATION).to_pylist() == [0, 1, 2, 0, 3]


def test_a_file_id_in_two_partitions_keeps_both(tmp_path: Path) -> None:
    places = [("day=1", 1, 2, 3), ("day=2", 1, 2, 3)]  # same integers: one fingerprint
    rows = index_rows(["a", "b"], places)
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", rows)
    assert read_base(FS, path).to_pylist() == rows.to_pylist()


def test_past_max_locations_the_four_columns_are_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locations, "MAX_LOCATIONS", 3)
    rows = index_rows([f"k{i}" for i in range(8)], [("p", i, i, i) for i in range(8)])
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", rows)
    schema = pq.read_schema(path)
    assert LOCATION not in schema.names and LOCATIONS_KEY not in schema.metadata
    assert read_base(FS, path).to_pylist() == rows.to_pylist()
    found, _ = lookup_base(FS, path, pa.array(["k3", "zz"]), scan_fraction=1.0)
    assert found.to_pylist() == rows.slice(3, 1).to_pylist()


def test_version_3_files_are_still_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(basewrite, "BASE_VERSION", 3)
    monkeypatch.setattr(basewrite, "encode", lambda table: None)  # version 3: four columns
    rows = index_rows([f"k{i}" for i in range(8)], [("p", i % 2, 7, 1) for i in range(8)])
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", rows)
    monkeypatch.undo()
    assert base_info(FS, path).version == 3
    assert read_base(FS, path).to_pylist() == rows.to_pylist()


def rewritten(path: str, change: dict[str, object]) -> None:
    """Rewrite ``path`` with its lakebraid entries (and their CRC) as they were, but for
    ``change``: columns replaced (name -> values) and entries (bytes -> bytes or None)."""
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    for name, value in change.items():
        if isinstance(name, bytes):
            meta.pop(name) if value is None else meta.update({name: value})
        else:
            at = table.column_names.index(name)
            table = table.set_column(at, table.field(at), pa.array(value, pa.int32()))
    if any(isinstance(name, bytes) for name in change):
        meta[basefile.CRC_KEY] = str(basefile.kv_crc(meta)).encode()
    pq.write_table(table.replace_schema_metadata(meta), path, row_group_size=4)
    basefile.FOOTERS.clear()


@pytest.mark.parametrize(
    "change, message",
    [
        ({LOCATION: [0, 1, 0, 2, 9, 0, 1, 0]}, "location 9 is outside"),
        ({LOCATION: [0, 1, 0, -1, 0, 0, 1, 0]}, "location -1 is outside"),
        ({LOCATIONS_KEY: None}, "with a location column and without lakebraid.locations"),
        ({LOCATIONS_KEY: b'[["p"],[1],[2]]'}, "unreadable lakebraid.locations"),
        ({LOCATIONS_KEY: b'[["p","q"],[1],[2],[3]]'}, "differ in length"),
        ({b"lakebraid.base.version": b"3"}, "version 3 base file with a location column"),
    ],
    ids=["past-the-table", "negative", "no-table", "three-arrays", "ragged", "version-3"],
)
def test_damaged_locations_name_the_file(tmp_path: Path, change: dict, message: str) -> None:
    places = [("p", 1, 1, 1), ("q", 2, 2, 2), ("p", 1, 1, 1), ("r", 3, 3, 3)] * 2
    rows = index_rows([f"k{i}" for i in range(8)], places)
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", rows)
    rewritten(path, change)
    with pytest.raises(CorruptBaseFileError, match=message) as raised:
        read_base(FS, path)
    assert path in str(raised.value)
    with pytest.raises(CorruptBaseFileError, match=message):
        lookup_base(FS, path, pa.array([f"k{i}" for i in range(8)]), scan_fraction=1.0)
