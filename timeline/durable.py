"""Durable writes on storage: fsyncs of new local files and folders, and put-if-absent.

* local / mounted file systems: :func:`put_if_absent` writes the body to a temporary
  ``.<name>.<uuid>.tmp`` in the same folder, fsyncs it, then ``os.link``-s it to its final name
  (fails if the name exists: an atomic rename without overwrite) and removes the temporary
  name. A crash leaves no file or a whole one; temporaries are dot files, ignored by listings.
  Inside a write's ``timeline.owed.owing`` scope the fsyncs of the calling thread are owed,
  and paid all together before the write's commit point.
* object stores: one conditional PUT (``pipe_file(mode="create")``, S3's
  ``If-None-Match: *``), which the store refuses with 412 (``FileExistsError``) when the
  name is taken: never check-then-write. :func:`create_settled` settles a create whose reply
  was lost by reading the object back, never by overwriting it.
"""

from __future__ import annotations

import functools
import os
import posixpath
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fsspec
import msgspec
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from lakebraid.timeline.errors import ConfigError, InstantExistsError, StateUnknownError
from lakebraid.timeline.owed import owe, owe_many, syncfs

_SETTLE_ATTEMPTS = 5
_SYNC_THREADS = 4  # fsyncs at once in sync_new_files (they wait on the disk, not a core)


def is_local(fs: AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def check_url(url: object) -> None:
    """Refuse a table path that is not a non-empty string, and an object-store URL with an
    empty segment (``s3://bucket//t``: stores keep the empty name, so ``s3://bucket/t`` would
    be another table, and the file system's own listings disagree on it)."""
    if not isinstance(url, str) or not url:
        raise ConfigError(f"a table path must be a non-empty string, not {url!r:.80}")
    protocol, path = fsspec.core.split_protocol(url)
    if protocol not in (None, "file", "local") and "//" in path.rstrip("/"):
        raise ConfigError(
            f"table URL {url} has an empty path segment ('//'); write it with single slashes"
        )


def check_bucket(fs: AbstractFileSystem, root: str) -> None:
    """Refuse a table on an object store whose bucket does not exist (or is not visible with
    these credentials): creating one would make a bucket of a typo'd name."""
    if is_local(fs):
        return
    bucket = root.strip("/").split("/", 1)[0]
    try:
        found = fs.exists(bucket)
    except OSError:
        found = False
    if not found:
        raise ConfigError(
            f"bucket {bucket!r} of table {fs.unstrip_protocol(root)} does not exist or is not "
            "visible with these credentials; create the bucket first (lakebraid never creates "
            "buckets)",
            table=fs.unstrip_protocol(root),
        )


def filesystem(
    url: str, storage_options: Mapping[str, object] | None = None
) -> tuple[AbstractFileSystem, str]:
    """The fsspec file system of a table URL and the table's path on it. Object stores get
    no listings cache: a listing must show what other processes wrote a moment ago.
    ``storage_options`` go to the file system (endpoint, credentials...); without them an
    S3 store takes the standard AWS environment variables."""
    check_url(url)
    if not storage_options and fsspec.core.split_protocol(url)[0] in (None, "file", "local"):
        return _local_filesystem(url)
    options = dict(storage_options or {})
    try:
        msgspec.msgpack.encode(options)
    except TypeError as exc:
        raise ConfigError(
            f"storage_options for {url} must be plain values (text, numbers, booleans, lists, "
            f"dicts) so that Spark executors can open the table with them: {exc}"
        ) from None
    protocol, _ = fsspec.core.split_protocol(url)
    if protocol not in (None, "file", "local"):
        options.setdefault("use_listings_cache", False)
    if protocol in ("s3", "s3a"):
        # one GET per whole-object read: with more, s3fs asks for the size first (a HEAD)
        options = {"max_concurrency": 1, **_aws_environment(), **options}
    try:
        return fsspec.core.url_to_fs(url, **options)
    except (ValueError, ImportError) as exc:  # fsspec's "Protocol not known", a missing driver
        raise ConfigError(
            f"cannot open {url}: {exc}; lakebraid tables live on local paths or object "
            "stores (s3://...), whose fsspec driver must be installed"
        ) from None


@functools.lru_cache(maxsize=64)
def _local_filesystem(url: str) -> tuple[AbstractFileSystem, str]:
    """A local table URL's file system and path (the same for every task of a write)."""
    return fsspec.core.url_to_fs(url)


def _aws_environment() -> dict[str, Any]:
    """The standard AWS environment variables as s3fs options, so that the options a table
    was opened with (shipped to Spark executors, whose environment may differ) name the
    endpoint and credentials the driver used. Unset variables add nothing: the executor's
    own credential chain (an instance role...) then applies."""
    env = os.environ
    options: dict[str, Any] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint_url"] = endpoint
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        options["key"] = env["AWS_ACCESS_KEY_ID"]
        options["secret"] = env["AWS_SECRET_ACCESS_KEY"]
        if env.get("AWS_SESSION_TOKEN"):
            options["token"] = env["AWS_SESSION_TOKEN"]
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        options["client_kwargs"] = {"region_name": region}
    return options


def make_folder(fs: AbstractFileSystem, folder: str) -> None:
    """Make ``folder`` on local disk (one ``mkdir`` when its parent exists, as for a new
    partition of a write across many); object stores have no folders (a name with slashes is
    enough), so nothing is asked of them (s3fs would send a request per call)."""
    if not is_local(fs):
        return
    path = fs._strip_protocol(folder)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)


