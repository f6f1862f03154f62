"""Recovery from dead writers, run at the start of every write.

Pending instants on the global timeline whose heartbeat expired are dealt with oldest first:
a rollback, restore or clean is finished from its requested plan (every step is idempotent);
a commit is rolled back. Instants already undone are left alone.

Whether an instant is dead is judged twice: first on the listing the write started from, then
again under the table lock on a fresh listing before anything is done. The first judgement
alone can be wrong: a live service that completes between the listing and the heartbeat read
removes its heartbeat, so its instant looks pending and silent. Under the lock nothing
completes, so a pending instant without a fresh heartbeat there is dead. The finishing itself
runs under the lock too, so two writers recovering the same instant take turns and the second
finds nothing left to do.
"""

from __future__ import annotations

from lakebraid.timeline.bodies import CleanPlan, RollbackPlan
from lakebraid.timeline.instant import Action, Instant, State
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.services.clean import execute_clean
from lakebraid.writers.services.lifecycle import G, remove
from lakebraid.writers.services.restore import finish_restore, requested_plan
from lakebraid.writers.services.rollback import execute_rollback_plan, rollback


def recover(table: TableTimelines, *, settle: bool = False) -> list[str]:
    """Finish rollbacks and restores whose writer died and roll back dead commits; returns
    the times of the instants dealt with. ``settle``: take the table lock first, so that on an
    object store a completion decided in the lease whose instant file its writer could not
    write is written now (every write does so when it takes the lock)."""
    if settle:
        with table.lock:
            pass
    done = []
    undone = table.visibility().undone
    for inst in table.dead_instants():
        if inst.action in FINISHED and finish_dead(table, inst):
            done.append(inst.time)
        elif inst.action is Action.COMMIT and inst.time not in undone:
            if rollback(table, inst.time, recovering=True) is not None:
                done.append(inst.time)
    for time in done:  # the dead writers' heartbeat files: nothing reads them any more
        remove(table.fs, table.layout.heartbeat(time))
    return done


FINISHED = frozenset({Action.CLEAN, Action.RESTORE, Action.ROLLBACK})


def finish_dead(table: TableTimelines, inst: Instant) -> bool:
    """Finish the service instant ``inst`` (seen pending and silent) if, judged again under
    the table lock on a fresh listing, it is still pending and its writer is gone; False
    when it completed meanwhile (or another writer finished it) or its writer beats."""
    with table.lock:
        now = table.timeline(G).get(inst.time, inst.action)
        if now is None or not now.is_pending or table.is_alive(inst.time):
            return False
        if inst.action is Action.CLEAN:
            requested = Instant(inst.time, Action.CLEAN, State.REQUESTED)
            execute_clean(table, inst.time, table.store.read_typed(G, requested, CleanPlan))
        elif inst.action is Action.RESTORE:
            finish_restore(table, now)
        else:
            execute_rollback_plan(table, inst.time, requested_plan(table, now, RollbackPlan))
    return True
