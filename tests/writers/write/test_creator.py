"""Local files created on I/O threads (``writers.write.creator.Creator``): every file handed
over exists with its bytes once ``finish`` returns, a failure raises from ``finish``, and
nothing is created after the ``with`` block is left by an error; through a whole write, a
failed creation leaves no file or row behind."""

from __future__ import annotations

import threading

import fsspec
import pyarrow as pa
import pytest

import lakebraid.writers.write.creator as creator
from lakebraid.writers.client import WriteClient
from lakebraid.writers.write.creator import Creator


def _data(i: int) -> pa.Buffer:
    return pa.py_buffer(f"file {i} ".encode() * (i + 1))


def test_every_file_handed_over_exists_with_its_bytes(tmp_path, monkeypatch) -> None:
    """30 files in 7 folders (two levels, repeats named once per file), handed to the
    threads 4 at a time, at most one job pending: every file holds its bytes and
    ``done`` ran once per file."""
    monkeypatch.setattr(creator, "PENDING", 1)
    monkeypatch.setattr(creator, "CHUNK", 4)
    fs = fsspec.filesystem("file")
    folders = [f"{tmp_path}/day=d{i % 7}/h={i % 2}" for i in range(30)]
    calls: list[str] = []
    lock = threading.Lock()

    def done() -> None:
        with lock:
            calls.append(threading.current_thread().name)

    with Creator(fs, folders, done) as made:
        for i, folder in enumerate(folders):
            made.create(folder, f"{folder}/{i}.parquet", _data(i))
        made.finish()
    for i, folder in enumerate(folders):
        assert (tmp_path / folder / f"{i}.parquet").read_bytes() == _data(i).to_pybytes()
    assert len(list(tmp_path.glob("day=*/h=*/*.parquet"))) == 30
    assert len(calls) == 30 and all(name.startswith("lakebraid-files") for name in calls)


def test_a_folder_that_cannot_be_made_fails_finish(tmp_path, monkeypatch) -> None:
    """A folder whose parent is a file: ``finish`` raises the folder's error, whether the
    failing folder shares its job with others or not; the file in the way is untouched and
    no file is created under it."""
    (tmp_path / "blocked").write_bytes(b"a file, not a folder")
    fs = fsspec.filesystem("file")
    good, bad = f"{tmp_path}/good", f"{tmp_path}/blocked/day=1"
    for chunk in (1, 32):
        monkeypatch.setattr(creator, "CHUNK", chunk)
        with pytest.raises(NotADirectoryError), Creator(fs, [good, bad]) as made:
            made.create(good, f"{good}/0.parquet", _data(0))
            made.create(bad, f"{bad}/1.parquet", _data(1))
            made.finish()
        assert (tmp_path / "blocked").read_bytes() == b"a file, not a folder"


def test_nothing_is_created_after_the_block_is_left_by_an_error(tmp_path, monkeypatch) -> None:
    """The caller fails while files (handed over one per job) wait behind a slow one: leaving
    the block cancels the waiting files and waits for the one under way; nothing appears
    afterwards."""
    monkeypatch.setattr(creator, "CHUNK", 1)
    monkeypatch.setattr(creator, "PENDING", 100)  # all 20 handed over behind the slow one
    fs = fsspec.filesystem("file")
    folder = f"{tmp_path}/p"
    started, release = threading.Event(), threading.Event()
    real = creator.write_local

    def slow(path: str, data: pa.Buffer) -> None:
        if path.endswith("/0.parquet"):
            started.set()
            release.wait(10)
        real(path, data)

    monkeypatch.setattr(creator, "write_local", slow)
    with pytest.raises(RuntimeError, match="caller"), Creator(fs, [folder]) as made:
        for i in range(20):
            made.create(folder, f"{folder}/{i}.parquet", _data(i))
        assert started.wait(10)
        threading.Timer(0.2, release.set).start()
        raise RuntimeError("the caller failed")
    left = sorted(p.name for p in (tmp_path / "p").iterdir())
    assert left == ["0.parquet"]  # the one under way finished; the 19 waiting never ran
    threading.Event().wait(0.3)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == left


def test_a_write_whose_file_creation_fails_leaves_nothing(tmp_path, monkeypatch) -> None:
    """A write of 100 new one-file partitions (past ``write.sync.batch.files``: one batch
    marker, one syncfs, the files created by a ``Creator``) whose 25th file cannot be
    created: the write raises the disk's error and rolls itself back; no file or row of it
    is left, and the next write succeeds."""
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    real, calls = creator.write_local, []

    def failing(path: str, data: pa.Buffer) -> None:
        calls.append(path)
        if len(calls) == 25:
            raise OSError("no space left on device (injected)")
        real(path, data)

    monkeypatch.setattr(creator, "write_local", failing)
    rows = pa.table(
        {
            "id": [f"k{i}" for i in range(100)],
            "day": [f"d{i:02d}" for i in range(100)],
            "ts": list(range(100)),
        }
    )
    with pytest.raises(OSError, match="injected"):
        c.insert(rows)
    assert len(calls) >= 25
    assert not list((tmp_path / "t").glob("day=*/*.parquet"))
    assert c.read_arrow().num_rows == 0 and c.validate() == []
    monkeypatch.setattr(creator, "write_local", real)
    c.insert(rows)
    assert c.read_arrow().sort_by("id").column("id").to_pylist() == sorted(
        f"k{i}" for i in range(100)
    )
    assert c.validate() == []
