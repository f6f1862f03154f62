"""The cleaner: delete file slices no retained read point needs (keep the last K commits).

Retained read points: the completion of each of the last ``clean.retain.commits`` visible
commits (reads as of any later time need nothing older than the earliest of them), the
completion of every savepointed commit, and the snapshot of every live reindex or index build
(its request; the metadata partitions it rewrites are not cleaned until it ends, as writes
meanwhile log them in its new layout). Kept:

* data files: those in the ``files`` listing as of a retained point, and every file written
  by a commit that completed after the earliest retained point (so also anything pending);
* metadata files: those of every file group's slice as of a retained point (base and logs),
  and every base or log file written after the earliest retained point.

Everything else written by visible commits and compactions is deleted, as one ``clean``
instant on all three timelines whose body lists the files. Data files are known from the
commits' write statuses, never from listing data folders; metadata folders are listed.
Reads as of points older than the retention may then fail: that is what retention means.
The cleaner also deletes files that completed rollbacks and restores left behind, the markers
folders of completed commits (``writers.services.markers``), the staging folders of Spark data
source writes idle for ``clean.staging.retain.hours``, and the temporaries killed processes
left under ``.braid/`` (``writers.services.leftovers``).
"""

from __future__ import annotations

import bisect
import time

import msgspec

from lakebraid.metadata.commits import read_commit
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import Partition
from lakebraid.metadata.slices import parse_name
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline import config as cfg
from lakebraid.timeline.bodies import (
    CleanPlan,
    IndexPlan,
    ReindexPlan,
    RestorePlan,
    RollbackPlan,
    encode_body,
)
from lakebraid.timeline.instant import Action, Instant, State
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.visibility import Visibility
from lakebraid.writers.services.leftovers import sweep_temporaries
from lakebraid.writers.services.lifecycle import (
    G,
    M,
    complete_all,
    modified_at,
    remove,
    remove_tree,
    run_service,
    start_all,
)
from lakebraid.writers.services.markers import sweep_completed
from lakebraid.writers.services.rollback import delete_undone_files

RETAIN_COMMITS = cfg.register(
    "clean.retain.commits",
    int,
    10,
    "The cleaner keeps every file the last this-many commits (and every savepoint) can read.",
    cfg.at_least(1),
)
STAGING_RETAIN_HOURS = cfg.register(
    "clean.staging.retain.hours",
    int,
    24,
    "The cleaner deletes a Spark data source write's staging folder (.braid/staging/<job>/) "
    "when nothing in it changed for this many hours: its job died or was aborted while a "
    "task still ran (a live job's commit would fail on the missing files, never half-commit).",
    cfg.at_least(1),
)


INLINE = cfg.register(
    "clean.inline",
    bool,
    True,
    "Run the cleaner after a write's commit, once clean.inline.every.commits commits completed "
    "since the latest clean (a failing clean is logged and never fails the write). Off: run "
    "`lakebraid clean PATH` (or WriteClient.clean) yourself.",
)
INLINE_EVERY = cfg.register(
    "clean.inline.every.commits",
    int,
    10,
    "How many commits complete between two inline cleans.",
    cfg.at_least(1),
)


def clean_due(table: TableTimelines, committed: str | None = None) -> bool:
    """Whether the inline cleaner is on and commit ``committed`` (the one that just completed;
    None: the latest) is a multiple of ``clean.inline.every.commits`` commits to complete since
    the latest completed clean (one listing of the global timeline; a clean that found nothing
    to delete writes no instant, so it is tried again that many commits later, not after every
    commit). Each multiple is one commit's, however writers interleave: counting every commit
    completed by the time of the check skipped a multiple whenever another writer's commit
    completed between this one and its check (two writers then left 20 or more commits'
    file versions uncleaned)."""
    if not table.options.get(INLINE):
        return False
    timeline = table.timeline(G)
    cleans = timeline.of_action(Action.CLEAN)
    since = (cleans[-1].completion_time or "") if cleans else ""
    done = timeline.of_action(Action.COMMIT)  # completion order
    first = bisect.bisect_right(done, since, key=lambda i: i.completion_time or "")
    place = len(done) - first  # the latest commit's, counted from 1
    if committed is not None:  # this commit's own place (none: a clean passed it since)
        mine = [n for n in range(first, len(done)) if done[n].time == committed]
        place = mine[0] - first + 1 if mine else place
    every = table.options.get(INLINE_EVERY)
    return place >= every and place % every == 0  # found nothing: try again N later


