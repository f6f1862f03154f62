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
durable (one ``syncfs`` before the commit point). Folders and files are handed to the threads
:data:`CHUNK` at a time (a future per file cost about 20 µs of the encoding thread's time, a
tenth of a small file's encoding). At most :data:`PENDING` jobs of encoded files wait for
creation at once, so memory stays bounded when the disk is slower than the encoding.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
from fsspec import AbstractFileSystem

from lakebraid.timeline.durable import make_folder
from lakebraid.writers.write.filegroup import write_local

CHUNK = 32  # folders or files per job of the threads
PENDING = 8  # jobs of files handed over and not yet done, at most

File = tuple[str, pa.Buffer]  # an operating-system path and its bytes


class Creator:
    """Makes ``folders`` (local, fsspec paths; repeats made once) on a thread from the start,
    and the files :meth:`create` hands over on another (``done`` called after each); see the
    module doc."""

    def __init__(
        self,
        fs: AbstractFileSystem,
        folders: Iterable[str],
        done: Callable[[], object] | None = None,
    ):
        self._folders = ThreadPoolExecutor(1, thread_name_prefix="lakebraid-folders")
        self._files = ThreadPoolExecutor(1, thread_name_prefix="lakebraid-files")
        distinct = list(dict.fromkeys(folders))
        self._made: dict[str, Future[None]] = {}
        for at in range(0, len(distinct), CHUNK):
            chunk = distinct[at : at + CHUNK]
            made = self._folders.submit(_make_folders, fs, chunk)
            self._made.update(dict.fromkeys(chunk, made))
        self._pending: deque[Future[None]] = deque()  # the jobs of files handed over
        self._chunk: list[File] = []  # files not handed over yet
        self._needs: dict[Future[None], None] = {}  # the folder jobs the chunk waits for
        self._done = done

    def create(self, folder: str, path: str, data: pa.Buffer) -> None:
        """Create the file ``path`` (an operating-system path) holding ``data`` once
        ``folder`` (one of the constructor's) exists."""
        self._chunk.append((path, data))
        self._needs[self._made[folder]] = None
        if len(self._chunk) >= CHUNK:
            self._flush()
            self._wait(PENDING)

    def finish(self) -> None:
        """Wait for every file handed over and every folder; the first failure raises."""
        self._flush()
        self._wait(0)
        for made in dict.fromkeys(self._made.values()):
            made.result()

    def _flush(self) -> None:
        if self._chunk:
            job = self._files.submit(_create, list(self._needs), self._chunk, self._done)
            self._pending.append(job)
            self._chunk, self._needs = [], {}

    def _wait(self, jobs: int) -> None:
        """Wait until at most ``jobs`` jobs of files are pending (oldest first)."""
        while len(self._pending) > jobs:
            self._pending.popleft().result()

    def __enter__(self) -> Creator:
        return self

    def __exit__(self, *error: object) -> None:
        self._files.shutdown(wait=True, cancel_futures=True)
        self._folders.shutdown(wait=True, cancel_futures=True)


def _make_folders(fs: AbstractFileSystem, folders: list[str]) -> None:
    for folder in folders:
        make_folder(fs, folder)


def _create(
    needs: list[Future[None]], files: list[File], done: Callable[[], object] | None
) -> None:
    for made in needs:
        made.result()  # a folder's failure is its files'
    for path, data in files:
        write_local(path, data)
        if done is not None:
            done()
