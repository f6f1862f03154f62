"""The table lock, reentrant within a thread (nested ``with table.lock:`` blocks are fine)
and exclusive across threads and processes.

* local and mounted file systems: :class:`TableLock`, one ``filelock`` at ``.braid/lock``;
* object stores with an atomic create-if-absent (S3): ``timeline.lease.LeaseLock``, a lease
  kept as put-if-absent records, whose holder also fences the instant clock and global
  completions (:func:`make_lock` picks one);
* other file systems are refused with a clear error: a lock built on a check-then-write
  create would not exclude anyone.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType
from typing import TypeAlias

import filelock
from fsspec import AbstractFileSystem

from lakebraid.timeline.durable import is_local
from lakebraid.timeline.errors import ConfigError, LockTimeoutError
from lakebraid.timeline.layout import TableLayout
from lakebraid.timeline.lease import LeaseLock

# protocols whose stores create an object only if the name is free (S3: If-None-Match)
ATOMIC_CREATE = frozenset({"s3", "s3a"})


def make_lock(
    fs: AbstractFileSystem, layout: TableLayout, timeout_s: float, lease_ms: int
) -> TableLock | LeaseLock:
    """The table lock that suits ``fs``."""
    if is_local(fs):
        return TableLock(fs, layout, timeout_s)
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    if protocols & ATOMIC_CREATE:
        return LeaseLock(fs, layout, timeout_s, lease_ms)
    raise ConfigError(
        f"table {layout.root}: {type(fs).__name__} ({'/'.join(sorted(protocols))}) is not a "
        "file system lakebraid can lock: it needs local or mounted disk, or an object store "
        f"with an atomic create-if-absent ({', '.join(sorted(ATOMIC_CREATE))})",
        table=layout.root,
    )


class TableLock:
    def __init__(self, fs: AbstractFileSystem, layout: TableLayout, timeout_s: float = 120.0):
        self._layout = layout
        self._timeout = timeout_s
        self._lock: filelock.BaseFileLock | None = None  # made at the first acquisition: a
        self._made = threading.Lock()  # reader that never locks makes no folder nor lock
        self._local = threading.local()
        self.holds = 0  # outermost acquisitions so far, by any thread of this process

    @property
    def held(self) -> bool:
        """True when the calling thread holds the lock."""
        return getattr(self._local, "depth", 0) > 0

    def __enter__(self) -> TableLock:
        depth = getattr(self._local, "depth", 0)
        if depth == 0:  # nested blocks only count: the file lock is this thread's already
            try:
                self._file_lock().acquire()
            except filelock.Timeout:
                raise LockTimeoutError(
                    f"could not take the table lock {self._layout.lock} within "
                    f"{self._timeout} s; another writer holds it: retry, or raise "
                    "lock.timeout.seconds",
                    table=self._layout.root,
                ) from None
            self.holds += 1
        self._local.depth = depth + 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._local.depth -= 1
        if self._local.depth == 0 and self._lock is not None:  # made when it was acquired
            self._lock.release()

    def _file_lock(self) -> filelock.BaseFileLock:
        with self._made:
            if self._lock is None:
                os.makedirs(os.path.dirname(self._layout.lock), exist_ok=True)
                self._lock = filelock.FileLock(
                    self._layout.lock, timeout=self._timeout, is_singleton=True
                )
            return self._lock


Lock: TypeAlias = TableLock | LeaseLock
