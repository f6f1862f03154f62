"""Reindex: rewrite the record index into a new number of file groups, as one ``reindex``
instant of the metadata timeline (body ``timeline.bodies.ReindexPlan``, the new group count).

:func:`reshard` reads every entry as of a snapshot taken when the instant is requested (under
the table lock) and :func:`reindex_record_index` takes a given state; both route the rows to
file groups by the format's hash, write a full base per file group (folding every instant
visible at the snapshot) and complete the instant under the lock; from its completion on, read
points use its group count (``MetadataTable.read_point``).

Online: writers keep committing while a reindex runs. A write whose index logs are in the old
layout never completes once a reindex is running or completed after it chose that layout (the
conflict rule ``resharded_during``, retryable); a reindex whose heartbeat expired and that
finds a record-index change completed after its snapshot does not complete
(:class:`ReindexConflictError`). So no entry is ever left behind in an old layout. Nor does a
reindex complete while a rollback or restore of an instant it folds is pending or after one
began: an undo corrects the bases of the reindexes completed before it (``index.rebase``),
never of one running.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.errors import ReindexConflictError
from lakebraid.index.scope import split_keys
from lakebraid.index.sizing import estimate_groups, partition_spans, resize_target
from lakebraid.index.undo_points import refuse_undos
from lakebraid.metadata import settings
from lakebraid.metadata.arrow_records import SCHEMAS, index_table
from lakebraid.metadata.basefile import base_info
from lakebraid.metadata.basewrite import write_base
from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.hashing import file_group_id
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import Partition
from lakebraid.metadata.slices import ReadPoint
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.bodies import ReindexPlan, encode_body
from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines


def reindex_record_index(
    metadata_table: MetadataTable, rows: pa.Table, n_groups: int | None = None
) -> str:
    """Replace the record index with ``rows`` (columns of ``SCHEMAS[record_index]``, or
    ``key``/``partition``/``file_id``/``instant`` strings), as one reindex instant writing a
    base per file group; ``n_groups`` defaults to an estimate from the row count."""
    partition = Partition.RECORD_INDEX
    schema = SCHEMAS[partition]
    if "file_id" in rows.column_names:
        rows = _index_rows_from_strings(rows)
    rows = rows.select(schema.names).cast(schema)
    return _reindex(metadata_table, n_groups, lambda point: rows)


def reshard(metadata_table: MetadataTable, groups: int | None = None) -> str:
    """Change the record index's file-group count online: every entry as of the reindex's
    request is rewritten into ``groups`` file groups (default: the estimate from the entry
    count). Writes that commit meanwhile conflict, retryably (``writers.commit.conflicts``);
    should one complete anyway (this reindex's heartbeat expired while it was paused), the
    reindex does not complete: :class:`ReindexConflictError`, nothing changed."""
    table = metadata_table.table
    if groups is not None and (isinstance(groups, bool) or not isinstance(groups, int)):
        raise MetadataValueError(f"groups must be a whole number, not {groups!r}", table=table.path)
    maximum = table.options.get(settings.MAX_GROUPS)
    if groups is not None and not 1 <= groups <= maximum:
        raise MetadataValueError(
            f"groups={groups}: the record index takes 1 to {maximum} file groups "
            f"({settings.MAX_GROUPS.name})",
            table=table.path,
        )
    return _reindex(metadata_table, groups, lambda point: _all_entries(metadata_table, point))


def resize_if_due(metadata_table: MetadataTable) -> str | None:
    """The automatic resize (an inline service): reshard to the estimate when the entries
    of the record index's current bases, per file group, pass the growth factor
    (``index.sizing.resize_target``). Returns the reindex instant, or None. Counts come from
    the bases' footers; entries still in logs count at the next compaction."""
    reader = metadata_table.reader()
    folder = reader.folder(Partition.RECORD_INDEX)
    slices = reader.slices(Partition.RECORD_INDEX)
    sizes = [
        base_info(metadata_table.fs, f"{folder}/{piece.base}").num_rows
        for piece in slices
        if piece.base is not None
    ]
    largest = max(sizes, default=0) if reader.point.scoped else None
    target = resize_target(metadata_table.table.options, sum(sizes), len(slices), largest)
    return None if target is None else reshard(metadata_table, target)


def _reindex(
    metadata_table: MetadataTable, n: int | None, entries: Callable[[ReadPoint], pa.Table]
) -> str:
    """The reindex instant: requested with its snapshot under the table lock, bases written,
    completed under the lock unless a record-index change completed since the snapshot.
    ``n`` None: estimated from the snapshot's entry count (the requested body then names no
    count; the inflight and completed ones do)."""
    table = metadata_table.table
    store, meta = table.store, TimelineKind.METADATA

    spans: dict[str, list[int]] = {}

    def plan(groups: int | None) -> bytes:
        counts = {} if groups is None else {str(Partition.RECORD_INDEX): groups}
        return encode_body(ReindexPlan(group_counts=counts, spans=spans))

    with table.lock:
        time = table.next_time()
        point = metadata_table.read_point()  # every commit completed before the request
        refuse_undos(table, time, point.visible, "")
        heartbeat = table.heartbeat(time).start()
        store.request(meta, time, Action.REINDEX, plan(n))
    try:
        rows = entries(point)
        n = n or estimate_groups(table.options, rows.num_rows)
        if point.scoped:
            spans.update(partition_spans(_per_partition(rows.column("key")), n))
        layout = msgspec.structs.replace(
            point, group_counts={**point.group_counts, str(Partition.RECORD_INDEX): n}, spans=spans
        )
        store.start(meta, time, Action.REINDEX, plan(n))
        _write_bases(metadata_table, rows, layout, time, list(point.visible))
        with table.lock:
            refuse_undos(table, time, point.visible, " (its heartbeat expired while it ran)")
            late = _changed_since(table, time)
            if late:
                raise ReindexConflictError(
                    f"reindex {time}: {late} changed the record index after its snapshot "
                    "(its heartbeat expired while it ran); nothing changed: run it again",
                    table=table.path,
                    instant=time,
                )
            store.complete(meta, time, Action.REINDEX, plan(n))
    finally:
        heartbeat.stop()
    return time


def _changed_since(table: TableTimelines, time: str) -> list[str]:
    """Metadata instants completed after ``time`` that wrote record-index entries."""
    return [
        i.time
        for i in table.timeline(TimelineKind.METADATA).completed()
        if i.completion_time is not None
        and i.completion_time > time
        and i.action in (Action.DELTACOMMIT, Action.REINDEX)
    ]


def _all_entries(metadata_table: MetadataTable, point: ReadPoint) -> pa.Table:
    """Every record-index entry as of ``point``, in the base files' columns."""
    reader = MetadataReader(
        metadata_table.fs, metadata_table.layout, point, metadata_table.table.options
    )
    schema = SCHEMAS[Partition.RECORD_INDEX]
    parts = [
        reader.group_table(Partition.RECORD_INDEX, i).select(schema.names).cast(schema)
        for i in range(reader.group_count(Partition.RECORD_INDEX))
    ]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _per_partition(keys: pa.ChunkedArray) -> dict[str, int]:
    """Entries per data partition of partition-scoped index keys."""
    if keys.num_chunks == 0 or len(keys) == 0:
        return {}
    counts = pc.value_counts(split_keys(keys.combine_chunks())[0])
    return {c["values"]: int(c["counts"]) for c in counts.to_pylist()}


def _write_bases(
    metadata_table: MetadataTable, rows: pa.Table, layout: ReadPoint, time: str, folded: list[str]
) -> None:
    """One base per new file group of the record index, holding its rows as ``layout``
    routes them (``ReadPoint.index_groups``)."""
    table, partition = metadata_table.table, Partition.RECORD_INDEX
    n = layout.group_counts[str(partition)]
    groups = pa.array(layout.index_groups(rows.column("key")))
    rows = rows.append_column("__group", groups).sort_by([("__group", "ascending")])
    counts = pc.value_counts(groups).to_pylist() if len(groups) else []
    sizes = {int(c["values"]): int(c["counts"]) for c in counts}
    start = 0
    row_groups = table.options.get(settings.BASE_ROW_GROUP_ROWS)
    for index in range(n):
        size = sizes.get(index, 0)
        part = rows.slice(start, size).drop_columns(["__group"])
        start += size
        group = file_group_id(str(partition), index)
        write_base(
            metadata_table.fs,
            metadata_table.layout.metadata_base_file(str(partition), group, time),
            part,
            partition=str(partition),
            file_group=group,
            instant=time,
            folded=folded,
            row_group_rows=row_groups,
        )


def _index_rows_from_strings(rows: pa.Table) -> pa.Table:
    """``key, partition, file_id, instant`` (strings; one instant) -> the base-file columns."""
    instants = pc.unique(rows.column("instant")).to_pylist()
    if len(instants) != 1:
        parts = [
            _index_rows_from_strings(rows.filter(pc.equal(rows.column("instant"), i)))
            for i in instants
        ]
        return pa.concat_tables(parts)
    return index_table(
        rows.column("key"), rows.column("partition"), rows.column("file_id"), instants[0]
    )