def clean_if_due(table: TableTimelines, committed: str | None = None) -> str | None:
    """The inline cleaner: :func:`clean` when :func:`clean_due` (``committed``: the commit
    whose writer asks)."""
    return clean(table) if clean_due(table, committed) else None


def plan_clean(table: TableTimelines, previous: CleanPlan | None = None) -> CleanPlan | None:
    """What to delete: data files no retained read point lists, among those written or
    replaced by the commits completed after ``previous.scan_from`` (an older file was kept
    by the previous clean only while a read point it kept listed it, and those points are
    all after that time), and stale metadata file slices."""
    visibility = table.visibility()
    commits = [i for i in visibility.visible if i.action is Action.COMMIT]
    keep_n = table.options.get(RETAIN_COMMITS)
    if len(commits) <= keep_n:
        return None
    earliest = commits[-keep_n]
    if previous is not None:
        # the retention never moves back (a rollback or restore leaves fewer visible commits):
        # the previous clean deleted what reads before its retained point needed, data files
        # and the metadata file slices, so the files listing as of an earlier point would be
        # read from what is left of them, and keep too little
        kept_from = table.timeline(G).get(previous.earliest_retained, Action.COMMIT)
        if kept_from is not None and (kept_from.completion_time or "") > (
            earliest.completion_time or ""
        ):
            earliest = kept_from
    held = table.savepointed()
    points = [earliest.completion_time] + [i.completion_time for i in commits if i.time in held]
    running = _running_rewrites(table)
    points += [time for time, _ in running]
    keep_data, keep_meta = _kept(MetadataTable(table), points)  # type: ignore[arg-type]
    # every commit after the earliest retained one keeps what it wrote, even when a restore
    # moved the earliest retained commit back before where the previous clean stopped
    scan_from = min(previous.scan_from if previous is not None else "", earliest.completion_time)  # type: ignore[type-var]
    candidates: set[str] = set()
    for inst in commits:
        if (inst.completion_time or "") <= scan_from:
            continue
        statuses = read_commit(table, inst).statuses
        if inst.completion_time > earliest.completion_time:  # type: ignore[operator]
            keep_data.update(_relative(s.partition, s.file_name) for s in statuses)
        candidates.update(_relative(s.partition, s.file_name) for s in statuses)
        candidates.update(_relative(s.partition, old) for s in statuses for old in s.replaced())
    candidates.discard("")
    root = table.layout.root
    doomed = [f for f in sorted(candidates - keep_data) if table.fs.exists(f"{root}/{f}")]
    return CleanPlan(
        earliest_retained=earliest.time,
        data_files=doomed,
        metadata_files=_stale_metadata(table, visibility, earliest, keep_meta, running),
        scan_from=min(p for p in points if p),
    )


def _relative(partition: str, name: str | None) -> str:
    return f"{partition}/{name}".lstrip("/") if name else ""


def _kept(metadata: MetadataTable, points: list[str]) -> tuple[set[str], set[str]]:
    """Data files and metadata files the read points list."""
    keep_data: set[str] = set()
    keep_meta: set[str] = set()
    for point in points:
        reader = metadata.reader(point)
        for partition, files in reader.files().items():
            keep_data.update(_relative(partition, name) for name in files)
        keep_meta.update(_slice_files(reader))
    return keep_data, keep_meta


def _stale_metadata(
    table: TableTimelines,
    visibility: Visibility,
    earliest: Instant,
    keep_meta: set[str],
    running: list[tuple[str, list[str]]],
) -> list[str]:
    """Metadata files no read point lists, of instants settled before the retention."""
    old_enough = {
        i.time for i in visibility.visible if i.completion_time <= earliest.completion_time
    }  # type: ignore[operator]
    meta_done = {
        i.time
        for i in table.timeline(M).by_completion(earliest.completion_time)
        if i.action in (Action.COMPACTION, Action.REINDEX)
    }
    # an undo's corrected bases stand in for their reindex's (``index.rebase``)
    meta_done.update(b for b, r in visibility.rebased.items() if r in meta_done)
    stale_meta = []
    rewritten = {str(p) for _, parts in running for p in parts}
    for partition in Partition:
        folder = table.layout.metadata_partition_dir(str(partition))
        if str(partition) in rewritten or not table.fs.exists(folder):
            continue  # a running rewrite's layout is not the read points': keep it all
        for path in table.fs.ls(folder, detail=False):
            name = path.rsplit("/", 1)[-1]
            parsed = parse_name(name)
            relative = f"{partition}/{name}"
            if parsed is None or relative in keep_meta:
                continue
            commit_base = parsed.kind == "base" and parsed.instant not in meta_done
            settled = old_enough if parsed.kind == "log" or commit_base else meta_done
            if parsed.instant in settled:
                stale_meta.append(relative)
    return sorted(stale_meta)


