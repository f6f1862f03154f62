"""Savepoints and restore.

* ``savepoint(t)``: a ``savepoint`` instant on all three timelines whose body names ``t`` (a
  visible commit); it keeps ``t``'s files from cleaning and makes ``t`` a restore point.
* ``restore(t)``: one ``restore`` instant on all three timelines. Its plan lists every commit
  after ``t`` (visible or pending) and the files and log files a rollback of each would
  delete (``writers.rollback.plan_rollback``); executing it deletes them all, and its
  completion undoes every instant between ``t`` and itself for every reader (the visibility
  rule), except rollbacks, restores and savepoints. Re-entrant like a rollback.
"""

from __future__ import annotations

import msgspec

from timeline.bodies import encode_body
from timeline.instant import Action, Instant, State
from timeline.table import TableTimelines
from writers.commit import G
from writers.errors import WriteError
from writers.rollback import execute_undo, plan_rollback
from writers.service import complete_all, run_service, start_all

BODY_VERSION = 1


class SavepointBody(msgspec.Struct, frozen=True, kw_only=True):
    version: int = BODY_VERSION
    target: str


class RestorePlan(msgspec.Struct, frozen=True, kw_only=True):
    version: int = BODY_VERSION
    target: str  # the savepointed instant the table returns to
    undone: list[str] = []  # the commits after it
    data_files: list[str] = []
    logs: list[str] = []


def savepoints(table: TableTimelines) -> dict[str, str]:
    """Visible savepoints: savepointed instant -> savepoint instant."""
    found = {}
    for inst in table.visibility().visible:
        if inst.action is Action.SAVEPOINT:
            data = table.store.read_body(G, inst)
            body = msgspec.json.decode(data, type=SavepointBody)
            found[body.target] = inst.time
    return found


def savepoint(table: TableTimelines, time: str) -> str:
    target = table.timeline(G).get(time, Action.COMMIT)
    if target is None or not table.visibility().is_visible(time):
        raise WriteError(
            f"cannot savepoint {time}: it is not a visible commit (see `lakebraid timeline`)",
            table=table.path,
            instant=time,
        )
    body = encode_body(SavepointBody(target=time))

    def mark(at: str) -> None:
        start_all(table, at, Action.SAVEPOINT, body)
        complete_all(table, at, Action.SAVEPOINT, body)

    return run_service(table, Action.SAVEPOINT, body, mark)


def restore(table: TableTimelines, time: str) -> str:
    """Return data, metadata and index to the savepointed instant ``time``."""
    if time not in savepoints(table):
        raise WriteError(
            f"cannot restore to {time}: it has no savepoint; savepoint an instant first "
            f"(savepointed: {sorted(savepoints(table)) or 'none'})",
            table=table.path,
            instant=time,
        )
    undone = table.visibility().undone
    later = [
        i
        for i in table.timeline(G)
        if i.action is Action.COMMIT and i.time > time and i.time not in undone
    ]
    files: set[str] = set()
    logs: set[str] = set()
    for inst in later:
        part = plan_rollback(table, inst)
        files.update(part.data_files)
        logs.update(part.logs)
    plan = RestorePlan(
        target=time,
        undone=[i.time for i in later],
        data_files=sorted(files),
        logs=sorted(logs),
    )
    body = encode_body(plan)

    def work(undo: str) -> None:
        execute_undo(table, undo, Action.RESTORE, body, plan.data_files, plan.logs, plan.undone)

    return run_service(table, Action.RESTORE, body, work)


def finish_restore(table: TableTimelines, inst: Instant) -> None:
    """Finish a restore whose writer died (from its requested plan)."""
    requested = Instant(inst.time, Action.RESTORE, State.REQUESTED)
    plan = msgspec.json.decode(table.store.read_body(G, requested), type=RestorePlan)
    body = encode_body(plan)
    execute_undo(table, inst.time, Action.RESTORE, body, plan.data_files, plan.logs, plan.undone)
