"""The table lock: one ``filelock`` per table at ``.braid/lock``.

Reentrant within a thread (nested ``with table_lock:`` blocks are fine); exclusive across
threads and processes. Works on local and mounted file systems; object stores need a lock
provider that lakebraid does not ship yet, and are refused with a clear error.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType

import filelock
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from lakebraid.timeline.errors import ConfigError, LockTimeoutError
from lakebraid.timeline.layout import TableLayout


def is_local(fs: AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


class TableLock:
    def __init__(self, fs: AbstractFileSystem, layout: TableLayout, timeout_s: float = 120.0):
        if not is_local(fs):
            raise ConfigError(
                f"table {layout.root}: the table lock needs a local or mounted file system "
                f"(got {type(fs).__name__}); object-store locking is not supported yet",
                table=layout.root,
            )
        os.makedirs(os.path.dirname(layout.lock), exist_ok=True)
        self._layout = layout
        self._timeout = timeout_s
        self._lock = filelock.FileLock(layout.lock, timeout=timeout_s, is_singleton=True)
        self._local = threading.local()

    @property
    def held(self) -> bool:
        """True when the calling thread holds the lock."""
        return getattr(self._local, "depth", 0) > 0

    def __enter__(self) -> TableLock:
        try:
            self._lock.acquire()
        except filelock.Timeout:
            raise LockTimeoutError(
                f"could not take the table lock {self._layout.lock} within {self._timeout} s; "
                "another writer holds it: retry, or raise lock.timeout.seconds",
                table=self._layout.root,
            ) from None
        self._local.depth = getattr(self._local, "depth", 0) + 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._local.depth -= 1
        self._lock.release()
