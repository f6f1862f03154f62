"""A check of the commit points for ``validate()``: a commit completed on the data and
metadata timelines is visible only once its global instant completes (the commit point).
One that never completed there while a later commit did lost its commit point file (the
table is damaged: that commit reads as not written, though later commits may build on it).
The latest commit in that state is left alone: it is what a writer that died between the
timelines leaves, and recovery rolls it back."""

from __future__ import annotations

from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines


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
