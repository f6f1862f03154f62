"""The visibility rule, as a pure function of the timelines.

An instant's effects are visible iff it is completed on the **global** timeline and not undone
by a completed ``rollback`` (its body names the target) or ``restore`` (undoes every instant
whose time lies strictly between its target and its own time). Completion on the data or
metadata timeline alone counts for nothing: a crash between the three completions leaves the
instant invisible.

"As of T" keeps the visible instants whose completion time is ``<= T``, in completion order,
so reads stay repeatable while concurrent writers complete out of start order (completion
times are issued under the table lock and exceed every earlier time). Undo is judged on the
whole timeline: an instant rolled back later is invisible at every point, because its files
are gone. Rollback and restore instants are themselves visible (they may carry compensating
metadata records); a restore does not undo the rollbacks, savepoints or cleans within its
range (a clean cannot be undone: the files it deleted are gone, and its retention must keep
refusing as-of reads and rollbacks that would need them).
Likewise an undo's corrected record-index bases (``rebased``) count at every point once the
undo completed: they replace bases that folded what it undid.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from lakebraid.timeline.bodies import RestoreBody, RollbackBody
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.timeline import Timeline

UNDO_ACTIONS = frozenset({Action.ROLLBACK, Action.RESTORE})
# a restore keeps these within its range: undo records, the savepoints that permit it, and
# cleans (whose deletions stand)
KEPT_BY_RESTORE = UNDO_ACTIONS | {Action.SAVEPOINT, Action.CLEAN}
UndoBody = RollbackBody | RestoreBody


class Visibility(msgspec.Struct, frozen=True):
    as_of: str | None
    visible: tuple[Instant, ...]  # completion order
    undone: frozenset[str]  # instant times undone by completed rollbacks/restores
    rebased: dict[str, str] = {}  # corrected base time -> the reindex whose bases it replaces

    @property
    def times(self) -> frozenset[str]:
        return frozenset(i.time for i in self.visible)

    def is_visible(self, time: str) -> bool:
        return time in self.times

    def latest(self) -> Instant | None:
        return self.visible[-1] if self.visible else None


def undone_times(global_timeline: Timeline, undo_bodies: Mapping[str, UndoBody]) -> set[str]:
    """Times undone by the completed rollbacks and restores on the global timeline.

    ``undo_bodies`` maps each completed rollback/restore time to its decoded body."""
    return set(undoers(global_timeline, undo_bodies))


def undoers(global_timeline: Timeline, undo_bodies: Mapping[str, UndoBody]) -> dict[str, str]:
    """Each undone time and the completed rollback or restore that undid it (the earliest
    when several did): a rollback its target, a restore every instant between its target and
    itself but those it keeps (:data:`KEPT_BY_RESTORE`)."""
    pairs = [
        (undo_bodies[i.time].target, i.time) for i in global_timeline.of_action(Action.ROLLBACK)
    ]
    for inst in global_timeline.of_action(Action.RESTORE):
        for other in global_timeline.after(undo_bodies[inst.time].target):
            if other.time >= inst.time:
                break  # in time order: the rest lie after the restore
            if other.action not in KEPT_BY_RESTORE:
                pairs.append((other.time, inst.time))
    found: dict[str, str] = {}
    for time, by in sorted(pairs, key=lambda pair: pair[1]):
        found.setdefault(time, by)
    return found


def resolve(
    global_timeline: Timeline,
    undo_bodies: Mapping[str, UndoBody],
    as_of: str | None = None,
) -> Visibility:
    """The instants visible as of ``as_of`` (None: now). Pure."""
    undone = undone_times(global_timeline, undo_bodies)
    done = global_timeline.completed_until(as_of)
    visible = tuple(inst for inst in done if inst.time not in undone) if undone else done
    rebased = {
        base: reindex
        for time, body in undo_bodies.items()
        if (inst := global_timeline.get(time)) is not None and inst.is_completed
        for reindex, base in body.rebased.items()
    }
    return Visibility(as_of, visible, frozenset(undone), rebased)
