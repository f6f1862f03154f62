"""Undo across a column-statistics build or drop: corrected bases of ``column_stats``.

A build or drop of column statistics (``index.column_stats_build``) folds every instant
completed before its request into full bases of the ``column_stats`` partition, so an undo of
one of those instants writes corrected bases for it (``index.rebase`` calls
:func:`rebase_column_stats`): the build's rows of every data file the undone commits neither
wrote nor replaced, plus, for the files they replaced that are current again without them,
those files' records as of the build's request without the undone commits (the layout before
the build) less the plan's columns, and (a build) the plan's columns read from the files.
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.column_stats_build import (
    SCHEMA,
    STATS,
    built_records,
    routed_tables,
    without_columns,
)
from lakebraid.index.undo_points import correction, write_corrected_bases
from lakebraid.metadata.basefile import read_base
from lakebraid.metadata.commits import read_commit
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.bodies import IndexPlan
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines

SEP = "\x00"


def rebase_column_stats(
    metadata_table: MetadataTable,
    build: Instant,
    plan: IndexPlan,
    base: str,
    undone: frozenset[str],
    mine: dict[str, str],
) -> None:
    """Write the corrected bases (time ``base``) of the completed column-statistics build or
    drop ``build`` (body ``plan``)."""
    table = metadata_table.table
    fix = correction(metadata_table, build, undone, mine)
    touched = touched_files(table, undone)
    listed = fix.before.files()
    back = sorted((p, name) for p, name in touched if name in listed.get(p, {}))
    wanted = set(back)
    prior = [
        r
        for r in fix.before.column_stats()
        if (r.partition, r.file) in wanted and r.column not in plan.columns
    ]
    if plan.op == "build":
        prior += built_records(table, back, plan.columns)
    added = routed_tables(prior, fix.at.group_count(STATS))
    gone = pa.array(sorted(f"{p}{SEP}{name}" for p, name in touched), pa.string())

    def correct(index: int, path: str) -> pa.Table:
        rows = without_columns(read_base(metadata_table.fs, path), ())
        if len(rows) and len(gone):
            places = pc.binary_join_element_wise(rows.column("partition"), rows.column("file"), SEP)
            rows = rows.filter(pc.invert(pc.is_in(places, value_set=gone)))
        return pa.concat_tables([rows, added[index]]).cast(SCHEMA)

    write_corrected_bases(metadata_table, STATS, fix.at, base, undone, correct)


def touched_files(table: TableTimelines, undone: Collection[str]) -> set[tuple[str, str]]:
    """(partition, file name) of every data file the completed ``undone`` commits wrote or
    replaced."""
    found: set[tuple[str, str]] = set()
    for inst in table.timeline(TimelineKind.GLOBAL).completed():
        if inst.time not in undone or inst.action is not Action.COMMIT:
            continue
        for s in read_commit(table, inst).statuses:
            found.update((s.partition, name) for name in (s.file_name, s.old_file) if name)
    return found
