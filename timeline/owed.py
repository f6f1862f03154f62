"""Durability owed until a write's commit point, paid all at once (local disk).

Nothing a write puts on storage between its requested instants and its commit point (the
global timeline's completion) is visible: readers see a commit only once that completion
exists, and a write that dies first is rolled back by name and by marker. So those files need
not be durable one by one, in turn; they must all be durable before the commit point names
them.

Inside :func:`owing` (``writers.commit.envelope`` opens it around a write and its commit;
the global requested instant, recovery's key to the write, is made durable at once inside it
by :func:`at_once`, before anything owed is written), the fsyncs ``timeline.durable`` would make
on the calling thread -- of files and of folders -- are *owed* instead: :func:`owe` records
the path and the caller skips its fsync. :func:`settle` (called just before the commit point
is written) pays them: each owed path fsynced once, all at the same time on the process's
payer threads (started once, kept), so the file system's journal commits them together (22
small files and 4 folders: 2.7 ms against 7.1 one after another). A write of many files that
:func:`owe_many` (``durable.make_all_durable``, which already chose one ``syncfs`` for them)
is paid by one ``syncfs`` of the file system holding the table instead (an fsync per path
where ``syncfs`` is missing or refused). Not for every write: ``syncfs`` writes back every
dirty page of the file system, other programs' too (with 300 MB of another file dirty it
took 152 ms where the fsyncs took 3.9). After :func:`settle` the scope owes nothing and
fsyncs as usual (the commit point itself, and what follows it). A scope left unsettled pays
on exit, also when an exception leaves it (a conflict's own rollback inside it then stays
durable; a failure to pay is not allowed to hide that exception).

Only the thread that opened the scope owes (a ``ContextVar``): files that worker threads or
other processes write are fsynced by them as before. A power loss before :func:`settle` may
keep any subset of the owed files; none is named by a completed commit, and the write's
requested global instant lets recovery roll it back.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any


class _Owed:
    """The paths owed in one scope (files and folders, in the order owed) and its table's
    local root; ``settled``: paid, nothing more is owed."""

    def __init__(self, root: str):
        self.root = root
        self.paths: dict[str, None] = {}
        self.many = False  # a write of many files: paid by one syncfs
        self.settled = False


_OWED: ContextVar[_Owed | None] = ContextVar("lakebraid_owed_durability", default=None)


@contextmanager
def owing(root: str | None) -> Iterator[None]:
    """Owe the calling thread's fsyncs until :func:`settle` (see the module doc); ``root``:
    the table's local folder (None: not on a local disk, nothing is owed)."""
    if root is None:
        yield
        return
    owed = _Owed(root)
    token = _OWED.set(owed)
    try:
        yield
    except BaseException:
        _OWED.reset(token)
        try:
            _pay(owed)
        except Exception:  # the write failed already: its own error is the one to raise
            pass
        raise
    _OWED.reset(token)
    _pay(owed)


@contextmanager
def at_once() -> Iterator[None]:
    """Inside an owing scope, fsync the calling thread's files at once again (a file that
    must be durable before anything owed reaches storage: a write's global requested
    instant); outside one, nothing changes."""
    token = _OWED.set(None)
    try:
        yield
    finally:
        _OWED.reset(token)


def owe(path: str) -> bool:
    """Record ``path`` (a local file or folder) as owed when the calling thread is in an
    unsettled scope: True, and the caller skips its fsync; else False."""
    owed = _OWED.get()
    if owed is None or owed.settled:
        return False
    owed.paths[path] = None
    return True


def owe_many(paths: Iterable[str]) -> bool:
    """:func:`owe` each of ``paths``, files a write makes durable together (then the scope is
    paid by one ``syncfs``); False, nothing recorded, outside an unsettled scope."""
    owed = _OWED.get()
    if owed is None or owed.settled:
        return False
    owed.paths.update(dict.fromkeys(paths))
    owed.many = True
    return True


def settle() -> None:
    """Pay what the calling thread's scope owes (nothing outside a scope): from here it owes
    nothing and fsyncs as usual."""
    owed = _OWED.get()
    if owed is not None:
        _pay(owed)


_PAY_THREADS = 8  # fsyncs at once: they wait on the disk, whose journal commits them together


@functools.cache
def _payers() -> ThreadPoolExecutor:
    """The process's fsync threads, made on the first payment and kept (starting 8 threads
    per write cost about 2 ms of a 40 ms append); a forked child, where the parent's threads
    do not exist, makes its own (the cache is cleared there)."""
    return ThreadPoolExecutor(_PAY_THREADS, thread_name_prefix="lakebraid-pay")


os.register_at_fork(after_in_child=_payers.cache_clear)


def _pay(owed: _Owed) -> None:
    if owed.settled:
        return
    paths = list(owed.paths)
    if len(paths) == 1:
        _fsync(paths[0])
    elif paths and not (owed.many and syncfs(owed.root)):
        list(_payers().map(_fsync, paths))  # list(): the first failure raises
    owed.settled = True


def _fsync(path: str) -> None:
    """fsync an owed file or folder; one gone since it was owed needs nothing (a metadata
    base's temporary, owed, then renamed to its name, owed too)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def syncfs(folder: str) -> bool:
    """``syncfs`` of the file system holding ``folder``; False where the C library has none
    or the system refuses the call itself (a sandbox's ENOSYS or EPERM): then the caller
    fsyncs each file. Any other failure (a write-back error) raises."""
    libc = _libc()
    if libc is None:
        return False
    fd = os.open(folder, os.O_RDONLY)
    try:
        if libc.syncfs(fd) != 0:
            code = ctypes.get_errno()
            if code in (errno.ENOSYS, errno.EPERM):
                return False
            raise OSError(
                code, f"syncfs of the file system of {folder} failed: {os.strerror(code)}"
            )
    finally:
        os.close(fd)
    return True


@functools.cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syncfs.argtypes = [ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None
