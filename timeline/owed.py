"""Durability owed until a write's commit point, paid by one ``syncfs(2)`` (local disk).

Nothing a write puts on storage between its requested instants and its commit point (the
global timeline's completion) is visible: readers see a commit only once that completion
exists, and a write that dies first is rolled back by name and by marker. So those files need
not be durable one by one; they must all be durable before the commit point names them.

Inside :func:`owing` (``writers.commit.envelope`` opens it around a write and its commit,
after the requested instants are durable), the fsyncs ``timeline.durable`` would make on the
calling thread -- of files and of folders -- are *owed* instead: :func:`owe` records the path
and the caller skips its fsync. :func:`settle` (called just before the commit point is
written) pays them with one ``syncfs`` of the file system holding the table: Linux writes back
every dirty page and inode of that file system and commits its journal before it returns, and
reports a failed write-back as an error (since 5.8). Where ``syncfs`` is missing or refused,
each owed path is fsynced once, in the order owed. After :func:`settle` the scope owes nothing
and fsyncs as usual (the commit point itself, and what follows it). A scope left unsettled
pays on exit, also when an exception leaves it (a conflict's own rollback inside it then stays
durable; a failure to pay is not allowed to hide that exception).

Only the thread that opened the scope owes (a ``ContextVar``): files that worker threads or
other processes write are fsynced by them as before. A power loss before :func:`settle` may
keep any subset of the owed files; none is named by a completed commit, and the write's
requested instants, durable before the scope, let recovery roll it back.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any


class _Owed:
    """The paths owed in one scope (files and folders, in the order owed) and its table's
    local root; ``settled``: paid, nothing more is owed."""

    def __init__(self, root: str):
        self.root = root
        self.paths: dict[str, None] = {}
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


def owe(path: str) -> bool:
    """Record ``path`` (a local file or folder) as owed when the calling thread is in an
    unsettled scope: True, and the caller skips its fsync; else False."""
    owed = _OWED.get()
    if owed is None or owed.settled:
        return False
    owed.paths[path] = None
    return True


def settle() -> None:
    """Pay what the calling thread's scope owes (nothing outside a scope): from here it owes
    nothing and fsyncs as usual."""
    owed = _OWED.get()
    if owed is not None:
        _pay(owed)


def _pay(owed: _Owed) -> None:
    if owed.settled:
        return
    if owed.paths and not syncfs(owed.root):
        for path in owed.paths:
            _fsync(path)
    owed.settled = True


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
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
