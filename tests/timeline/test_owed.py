"""``timeline.owed``: inside a scope the calling thread's fsyncs are owed, not done; settling
pays them, one fsync per owed path at the same time (a write of many files: one syncfs, or
where it is missing an fsync per path); then, and outside any scope, and on other threads,
``timeline.durable`` fsyncs as before. A scope left unsettled pays on exit, also when an
exception leaves it."""

from __future__ import annotations

import os
import threading
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


def test_owed_fsyncs_are_paid_together_then_fsyncs_resume(tmp_path, calls) -> None:
    a, b = _files(tmp_path, 2)
    instant = tmp_path / "sub" / "i"
    with owed.owing(str(tmp_path)):
        durable.fsync_path(a)
        durable.sync_new_files(fsspec.filesystem("file"), [a, b])
        durable.put_if_absent(fsspec.filesystem("file"), str(instant), b"body")
        assert calls == []  # nothing done yet: all owed
        owed.settle()
        want = {a, b, str(tmp_path), str(instant), str(instant.parent)}
        assert sorted(calls) == sorted(("fsync", path) for path in want)  # each once
        calls.clear()
        durable.fsync_path(b)  # after the settle: done at once
        owed.settle()  # nothing more owed
    assert calls == [("fsync", b)]
    assert instant.read_bytes() == b"body"


@pytest.mark.parametrize("has_syncfs", [True, False])
def test_many_files_made_durable_together_are_paid_by_one_syncfs(
    tmp_path, calls, monkeypatch, has_syncfs
) -> None:
    """``make_all_durable`` (a write of many files) owes them all; the scope then pays by
    one syncfs, or, where it is missing, by an fsync of every file and folder owed."""
    if not has_syncfs:
        monkeypatch.setattr(owed, "syncfs", lambda folder: False)
    a, b = _files(tmp_path, 2)
    folder = tmp_path / "day=1"
    folder.mkdir()
    c = str(folder / "f.parquet")
    Path(c).write_bytes(b"x")
    with owed.owing(str(tmp_path)):
        durable.fsync_path(a)
        durable.make_all_durable(fsspec.filesystem("file"), str(tmp_path), [b, c])
        assert calls == []
    if has_syncfs:
        assert calls == [("syncfs", str(tmp_path))]
    else:
        want = {a, b, c, str(folder), str(tmp_path), str(tmp_path.parent)}
        assert sorted(calls) == sorted(("fsync", path) for path in want)


def test_an_unsettled_scope_pays_on_exit_even_when_an_exception_leaves_it(tmp_path, calls) -> None:
    (a,) = _files(tmp_path, 1)
    with pytest.raises(KeyError), owed.owing(str(tmp_path)):
        durable.fsync_path(a)
        raise KeyError("the write failed")
    assert calls == [("fsync", a)]
    with owed.owing(str(tmp_path)):
        pass  # nothing owed: nothing paid
    assert calls == [("fsync", a)]


def test_a_failed_payment_does_not_hide_the_error_that_left_the_scope(
    tmp_path, monkeypatch
) -> None:
    def failing(fd: int) -> None:
        raise OSError(5, "write-back failed")

    monkeypatch.setattr(os, "fsync", failing)
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


def test_a_temporary_owed_then_renamed_is_paid_by_its_new_name(tmp_path, calls) -> None:
    """A metadata base is written to a temporary, made durable, renamed, made durable again:
    owed twice, paid once under the name it has (the temporary's is gone)."""
    tmp, final = tmp_path / "b.parquet.inprogress", tmp_path / "b.parquet"
    tmp.write_bytes(b"base")
    with owed.owing(str(tmp_path)):
        durable.make_durable(fsspec.filesystem("file"), str(tmp))
        tmp.rename(final)
        durable.make_durable(fsspec.filesystem("file"), str(final))
    assert sorted(calls) == [("fsync", str(tmp_path)), ("fsync", str(final))]


def test_payments_share_the_process_threads_and_a_forked_child_makes_its_own(
    tmp_path, calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    names: list[str] = []
    real = owed._fsync

    def traced(path: str) -> None:
        names.append(threading.current_thread().name)
        real(path)

    monkeypatch.setattr(owed, "_fsync", traced)
    pools = []
    for n in (6, 5):  # two writes' payments
        paths = _files(tmp_path, n)
        calls.clear()
        with owed.owing(str(tmp_path)):
            for path in paths:
                durable.fsync_path(path)
        assert sorted(calls) == sorted(("fsync", p) for p in paths)  # each paid once
        pools.append(owed._payers())
    assert pools[0] is pools[1]  # one pool kept between payments
    assert names and all(name.startswith("lakebraid-pay") for name in names)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: the parent's threads are gone; a new pool pays
        ok = owed._payers() is not pools[0]
        ok = ok and list(owed._payers().map(len, ["ab", "c"])) == [2, 1]
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    assert os.read(read, 1) == b"1" and status == 0
    assert owed._payers() is pools[0]  # the parent's stays


def test_at_once_inside_a_scope_fsyncs_at_once_then_owing_resumes(tmp_path, calls) -> None:
    first, later = _files(tmp_path, 2)
    fs = fsspec.filesystem("file")
    with owed.owing(str(tmp_path)):
        with owed.at_once():
            durable.make_durable(fs, first)
        assert ("fsync", first) in calls
        durable.make_durable(fs, later)
        assert ("fsync", later) not in calls
        owed.settle()
        assert ("fsync", later) in calls
    with owed.at_once():  # outside a scope: nothing changes
        assert owed.owe(first) is False
