"""``timeline.durable.make_all_durable``: one syncfs where the C library has it and the
system allows it, else an fsync of every file, its folder and that folder's parent; a failed
write-back is an error."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import fsspec
import pytest

import lakebraid.timeline.durable as durable

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
    if durable._libc() is None:
        pytest.skip("no syncfs in this C library")
    calls = counted_fsyncs(monkeypatch)
    durable.make_all_durable(FS, str(tmp_path), files(tmp_path, 5))
    assert calls == []


def test_without_syncfs_every_file_and_folder_is_fsynced(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(durable, "_libc", lambda: None)
    calls = counted_fsyncs(monkeypatch)
    durable.make_all_durable(FS, str(tmp_path), files(tmp_path, 5))
    assert len(calls) == 5 * 2 + 1  # each file and its folder, then the table folder once


@pytest.mark.parametrize("refused", [errno.ENOSYS, errno.EPERM])
def test_a_sandbox_that_refuses_syncfs_gets_fsyncs(tmp_path, monkeypatch, refused) -> None:
    class Refusing:
        def syncfs(self, fd: int) -> int:
            return -1

    monkeypatch.setattr(durable, "_libc", lambda: Refusing())
    monkeypatch.setattr(durable.ctypes, "get_errno", lambda: refused)
    calls = counted_fsyncs(monkeypatch)
    durable.make_all_durable(FS, str(tmp_path), files(tmp_path, 3))
    assert len(calls) == 3 * 2 + 1


def test_a_failed_syncfs_is_an_error_naming_the_folder(tmp_path, monkeypatch) -> None:
    class Failing:
        def syncfs(self, fd: int) -> int:
            return -1

    monkeypatch.setattr(durable, "_libc", lambda: Failing())
    monkeypatch.setattr(durable.ctypes, "get_errno", lambda: errno.EIO)
    with pytest.raises(OSError, match=f"syncfs of the file system of {tmp_path}"):
        durable.make_all_durable(FS, str(tmp_path), files(tmp_path, 2))


def test_nothing_to_do_for_no_files_or_an_object_store(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(durable, "_libc", lambda: pytest.fail("no sync expected"))
    durable.make_all_durable(FS, str(tmp_path), [])
    memory = fsspec.filesystem("memory")
    durable.make_all_durable(memory, "/t", ["/t/a"])
