"""Savepoints and restore.

* ``savepoint(t)``: a ``savepoint`` instant on all three timelines whose body names ``t`` (a
  visible commit); it keeps ``t``'s files from cleaning and makes ``t`` a restore point.
* ``restore(t)``: one ``restore`` instant on all three timelines. Its plan lists every commit
  after ``t`` (visible or pending) and the files and log files a rollback of each would
  delete (``writers.services.rollback.plan_rollback``); executing it deletes them all, and its
  completion undoes every instant between ``t`` and itself for every reader (the visibility
  rule), except rollbacks, restores and savepoints. Re-entrant like a rollback. A reindex
  that folded one of those commits gets corrected record-index bases (``index.rebase``).
* ``delete_savepoint(t)``: a ``rollback`` instant targeting ``t``'s savepoint instant (no
  file deleted); once complete, ``t`` is no longer kept or restorable. A restore and a
  deletion of its savepoint exclude each other: each checks the other under the table lock
  before it requests its instant.
"""

from __future__ import annotations

from typing import TypeVar

from lakebraid.index.rebase import plan_rebase
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.as_of import AsOfError
from lakebraid.timeline.bodies import RestorePlan, RollbackPlan, SavepointBody, encode_body
from lakebraid.timeline.instant import Action, Instant, State
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.errors import WriteError
from lakebraid.writers.services.lifecycle import (
    G,
    check_commit_time,
    complete_all,
    open_instant,
    run_opened,
    run_service,
    start_all,
)
from lakebraid.writers.services.rollback import execute_undo, plan_rollback

Plan = TypeVar("Plan", RollbackPlan, RestorePlan)


def earliest_restorable(table: TableTimelines) -> str:
    """Which commit can still be restored first (for an error message): the earliest visible
    commit that is savepointed or within the latest clean's retention."""
    visibility = table.visibility()
    held = table.savepointed(visibility)
    since = table.retained_from(table.timeline(G), visibility)
    for i in visibility.visible:
        if i.action is Action.COMMIT and (
            i.time in held or since is None or i.completion_time >= since  # type: ignore[operator]
        ):
            return f"the earliest commit that can still be savepointed and restored is {i.time}"
    return "no commit can be savepointed and restored any more"


def missing_files(table: TableTimelines, time: str) -> list[str]:
    """Data files the table needs as of commit ``time`` that are not on storage (one
    listing per partition folder)."""
    listing = MetadataTable(table).reader(time).files()
    missing = []
    for partition, files in sorted(listing.items()):
        folder = table.layout.partition_dir(partition)
        try:
            present = {p.rsplit("/", 1)[-1] for p in table.fs.ls(folder, detail=False)}
        except FileNotFoundError:
            present = set()
        missing.extend(
            table.layout.data_file(partition, n) for n in sorted(files) if n not in present
        )
    return missing


def check_restorable(table: TableTimelines, time: str, verb: str) -> None:
    """Refuse (changing nothing) a commit whose files are gone or that is not visible."""
    target = table.timeline(G).get(time, Action.COMMIT)
    if target is None or not table.visibility().is_visible(time):
        raise WriteError(
            f"cannot {verb} {time}: it is not a visible commit (see `lakebraid timeline`)",
            table=table.path,
            instant=time,
        )
    try:
        table.read_point(time)
    except AsOfError:
        raise WriteError(
            f"cannot {verb} {time}: the cleaner already removed its files (it is older than "
            f"the clean retention); {earliest_restorable(table)}",
            table=table.path,
            instant=time,
        ) from None
    missing = missing_files(table, time)
    if missing:
        raise WriteError(
            f"cannot {verb} {time}: {len(missing)} of its data files are gone (first: "
            f"{missing[0]}); {earliest_restorable(table)}",
            table=table.path,
            instant=time,
        )


def savepoint(table: TableTimelines, time: str) -> str:
    """Savepoint commit ``time``; returns the savepoint instant (the one it has already, if
    any: savepointing twice makes no second savepoint)."""
    time = check_commit_time(table, time, "savepoint")
    held = table.savepointed().get(time)
    if held is not None:
        return held
    check_restorable(table, time, "savepoint")
    body = encode_body(SavepointBody(target=time))

    def mark(at: str) -> None:
        start_all(table, at, Action.SAVEPOINT, body)
        complete_all(table, at, Action.SAVEPOINT, body)

    return run_service(table, Action.SAVEPOINT, body, mark)