def _running_rewrites(table: TableTimelines) -> list[tuple[str, list[str]]]:
    """(request time, metadata partitions rewritten) of every live reindex and index build
    (``MetadataTable.rewrites``). Each reads the table as of its request
    (``index.reindex``, ``index.secondary_build``), so its snapshot is kept whatever the
    retention; and writes meanwhile log its partitions in its layout, which no read point
    knows yet, so those partitions are not cleaned until it ends."""
    found = []
    for inst, alive in MetadataTable(table).rewrites():
        if not alive:
            continue
        kind = ReindexPlan if inst.action is Action.REINDEX else IndexPlan
        requested = Instant(inst.time, inst.action, State.REQUESTED)
        plan = table.store.read_typed(M, requested, kind)
        parts = list(plan.group_counts) or [str(Partition.RECORD_INDEX)]
        if isinstance(plan, IndexPlan):
            stats = plan.kind == "column_stats"
            parts = [str(Partition.COLUMN_STATS if stats else Partition.SECONDARY_INDEX)]
        found.append((inst.time, parts))
    return found


def _slice_files(reader: MetadataReader) -> set[str]:
    kept = set()
    for partition in Partition:
        for piece in reader.slices(partition):
            names = ([piece.base] if piece.base else []) + list(piece.logs)
            kept.update(f"{partition}/{name}" for name in names)
    return kept


def sweep_undone(table: TableTimelines, after: str = "") -> None:
    """Delete files a completed rollback or restore left behind (its writer died after the
    undo's commit point, before its deletes), of the undos completed after ``after``."""
    for inst in table.timeline(G).completed():
        if inst.action not in (Action.ROLLBACK, Action.RESTORE):
            continue
        if (inst.completion_time or "") <= after:
            continue
        kind = RollbackPlan if inst.action is Action.ROLLBACK else RestorePlan
        plan = table.store.read_typed(G, inst, kind)
        targets = [plan.target] if isinstance(plan, RollbackPlan) else plan.undone
        delete_undone_files(table, plan.data_files, plan.logs, targets)


def sweep_staging(table: TableTimelines, now: float | None = None) -> list[str]:
    """Delete the staging folders of data source writes idle for ``clean.staging.retain.hours``
    (staged rows are never part of a commit until it reads them); returns their paths."""
    fs, root = table.fs, table.layout.staging_root()
    if not fs.exists(root):
        return []
    limit = (now if now is not None else time.time()) - 3600 * table.options.get(
        STAGING_RETAIN_HOURS
    )
    swept = []
    for folder in fs.ls(root, detail=False):
        stamps = [
            modified_at(info) for info in fs.find(folder, withdirs=True, detail=True).values()
        ]
        stamps.append(modified_at(fs.info(folder)))
        known = [t for t in stamps if t is not None]
        if known and max(known) < limit:
            remove_tree(fs, folder)
            swept.append(folder)
    return swept


def clean(table: TableTimelines) -> str | None:
    """Run the cleaner; returns the clean instant (None: nothing to clean)."""
    sweep_staging(table)
    sweep_temporaries(table)
    previous = latest_plan(table)
    swept_to = table.timeline(G).max_time() or ""
    sweep_undone(table, previous.swept_to if previous is not None else "")
    sweep_completed(table)
    plan = plan_clean(table, previous)
    if plan is None or not (plan.data_files or plan.metadata_files):
        return None
    plan = msgspec.structs.replace(plan, swept_to=swept_to)
    return run_service(
        table, Action.CLEAN, encode_body(plan), lambda time: execute_clean(table, time, plan)
    )


def latest_plan(table: TableTimelines) -> CleanPlan | None:
    """The plan of the latest visible clean (None: no clean ran)."""
    cleans = [i for i in table.visibility().visible if i.action is Action.CLEAN]
    return table.store.read_typed(G, cleans[-1], CleanPlan) if cleans else None


def execute_clean(table: TableTimelines, time: str, plan: CleanPlan) -> None:
    """Inflight, delete, complete; every step skipped when done (finishes a dead clean)."""
    body = encode_body(plan)
    start_all(table, time, Action.CLEAN, body)
    for relative in plan.data_files:
        remove(table.fs, f"{table.layout.root}/{relative}")
    for relative in plan.metadata_files:
        remove(table.fs, f"{table.layout.metadata_dir}/{relative}")
    complete_all(table, time, Action.CLEAN, body)
