"""Per-file-group work of a write, as plain functions over pyarrow data (engine independent).

A :class:`RewriteTask` names one file group of the data table and how to rewrite it
(copy-on-write): the rows of its current base file, minus the keys deleted or replaced, plus
the incoming rows, sorted by record key, become a new base file
``<file id>_<write token>_<instant>.parquet``. Its marker
(``.braid/markers/<instant>/<partition>/<file name>.marker``) is created before the file, so a
crashed write can be rolled back from its markers alone. The result is a :class:`WriteStatus`.

Incoming rows carry the table's columns plus ``_braid_record_key`` (string) and ``_braid_op``
(int8: :data:`OP_UPSERT` or :data:`OP_DELETE`). Everything here is picklable plain data, so the
Spark engine can run it in executors.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import fsspec
import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from timeline.layout import TableLayout, data_file_name
from timeline.table_config import text_to_type

COMMIT_TIME = "_braid_commit_time"
RECORD_KEY = "_braid_record_key"
OP = "_braid_op"
META_COLUMNS = (COMMIT_TIME, RECORD_KEY)
OP_UPSERT, OP_DELETE = 0, 1


class ColumnStat(msgspec.Struct, frozen=True, array_like=True):
    column: str
    min_value: Any
    max_value: Any
    null_count: int
    value_count: int
    total_size: int


class WriteStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What one task did to one file group."""

    partition: str
    file_id: str
    file_name: str | None  # None: the group is now empty (no new file)
    old_file: str | None
    size: int = 0
    rows: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    stats: list[ColumnStat] = []
    keys_added: list[str] = []  # keys now in this group that were not before
    keys_removed: list[str] = []  # keys that left this group (deleted or moved away)


class RewriteTask(msgspec.Struct, frozen=True, kw_only=True):
    root: str  # fsspec URL of the table
    partition: str
    file_id: str
    old_file: str | None
    instant: str
    write_token: str
    schema: list[tuple[str, str, bool]]  # (name, type text, nullable) of the table
    precombine: str | None = None


def data_schema(schema: list[tuple[str, str, bool]]) -> pa.Schema:
    """The schema of data files: the table's columns then the meta columns."""
    fields = [pa.field(n, text_to_type(t), nullable) for n, t, nullable in schema]
    fields += [pa.field(COMMIT_TIME, pa.string(), False), pa.field(RECORD_KEY, pa.string(), False)]
    return pa.schema(fields)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select and cast ``table`` to ``schema``; missing nullable columns become nulls."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def rewrite_file_group(task: RewriteTask, incoming: pa.Table) -> WriteStatus:
    """Rewrite one file group with ``incoming`` (upserts and deletes); see the module doc."""
    fs, root = fsspec.core.url_to_fs(task.root)
    layout = TableLayout(root)
    schema = data_schema(task.schema)
    folder = layout.partition_dir(task.partition)
    if task.old_file is not None:
        old = conform(read_parquet(fs, f"{folder}/{task.old_file}"), schema)
    else:
        old = schema.empty_table()
    ops = incoming.column(OP)
    upserts = incoming.filter(pc.equal(ops, OP_UPSERT))
    deletes = incoming.filter(pc.equal(ops, OP_DELETE)).column(RECORD_KEY)
    old_keys = old.column(RECORD_KEY)
    new_keys = upserts.column(RECORD_KEY)
    touched = pa.concat_arrays([_flat(new_keys), _flat(deletes)])
    kept = old.filter(pc.invert(pc.is_in(old_keys, value_set=touched)))
    was_there_new = pc.is_in(new_keys, value_set=old_keys)
    was_there_del = pc.is_in(deletes, value_set=old_keys)
    if COMMIT_TIME in upserts.column_names:
        upserts = upserts.drop_columns([COMMIT_TIME])
    stamp = pa.array([task.instant] * upserts.num_rows, pa.string())
    upserts = upserts.append_column(COMMIT_TIME, stamp)
    result = pa.concat_tables([kept, conform(upserts, schema)]).sort_by(RECORD_KEY)
    inserted = new_keys.filter(pc.invert(was_there_new))
    removed = deletes.filter(was_there_del)
    status = dict(
        partition=task.partition,
        file_id=task.file_id,
        old_file=task.old_file,
        inserts=len(inserted),
        updates=int(pc.sum(was_there_new).as_py() or 0),
        deletes=len(removed),
        keys_added=inserted.to_pylist(),
        keys_removed=removed.to_pylist(),
    )
    if result.num_rows == 0:
        return WriteStatus(file_name=None, **status)  # type: ignore[arg-type]
    name = data_file_name(task.file_id, task.write_token, task.instant)
    marker_dir = f"{layout.markers_dir(task.instant)}/{task.partition}".rstrip("/")
    fs.makedirs(marker_dir, exist_ok=True)
    fs.pipe_file(f"{marker_dir}/{name}.marker", b"")
    fs.makedirs(folder, exist_ok=True)
    path = f"{folder}/{name}"
    collected: list[pq.FileMetaData] = []
    with fs.open(path, "wb") as handle:
        pq.write_table(
            result,
            handle,
            compression="zstd",
            write_statistics=True,
            metadata_collector=collected,
        )
    size = int(fs.size(path))
    meta = collected[0]
    return WriteStatus(
        file_name=name,
        size=size,
        rows=result.num_rows,
        stats=column_stats(result, meta, [n for n, _, _ in task.schema]),
        **status,  # type: ignore[arg-type]
    )


def read_parquet(fs: AbstractFileSystem, path: str) -> pa.Table:
    """A whole Parquet file; local files through Arrow's own file system (no Python file
    object crosses into Arrow's I/O threads)."""
    if isinstance(fs, LocalFileSystem):
        return pq.read_table(path, use_threads=True)
    with fs.open(path, "rb") as handle:
        return pq.read_table(handle, pre_buffer=False)


def _flat(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        return array.combine_chunks() if array.num_chunks else pa.array([], array.type)
    return array


def column_stats(table: pa.Table, meta: pq.FileMetaData, columns: list[str]) -> list[ColumnStat]:
    """Min, max, nulls, values and compressed bytes of each column of a written file."""
    sizes = {name: 0 for name in columns}
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for c in range(group.num_columns):
            path = group.column(c).path_in_schema.split(".")[0]
            if path in sizes:
                sizes[path] += group.column(c).total_compressed_size
    stats = []
    for name in columns:
        column = table.column(name)
        lo = hi = None
        if _orderable(column.type) and column.null_count < len(column):
            bounds = pc.min_max(column)
            lo, hi = _plain(bounds["min"].as_py()), _plain(bounds["max"].as_py())
        stats.append(
            ColumnStat(
                name, lo, hi, column.null_count, len(column) - column.null_count, sizes[name]
            )
        )
    return stats


def _orderable(kind: pa.DataType) -> bool:
    return not (pa.types.is_nested(kind) or pa.types.is_null(kind))


def _plain(value: Any) -> Any:
    """A statistics value the metadata format holds exactly; others become None (no pruning)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, decimal.Decimal | dt.time | dt.timedelta):
        return None
    return value
