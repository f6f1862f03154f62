"""Reindex: replace the record index with a given state, as one ``reindex`` instant of the
metadata timeline (body ``timeline.bodies.ReindexPlan``, the new group count).

:func:`reindex_record_index` routes the rows to file groups by the format's hash, writes a full
base per file group (folding every instant visible when it starts) and completes the instant;
from its completion on, read points use its group count (``MetadataTable.read_point``).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.sizing import estimate_groups
from lakebraid.metadata import settings
from lakebraid.metadata.arrow_records import SCHEMAS, index_table
from lakebraid.metadata.basefile import write_base
from lakebraid.metadata.hashing import file_group_id, file_groups_of
from lakebraid.metadata.records import Partition
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.bodies import ReindexPlan, encode_body
from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind


def reindex_record_index(
    metadata_table: MetadataTable, rows: pa.Table, n_groups: int | None = None
) -> str:
    """Replace the record index with ``rows`` (columns of ``SCHEMAS[record_index]``, or
    ``key``/``partition``/``file_id``/``instant`` strings), as one reindex instant writing a
    base per file group; ``n_groups`` defaults to an estimate from the row count."""
    table, layout = metadata_table.table, metadata_table.layout
    partition = Partition.RECORD_INDEX
    schema = SCHEMAS[partition]
    if "file_id" in rows.column_names:
        rows = _index_rows_from_strings(rows)
    rows = rows.select(schema.names).cast(schema)
    n = n_groups or estimate_groups(table.options, rows.num_rows)
    point = metadata_table.read_point()
    store, meta = table.store, TimelineKind.METADATA
    with table.lock:
        time = table.next_time()
        plan = ReindexPlan(group_counts={str(partition): n})
        store.request(meta, time, Action.REINDEX, encode_body(plan))
    store.start(meta, time, Action.REINDEX, encode_body(plan))
    groups = pa.array(file_groups_of(rows.column("key"), n))
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
            layout.metadata_base_file(str(partition), group, time),
            part,
            partition=str(partition),
            file_group=group,
            instant=time,
            folded=list(point.visible),
            row_group_rows=row_groups,
        )
    store.complete(meta, time, Action.REINDEX, encode_body(plan))
    return time


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
