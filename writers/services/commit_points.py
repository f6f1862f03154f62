"""Checks for ``validate()`` of files that readers never miss out loud, because a table read
without them is a valid older table, and of commit bodies that do not decode (the rebuild
needs every one):

* a commit's commit point: a commit completed on the data and metadata timelines is visible
  only once its global instant completes. One that never completed there while a later
  commit did lost its commit point file (it reads as never written, though later commits may
  build on it). The latest commit in that state is left alone: it is what a writer that died
  between the timelines leaves, and recovery rolls it back.
* a commit's metadata log files: one that is gone while no later base of its file group
  folded it makes readers build the group from the files before it. Readers refuse that for
  the newest visible commits (``metadata.slices.lost_logs``); this check covers every one.
"""

from __future__ import annotations

from collections.abc import Collection

from fsspec import AbstractFileSystem

from lakebraid.metadata.commits import read_commit
from lakebraid.timeline.errors import InstantFileError
from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines


def damaged_bodies(table: TableTimelines) -> list[str]:
    """One problem per visible commit whose body under ``.braid/global`` does not decode
    (truncated, overwritten): the rest of ``validate()`` rebuilds the table from every
    commit's body, so it waits until these are restored."""
    problems = []
    for inst in table.visibility().visible:
        if inst.action is Action.COMMIT:
            try:
                read_commit(table, inst)
            except InstantFileError as exc:
                problems.append(f"timelines: {exc}; the rest is checked once every body reads")
    return problems


def lost_commit_points(table: TableTimelines) -> list[str]:
    """One problem per commit that lost its commit point (see the module doc)."""
    glob = table.timeline(TimelineKind.GLOBAL)
    data, meta = table.timeline(TimelineKind.DATA), table.timeline(TimelineKind.METADATA)
    done = [i.time for i in glob if i.action is Action.COMMIT and i.is_completed]
    undone = table.visibility(global_timeline=glob).undone
    problems = []
    for inst in data:
        if inst.action is not Action.COMMIT or not inst.is_completed or inst.time in undone:
            continue
        on_meta, on_global = (
            meta.get(inst.time, Action.DELTACOMMIT),
            glob.get(inst.time, Action.COMMIT),
        )
        if on_meta is None or not on_meta.is_completed:
            continue
        if (on_global is None or not on_global.is_completed) and any(t > inst.time for t in done):
            problems.append(
                f"timelines: commit {inst.time} completed on the data and metadata timelines "
                "but not on the global one, while later commits did: its commit point file "
                f"(.braid/global/{inst.time}_<completion time>.commit) is missing, so it reads "
                "as never written; restore the file from a backup, or restore the table to a "
                "savepoint before it"
            )
    return problems


REBUILDS = (Action.REINDEX, Action.INDEX)


def lost_metadata_logs(table: TableTimelines, reported: Collection[str] = ()) -> list[str]:
    """One problem per metadata file a visible commit wrote that is gone although no later
    base of its file group folded it (a compaction's base at or after the commit lets the
    cleaner remove it): readers would build that group from the files before it and miss what
    the commit recorded, with no error. ``reported``: files (``partition/name``) already
    reported, left out."""
    fs, layout = table.fs, table.layout
    meta = table.timeline(TimelineKind.METADATA)
    rebuilt = [i.time for i in meta if i.action in REBUILDS and i.is_completed]
    listed: dict[str, list[str]] = {}
    problems = []
    for inst in table.visibility().visible:
        if inst.action is not Action.COMMIT or any(t > inst.time for t in rebuilt):
            continue  # a reindex or index build since rewrote what its logs recorded
        for log in read_commit(table, inst).logs:
            folder = layout.metadata_partition_dir(log.partition)
            if folder not in listed:
                listed[folder] = [p.rsplit("/", 1)[-1] for p in _names(fs, folder)]
            names = listed[folder]
            if log.name in names or not names or f"{log.partition}/{log.name}" in reported:
                continue  # no files: an index dropped since
            bases = (
                n for n in names if n.startswith(f"{log.file_group}_") and n.endswith(".parquet")
            )
            if any(n.rsplit("_", 1)[-1].removesuffix(".parquet") >= inst.time for n in bases):
                continue  # folded into a later base, then cleaned
            problems.append(
                f"metadata: {log.partition}/{log.name}, written by commit {inst.time}, is missing "
                "and no later base of its file group holds what it recorded: reads miss it; "
                "restore the file from a backup, or restore the table to a savepoint before "
                "that commit"
            )
    return problems


def _names(fs: AbstractFileSystem, folder: str) -> list[str]:
    try:
        return list(fs.ls(folder, detail=False))
    except FileNotFoundError:
        return []
