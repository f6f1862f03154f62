"""Local files created on I/O threads while the calling thread encodes the next ones.

Creating a file or a folder is a new inode: on this project's machines (ext4 on a virtual
disk) each costs 100-400 µs of kernel time, against about 4 µs on tmpfs. A write of 5,000
one-file partitions makes 10,000 of them, more than half its time when made one after another
on the thread that also encodes the files. :class:`Creator` makes them on two threads of its
own, which release the GIL inside the kernel: one makes the partition folders, all of them
submitted first, in the order given (a folder's new entries lock its parent, so a second
thread would only wait); one creates each file in its folder once the folder exists, with
:func:`writers.write.filegroup.write_local`'s three system calls.

The rules are those of a file written on the calling thread: the caller marks a file (or
names it in a batch marker) before handing it over, so the marker exists before the file;
:meth:`Creator.finish` returns once every file is created, and raises the first failure (a
folder's or a file's), so no status is returned for a file that was not written; leaving the
``with`` block by an error cancels what has not started and waits for what has, so no file
appears after the write has failed. Files are not fsynced here: the caller makes them
durable (one ``syncfs`` before the commit point). At most :data:`PENDING` encoded files wait
for creation at once, so memory stays bounded when the disk is slower than the encoding.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType

import pyarrow as pa
from fsspec import AbstractFileSystem

from lakebraid.timeline.durable import make_folder
from lakebraid.writers.write.filegroup import write_local

PENDING = 256  # encoded files handed over and not yet created, at most


class Creator:
    """Makes ``folders`` (local, fsspec paths; repeats made once) on a thread from the start,
    and the files :meth:`create` hands over on another; see the module doc."""

    def __init__(self, fs: AbstractFileSystem, folders: Iterable[str]):
        self._folders = ThreadPoolExecutor(1, thread_name_prefix="lakebraid-folders")
        self._files = ThreadPoolExecutor(1, thread_name_prefix="lakebraid-files")
        self._made = {
            folder: self._folders.submit(make_folder, fs, folder)
            for folder in dict.fromkeys(folders)
        }
        self._pending: deque[Future[None]] = deque()

    def create(
        self, folder: str, path: str, data: pa.Buffer, done: Callable[[], object] | None = None
    ) -> None:
        """Create the file ``path`` (an operating-system path) holding ``data`` once
        ``folder`` (one of the constructor's) exists; ``done`` is called after it."""
        if len(self._pending) >= PENDING:
            self._pending.popleft().result()
        made = self._made[folder]
        self._pending.append(self._files.submit(_create, made, path, data, done))

    def finish(self) -> None:
        """Wait for every file handed over and every folder; the first failure raises."""
        while self._pending:
            self._pending.popleft().result()
        for made in self._made.values():
            made.result()

    def __enter__(self) -> Creator:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._files.shutdown(wait=True, cancel_futures=True)
        self._folders.shutdown(wait=True, cancel_futures=True)


def _create(
    made: Future[None], path: str, data: pa.Buffer, done: Callable[[], object] | None
) -> None:
    made.result()  # the folder's failure is this file's
    write_local(path, data)
    if done is not None:
        done()
