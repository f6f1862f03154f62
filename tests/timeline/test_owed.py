"""``timeline.owed``: inside a scope the calling thread's fsyncs are owed, not done; settling
pays them with one syncfs (or, without syncfs, one fsync per owed path, in order); then, and
outside any scope, and on other threads, ``timeline.durable`` fsyncs as before. A scope left
unsettled pays on exit, also when an exception leaves it."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fsspec
import pytest

import lakebraid.timeline.durable as durable
import lakebraid.timeline.owed as owed


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """("fsync", path) and ("syncfs", folder) in order; syncfs reports itself available."""
    seen: list[tuple[str, str]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    def syncfs(folder: str) -> bool:
        seen.append(("syncfs", folder))
        return True

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(owed, "syncfs", syncfs)
    return seen


def _files(root: Path, n: int) -> list[str]:
    paths = []
    for i in range(n):
        path = root / f"f{i}"
        path.write_bytes(b"x" * i)
        paths.append(str(path))
    return paths


def test_owed_fsyncs_are_paid_by_one_syncfs_then_fsyncs_resume(tmp_path, calls) -> None:
    a, b = _files(tmp_path, 2)
    with owed.owing(str(tmp_path)):
        durable.fsync_path(a)
        durable.sync_new_files([a, b])
        durable.put_if_absent(fsspec.filesystem("file"), str(tmp_path / "sub" / "i"), b"body")
        assert calls == []  # nothing done yet: all owed
        owed.settle()
        assert calls == [("syncfs", str(tmp_path))]
        durable.fsync_path(b)  # after the settle: done at once
        owed.settle()  # nothing more owed
    assert calls == [("syncfs", str(tmp_path)), ("fsync", b)]
    assert (tmp_path / "sub" / "i").read_bytes() == b"body"


def test_without_syncfs_each_owed_path_is_fsynced_once_in_order(
    tmp_path, calls, monkeypatch
) -> None:
    monkeypatch.setattr(owed, "syncfs", lambda folder: False)
    a, b = _files(tmp_path, 2)
    with owed.owing(str(tmp_path)):
        durable.fsync_path(b)
        durable.make_durable(fsspec.filesystem("file"), a)
        durable.fsync_path(b)
        assert calls == []
    assert calls == [("fsync", b), ("fsync", a), ("fsync", str(tmp_path))]


def test_an_unsettled_scope_pays_on_exit_even_when_an_exception_leaves_it(tmp_path, calls) -> None:
    (a,) = _files(tmp_path, 1)
    with pytest.raises(KeyError), owed.owing(str(tmp_path)):
        durable.fsync_path(a)
        raise KeyError("the write failed")
    assert calls == [("syncfs", str(tmp_path))]
    with owed.owing(str(tmp_path)):
        pass  # nothing owed: nothing paid
    assert calls == [("syncfs", str(tmp_path))]


def test_a_failed_payment_does_not_hide_the_error_that_left_the_scope(
    tmp_path, monkeypatch
) -> None:
    def failing(folder: str) -> bool:
        raise OSError(5, "write-back failed")

    monkeypatch.setattr(owed, "syncfs", failing)
    (a,) = _files(tmp_path, 1)
    with pytest.raises(KeyError), owed.owing(str(tmp_path)):
        durable.fsync_path(a)
        raise KeyError("the write failed")
    with pytest.raises(OSError, match="write-back failed"), owed.owing(str(tmp_path)):
        durable.fsync_path(a)  # settled on a clean exit: its failure raises


def test_other_threads_and_no_scope_fsync_at_once(tmp_path, calls) -> None:
    a, b = _files(tmp_path, 2)
    with owed.owing(str(tmp_path)), ThreadPoolExecutor(1) as pool:
        pool.submit(durable.fsync_path, a).result()  # a worker thread owes nothing
        assert calls == [("fsync", a)]
    with owed.owing(None):  # not on a local disk: nothing is owed
        durable.fsync_path(b)
    assert calls == [("fsync", a), ("fsync", b)]
    assert not owed.owe(a)
