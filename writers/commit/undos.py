"""The rollbacks and restores a commit's conflict check weighs (``writers.commit.conflicts``
rules 1, 2 and 8): those requested at or after the write began, and those not completed at
its read point (pending, or completed since), each with its target and, for a rollback, when
its target completed (None: a commit that never completed, a dead writer's)."""

from __future__ import annotations

from lakebraid.timeline.bodies import RestoreBody
from lakebraid.timeline.instant import Action, Instant, State
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.timeline import Timeline
from lakebraid.writers.commit.conflicts import Other

UNDOS = (Action.ROLLBACK, Action.RESTORE)


def undo_instants(table: TableTimelines, glob: Timeline, time: str, since: str) -> list[Other]:
    """The undo instants of global timeline ``glob`` that the write at ``time`` whose reads
    saw the commits completed up to ``since`` must be checked against."""
    found = []
    for inst in glob:
        if inst.action not in UNDOS:
            continue
        done = inst.completion_time
        if inst.time < time and inst.is_completed and done is not None and done <= since:
            continue  # completed before the write's reads: they saw its result
        requested = Instant(inst.time, inst.action, State.REQUESTED)
        target = table.store.read_typed(TimelineKind.GLOBAL, requested, RestoreBody).target
        undone = glob.get(target, Action.COMMIT) if inst.action is Action.ROLLBACK else None
        found.append(
            Other(
                time=inst.time,
                action=inst.action,
                completion_time=done if inst.is_completed else None,
                target=target,
                target_completed=undone.completion_time if undone is not None else None,
            )
        )
    return found
