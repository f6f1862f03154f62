"""Read points as an undo will leave them, and the record keys an undo touches: shared by the
corrections of reindexes (``index.rebase``) and of index builds (``index.secondary_rebase``)."""

from __future__ import annotations

from collections.abc import Collection

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.errors import ReindexConflictError
from lakebraid.metadata.arrow_records import KEY
from lakebraid.metadata.logblock import read_log_file
from lakebraid.metadata.reader import index_log_table
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
    record-index log files (any layout)."""
    fs, folder = metadata_table.fs, metadata_table.layout.metadata_partition_dir(str(INDEX))
    try:
        names = fs.ls(folder, detail=False)
    except FileNotFoundError:
        names = []
    suffixes = tuple(f"_{t}.log" for t in instants)
    parts = [
        index_log_table(read_log_file(fs, path)).column(KEY)
        for path in names
        if path.endswith(suffixes)
    ]
    if not parts:
        return pa.array([], pa.string())
    return pc.unique(pa.chunked_array(parts).combine_chunks())


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
