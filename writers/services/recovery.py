"""Recovery from dead writers, run at the start of every write.

Pending instants on the global timeline whose heartbeat expired are dealt with oldest first:
a rollback, restore or clean is finished from its requested plan (every step is idempotent);
a commit is rolled back. Instants already undone are left alone.
"""

from __future__ import annotations

from lakebraid.timeline.bodies import CleanPlan, RollbackPlan
from lakebraid.timeline.instant import Action, Instant, State
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.services.clean import execute_clean
from lakebraid.writers.services.lifecycle import G
from lakebraid.writers.services.restore import finish_restore
from lakebraid.writers.services.rollback import execute_rollback_plan, rollback


def recover(table: TableTimelines) -> list[str]:
    """Finish rollbacks and restores whose writer died and roll back dead commits; returns
    the times of the instants dealt with."""
    done = []
    undone = table.visibility().undone
    for inst in table.dead_instants():
        if inst.action is Action.CLEAN:
            requested = Instant(inst.time, Action.CLEAN, State.REQUESTED)
            plan = table.store.read_typed(G, requested, CleanPlan)
            execute_clean(table, inst.time, plan)
            done.append(inst.time)
        elif inst.action is Action.RESTORE:
            finish_restore(table, inst)
            done.append(inst.time)
        elif inst.action is Action.ROLLBACK:
            requested = Instant(inst.time, Action.ROLLBACK, State.REQUESTED)
            plan = table.store.read_typed(G, requested, RollbackPlan)
            execute_rollback_plan(table, inst.time, plan)
            done.append(inst.time)
        elif inst.action is Action.COMMIT and inst.time not in undone:
            if rollback(table, inst.time, recovering=True) is not None:
                done.append(inst.time)
    return done
