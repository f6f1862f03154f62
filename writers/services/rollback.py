"""Rollback of a pending or completed commit, and recovery from dead writers.

A rollback is its own instant ``r`` on all three timelines::

    lock:   r = next instant time; requested on global, data, metadata (body: RollbackPlan)
    inflight on global, data, metadata
    when a completed reindex folded the target: its corrected record-index bases
            (``index.rebase``; the plan's ``rebased`` names their time)
    lock:   completed on data, metadata, then global (body: the plan, a superset of
            ``timeline.bodies.RollbackBody``): from here the target is undone for every reader
    delete the target's data files (from its markers and its write statuses), its metadata
    log files (``<group>_<target>.log``) and its markers folder

Every step is idempotent, so a rollback whose writer died is finished by
``writers.services.recovery.recover``, which every write calls first.
"""

from __future__ import annotations

import msgspec

from lakebraid.index.rebase import plan_rebase, write_rebased
from lakebraid.index.record_index import logged_keys
from lakebraid.metadata.commits import read_commit
from lakebraid.metadata.records import Partition
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline import progress
from lakebraid.timeline.bodies import RestorePlan, RollbackPlan, encode_body
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import data_file_name_of
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.errors import LostCompletionError, WriteError
from lakebraid.writers.services.lifecycle import (
    G,
    check_commit_time,
    complete_all,
    open_instant,
    remove,
    remove_tree,
    run_opened,
    start_all,
)
from lakebraid.writers.write.marking import marked


def _relative(path: str, root: str) -> str:
    return path[len(root) :].lstrip("/")


def plan_rollback(table: TableTimelines, target: Instant) -> RollbackPlan:
    """What a rollback of ``target`` deletes: files its markers or statuses name, and the
    metadata log files written at its time."""
    fs, layout = table.fs, table.layout
    files: set[str] = set()
    markers = layout.markers_dir(target.time)
    if fs.exists(markers):
        files |= marked(fs, markers, fs.find(markers))
    if target.is_completed:
        body = read_commit(table, target)
        files.update(
            f"{s.partition}/{s.file_name}".lstrip("/") for s in body.statuses if s.file_name
        )
    logs = []
    for partition in Partition:
        folder = layout.metadata_partition_dir(str(partition))
        if fs.exists(folder):
            for path in fs.ls(folder, detail=False):  # its logs, and its commit bases
                if path.endswith((f"_{target.time}.log", f"_{target.time}.parquet")):
                    logs.append(_relative(path, layout.metadata_dir))
    return RollbackPlan(
        target=target.time,
        target_action=target.action,
        data_files=sorted(files),
        logs=sorted(logs),
    )


def check_not_built_upon(table: TableTimelines, target: Instant) -> None:
    """Refuse to roll back the pending commit ``target`` when a visible commit built on a
    file it wrote (``WriteStatus.built_on``: a base rewritten, a slice whose base it wrote
    appended to, a log of it folded or appended after): a commit plans from the visible
    files only, so ``target`` had completed and its
    completion file under ``.braid/global`` was lost since. Rolling it back would delete rows
    and index entries later commits rely on. The bodies of the commits completed after
    ``target`` was requested are read (a recovery meets few: it runs at every write)."""
    later = [
        i
        for i in table.visibility().visible
        if i.action is Action.COMMIT and i.completion_time > target.time  # type: ignore[operator]
    ]
    for inst in later:
        for status in read_commit(table, inst).statuses:
            mine = [n for n in status.built_on() if _instant_of(n) == target.time]
            if mine:
                where = f"{status.partition}/{mine[0]}".lstrip("/")
                raise LostCompletionError(
                    f"commit {target.time} looks unfinished (no completion file under "
                    f".braid/global), but commit {inst.time}, completed after it, built on its "
                    f"file {where}: {target.time} had completed and its completion file was "
                    "lost. Nothing was rolled back; restore the file "
                    f"(.braid/global/{target.time}_<completion time>.commit) from a backup",
                    table=table.path,
                    instant=target.time,
                )


def _instant_of(name: str) -> str | None:
    """The instant of a data file name (a base or a log), None for a name of another form."""
    parsed = data_file_name_of(name)
    return None if parsed is None else parsed.instant


