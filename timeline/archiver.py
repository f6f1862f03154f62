"""Timeline archival: which instant files move from the active timeline folders into the
archive (``timeline.archive``), and when.

Archival is due when the active global timeline holds more than ``archive.max.instants``
instants. It then archives every instant file of all three timelines at or before a horizon
that leaves the newest ``archive.min.instants`` global instants active, lowered if needed so
that it stays before:

* the earliest pending global instant that no completed rollback or restore undid (a write or
  a service still running, or dead and waiting for recovery);
* the earliest pending reindex or index build of the metadata timeline whose writer's
  heartbeat is live.

Other pending metadata instants (a metadata compaction that stopped, or that a reindex left
pending on purpose) never complete and are archived as they are; a compaction still running
when archival passes it is refused its completion (``InstantStore`` refuses every transition
at or below the horizon) and stays pending, unread, like one that stopped.

Archival moves files only: a timeline (archive joined with the active folder) is the same
value before and after, so visibility, as-of reads, rollback, restore and savepoints see the
same history; savepointed instants and everything a pending operation needs stay readable.

Steps, under the table lock; a crash at any point leaves a readable table and the next run
finishes the work:

1. delete leftovers of an earlier run: active files at or below the horizon, manifests and
   files a newer manifest superseded;
2. write one archive file of the instant files after the old horizon, up to the new one;
3. create the next manifest (put-if-absent: the commit point) naming the old files and the
   new one, with the new horizon;
4. delete the archived files from the active folders;
5. merge: once ``archive.merge.files`` files of one level exist (they are adjacent), write them
   as one file of the next level under a further manifest, and delete what it superseded;
   a merge takes as many of them as fit in ``archive.merge.max.bytes`` (at least two).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from lakebraid.timeline import config as cfg
from lakebraid.timeline.archive import (
    MARK,
    Archive,
    ArchiveFile,
    Manifest,
    Row,
    Snapshot,
    encode_rows,
    mark_name,
    marked_version,
)
from lakebraid.timeline.durable import list_folder, put_if_absent
from lakebraid.timeline.errors import ConfigError, InstantExistsError, InstantFileError
from lakebraid.timeline.instant import Action, Instant, parse
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.timeline import Timeline

REWRITES = frozenset({Action.REINDEX, Action.INDEX})


class ArchiveResult(msgspec.Struct, frozen=True):
    horizon: str  # the archive's horizon after this run
    instants: int  # global instants archived by this run
    files: int  # instant files archived by this run
    version: int  # the archive's manifest version after this run
    merged: int  # archive files merged into one (0: no merge)


def plan_horizon(
    timelines: Mapping[TimelineKind, Timeline],
    undone: frozenset[str],
    alive: frozenset[str],
    after: str | None,
    keep: int,
) -> str | None:
    """The new horizon (module doc), or None when nothing can be archived. Pure.

    ``undone``: times undone by completed rollbacks/restores; ``alive``: pending instants
    whose writer's heartbeat is live; ``after``: the current horizon."""
    active = [i for i in timelines[TimelineKind.GLOBAL] if after is None or i.time > after]
    if len(active) <= keep:
        return None
    horizon = active[len(active) - keep - 1].time
    blockers = [i.time for i in active if i.is_pending and i.time not in undone]
    blockers += [
        i.time
        for i in timelines[TimelineKind.METADATA]
        if i.is_pending and i.action in REWRITES and i.time in alive
    ]
    if blockers and min(blockers) <= horizon:
        earlier = [i.time for i in active if i.time < min(blockers)]
        return earlier[-1] if earlier else None
    return horizon


def active_count(table: TableTimelines, snap: Snapshot | None = None) -> int:
    """Global instants not archived (of the archive ``snap``, default: the one the store's
    latest load joined; no listing of the archive)."""
    timeline = table.timeline()
    snap = snap if snap is not None else table.store.seen_archive
    return len(timeline.after(snap.horizon))


def is_due(table: TableTimelines) -> bool:
    """Whether the active global timeline holds more than ``archive.max.instants``."""
    return active_count(table) > table.options.get(cfg.ARCHIVE_MAX)


def archive_if_due(table: TableTimelines) -> ArchiveResult | None:
    """Archive when on (``archive.inline``) and due; the inline service's entry point."""
    if not table.options.get(cfg.ARCHIVE_INLINE) or not is_due(table):
        return None
    return archive(table)


