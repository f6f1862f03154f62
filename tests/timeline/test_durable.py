"""``timeline.durable.make_all_durable``: one syncfs where the C library has it and the
system allows it, else an fsync of every file, its folder and that folder's parent; a failed
write-back is an error."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import fsspec
import pytest

import lakebraid.timeline.durable as durable
import lakebraid.timeline.owed as owed

FS = fsspec.filesystem("file")


def files(root: Path, n: int) -> list[str]:
    paths = []
    for i in range(n):
        folder = root / f"day={i}"
        folder.mkdir(parents=True)
        (folder / "f.parquet").write_bytes(b"x" * i)
        paths.append(str(folder / "f.parquet"))
    return paths


def counted_fsyncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(durable.os, "fsync", fsync)
    return calls


def test_one_syncfs_and_no_fsync_where_linux_has_it(tmp_path, monkeypatch) -> None:
    if owed._libc() is None:
        pytest.skip("no syncfs in this C library")
    calls = counted_fsyncs(monkeypatch)
    durable.make_all_durable(FS, str(tmp_path), files(tmp_path, 5))
    assert calls == []


def test_without_syncfs_every_file_and_folder_is_fsynced(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(owed, "_libc", lambda: None)
    calls = counted_fsyncs(monkeypatch)
    durable.make_all_durable(FS, str(tmp_path), files(tmp_path, 5))
    assert len(calls) == 5 * 2 + 1  # each file and its folder, then the table folder once


@pytest.mark.parametrize("refused", [errno.ENOSYS, errno.EPERM])
def test_a_sandbox_that_refuses_syncfs_gets_fsyncs(tmp_path, monkeypatch, refused) -> None:
    class Refusing:
        def syncfs(self, fd: int) -> int:
            return -1

    monkeypatch.setattr(owed, "_libc", lambda: Refusing())
    monkeypatch.setattr(owed.ctypes, "get_errno", lambda: refused)
    calls = counted_fsyncs(monkeypatch)
    durable.make_all_durable(FS, str(tmp_path), files(tmp_path, 3))
    assert len(calls) == 3 * 2 + 1


def test_a_failed_syncfs_is_an_error_naming_the_folder(tmp_path, monkeypatch) -> None:
    class Failing:
        def syncfs(self, fd: int) -> int:
            return -1

    monkeypatch.setattr(owed, "_libc", lambda: Failing())
    monkeypatch.setattr(owed.ctypes, "get_errno", lambda: errno.EIO)
    with pytest.raises(OSError, match=f"syncfs of the file system of {tmp_path}"):
        durable.make_all_durable(FS, str(tmp_path), files(tmp_path, 2))


def test_nothing_to_do_for_no_files_or_an_object_store(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(owed, "_libc", lambda: pytest.fail("no sync expected"))
    durable.make_all_durable(FS, str(tmp_path), [])
    memory = fsspec.filesystem("memory")
    durable.make_all_durable(memory, "/t", ["/t/a"])


def test_a_file_removed_while_listed_is_left_out_not_the_whole_folder(
    tmp_path: Path, monkeypatch
) -> None:
    """A file another process deletes between the folder's read and its ``stat``: the
    listing holds every other file (an empty one would hide live files from a reader)."""
    for name, size in (("a", 3), ("gone", 5), ("b", 7)):
        (tmp_path / name).write_bytes(b"x" * size)
    (tmp_path / "sub").mkdir()
    real = os.scandir

    class Racing:  # deletes "gone" once the folder is read, before its entry is stat'ed
        def __init__(self, path: str) -> None:
            self.entries = real(path)

        def __enter__(self) -> Racing:
            return self

        def __exit__(self, *exc: object) -> None:
            self.entries.close()

        def __iter__(self):
            for entry in self.entries:
                if entry.name == "gone":
                    os.remove(entry.path)
                yield entry

    monkeypatch.setattr(durable.os, "scandir", Racing)
    listed = durable.list_sizes(fsspec.filesystem("file"), str(tmp_path))
    assert sorted(listed) == [("a", 3), ("b", 7)]
    assert durable.list_sizes(fsspec.filesystem("file"), str(tmp_path / "absent")) == []


def _churn(folder: str, stop: str) -> None:
    """Create and delete files in ``folder`` until ``stop`` exists."""
    n = 0
    while not os.path.exists(stop):
        path = os.path.join(folder, f"tmp-{n % 50}")
        with open(path, "wb") as f:
            f.write(b"y")
        if n % 2:
            os.remove(os.path.join(folder, f"tmp-{(n - 1) % 50}"))
        n += 1


def test_a_listing_beside_a_process_that_deletes_files_keeps_the_lasting_ones(
    tmp_path: Path,
) -> None:
    """Another process creates and deletes files in the folder all along: every listing
    holds each of the files that stay."""
    import multiprocessing

    lasting = {f"keep-{i}": i + 1 for i in range(20)}
    for name, size in lasting.items():
        (tmp_path / name).write_bytes(b"z" * size)
    stop = str(tmp_path.parent / f"{tmp_path.name}.stop")
    worker = multiprocessing.get_context("spawn").Process(target=_churn, args=(str(tmp_path), stop))
    worker.start()
    try:
        fs = fsspec.filesystem("file")
        while not (tmp_path / "tmp-3").exists():  # the other process is churning
            time.sleep(0.01)
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            listed = dict(durable.list_sizes(fs, str(tmp_path)))
            assert {k: listed.get(k) for k in lasting} == lasting
    finally:
        Path(stop).touch()
        worker.join(30)