def check_dependents(table: TableTimelines, target: Instant) -> None:
    """Refuse to roll back a completed commit whose file groups a later visible commit
    rewrote: those must be rolled back first, newest first."""
    visibility = table.visibility()
    if not visibility.is_visible(target.time):
        return

    def groups(inst: Instant) -> set[tuple[str, str]]:
        body = read_commit(table, inst)
        return {(s.partition, s.file_id) for s in body.statuses}

    mine = groups(target)
    later = [
        i
        for i in visibility.visible
        if i.action is Action.COMMIT and i.completion_time > target.completion_time  # type: ignore[operator]
    ]
    blocking = [i.time for i in later if groups(i) & mine]
    if blocking:
        raise WriteError(
            f"cannot roll back {target.time}: later commits {blocking} rewrote its file "
            "groups; roll those back first, newest first",
            table=table.path,
            instant=target.time,
        )
    _check_key_dependents(table, target, later)


def _check_key_dependents(table: TableTimelines, target: Instant, later: list[Instant]) -> None:
    """Refuse to roll back a commit that placed or removed a key whose record-index entry a
    later visible commit changed again in another file group (a delete, then the key written
    to another partition): the rollback would put the key back beside its new home."""
    if not later:  # nothing after it to clash with (and its logs need not be readable)
        return
    folder = table.layout.metadata_partition_dir(str(Partition.RECORD_INDEX))

    def keys(inst: Instant) -> set[str]:
        try:
            return logged_keys(table.fs, folder, read_commit(table, inst).logs)
        except FileNotFoundError as exc:
            raise WriteError(
                f"cannot roll back {target.time}: the record-index file {exc.filename} of "
                f"commit {inst.time} is gone, so the keys it wrote cannot be checked against "
                "the later commits; restore the file from a backup, or restore the table to a "
                f"savepoint before {target.time}",
                table=table.path,
                instant=target.time,
            ) from exc

    mine = keys(target)
    if not mine:
        return
    clashes = {i.time: sorted(keys(i) & mine)[:3] for i in later}
    blocking = {t: k for t, k in clashes.items() if k}
    if blocking:
        raise WriteError(
            f"cannot roll back {target.time}: later commits {sorted(blocking)} moved, wrote or "
            f"deleted keys it wrote or deleted (such as "
            f"{', '.join(map(repr, next(iter(blocking.values()))))}); roll those back first, "
            "newest first",
            table=table.path,
            instant=target.time,
        )


def check_savepoint(table: TableTimelines, target: Instant) -> None:
    """Refuse, as Hudi does, a rollback of a savepointed commit: the savepoint would name an
    undone commit, and a restore to it would fail."""
    mark = table.savepointed().get(target.time)
    if mark is not None:
        raise WriteError(
            f"cannot roll back {target.time}: savepoint {mark} keeps it as a restore point; "
            "restore to an earlier savepoint instead, or keep it",
            table=table.path,
            instant=target.time,
        )


def check_retention(table: TableTimelines, target: Instant) -> None:
    """Refuse a completed commit older than the last clean's earliest retained commit: the
    file slices before it (data files and the metadata slices a reader falls back to when
    the target is undone) are gone, so only a restore to a savepoint can go back that far."""
    since = table.retained_from(table.timeline(G), table.visibility())
    if since is not None and target.completion_time < since:  # type: ignore[operator]
        raise WriteError(
            f"cannot roll back {target.time}: it is older than the retention of the last clean "
            f"(the earliest retained commit completed {since}), whose older files the cleaner "
            "removed; restore a savepoint instead, or raise clean.retain.commits",
            table=table.path,
            instant=target.time,
        )


def check_previous_files(table: TableTimelines, target: Instant) -> None:
    """Refuse, before changing anything, a rollback that would make a file group's previous
    file current again when that file is gone (the group would be unreadable)."""
    body = read_commit(table, target)
    for status in body.statuses:
        for old in status.replaced():  # a merge-on-read compaction: its base and logs
            _check_present(table, target, table.layout.data_file(status.partition, old))


def _check_present(table: TableTimelines, target: Instant, path: str) -> None:
    if not table.fs.exists(path):
        raise WriteError(
            f"cannot roll back {target.time}: the file it replaced, {path}, is gone, so "
            "its file group would be unreadable; restore a savepoint instead",
            table=table.path,
            instant=target.time,
        )


