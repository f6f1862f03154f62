"""A small local base file whose size a listing gave is read whole with its footer, its bytes
kept with the footer (``basefile.SMALL_BASE_BYTES``): the read of its rows opens nothing and
gives the rows a read from the file gives; a damaged small file is still refused by name;
files of unknown size or above the limit are opened as before."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pyarrow as pa
import pytest
from index_base_fixtures import write_index_base

from lakebraid.metadata import basefile
from lakebraid.metadata.basefile import SIZES, open_base, read_base
from lakebraid.metadata.errors import CorruptBaseFileError

FS = fsspec.filesystem("file")


def small_base(folder: Path) -> str:
    rows = pa.table(
        {
            "key": pa.array([f"k{i:03d}" for i in range(50)]),
            "partition": pa.array(["day=1"] * 50),
            "file_id_hi": pa.array(range(50), pa.int64()),
            "file_id_lo": pa.array([7] * 50, pa.int64()),
            "instant": pa.array([20260101000000001] * 50, pa.int64()),
        }
    )
    return write_index_base(folder / "record_index-0000_20260101000000001.parquet", rows)


def test_a_listed_small_base_is_read_once_with_its_footer(tmp_path, monkeypatch) -> None:
    path = small_base(tmp_path)
    expected = read_base(FS, path)  # size unknown: opened as before
    assert open_base(FS, path).data is None
    basefile.FOOTERS.clear()
    SIZES.put(path, Path(path).stat().st_size)  # as a listing leaves it
    assert open_base(FS, path).data is not None

    def no_open(*args, **kwargs):
        raise AssertionError("a held base file was opened again")

    monkeypatch.setattr(basefile, "open_file", no_open)
    assert read_base(FS, path).equals(expected)


def test_a_base_above_the_limit_is_not_held(tmp_path, monkeypatch) -> None:
    path = small_base(tmp_path)
    monkeypatch.setattr(basefile, "SMALL_BASE_BYTES", 100)
    SIZES.put(path, Path(path).stat().st_size)
    assert open_base(FS, path).data is None


def test_a_damaged_small_base_is_refused_by_name(tmp_path) -> None:
    path = small_base(tmp_path)
    data = bytearray(Path(path).read_bytes())
    data[10] ^= 0xFF  # inside the first column's first page
    Path(path).write_bytes(bytes(data))
    basefile.FOOTERS.clear()
    SIZES.put(path, len(data))
    with pytest.raises(CorruptBaseFileError, match="record_index-0000"):
        read_base(FS, path)
