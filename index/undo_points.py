"""Read points as an undo will leave them, and the record keys an undo touches: shared by the
corrections of reindexes (``index.rebase``) and of index builds (``index.secondary_rebase``)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import NamedTuple

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.errors import ReindexConflictError
from lakebraid.metadata import settings
from lakebraid.metadata.arrow_records import KEY
from lakebraid.metadata.basefile import base_info, read_base
from lakebraid.metadata.basewrite import write_base
from lakebraid.metadata.logblock import read_log_file
from lakebraid.metadata.logcache import index_log_table
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import Partition
from lakebraid.metadata.slices import ReadPoint
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.bodies import RestorePlan, RollbackPlan
from lakebraid.timeline.instant import Action, Instant, State
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.visibility import UNDO_ACTIONS

INDEX = Partition.RECORD_INDEX


def touched_keys(metadata_table: MetadataTable, instants: frozenset[str]) -> pa.Array:
    """Every record key whose index entry one of ``instants`` wrote or deleted, from their
    record-index log files and commit bases (any layout)."""
    fs, folder = metadata_table.fs, metadata_table.layout.metadata_partition_dir(str(INDEX))
    try:
        names = fs.ls(folder, detail=False)
    except FileNotFoundError:
        names = []
    logs = tuple(f"_{t}.log" for t in instants)
    bases = tuple(f"_{t}.parquet" for t in instants)  # commit bases (``metadata.writer``)
    parts = [
        index_log_table(read_log_file(fs, path)).column(KEY)
        for path in names
        if path.endswith(logs)
    ]
    parts += [read_base(fs, path, [KEY]).column(KEY) for path in names if path.endswith(bases)]
    if not parts:
        return pa.array([], pa.string())
    return pc.unique(pa.chunked_array(parts).combine_chunks())


def evidence_cleaned(table: TableTimelines, undone: Collection[str]) -> bool:
    """Whether a clean may have deleted what tells the keys ``undone`` touched: it deletes the
    metadata slices of instants settled before its retention (their record-index logs, once
    a later base folded them) and the data files only older points listed. So a restore to a
    savepoint from before the retention undoes instants whose logs may be gone."""
    glob = table.timeline(TimelineKind.GLOBAL)
    retained = table.retained_from(glob, table.visibility(global_timeline=glob))
    if retained is None:
        return False
    return any(
        i.time in undone and i.completion_time is not None and i.completion_time <= retained
        for i in glob.completed()
    )


def every_key(
    metadata_table: MetadataTable, rewrite: Instant, undone: frozenset[str], mine: dict[str, str]
) -> pa.Array:
    """Every record key the index holds at ``rewrite``'s completion or as of its request
    without ``undone``: a superset of the keys ``undone`` touched, for a correction whose
    evidence a clean removed (:func:`evidence_cleaned`). A key no undone instant touched has
    the same entry in the rewrite's bases as without them, so correcting it changes nothing."""
    fix = correction(metadata_table, rewrite, undone, mine)
    parts = [
        reader.group_table(INDEX, i).column(KEY)
        for reader in (fix.at, fix.before)
        for i in range(reader.group_count(INDEX))
    ]
    parts = [p.combine_chunks().cast(pa.string()) for p in parts if len(p)]
    return pc.unique(pa.concat_arrays(parts)) if parts else pa.array([], pa.string())


def with_undone(point: ReadPoint, undone: frozenset[str], mine: dict[str, str]) -> ReadPoint:
    """``point`` as it will read once the undo of ``undone`` completes, with the corrected
    bases this undo already wrote."""
    rebased = {**point.rebased, **{b: r for b, r in mine.items() if r in point.bases}}
    return msgspec.structs.replace(
        point,
        visible=tuple(t for t in point.visible if t not in undone),
        undone=point.undone | undone,
        rebased=rebased,
    )


def refuse_undos(table: TableTimelines, time: str, folded: Collection[str], why: str) -> None:
    """Refuse to let a rewrite requested at ``time`` (a reindex or an index build, folding the
    instants ``folded``) complete while a rollback or restore of one of those instants is
    pending or completed after ``time``: that undo did not correct the rewrite's bases. Undos
    of other instants (a writer rolling back its own pending write) do not matter."""
    folded = set(folded)
    for inst in table.timeline(TimelineKind.GLOBAL):
        if inst.action not in UNDO_ACTIONS:
            continue
        if inst.completion_time is not None and inst.completion_time <= time:
            continue
        requested = Instant(inst.time, inst.action, State.REQUESTED)
        read = table.store.read_typed
        if inst.action is Action.RESTORE:
            targets = set(read(TimelineKind.GLOBAL, requested, RestorePlan).undone)
        else:
            targets = {read(TimelineKind.GLOBAL, requested, RollbackPlan).target}
        if targets & folded:
            raise ReindexConflictError(
                f"{time}: {inst.time} (a {inst.action}) undoes {sorted(targets & folded)[0]}, "
                f"which this rewrite folds, and began after it{why}; nothing changed: run it "
                "again once the undo is done",
                table=table.path,
                instant=time,
            )


class Correction(NamedTuple):
    """What an undo corrects in one rewrite (a reindex or index build): readers at the
    rewrite's completion (its bases, ``at``) and as of its request without the undone
    instants (``before``)."""

    at: MetadataReader
    before: MetadataReader


def correction(
    metadata_table: MetadataTable, rewrite: Instant, undone: frozenset[str], mine: dict[str, str]
) -> Correction:
    table = metadata_table.table
    at = metadata_table.read_point(rewrite.completion_time)  # its bases, not yet undone
    before = with_undone(metadata_table.read_point(rewrite.time), undone, mine)
    fs, layout, options = metadata_table.fs, metadata_table.layout, table.options
    return Correction(
        MetadataReader(fs, layout, at, options), MetadataReader(fs, layout, before, options)
    )


def write_corrected_bases(
    metadata_table: MetadataTable,
    partition: Partition,
    at: MetadataReader,
    base: str,
    undone: frozenset[str],
    correct: Callable[[int, str], pa.Table],
) -> None:
    """For each file group of ``partition`` whose slice at ``at`` has a base: the corrected
    rows ``correct(group index, base path)``, written as ``<group>_<base>.parquet`` folding
    that base's instants minus ``undone``."""
    folder = at.folder(partition)
    for index in range(at.group_count(partition)):
        piece = at.slice(partition, index)
        if piece.base is None:
            continue  # the rewrite wrote no rows here: nothing to correct
        path = f"{folder}/{piece.base}"
        write_base(
            metadata_table.fs,
            metadata_table.layout.metadata_base_file(str(partition), piece.file_group, base),
            correct(index, path),
            partition=str(partition),
            file_group=piece.file_group,
            instant=base,
            folded=sorted(set(base_info(metadata_table.fs, path).folded) - undone),
            row_group_rows=metadata_table.table.options.get(settings.BASE_ROW_GROUP_ROWS),
        )
