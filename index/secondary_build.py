"""Building and dropping secondary indexes on a live table, and which indexes a write keeps.

A build of column ``c`` is one ``index`` instant of the metadata timeline (body
``timeline.bodies.IndexPlan``), like a reindex of the ``secondary_index`` partition::

    lock:   t = next time; requested (op build, column, the partition's group count);
            snapshot S = the read point (every commit completed before the request)
    read the partition as of S less c's entries, and c's entries of every data file of S
    inflight; a full base per file group, folding S's instants
    lock:   completed, unless a rollback or restore began since (it could undo what S folds)

Writers keep committing meanwhile: from the request on, every write that chooses its metadata
layout sees the running build and writes ``c``'s entries too (:func:`maintained`), so the base
(as of S) plus those writes' logs is the whole index when the build completes and readers start
using it. A write that chose its layout before the request, and so lacks ``c``'s entries,
conflicts (retryably) with the build (``writers.commit.conflicts.indexed_during``). A drop is
the same instant with op drop: bases without ``c``'s entries; readers stop using ``c`` at its
completion. One build or drop runs at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.errors import IndexLayerError, ReindexRunningError
from lakebraid.index.scope import is_scoped
from lakebraid.index.secondary import INDEX, SEP, file_entries, group_of_entries, value_problem
from lakebraid.index.undo_points import refuse_undos
from lakebraid.metadata import settings
from lakebraid.metadata.basewrite import write_base
from lakebraid.metadata.commits import schema_as_of
from lakebraid.metadata.hashing import file_group_id
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.slices import ReadPoint
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.bodies import IndexPlan, encode_body
from lakebraid.timeline.instant import Action, Instant, State
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import text_to_type

M = TimelineKind.METADATA
T = TypeVar("T")


def maintained(metadata_table: MetadataTable, point: ReadPoint) -> tuple[list[str], int, set[str]]:
    """What a write whose metadata layout is ``point`` keeps: the indexed columns (visible
    at ``point``, or being built), the partition's group count, and the running index
    instants it saw (of every kind: column statistics too)."""
    columns = set(point.secondary)
    n = point.group_counts[str(INDEX)]
    seen: set[str] = set()
    table = metadata_table.table
    for time in point.pending_indexes:  # listed by the read point: no listing here
        if not table.is_alive(time):
            continue
        requested = Instant(time, Action.INDEX, State.REQUESTED)
        plan = table.store.read_typed(M, requested, IndexPlan)
        seen.add(time)
        n = plan.group_counts.get(str(INDEX), n)
        if plan.op == "build" and plan.kind == "secondary":
            columns.add(plan.column)
    return sorted(columns), n, seen


def build_index(metadata_table: MetadataTable, column: str) -> str:
    """Build (or rebuild) the secondary index of ``column``; returns the instant."""
    check_indexable(metadata_table.table, column)
    return _rewrite(metadata_table, IndexPlan(op="build", kind="secondary", column=column))


def drop_index(metadata_table: MetadataTable, column: str) -> str:
    """Drop the secondary index of ``column``; returns the instant."""
    if column not in metadata_table.read_point().secondary:
        raise IndexLayerError(
            f"no secondary index on column {column!r} (indexed: "
            f"{sorted(metadata_table.read_point().secondary) or 'none'})",
            table=metadata_table.table.path,
        )
    return _rewrite(metadata_table, IndexPlan(op="drop", kind="secondary", column=column))


def check_indexable(table: TableTimelines, column: str) -> None:
    """Refuse a column that is not in the table's schema, a partition field, or of a type
    whose values have no canonical text."""
    if not isinstance(column, str) or not column:
        raise IndexLayerError(
            f"a secondary index needs a column name, not {column!r}", table=table.path
        )
    if column in table.config.partition_fields:
        raise IndexLayerError(
            f"column {column!r} is a partition field: reads already prune by it",
            table=table.path,
        )
    fields = {f.name: f for f in schema_as_of(table)}
    if column not in fields:
        raise IndexLayerError(
            f"no column {column!r} in the table (columns: {sorted(fields)})", table=table.path
        )
    problem = value_problem(text_to_type(fields[column].type))
    if problem is not None:
        raise IndexLayerError(f"column {column!r} cannot be indexed: {problem}", table=table.path)


def _rewrite(metadata_table: MetadataTable, plan: IndexPlan) -> str:
    return run_rewrite(
        metadata_table,
        plan,
        str(INDEX),
        lambda point: _group_count(metadata_table, point),
        lambda point, full: _entries_as_of(metadata_table, point, full),
        lambda entries, n, time, folded: _write_bases(metadata_table, entries, n, time, folded),
    )


def run_rewrite(
    metadata_table: MetadataTable,
    plan: IndexPlan,
    partition: str,
    group_count: Callable[[ReadPoint], int],
    collect: Callable[[ReadPoint, IndexPlan], T],
    write: Callable[[T, int, str, list[str]], None],
) -> str:
    """One ``index`` instant rewriting the metadata partition ``partition`` (the module doc;
    column statistics use it too, ``index.column_stats_build``): under the lock the request
    and the snapshot; ``collect`` the rows as of the snapshot, ``write`` the full bases (rows,
    group count, instant, folded instants); completed under the lock unless an undo of a
    folded instant began meanwhile."""
    table = metadata_table.table
    store = table.store
    with table.lock:
        running = [i.time for i, alive in metadata_table.rewrites() if alive]
        if running:
            raise ReindexRunningError(
                f"{plan.op} of the {plan.kind} index on {plan.label}: {running[0]} (a reindex "
                "or index build) is running; wait for it, then retry",
                table=table.path,
                instant=running[0],
            )
        time = table.next_time()
        point = metadata_table.read_point()
        refuse_undos(table, time, point.visible, "")
        n = group_count(point)
        plan = msgspec.structs.replace(plan, group_counts={partition: n})
        heartbeat = table.heartbeat(time).start()
        store.request(M, time, Action.INDEX, encode_body(plan))
    try:
        rows = collect(point, plan)
        store.start(M, time, Action.INDEX, encode_body(plan))
        write(rows, n, time, list(point.visible))
        with table.lock:
            refuse_undos(table, time, point.visible, " (its heartbeat expired while it ran)")
            store.complete(M, time, Action.INDEX, encode_body(plan))
    finally:
        heartbeat.stop()
    return time


def _group_count(metadata_table: MetadataTable, point: ReadPoint) -> int:
    """The count writers route by: the partition's, once any build named one."""
    if str(INDEX) in point.reindexed:
        return point.group_counts[str(INDEX)]
    return metadata_table.table.options.get(settings.SECONDARY_GROUPS)


