"""Markers after a commit: a completed commit needs no markers (its write statuses name its
files), so they are removed once it completes, and with them any data file a marker names
that the statuses do not (a retried or zombie task's leftover, never visible to readers: the
``files`` partition does not list it). A crash between the commit and this sweep leaves the
folder; the cleaner sweeps the folders of every completed commit."""

from __future__ import annotations

from collections.abc import Iterable

from lakebraid.metadata.commits import read_commit
from lakebraid.timeline.instant import Action
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.services.lifecycle import remove

SUFFIX = ".marker"


def sweep_markers(table: TableTimelines, time: str, committed: Iterable[str]) -> list[str]:
    """Remove the markers folder of completed commit ``time`` and the marked files not in
    ``committed`` (paths relative to the table root); returns the files deleted."""
    fs, layout = table.fs, table.layout
    folder = layout.markers_dir(time)
    if not fs.exists(folder):
        return []
    keep = set(committed)
    deleted = []
    for path in fs.find(folder):
        if not path.endswith(SUFFIX):
            continue
        relative = path[len(folder) :].strip("/")[: -len(SUFFIX)]
        if relative not in keep:
            remove(fs, f"{layout.root}/{relative}")
            deleted.append(relative)
    fs.rm(folder, recursive=True)
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
