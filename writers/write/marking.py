"""Markers: what an in-flight write may have created, so a crashed or undone write can be
rolled back from them alone. Every marker of instant ``t`` lives under
``.braid/markers/<t>/`` (``TableLayout.markers_dir``) and is written before the file it names.

Two kinds, version 1, both read by :func:`marked`:

* a **file marker** ``<partition path>/<file name>.marker`` (``<file name>.marker`` when
  unpartitioned): empty; its path names one file. A task writing one file alone makes one.
* a **batch marker** ``batch-<32 hex>.markers``: UTF-8 text, the line ``lakebraid-markers 1``
  then one path per line (relative to the table root, ``/``-separated, no newline in a path;
  partition values are percent-encoded), each line ending in ``\\n``. An engine that knows
  the files of many tasks before they run writes one for them all (one create instead of a
  folder and a file per data file); a path it names may never be created (a group emptied by
  deletes writes no file), and every reader treats a named file that is absent as gone.

Sample batch marker (two files)::

    lakebraid-markers 1
    day=2024-01-01/0f1e..._0-1_20240101000000000.parquet
    day=2024-01-02/4a5b..._0-1_20240101000000000.log
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from fsspec import AbstractFileSystem

from lakebraid.timeline.durable import make_folder, read_bytes
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.errors import WriteError

SUFFIX = ".marker"
BATCH_SUFFIX = ".markers"
BATCH_HEADER = "lakebraid-markers 1"


def mark(
    fs: AbstractFileSystem, layout: TableLayout, instant: str, partition: str, name: str
) -> None:
    """The file marker of ``<partition>/<name>``, written by instant ``instant``."""
    folder = f"{layout.markers_dir(instant)}/{partition}".rstrip("/")
    make_folder(fs, folder)
    fs.pipe_file(f"{folder}/{name}{SUFFIX}", b"")


def mark_all(
    fs: AbstractFileSystem, layout: TableLayout, instant: str, paths: Iterable[str]
) -> str:
    """One batch marker naming ``paths`` (relative to the table root); returns its path."""
    lines = [BATCH_HEADER]
    for path in paths:
        if "\n" in path or "\r" in path or not path.strip("/"):
            raise WriteError(
                f"cannot mark the file {path!r}: a marked path is one non-empty line",
                table=layout.root,
                instant=instant,
            )
        lines.append(path.strip("/"))
    folder = layout.markers_dir(instant)
    make_folder(fs, folder)
    target = f"{folder}/batch-{uuid.uuid4().hex}{BATCH_SUFFIX}"
    fs.pipe_file(target, ("\n".join(lines) + "\n").encode())
    return target


def marked(fs: AbstractFileSystem, folder: str, found: Iterable[str]) -> set[str]:
    """The files (relative to the table root) named by the markers among ``found``, the
    paths listed under the markers folder ``folder`` of one instant."""
    files: set[str] = set()
    for path in found:
        relative = path[len(folder) :].strip("/")
        if relative.endswith(SUFFIX):
            files.add(relative[: -len(SUFFIX)])
        elif relative.endswith(BATCH_SUFFIX) and "/" not in relative:
            files.update(read_batch(fs, path))
    return files


def read_batch(fs: AbstractFileSystem, path: str) -> list[str]:
    """The paths a batch marker names. A marker cut short by a crash (its writer died before
    any file it names was created) names what its whole lines name."""
    try:
        raw = read_bytes(fs, path)
    except FileNotFoundError:
        return []
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        if b"\n" in raw[exc.start :] or len(raw) - exc.start > 3:
            raise _corrupt(path, f"it is not UTF-8 text ({exc})") from None
        text = raw[: exc.start].decode()  # cut inside its last character
    head, _, body = text.partition("\n")
    if head != BATCH_HEADER:
        if not text or BATCH_HEADER.startswith(text):
            return []  # cut short before its first path
        raise _corrupt(path, f"it starts with {head[:40]!r}, not {BATCH_HEADER!r}")
    lines = body.split("\n")
    return [line for line in lines[:-1] if line]  # the last piece is cut short or empty


def _corrupt(path: str, reason: str) -> WriteError:
    return WriteError(
        f"the batch marker {path} is damaged: {reason}. The files of its write cannot be "
        "known from it: restore the marker from a backup, or remove the files of that "
        "instant by hand (their names end in _<instant>.parquet or .log) and then the marker"
    )