def storage_of(fs: AbstractFileSystem) -> dict[str, Any]:
    """The options that open ``fs`` again elsewhere (a Spark executor, another worker):
    plain values, shipped in tasks beside the table's URL. Local disk needs none."""
    return {} if is_local(fs) else dict(fs.storage_options)


def read_bytes(fs: AbstractFileSystem, path: str) -> bytes:
    """A whole file's bytes: one ``open`` and ``read`` on local disk (no fsspec file object
    around it), one GET on an object store."""
    if is_local(fs):
        with open(fs._strip_protocol(path), "rb") as handle:
            return handle.read()
    return bytes(fs.cat_file(path))


def fsync_path(path: str) -> None:
    """fsync a local file's contents, or a folder's new or renamed entries (owed instead
    inside a write's :func:`timeline.owed.owing` scope)."""
    if owe(path):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_path  # a folder: its new or renamed entries made durable


def make_durable(fs: AbstractFileSystem, path: str) -> None:
    """Make a just-written local file durable, contents and folder entry, before a commit
    names it (a power loss must not leave a completed instant naming a truncated file).
    Object stores make a file durable when its upload completes: nothing to do."""
    if not is_local(fs):
        return
    local = fs._strip_protocol(path)
    fsync_path(local)
    fsync_dir(posixpath.dirname(local) or ".")


def sync_new_files(fs: AbstractFileSystem, paths: Sequence[str]) -> None:
    """Make just-written files of ``fs`` durable, contents and folder entries, as
    :func:`make_durable` would one by one: on a local disk each file's fsync and each distinct
    folder's once, on threads, so the file system's journal commits overlap (four small files
    in three folders: ~1.1 ms against 2.1 one after another on this project's machines).
    Object stores: nothing to do."""
    if not is_local(fs):
        return
    paths = [fs._strip_protocol(p) for p in paths]
    folders = sorted({posixpath.dirname(p) or "." for p in paths})
    jobs = [*paths, *folders]
    if all([owe(job) for job in jobs]):  # a write's scope owes them all: paid together
        return
    if len(jobs) <= 2:
        for job in jobs:
            fsync_path(job)
        return
    with ThreadPoolExecutor(min(len(jobs), _SYNC_THREADS)) as pool:
        list(pool.map(fsync_path, jobs))  # list(): the first failure raises


def make_all_durable(fs: AbstractFileSystem, root: str, paths: list[str]) -> None:
    """Make many just-written local files under ``root`` durable, contents and folder entries
    (new folders included), with one ``syncfs(2)`` of the file system holding ``root``
    instead of two fsyncs per file: Linux writes back every dirty page and inode of that file
    system and commits its journal before it returns, and reports a failed write-back as an
    error (since 5.8). Where ``syncfs`` is missing, each file, its folder and that folder's
    parent are fsynced once each. Object stores: nothing to do."""
    if not is_local(fs) or not paths:
        return
    local = fs._strip_protocol(root)
    if owe_many(_with_folders(fs, local, paths)):  # paid by one syncfs before the commit point
        return
    if syncfs(local):
        return
    for path in dict.fromkeys(_with_folders(fs, local, paths)):  # each once
        fsync_path(path)


