"""A record-index slice folded in its base's stored form (``metadata.indexfold``) holds the
entries a plain model of the slice gives (base entries, then each log's entries in order:
newest wins, tombstones remove), its file is read back as the generic fold's file is (same
rows, same location column and table), and keys that do not fit the base's packing, bases of
text keys, empty results and older formats are handled or left to the generic fold."""

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
from index_base_fixtures import write_index_base

from lakebraid.metadata import basefile, logcache
from lakebraid.metadata.arrow_records import INDEX_LOG_SCHEMA
from lakebraid.metadata.basefile import read_base
from lakebraid.metadata.basewrite import Header, write_stored
from lakebraid.metadata.indexfold import fold_stored
from lakebraid.metadata.locations import (
    LOCATION,
    LOCATIONS_KEY,
    MAX_LOCATIONS,
    codes_in,
    renumbered,
    table_of,
)
from lakebraid.metadata.logblock import BlockType
from lakebraid.metadata.logwrite import append_blocks, encode_block
from lakebraid.metadata.reader import slice_table
from lakebraid.metadata.records import Partition
from lakebraid.metadata.slices import FileSlice

FS = fsspec.filesystem("file")
GROUP = "record_index-0000"
BASE_INSTANT = "20260101000000001"
LOCATIONS = [("", 1, 2, 3), ("day=1", 1, 2, 4), ("ünï/ç=ödé", -5, 2**62, 7), ("day=2", 0, 0, 0)]


def key_family(kind: str, n: int) -> str:
    if kind == "hex":
        return f"id-{n:08x}"
    if kind == "padded":
        return f"k{n:07d}"
    if kind == "uuid":
        return str(uuid.UUID(int=n * 0x9E3779B97F4A7C15 % 2**128))
    return f"t{n}" + "é" * (n % 3)  # several widths


@st.composite
def slices(draw: st.DrawFn) -> tuple[dict, list[list[tuple]]]:
    """Base entries {key: location} and logs, each a list of (key, location or None)."""
    family = draw(st.sampled_from(["hex", "padded", "uuid", "text"]))
    other = draw(st.sampled_from(["hex", "padded", "uuid", "text", family, family]))
    numbers = draw(st.sets(st.integers(0, 5000), min_size=2, max_size=60))
    base = {key_family(family, n): draw(st.sampled_from(LOCATIONS)) for n in numbers}
    fresh = [key_family(other, n) for n in draw(st.sets(st.integers(0, 10**6), max_size=20))]
    pool = sorted(set(base) | set(fresh))
    new_location = st.tuples(
        st.just("day=9"), st.integers(-3, 3), st.integers(0, 3), st.integers(0, 9)
    )
    value = st.one_of(st.none(), st.sampled_from(LOCATIONS), new_location)
    logs = []
    for _ in range(draw(st.integers(0, 3))):
        keys = draw(st.sets(st.sampled_from(pool), max_size=25))
        logs.append([(k, draw(value)) for k in sorted(keys)])
    return base, logs


def model(base: dict, logs: list[list[tuple]]) -> dict:
    state = dict(base)
    for log in logs:
        for key, location in log:
            if location is None:
                state.pop(key, None)
            else:
                state[key] = location
    return state


def index_rows(entries: list[tuple]) -> pa.Table:
    """Log rows: (key, location or None for a tombstone)."""
    columns = [[k for k, _ in entries]]
    for i in range(4):
        columns.append([("" if i == 0 else 0) if loc is None else loc[i] for _, loc in entries])
    columns.append([loc is None for _, loc in entries])
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, INDEX_LOG_SCHEMA, strict=True)],
        schema=INDEX_LOG_SCHEMA,
    )


def build(folder: Path, base: dict, logs: list[list[tuple]]) -> FileSlice:
    rows = index_rows(sorted((k, v) for k, v in base.items())).drop_columns(["deleted"])
    name = f"{GROUP}_{BASE_INSTANT}.parquet"
    write_index_base(folder / name, rows)
    names, instants = [], []
    for i, log in enumerate(logs):
        instant = f"2026010100000{i + 1:04d}"
        path = folder / f"{GROUP}_{instant}.log"
        blob = encode_block(
            BlockType.DATA,
            instant=instant,
            partition=Partition.RECORD_INDEX,
            file_group=GROUP,
            columns=index_rows(log),
            min_columnar=1 if i % 2 else 10**6,  # columnar and record bodies both
        )
        if log:
            append_blocks(FS, str(path), [blob])
            names.append(path.name)
            instants.append(instant)
    logcache.LOGS.clear()
    return FileSlice(GROUP, name, BASE_INSTANT, tuple(names), tuple(instants))


def entries_of(path: str) -> dict:
    rows = read_base(FS, path)
    return {
        r["key"]: (r["partition"], r["file_id_hi"], r["file_id_lo"], r["instant"])
        for r in rows.to_pylist()
    }