def held_savepoint(table: TableTimelines, time: str, verb: str) -> str:
    """The savepoint instant of commit ``time``; refused when it has none or a deletion of
    it is running."""
    held = table.savepointed()
    mark = held.get(time)
    if mark is None:
        kept = {m: t for t, m in held.items()}.get(time)  # the savepoint's own time given
        hint = f"give the commit it keeps, {kept}" if kept else "savepoint an instant first"
        raise WriteError(
            f"cannot {verb} {time}: it has no savepoint; {hint} "
            f"(savepointed: {sorted(held) or 'none'})",
            table=table.path,
            instant=time,
        )
    deleting = pending_undos(table, Action.ROLLBACK, RollbackPlan, mark)
    if deleting:
        raise WriteError(
            f"cannot {verb} {time}: its savepoint {mark} is being deleted (rollback "
            f"{deleting[0]}); savepoint {time} again once that ends",
            table=table.path,
            instant=time,
        )
    return mark


def pending_undos(
    table: TableTimelines, action: Action, kind: type[Plan], target: str
) -> list[str]:
    """The pending ``action`` instants (rollbacks or restores) whose plan targets ``target``."""
    return [
        inst.time
        for inst in table.timeline(G).pending()
        if inst.action is action and requested_plan(table, inst, kind).target == target
    ]


def requested_plan(table: TableTimelines, inst: Instant, kind: type[Plan]) -> Plan:
    """The plan an undo instant was requested with (its later states carry the same)."""
    return table.store.read_typed(G, Instant(inst.time, inst.action, State.REQUESTED), kind)


def delete_savepoint(table: TableTimelines, time: str) -> str:
    """Delete the savepoint of commit ``time``; returns the deleting instant. It is a
    ``rollback`` whose plan targets the savepoint instant and deletes no file: once it
    completes, the savepoint is undone for every reader at every point (the visibility rule),
    so the cleaner no longer keeps ``time``'s files, ``restore(time)`` is refused, and the
    commit can be rolled back or savepointed again. Refused while a restore to ``time``
    runs; a deletion whose writer died is finished by recovery, as any rollback."""
    time = check_commit_time(table, time, "delete the savepoint of")
    with table.lock:  # checked and requested at once: no restore to it starts meanwhile
        mark = held_savepoint(table, time, "delete the savepoint of")
        running = pending_undos(table, Action.RESTORE, RestorePlan, time)
        if running:
            raise WriteError(
                f"cannot delete the savepoint of {time}: restore {running[0]} to it is "
                "running; wait for it to end (if its writer died, `lakebraid recover` "
                "finishes it)",
                table=table.path,
                instant=time,
            )
        plan = RollbackPlan(target=mark, target_action=Action.SAVEPOINT)
        undo, heartbeat = open_instant(table, Action.ROLLBACK, encode_body(plan))

    def work(at: str) -> None:
        execute_undo(table, at, Action.ROLLBACK, plan, [mark])

    return run_opened(table, Action.ROLLBACK, undo, heartbeat, work)


def restore(table: TableTimelines, time: str) -> str:
    """Return data, metadata and index to the savepointed instant ``time``."""
    time = check_commit_time(table, time, "restore")
    held_savepoint(table, time, "restore to")
    check_restorable(table, time, "restore to")
    with table.lock:  # the plan and the corrected bases' times, then the instant, at once
        held_savepoint(table, time, "restore to")  # not deleted meanwhile
        plan = plan_restore(table, time)
        undo, heartbeat = open_instant(table, Action.RESTORE, encode_body(plan))

    def work(at: str) -> None:
        execute_undo(table, at, Action.RESTORE, plan, plan.undone)

    return run_opened(table, Action.RESTORE, undo, heartbeat, work)


def plan_restore(table: TableTimelines, time: str) -> RestorePlan:
    """Every commit after ``time`` that is not undone, the files a rollback of each would
    delete, and corrected bases for the reindexes that folded one of them."""
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
    return RestorePlan(
        target=time,
        undone=[i.time for i in later],
        data_files=sorted(files),
        logs=sorted(logs),
        rebased=plan_rebase(table, later, f"restore to {time}"),
    )


def finish_restore(table: TableTimelines, inst: Instant) -> None:
    """Finish a restore whose writer died (from its requested plan)."""
    plan = requested_plan(table, inst, RestorePlan)
    execute_undo(table, inst.time, Action.RESTORE, plan, plan.undone)
