"""Markers after a commit: a completed commit needs no markers (its write statuses name its
files), so they are removed once it completes, and with them any data file a marker names
that the statuses do not (a retried or zombie task's leftover, never visible to readers: the
``files`` partition does not list it). A crash between the commit and this sweep leaves the
folder; the cleaner sweeps the folders of every completed commit.

On an object store a commit removes just the markers of the files it committed (one batch
delete, no listing); a marker left (a retried task's) keeps its object "folder" alive, and the
cleaner's sweep removes it and the file it names."""

from __future__ import annotations

from collections.abc import Iterable

from lakebraid.metadata.commits import read_commit
from lakebraid.timeline.durable import is_local
from lakebraid.timeline.instant import Action
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.services.lifecycle import remove, remove_tree
from lakebraid.writers.write.marking import SUFFIX, marked


def sweep_committed(table: TableTimelines, time: str, committed: Iterable[str]) -> list[str]:
    """After commit ``time``: :func:`sweep_markers` on local disk; on an object store, delete
    the committed files' markers only (see the module doc)."""
    if is_local(table.fs):
        return sweep_markers(table, time, committed)
    folder = table.layout.markers_dir(time)
    markers = [f"{folder}/{relative}{SUFFIX}" for relative in committed]  # no batch markers
    if markers:
        table.fs.rm(markers)
    return []


def sweep_markers(table: TableTimelines, time: str, committed: Iterable[str]) -> list[str]:
    """Remove the markers folder of completed commit ``time`` and the marked files not in
    ``committed`` (paths relative to the table root); returns the files deleted."""
    fs, layout = table.fs, table.layout
    folder = layout.markers_dir(time)
    try:
        found = fs.find(folder)  # one listing; none when the folder is gone
    except FileNotFoundError:
        found = []
    if not found:
        if is_local(fs):
            remove_tree(fs, folder)
        return []
    deleted = sorted(marked(fs, folder, found) - set(committed))
    for relative in deleted:
        remove(fs, f"{layout.root}/{relative}")
    if is_local(fs):
        remove_tree(fs, folder)
    else:  # object stores have no folders: one batch delete of the markers
        fs.rm(found)
    return deleted


def sweep_completed(table: TableTimelines) -> list[str]:
    """Sweep the markers folders left by completed, visible commits (see module doc)."""
    fs, layout = table.fs, table.layout
    root = layout.markers_root()
    if not fs.exists(root):
        return []
    visible = {i.time: i for i in table.visibility().visible if i.action is Action.COMMIT}
    deleted = []
    for path in fs.ls(root, detail=False):
        inst = visible.get(path.rstrip("/").rsplit("/", 1)[-1])
        if inst is None:
            continue  # pending (its writer or recovery owns it) or undone (rollback owns it)
        body = read_commit(table, inst)
        names = [f"{s.partition}/{s.file_name}".lstrip("/") for s in body.statuses if s.file_name]
        deleted += sweep_markers(table, inst.time, names)
    return deleted
