"""``metadata.files``: ``whole_file`` (a whole file's bytes, read on local disk, fetched
elsewhere; the same bytes either way, and they outlive the file's name),
``open_file(whole=True)`` (a small local file read into memory at once, a larger one opened
as asked; the same rows either way) and ``decode_threaded`` (which Parquet reads decode on
Arrow's threads)."""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakebraid.metadata import files
from lakebraid.metadata.files import THREADED_READ_BYTES, decode_threaded, open_file, whole_file


@pytest.mark.parametrize("data", [b"", b"x", bytes(range(256)) * 1000])
def test_local_and_remote_files_read_the_same_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(data)
    local = whole_file(fsspec.filesystem("file"), str(path))
    memory = fsspec.filesystem("memory")
    memory.pipe_file("/t/a.log", data)
    assert bytes(local) == data == bytes(whole_file(memory, "memory:///t/a.log"))


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_a_whole_file_is_held_in_arrows_pool(tmp_path: Path, remote: bool) -> None:
    """Rows decoded from it then hold no Python object (``writers.read``'s Arrow-owned
    results): the pool's bytes grow by the file's size while it is held."""
    data = bytes(range(256)) * 4096
    if remote:
        fs, path = fsspec.filesystem("memory"), "memory:///t/b.log"
        fs.pipe_file("/t/b.log", data)
    else:
        fs, path = fsspec.filesystem("file"), str(tmp_path / "b.log")
        Path(path).write_bytes(data)
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    held = whole_file(fs, path)
    assert isinstance(held, pa.Buffer) and held.to_pybytes() == data
    assert pool.bytes_allocated() - before >= len(data)
    del held
    assert pool.bytes_allocated() - before < len(data)


def test_bytes_read_outlive_the_files_name(tmp_path: Path) -> None:
    """A cleaner may delete a log a read has read: the read keeps its bytes."""
    path = tmp_path / "a.log"
    path.write_bytes(b"block" * 1000)
    view = whole_file(fsspec.filesystem("file"), str(path))
    os.remove(path)
    assert bytes(view[:5]) == b"block" and len(view) == 5000


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    for fs in (fsspec.filesystem("file"), fsspec.filesystem("memory")):
        with pytest.raises(FileNotFoundError):
            whole_file(fs, str(tmp_path / "gone.log"))


@pytest.mark.parametrize("limit", [0, 1 << 30], ids=["opened", "in memory"])
def test_a_whole_read_gives_the_files_rows_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    monkeypatch.setattr(files, "WHOLE_READ_BYTES", limit)
    path = str(tmp_path / "a.parquet")
    table = pa.table({"k": [f"k{i}" for i in range(5_000)], "v": np.arange(5_000)})
    pq.write_table(table, path, row_group_size=700)
    fs = fsspec.filesystem("file")
    with open_file(fs, path, whole=True, memory_map=True) as source:
        assert isinstance(source, pa.BufferReader) is bool(limit)
        assert pq.ParquetFile(source).read().equals(table)
    with pytest.raises(FileNotFoundError, match=r"gone\.parquet"):
        with open_file(fs, str(tmp_path / "gone.parquet"), whole=True):
            pass


@pytest.mark.parametrize(("rows", "threaded"), [(0, False), (10, False), (200_000, True)])
def test_only_files_past_the_threshold_decode_on_threads(
    tmp_path: Path, rows: int, threaded: bool
) -> None:
    """The decision follows the row groups' decoded bytes (200,000 int64 values in seven
    row groups are 1.6 MB, summed), and a caller's ``wanted=False`` always wins."""
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"v": np.arange(rows, dtype=np.int64)}), path, row_group_size=30_000)
    meta = pq.read_metadata(path)
    assert all(
        meta.row_group(i).total_byte_size < THREADED_READ_BYTES for i in range(meta.num_row_groups)
    )
    assert decode_threaded(meta) is threaded
    assert decode_threaded(meta, wanted=False) is False