def archive(table: TableTimelines, keep: int | None = None) -> ArchiveResult | None:
    """Archive all but the newest ``keep`` (default ``archive.min.instants``) global
    instants, as far as pending work allows; None when nothing moved."""
    if keep is not None and (type(keep) is not int or keep < 1):
        raise ConfigError(
            f"archive: keep must be a whole number of at least 1 (the newest instants stay on "
            f"the active timeline), not {keep!r:.40}",
            table=table.path,
        )
    keep = keep if keep is not None else table.options.get(cfg.ARCHIVE_MIN)
    store, archive_ = table.store, table.store.archive
    with table.lock:
        snap = archive_.snapshot()
        _remove_leftovers(table, snap)
        timelines = {kind: table.timeline(kind) for kind in TimelineKind}
        undone = table.visibility(global_timeline=timelines[TimelineKind.GLOBAL]).undone
        alive = frozenset(
            i.time
            for i in timelines[TimelineKind.METADATA]
            if i.is_pending and i.action in REWRITES and table.is_alive(i.time)
        )
        horizon = plan_horizon(timelines, undone, alive, snap.horizon, keep)
        if horizon is None:
            return None
        moved = [
            (kind, inst)
            for kind, timeline in timelines.items()
            for inst in timeline.files
            if not snap.holds(inst.time) and inst.time <= horizon
        ]
        rows: list[Row] = [(k, i.file_name, store.read_body(k, i)) for k, i in moved]
        version = snap.version + 1
        entry = archive_.write_file(version, 0, encode_rows(rows).to_batches())
        old = snap.manifest.files if snap.manifest is not None else ()
        archive_.commit(Manifest(1, version, horizon, (*old, entry)))
        _delete_active(table, moved, version)
        merged, latest = _merge_if_due(table, archive_)
        archive_.remove_superseded(latest)
    instants = len({i.time for k, i in moved if k is TimelineKind.GLOBAL})
    return ArchiveResult(horizon, instants, len(rows), latest.version, merged)


def _delete_active(
    table: TableTimelines, files: list[tuple[TimelineKind, Instant]], version: int
) -> None:
    """Mark every timeline folder with the archive ``version`` holding ``files``, delete
    them, then the older marks (``timeline.archive``: readers rely on the marks)."""
    paths = [table.store.path_of(kind, inst) for kind, inst in files]
    if not paths:
        return
    folders = [table.layout.timeline_dir(kind) for kind in TimelineKind]
    for folder in folders:
        try:
            put_if_absent(table.fs, f"{folder}/{mark_name(version)}", b"")
        except InstantExistsError:
            pass
    table.fs.rm(paths)
    older = [
        f"{folder}/{name}"
        for folder in folders
        for name in list_folder(table.fs, folder)
        if name.startswith(MARK) and marked_version([name]) < version
    ]
    if older:
        table.fs.rm(older)


def _remove_leftovers(table: TableTimelines, snap: Snapshot) -> None:
    """Active files at or below the horizon (a run that stopped before deleting them, or a
    transition refused as archived) and whatever a newer manifest superseded."""
    if snap.manifest is None:
        return
    left = [
        (kind, inst)
        for kind in TimelineKind
        for name in table.store.list_names(kind)
        if not name.startswith(".")
        and (inst := _parse_or_none(name)) is not None
        and snap.holds(inst.time)
    ]
    _delete_active(table, left, snap.version)
    table.store.archive.remove_superseded(snap)


def _parse_or_none(name: str) -> Instant | None:
    try:
        return parse(name)
    except InstantFileError:
        return None


def _merge_if_due(table: TableTimelines, archive_: Archive) -> tuple[int, Snapshot]:
    """Merge the oldest files of the lowest level holding ``archive.merge.files`` of them:
    as many of those as fit in ``archive.merge.max.bytes`` of bodies together, at least two
    (files that cannot pair under it stay as they are), so a merge's time stays bounded
    however long the history; its memory holds one batch of rows (``Archive.merged``)."""
    snap = archive_.snapshot()
    assert snap.manifest is not None
    files = snap.manifest.files
    fan_in = table.options.get(cfg.ARCHIVE_MERGE_FILES)
    cap = table.options.get(cfg.ARCHIVE_MERGE_MAX_BYTES)
    for level in sorted({f.level for f in files}):
        if sum(1 for f in files if f.level == level) < fan_in:
            continue
        window = _window(files, level, fan_in, cap)
        if window is None:
            continue
        start, chosen = window
        version = snap.version + 1
        merged: ArchiveFile = archive_.write_file(version, level + 1, archive_.merged(chosen))
        kept = (*files[:start], merged, *files[start + len(chosen) :])
        archive_.commit(Manifest(1, version, snap.manifest.horizon, kept))
        return len(chosen), archive_.snapshot()
    return 0, snap


def _window(
    files: tuple[ArchiveFile, ...], level: int, fan_in: int, cap: int
) -> tuple[int, list[ArchiveFile]] | None:
    """The oldest run of adjacent files of ``level`` to merge: at most ``fan_in``, as many as
    fit in ``cap`` bytes of bodies, at least two; None when no two adjacent ones fit."""
    for start, entry in enumerate(files):
        if entry.level != level:
            continue
        run: list[ArchiveFile] = []
        for candidate in files[start : start + fan_in]:
            if (
                candidate.level != level
                or sum(f.body_bytes for f in run) + candidate.body_bytes > cap
            ):
                break
            run.append(candidate)
        if len(run) >= 2:
            return start, run
    return None