def rollback(
    table: TableTimelines, time: str, *, own: bool = False, recovering: bool = False
) -> str | None:
    """Roll back the commit at ``time``; returns the rollback instant's time.

    ``own``: the caller wrote the pending instant (a lost conflict, a failed write), so its
    heartbeat is not a reason to refuse; None if it completed after all. ``recovering``:
    roll back only if the instant is still pending with a dead heartbeat, judged under the
    table lock (a writer completes under the lock and drops its heartbeat only after), else
    return None."""
    time = check_commit_time(table, time, "rollback")
    with table.lock:
        target = table.timeline(G).get(time, Action.COMMIT)
        if target is None:
            other = table.timeline(G).get(time)
            what = f"a {other.action.value}, not a commit," if other else "no commit"
            hint = " (delete a savepoint with `lakebraid savepoint PATH COMMIT --delete`)"
            raise WriteError(
                f"{time} is {what} on the global timeline: only commits can be rolled back; "
                "`lakebraid timeline` lists them"
                + (hint if other is not None and other.action is Action.SAVEPOINT else ""),
                table=table.path,
                instant=time,
            )
        if (recovering or own) and target.is_completed:
            return None  # it committed after all (a decision its writer could not confirm)
        if recovering and table.is_alive(time):
            return None
        already = time in table.visibility().undone
        if already and (own or recovering):
            return None  # someone else's recovery got there first
        if already:
            raise WriteError(
                f"commit {time} is already rolled back", table=table.path, instant=time
            )
        if target.is_pending and not (own or recovering) and table.is_alive(time):
            raise WriteError(
                f"commit {time} is still being written (its heartbeat is fresh); wait for it "
                "or for its heartbeat to expire",
                table=table.path,
                instant=time,
            )
        if target.is_pending and not own:
            check_not_built_upon(table, target)
        if target.is_completed:
            check_savepoint(table, target)
            check_retention(table, target)
            check_dependents(table, target)
            check_previous_files(table, target)
        rebased = plan_rebase(table, [target], f"roll back {time}")
        plan = msgspec.structs.replace(plan_rollback(table, target), rebased=rebased)
        undo, heartbeat = open_instant(table, Action.ROLLBACK, encode_body(plan))
    return run_opened(
        table, Action.ROLLBACK, undo, heartbeat, lambda t: execute_rollback_plan(table, t, plan)
    )


def execute_rollback_plan(table: TableTimelines, undo: str, plan: RollbackPlan) -> None:
    execute_undo(table, undo, Action.ROLLBACK, plan, [plan.target])


def execute_undo(
    table: TableTimelines,
    undo: str,
    action: Action,
    plan: RollbackPlan | RestorePlan,
    targets: list[str],
) -> None:
    """Inflight, corrected record-index bases (``index.rebase``, when the undo crosses a
    reindex), complete, then delete: each step skipped when already done (re-entrant).
    Shared by rollback and restore. The files go only once the undo is complete (its commit
    point), so no reader ever meets a visible commit with files missing; a crash after the
    completion leaves invisible files that :func:`delete_undone_files` (the cleaner) removes."""
    body = encode_body(plan)
    start_all(table, undo, action, body)
    done = table.timeline(G).get(undo, action)
    if plan.rebased and not (done is not None and done.is_completed):
        write_rebased(MetadataTable(table), plan.rebased, targets)
    complete_all(table, undo, action, body)
    delete_undone_files(table, plan.data_files, plan.logs, targets)


def delete_undone_files(
    table: TableTimelines, data_files: list[str], logs: list[str], targets: list[str]
) -> None:
    """Delete the files of undone instants (idempotent: missing files are fine)."""
    fs, layout = table.fs, table.layout
    with progress.task("delete undone files", total=len(data_files) + len(logs)) as bar:
        for relative in data_files:
            remove(fs, f"{layout.root}/{relative}")
            bar.advance()
        for relative in logs:
            remove(fs, f"{layout.metadata_dir}/{relative}")
            bar.advance()
    for target in targets:
        remove_tree(fs, layout.markers_dir(target))
