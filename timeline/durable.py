"""Durable writes on storage: fsyncs of new local files and folders, and put-if-absent.

* local / mounted file systems: :func:`put_if_absent` writes the body to a temporary
  ``.<name>.<uuid>.tmp`` in the same folder, fsyncs it, then ``os.link``-s it to its final name
  (fails if the name exists: an atomic rename without overwrite) and removes the temporary
  name. A crash leaves no file or a whole one; temporaries are dot files, ignored by listings.
* other fsspec file systems (object stores): refuse if the name exists, else one
  ``pipe_file`` (a single PUT); callers hold the table lock.
"""

from __future__ import annotations

import os
import posixpath
import uuid

from fsspec import AbstractFileSystem

from lakebraid.timeline.errors import InstantExistsError
from lakebraid.timeline.lock import is_local


def fsync_dir(folder: str) -> None:
    """Make a new or renamed entry of a local folder durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable(fs: AbstractFileSystem, path: str) -> None:
    """Make a just-written local file durable, contents and folder entry, before a commit
    names it (a power loss must not leave a completed instant naming a truncated file).
    Object stores make a file durable when its upload completes: nothing to do."""
    if not is_local(fs):
        return
    local = fs._strip_protocol(path)
    fd = os.open(local, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(posixpath.dirname(local) or ".")


def put_if_absent(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    """Create ``path`` holding ``data`` whole, or raise :class:`InstantExistsError`."""
    folder, name = posixpath.split(path)
    if not is_local(fs):
        if fs.exists(path):
            raise InstantExistsError(f"{path} exists; instant files are never overwritten")
        fs.pipe_file(path, data)
        return
    os.makedirs(folder, exist_ok=True)
    tmp = posixpath.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise InstantExistsError(f"{path} exists; instant files are never overwritten") from None
    finally:
        os.unlink(tmp)
    fsync_dir(folder)


def list_folder(fs: AbstractFileSystem, folder: str) -> list[str]:
    """The names in ``folder`` (none if it does not exist); local folders without fsspec's
    per-entry ``stat``."""
    if is_local(fs):
        try:
            return os.listdir(fs._strip_protocol(folder))
        except FileNotFoundError:
            return []
    try:
        return [posixpath.basename(p) for p in fs.ls(folder, detail=False)]
    except FileNotFoundError:
        return []