def _with_folders(fs: AbstractFileSystem, root: str, paths: list[str]) -> Iterator[str]:
    """``root``, then each of ``paths`` with its folder and that folder's parent (local
    paths): what :func:`make_all_durable` makes durable, computed as it is consumed."""
    yield root
    for path in paths:
        file = fs._strip_protocol(path)
        folder = posixpath.dirname(file) or "."
        yield from (file, folder, posixpath.dirname(folder) or ".")


def replace_whole(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    """Write ``path`` holding ``data``, replacing any file there, never torn: on a local
    disk a temporary of this call's own (a dot name) renamed over it; an object store's
    upload is whole or absent. Not fsynced (:func:`make_durable`)."""
    if not is_local(fs):
        fs.pipe_file(path, data)
        return
    local = fs._strip_protocol(path)
    folder, name = posixpath.split(local)
    os.makedirs(folder or ".", exist_ok=True)
    tmp = posixpath.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, local)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def put_if_absent(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    """Create ``path`` holding ``data`` whole, or raise :class:`InstantExistsError`."""
    folder, name = posixpath.split(path)
    if not is_local(fs):
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            raise InstantExistsError(f"{path} exists; it is never overwritten") from None
        return
    os.makedirs(folder, exist_ok=True)
    tmp = posixpath.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")
    owed = owe(path)  # the file it becomes, fsynced by that name when paid
    with open(tmp, "xb") as handle:
        handle.write(data)
        handle.flush()
        if not owed:
            os.fsync(handle.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise InstantExistsError(f"{path} exists; instant files are never overwritten") from None
    finally:
        os.unlink(tmp)
    fsync_dir(folder)


def create_settled(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless the name is taken. True when ``path`` holds
    exactly ``data`` afterwards (created now, or by an earlier attempt whose reply was lost),
    False when it holds something else. A create whose outcome is unknown (an I/O error) is
    settled by reading back; it is tried again only while the name is still free, which a
    put-if-absent makes harmless (an S3 client resends a PUT whose reply was lost, and its
    resend meets 412: "taken" is settled by reading back too). :class:`StateUnknownError`
    when no attempt settles."""
    problem: Exception | None = None
    for _ in range(_SETTLE_ATTEMPTS):
        try:
            put_if_absent(fs, path, data)
            return True
        except InstantExistsError:  # taken: by an earlier attempt whose reply was lost?
            pass
        except Exception as exc:  # the request failed somewhere: read what the store holds
            problem = exc
        try:
            return bool(fs.cat_file(path) == data)
        except FileNotFoundError:
            continue
        except Exception as exc:  # OSError, or a client's own (botocore's connection errors)
            problem = exc
    raise StateUnknownError(
        f"could not create {path} nor read it back after {_SETTLE_ATTEMPTS} attempts "
        f"({problem}); whether it was written is unknown"
    )


def list_sizes(fs: AbstractFileSystem, folder: str) -> list[tuple[str, int]]:
    """The files in ``folder`` with their sizes (none if it does not exist); local folders
    by ``os.scandir`` (one ``stat`` per file, without fsspec's per-entry work)."""
    if is_local(fs):
        return _local_sizes(fs._strip_protocol(folder))
    try:
        entries = fs.ls(folder, detail=True, refresh=True)
    except FileNotFoundError:
        return []
    return [
        (e["name"].rsplit("/", 1)[-1], int(e.get("size") or 0))
        for e in entries
        if e.get("type") != "directory"
    ]


def _local_sizes(path: str) -> list[tuple[str, int]]:
    """Names and sizes of the files of a local folder (none if it does not exist). A file
    removed or renamed by another process between the folder's read and its ``stat`` is left
    out, as a listing taken a moment later would leave it out; the others stay (never an empty
    listing for one file gone: a reader would take a folder of live files for an empty one)."""
    try:
        listing = os.scandir(path)
    except FileNotFoundError:
        return []
    found = []
    with listing as entries:
        for entry in entries:
            try:
                if entry.is_file():
                    found.append((entry.name, entry.stat().st_size))
            except FileNotFoundError:
                continue
    return found


def list_folder(fs: AbstractFileSystem, folder: str) -> list[str]:
    """The names in ``folder`` (none if it does not exist); local folders without fsspec's
    per-entry ``stat``."""
    if is_local(fs):
        try:
            return os.listdir(fs._strip_protocol(folder))
        except FileNotFoundError:
            return []
    try:
        return [posixpath.basename(p) for p in fs.ls(folder, detail=False, refresh=True)]
    except FileNotFoundError:
        return []
