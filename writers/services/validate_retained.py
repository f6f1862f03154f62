"""A check for ``validate()`` of the files that reads of older points need: the cleaner keeps
every file a retained read point lists (``writers.services.clean``), so each must be in
storage at the size its commit recorded. A retained point is the earliest commit of the
latest clean (the first visible commit when no clean ran), every savepointed commit before
it, and every commit completed after it. Storage lacking such a file, or holding it at
another size, makes ``read(as_of=...)`` of those points fail, though reads of now succeed.

The files of the current read point are left to the rest of the validation, which reads them
whole; these are compared by name and size only (no read). A file found missing is reported
only if timelines loaded after storage was listed still need it: a clean running beside the
validation moves the retention on and deletes what only older points needed. So is a retained
point whose metadata table cannot be read for a missing file: a clean beside the validation
deletes the metadata files of points it no longer retains, and a fresh load then lists no
such point; one it still retains is reported (reads as of it fail).
"""

from __future__ import annotations

from collections.abc import Iterable

from lakebraid.metadata.commits import read_commit
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines

File = tuple[str, str]  # (partition path, data file name)
# the partition of a need that is a retained point whose metadata is missing, paired with the
# point's time (no partition path holds a NUL byte)
POINT = "\x00point"


def lost_retained_files(
    table: TableTimelines, found: Iterable[tuple[str, str, int]], current: set[File]
) -> dict[File, str]:
    """Per file a retained read point of the timelines as loaded needs that storage
    (``found``: partition, name, size) lacks or holds at another size, the problem; the files
    in ``current`` are not checked. A retained point whose metadata is missing is a problem
    too, keyed ``(POINT, its time)``. A clean may have completed since those timelines were
    loaded: :func:`still_needed` tells which of these a fresh load still needs."""
    need = {f: n for f, n in _needed(table).items() if f not in current}
    sizes = {(partition, name): size for partition, name, size in found}
    problems = {}
    for (partition, name), (size, why) in sorted(need.items()):
        if partition == POINT:  # the point's metadata, not a data file
            problems[(partition, name)] = (
                f"{why}: reads as of that point fail, reads of now do not need it; restore "
                "the file from a backup, or read only later points"
            )
            continue
        path = f"{partition}/{name}".lstrip("/")
        got = sizes.get((partition, name))
        if got is None:
            problems[(partition, name)] = (
                f"data file {path} ({why}) is missing: reads as of that point fail, reads of "
                "now do not need it; restore it from a backup, or read only later points"
            )
        elif size and got != size:
            problems[(partition, name)] = (
                f"data file {path} ({why}) is {got} bytes, its commit wrote {size}: truncated "
                "or replaced; reads as of that point fail or read other rows; restore it from "
                "a backup"
            )
    return problems


def still_needed(table: TableTimelines) -> set[File]:
    """The files retained read points need, the timelines loaded now."""
    return set(_needed(table))


def _needed(table: TableTimelines) -> dict[File, tuple[int, str]]:
    """Every file a retained read point lists: (its recorded size, which point needs it);
    and ``(POINT, time)`` for each point whose metadata is missing: (0, what is missing)."""
    glob = table.timeline(TimelineKind.GLOBAL)
    visibility = table.visibility(global_timeline=glob)
    commits = [i for i in visibility.visible if i.action is Action.COMMIT]
    if not commits:
        return {}
    start = table.retained_from(glob, visibility) or commits[0].completion_time
    assert start is not None
    held = table.savepointed(visibility)
    points = [start] + [
        i.completion_time
        for i in commits
        if i.time in held and i.completion_time is not None and i.completion_time < start
    ]
    need: dict[File, tuple[int, str]] = {}
    metadata = MetadataTable(table)
    for point in points:
        try:
            listing = metadata.reader(point).files()
        except FileNotFoundError as exc:
            missing = exc.filename or exc
            need[(POINT, point)] = (0, f"the metadata table as of {point}: {missing} is missing")
            continue
        for partition, files in listing.items():
            for name, size in files.items():
                need[(partition, name)] = (size, f"listed as of {point}")
    for inst in commits:
        if (inst.completion_time or "") <= start:
            continue
        for status in read_commit(table, inst).statuses:
            if status.file_name is not None:
                need[(status.partition, status.file_name)] = (
                    status.size,
                    f"written by commit {inst.time}",
                )
    return need