def header(instant: str = "20260201000000001") -> Header:
    return Header("record_index", GROUP, instant, [BASE_INSTANT], 4)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=slices())
def test_a_stored_fold_holds_the_model_and_reads_as_the_generic_fold(case) -> None:
    base, logs = case
    expected = model(base, logs)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        piece = build(folder, base, logs)
        fold = fold_stored(FS, str(folder), piece)
        if not expected:
            assert fold is None  # an empty result: the generic fold writes it
            return
        assert fold is not None
        path = str(folder / f"{GROUP}_20260201000000001.parquet")
        write_stored(FS, path, fold.rows, header(), fold.codec, fold.locations)
        basefile.FOOTERS.clear()
        assert entries_of(path) == expected
        generic, _ = slice_table(FS, str(folder), Partition.RECORD_INDEX, piece)
        other = str(folder / "record_index-0001_20260201000000001.parquet")
        write_index_base(folder / Path(other).name, generic)
        assert entries_of(other) == expected
        stored, written = pq.read_table(path), pq.read_table(other)
        assert stored.column(LOCATION).equals(written.column(LOCATION))
        notes = [pq.read_schema(p).metadata[LOCATIONS_KEY] for p in (path, other)]
        assert notes[0] == notes[1]
        assert [r.num_rows for r in _row_groups(path)] == [r.num_rows for r in _row_groups(other)]


def _row_groups(path: str) -> list:
    meta = pq.read_metadata(path)
    return [meta.row_group(i) for i in range(meta.num_row_groups)]


def test_a_new_key_outside_the_packing_turns_the_keys_to_text_and_packs_them_again(
    tmp_path: Path,
) -> None:
    base = {f"k{n:07d}": LOCATIONS[0] for n in range(10, 30)}  # only the last digits vary
    logs = [[("k9999999", LOCATIONS[1]), ("kabc", LOCATIONS[2])]]  # another digit; a width
    piece = build(tmp_path, base, logs)
    before = basefile.open_base(FS, str(tmp_path / piece.base)).info.key_hex
    fold = fold_stored(FS, str(tmp_path), piece)
    assert fold is not None and before is not None
    assert not pa.types.is_fixed_size_binary(fold.rows.schema.field("key").type)  # two widths
    path = str(tmp_path / f"{GROUP}_20260201000000001.parquet")
    write_stored(FS, path, fold.rows, header(), fold.codec, fold.locations)
    basefile.FOOTERS.clear()
    assert entries_of(path) == model(base, logs)


def test_a_base_of_four_location_columns_is_left_to_the_generic_fold(tmp_path: Path) -> None:
    many = MAX_LOCATIONS + 1  # too many locations: the base keeps the four columns
    base = {f"k{n:07d}": ("p", n, 0, 0) for n in range(many)}
    piece = build(tmp_path, base, [[("k0000001", None)]])
    assert basefile.open_base(FS, str(tmp_path / piece.base)).locations is None
    assert fold_stored(FS, str(tmp_path), piece) is None


def test_codes_in_extends_the_table_in_first_use_order() -> None:
    known = table_of(b'[["a","b"],[1,2],[0,0],[5,6]]')
    rows = index_rows([("x", ("c", 3, 0, 7)), ("y", ("b", 2, 0, 6)), ("z", ("c", 3, 0, 7))])
    rows = pa.concat_tables([rows, index_rows([("w", ("d", 4, 0, 8))])])
    found = codes_in(known, rows)
    assert found is not None
    codes, table = found
    assert codes.tolist() == [2, 1, 2, 3]
    assert table.to_pylist()[2:] == [
        {"partition": "c", "file_id_hi": 3, "file_id_lo": 0, "instant": 7},
        {"partition": "d", "file_id_hi": 4, "file_id_lo": 0, "instant": 8},
    ]


def test_renumbered_keeps_the_locations_in_use_in_first_use_order() -> None:
    table = table_of(b'[["a","b","c","d"],[1,2,3,4],[0,0,0,0],[5,6,7,8]]')
    numbered = renumbered(np.array([3, 1, 3, 2], np.int32), table)
    assert numbered is not None
    codes, note = numbered
    assert codes.to_pylist() == [0, 1, 0, 2]
    assert note == b'[["d","b","c"],[4,2,3],[0,0,0],[8,6,7]]'


@pytest.mark.parametrize("code", [-1, 4])
def test_a_stored_read_refuses_a_location_outside_the_table(tmp_path: Path, code: int) -> None:
    piece = build(tmp_path, {"k1": LOCATIONS[0], "k2": LOCATIONS[1]}, [])
    path = tmp_path / piece.base
    table = pq.read_table(path)
    codes = pa.array([0, code], pa.int32())
    table = table.set_column(1, table.schema.field(1), codes)
    pq.write_table(table, path, write_page_checksum=True)
    basefile.FOOTERS.clear()
    with pytest.raises(basefile.CorruptBaseFileError, match="location"):
        fold_stored(FS, str(tmp_path), piece)