def _entries_as_of(metadata_table: MetadataTable, point: ReadPoint, plan: IndexPlan) -> pa.Array:
    """Every entry of the partition as of ``point`` less the column's, plus (a build) the
    column's entries of every data file as of ``point``."""
    table = metadata_table.table
    reader = MetadataReader(metadata_table.fs, metadata_table.layout, point, table.options)
    kept = []
    for index in range(reader.group_count(INDEX)):
        keys = reader.group_table(INDEX, index).column("key").combine_chunks()
        kept.append(keys.filter(pc.invert(pc.starts_with(keys, plan.column + SEP))))
    if plan.op == "build":
        for partition, files in sorted(reader.files().items()):
            for name in sorted(files):
                path = table.layout.data_file(partition, name)
                scope = partition if is_scoped(table.config) else None
                key = table.config.record_key
                found = file_entries(table.fs, path, [plan.column], key, scope)
                kept.append(found[plan.column])
    kept = [k.cast(pa.string()) for k in kept if len(k)]
    return pa.concat_arrays(kept) if kept else pa.array([], pa.string())


def _write_bases(
    metadata_table: MetadataTable, entries: pa.Array, n: int, time: str, folded: list[str]
) -> None:
    groups = pa.array(group_of_entries(entries, n)) if len(entries) else pa.array([], pa.int64())
    row_groups = metadata_table.table.options.get(settings.BASE_ROW_GROUP_ROWS)
    for index in range(n):
        mine = entries.filter(pc.equal(groups, index)) if len(entries) else entries
        group = file_group_id(str(INDEX), index)
        write_base(
            metadata_table.fs,
            metadata_table.layout.metadata_base_file(str(INDEX), group, time),
            pa.table({"key": mine}),
            partition=str(INDEX),
            file_group=group,
            instant=time,
            folded=folded,
            row_group_rows=row_groups,
        )
