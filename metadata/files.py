"""Opening a table's files on any fsspec file system: on the local file system through the
operating system's path with Arrow's native files (their reads and writes release the GIL, and
no Python file object crosses into Arrow's I/O threads), elsewhere through fsspec."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem
from fsspec.spec import AbstractBufferedFile

from lakebraid.metadata.arrow_records import arrow_bytes, pool_buffer
from lakebraid.metadata.errors import StorageReadError
from lakebraid.timeline.durable import is_local, read_bytes
from lakebraid.timeline.errors import LakebraidError


def local_path(fs: AbstractFileSystem, path: str) -> str | None:
    """The operating system's path of ``path`` when ``fs`` is the local file system, else
    None."""
    return fs._strip_protocol(path) if is_local(fs) else None


@contextmanager
def open_file(
    fs: AbstractFileSystem,
    path: str,
    mode: Literal["rb", "wb"] = "rb",
    *,
    memory_map: bool = False,
    size: int | None = None,
    whole: bool = False,
) -> Iterator[pa.NativeFile | BinaryIO]:
    """``path`` opened for reading (``"rb"``) or writing (``"wb"``): a native Arrow file on
    the local file system (``memory_map``: a read-only memory map; ``whole``: for a reader
    of the whole file, its bytes read at once when at most :data:`WHOLE_READ_BYTES`), else
    the fsspec file (``size``: the file's size when known, which spares an object store a
    HEAD request)."""
    local = local_path(fs, path)
    if local is not None and whole and mode == "rb":
        with _native(pa.OSFile, local, "r") as native:
            buffer = native.read_buffer() if native.size() <= WHOLE_READ_BYTES else None
        if buffer is not None:
            yield pa.BufferReader(buffer)
            return
    if local is None and mode == "rb":
        with storage_read(path):
            opened = fs.open(path, mode, **({} if size is None else {"size": size}))
        with opened as handle:
            if size is not None and isinstance(handle, AbstractBufferedFile):
                # fsspec files ask the store for the details (a HEAD) at their first read
                # otherwise; lakebraid's files never change under a name, so no ETag is kept
                handle.details = {"name": path, "size": size, "type": "file"}
            yield _Reading(handle, path)
    elif local is None:
        with fs.open(path, mode) as handle:
            yield handle
    elif memory_map and mode == "rb":
        with _native(pa.memory_map, local, "r") as mapped:
            yield mapped
    else:
        with _native(pa.OSFile, local, mode) as native:
            yield native


def whole_file(fs: AbstractFileSystem, path: str) -> pa.Buffer:
    """All of a file that never changes under its name (a data log), in a buffer of Arrow's
    memory pool (``arrow_records.arrow_bytes``: arrays decoded from it hold no Python
    object): on the local file system one read of its size straight into the buffer (300 logs
    of 300 KB in 19 ms, against 24 read as bytes then copied; a memory map costs a fault per
    page a checksum touches), elsewhere one GET, copied."""
    if is_local(fs):
        with open(fs._strip_protocol(path), "rb", buffering=0) as handle:
            size = os.fstat(handle.fileno()).st_size
            buffer, view = arrow_bytes(size)
            got = 0
            while got < size and (step := handle.readinto(view[got:])):
                got += step
        if got != size:  # shortened while read: the file is not one that never changes
            raise OSError(errno.EIO, f"{path}: read {got} of its {size} bytes")
        return buffer
    with storage_read(path):
        return pool_buffer(read_bytes(fs, path))


@contextmanager
def storage_read(path: str) -> Iterator[None]:
    """Run a read of ``path`` from an object store: a failure of the store or the network
    becomes :class:`StorageReadError` (a missing file stays ``FileNotFoundError``), so a
    caller that turns a file's parse errors into corruption never mistakes one for it."""
    try:
        yield
    except (FileNotFoundError, LakebraidError):
        raise
    except Exception as exc:
        raise StorageReadError(path, exc) from exc


class _Reading:
    """An fsspec file being read whose store failures are :class:`StorageReadError`s (Arrow
    re-raises the exception a Python file's method raised, so they stay apart from the
    parse errors of a damaged file)."""

    def __init__(self, handle: BinaryIO, path: str):
        self._handle = handle
        self._path = path

    def read(self, size: int = -1) -> bytes:
        with storage_read(self._path):
            return self._handle.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        with storage_read(self._path):
            return self._handle.seek(offset, whence)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _native(kind: Callable[[str, str], pa.NativeFile], local: str, mode: str) -> pa.NativeFile:
    """Arrow's native file ``kind`` of ``local``; a missing file raises ``FileNotFoundError``
    with its path (Arrow's own carries none), which callers tell apart by it."""
    try:
        return kind(local, mode)
    except FileNotFoundError as exc:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), local) from exc


WHOLE_READ_BYTES = 16 << 20
"""Size up to which a local Parquet file read whole is first read into memory at once
(``open_file(whole=True)``): Arrow's reader then makes no system call per column chunk or
page. Data files, five columns, one thread, page checksums verified, median of 100 reads:
20,000 rows (665 KB) 1.03-1.06 ms memory-mapped -> 0.89-0.93, 333,334 rows (7.5 MB)
11.0-11.5 -> 10.5-10.9; Arrow's ``pre_buffer`` gave nothing. Above it a file is read as it
is opened (no copy held)."""

THREADED_READ_BYTES = 1 << 20
"""Decoded size (the row groups' uncompressed bytes) from which a Parquet read decodes columns
on Arrow's threads. Below it the hand-off costs more than it saves. 2 cores, median of 100
reads each after 5 ms idle (as reads come in a program): five columns, 5,000 rows (190 KB)
1.21-1.33 ms on the calling thread against 1.43-1.45 threaded, 20,000 rows (780 KB) 3.2-3.4
against 3.1-3.6, 60,000 rows (2.3 MB) 8.1 against 5.3-6.3; a 384-row column_stats base 0.68
against 1.06 ms back to back. The filtered read of one 20,000-row file of 100 (footers and
bases of ``files`` and ``column_stats``, the data file), alternated in one process, median of
150: 11.4 ms with a 2 MiB threshold, 11.9 with 512 KiB, 13.3 threading every read."""


def decode_threaded(meta: pq.FileMetaData, wanted: bool = True) -> bool:
    """Whether a read of the Parquet file of footer ``meta`` should use Arrow's threads
    (``wanted``: the caller allows them; a file of at least :data:`THREADED_READ_BYTES`)."""
    if not wanted:
        return False
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    return size >= THREADED_READ_BYTES
