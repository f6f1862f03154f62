"""Per-file-group work of a write, as plain functions over pyarrow data (engine independent).

A :class:`RewriteTask` names one file group of the data table and how to rewrite it
(copy-on-write): the rows of its current base file, updated in place, minus the keys deleted,
followed by the new rows, become a new base file
``<file id>_<write token>_<instant>.parquet``. Its marker
(``.braid/markers/<instant>/<partition>/<file name>.marker``) is created before the file, so a
crashed write can be rolled back from its markers alone. The result is a :class:`WriteStatus`.

Incoming rows carry the table's columns plus ``_braid_record_key`` (string) and ``_braid_op``
(int8: :data:`OP_UPSERT` or :data:`OP_DELETE`). Everything here is picklable plain data, so the
Spark engine can run it in executors.

A table whose record key is a string or integer column has a *virtual* ``_braid_record_key``:
data files do not hold it (it is ``cast(key as string)``, and Arrow and Spark write integers
alike), readers derive it (:func:`conform` with ``derive_key``). Other key types keep the
physical column.

Integrity (``metadata.integrity``): data files are written with Parquet page checksums and
read with them verified, their footer schema checked against pyarrow's ``ARROW:schema`` note;
a damaged file raises :class:`writers.errors.CorruptDataFileError` naming it. A write status
records ``crc32``, the CRC-32 of the whole new file, which ``validate()`` checks (statuses of
commits written before this field have ``None``: nothing to check).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from typing import Any

import fsspec
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from lakebraid.index.keys import RECORD_KEY
from lakebraid.metadata.arrow_records import flat
from lakebraid.metadata.commits import ColumnStat, WriteStatus, pack_keys
from lakebraid.metadata.integrity import (
    READ_OPTIONS,
    WRITE_OPTIONS,
    check_decoded,
    check_footer,
    file_crc32,
    guarded,
)
from lakebraid.timeline.layout import TableLayout, data_file_name
from lakebraid.timeline.store import make_durable
from lakebraid.timeline.table_config import text_to_type
from lakebraid.writers.errors import CorruptDataFileError
from lakebraid.writers.write.encoding import choose

COMMIT_TIME = "_braid_commit_time"
OP = "_braid_op"
OP_UPSERT, OP_DELETE = 0, 1


class RewriteTask(msgspec.Struct, frozen=True, kw_only=True):
    root: str  # fsspec URL of the table
    record_key: str  # the table's record key column
    partition: str
    file_id: str
    old_file: str | None
    instant: str
    write_token: str
    schema: list[tuple[str, str, bool]]  # (name, type text, nullable) of the table
    precombine: str | None = None


Spec = Sequence[tuple[str, str, bool]]  # (name, type text, nullable) of the table's columns


def data_schema(schema: Spec) -> pa.Schema:
    """The schema of the table's rows as read: its columns then the meta columns."""
    fields = [pa.field(n, text_to_type(t), nullable) for n, t, nullable in schema]
    fields += [pa.field(COMMIT_TIME, pa.string(), False), pa.field(RECORD_KEY, pa.string(), False)]
    return pa.schema(fields)


def stores_record_key(key_type: pa.DataType) -> bool:
    """Whether data files hold ``_braid_record_key``: not for string and integer keys, whose
    string form every engine derives alike (see the module doc)."""
    textual = pa.types.is_string(key_type) or pa.types.is_large_string(key_type)
    return not (textual or pa.types.is_integer(key_type))


def virtual_key(schema: Spec, record_key: str) -> str | None:
    """``record_key`` when the table's ``_braid_record_key`` is virtual, else None."""
    for name, text, _ in schema:
        if name == record_key:
            return None if stores_record_key(text_to_type(text)) else record_key
    return None


def file_schema(schema: Spec, record_key: str) -> pa.Schema:
    """The schema of data files: :func:`data_schema` less a virtual record key column."""
    full = data_schema(schema)
    if virtual_key(schema, record_key) is None:
        return full
    return full.remove(full.get_field_index(RECORD_KEY))


def conform(table: pa.Table, schema: pa.Schema, derive_key: str | None = None) -> pa.Table:
    """Select and cast ``table`` to ``schema``; missing nullable columns become nulls.
    ``derive_key``: the key column of a virtual ``_braid_record_key``, which is derived
    from it (a physical one an older file may hold is equal and ignored)."""
    columns = []
    for field in schema:
        if field.name == RECORD_KEY and derive_key is not None:
            columns.append(pc.cast(table.column(derive_key), pa.string()))
        elif field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def rewrite_file_group(task: RewriteTask, incoming: pa.Table, *, sync: bool = True) -> WriteStatus:
    """Rewrite one file group with ``incoming`` (upserts and deletes); see the module doc.

    The old rows keep their order: an updated row takes its old place, a deleted one drops
    out, new rows follow (a new group's rows sorted by key). One hash of the old keys and one
    ``take`` build the new file; no sort of the whole group. ``sync=False``: the caller makes
    the file durable (:func:`timeline.store.make_durable`) before it commits."""
    fs, root = fsspec.core.url_to_fs(task.root)
    layout = TableLayout(root)
    stored = file_schema(task.schema, task.record_key)
    schema = _repeating_as_dictionaries(stored, task.partition)
    folder = layout.partition_dir(task.partition)
    if task.old_file is not None:
        # one thread: engines run several rewrites at once (Arrow's pool would oversubscribe)
        path = f"{folder}/{task.old_file}"
        old = read_parquet(fs, path, threads=False, dictionaries=schema)
        schema = _dictionaries_kept(schema, old.schema)
        old = conform(old, schema)
    else:
        old = schema.empty_table()
    is_upsert = pc.equal(incoming.column(OP), OP_UPSERT)
    upserts = incoming.filter(is_upsert)
    deletes = flat(incoming.filter(pc.invert(is_upsert)).column(RECORD_KEY))
    new_keys = flat(upserts.column(RECORD_KEY))
    n_old, n_up = old.num_rows, upserts.num_rows
    up_at = np.full(n_up, -1, dtype=np.int64)  # the old row of each upsert, or -1
    del_at = np.full(len(deletes), -1, dtype=np.int64)  # the old row of each delete, or -1
    if n_old and len(up_at) + len(del_at):
        # probe the old keys against a hash of the (few) incoming ones: no hash of the group
        touched = pa.concat_arrays([new_keys, deletes])
        old_keys = old.column(RECORD_KEY if RECORD_KEY in stored.names else task.record_key)
        hit = pc.index_in(flat(pc.cast(old_keys, pa.string())), value_set=touched)
        hit = pc.fill_null(hit, -1).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(hit >= 0)
        which = hit[rows]
        is_up = which < n_up
        up_at[which[is_up]] = rows[is_up]
        del_at[which[~is_up] - n_up] = rows[~is_up]
    known = up_at >= 0
    updated = known & ~_older_events(old, upserts, up_at, known, task.precombine)
    fresh = np.flatnonzero(~known)  # an older event of a stored key is neither
    if task.old_file is None and len(fresh) > 1:  # a new group: its rows sorted by key
        fresh = fresh[pc.sort_indices(new_keys.take(pa.array(fresh))).to_numpy()]
    source = np.arange(n_old, dtype=np.int64)
    source[up_at[updated]] = n_old + np.flatnonzero(updated)
    keep = np.ones(n_old, dtype=bool)
    removed_at = del_at[del_at >= 0]
    keep[removed_at] = False
    order = np.concatenate([source[keep], n_old + fresh])
    if COMMIT_TIME in upserts.column_names:
        upserts = upserts.drop_columns([COMMIT_TIME])
    stamp = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n_up, dtype=np.int32)), pa.array([task.instant], pa.string())
    )
    upserts = upserts.append_column(COMMIT_TIME, stamp)
    combined = pa.concat_tables([old, conform(upserts, schema)])
    in_place = len(order) == combined.num_rows and bool(np.all(np.diff(order) > 0))
    result = combined if in_place else combined.take(pa.array(order))
    status = dict(
        partition=task.partition,
        file_id=task.file_id,
        old_file=task.old_file,
        inserts=len(fresh),
        updates=int(updated.sum()),
        deletes=len(removed_at),
        keys_added=pack_keys(new_keys.take(pa.array(np.flatnonzero(~known)))),
        keys_removed=pack_keys(deletes.filter(pa.array(del_at >= 0))),
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
    # record keys are unique: no dictionary; the statistics of _braid_record_key are never
    # read (the table's key column has them) and cost a comparison per row
    result, dictionary = choose(result, plain={task.record_key, RECORD_KEY})
    options: dict[str, Any] = dict(
        compression="zstd",
        metadata_collector=collected,
        use_dictionary=dictionary,
        write_statistics=[n for n in result.schema.names if n != RECORD_KEY],
        **WRITE_OPTIONS,
    )
    if isinstance(fs, LocalFileSystem):
        pq.write_table(result, path, **options)  # Arrow's own file I/O
    else:
        with fs.open(path, "wb") as handle:
            pq.write_table(result, handle, **options)
    if sync:
        make_durable(fs, path)
    size = int(fs.size(path))
    return WriteStatus(
        file_name=name,
        size=size,
        crc32=file_crc32(fs, path),
        rows=result.num_rows,
        stats=column_stats(result, collected[0], [n for n, _, _ in task.schema]),
        **status,  # type: ignore[arg-type]
    )


def read_parquet(
    fs: AbstractFileSystem,
    path: str,
    *,
    threads: bool = True,
    dictionaries: pa.Schema | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """A Parquet file (``columns``: only those of them the file has); local files through
    Arrow's own file system (no Python file object crosses into Arrow's I/O threads). The
    dictionary-typed fields of ``dictionaries`` are read as dictionaries (no string per row).
    Page checksums are verified and the footer checked; a damaged file raises
    :class:`CorruptDataFileError`."""
    keep = [f.name for f in dictionaries or [] if pa.types.is_dictionary(f.type)]
    options: dict[str, Any] = dict(read_dictionary=keep or None, **READ_OPTIONS)
    with guarded(path, CorruptDataFileError):
        if isinstance(fs, LocalFileSystem):
            with pq.ParquetFile(path, memory_map=True, **options) as parquet:
                return _read_checked(parquet, threads, columns)
        with fs.open(path, "rb") as handle, pq.ParquetFile(handle, **options) as parquet:
            return _read_checked(parquet, threads, columns)


def _read_checked(
    parquet: pq.ParquetFile, threads: bool, columns: Sequence[str] | None
) -> pa.Table:
    check_footer(parquet.metadata)
    if columns is not None:
        columns = [c for c in columns if c in parquet.schema_arrow.names]
    table = parquet.read(columns=columns, use_threads=threads)
    check_decoded(table)
    return table


def _repeating_as_dictionaries(schema: pa.Schema, partition: str) -> pa.Schema:
    """``schema`` with the string columns that repeat one value for many rows -- the commit
    time and the partition columns (one value per file group) -- as dictionaries: a rewrite
    reads, takes and writes their indices, and Parquet gets the dictionary as is instead of
    hashing a string per row. The file's data is the same; only its Arrow schema note says
    dictionary, and every reader conforms columns to the table schema."""
    repeating = {COMMIT_TIME} | {part.split("=", 1)[0] for part in partition.split("/") if part}
    fields = [
        f.with_type(pa.dictionary(pa.int32(), f.type))
        if f.name in repeating and pa.types.is_string(f.type)
        else f
        for f in schema
    ]
    return pa.schema(fields)


def _dictionaries_kept(schema: pa.Schema, found: pa.Schema) -> pa.Schema:
    """``schema`` with the string fields an old file holds as Arrow dictionaries (its
    ``ARROW:schema`` note; ``writers.write.encoding`` chose them) kept as dictionaries."""
    fields = []
    for field in schema:
        kind = found.field(field.name).type if field.name in found.names else None
        if kind is not None and pa.types.is_dictionary(kind) and kind.value_type == field.type:
            field = field.with_type(kind)
        fields.append(field)
    return pa.schema(fields)


def column_stats(table: pa.Table, meta: pq.FileMetaData, columns: list[str]) -> list[ColumnStat]:
    """Min, max, nulls, values and compressed bytes of each column of a written file.

    Integer and string bounds come from the footer the writer just made (exact: Arrow writes
    untruncated statistics, or none); other types are computed from the rows."""
    sizes = {name: 0 for name in columns}
    footer: dict[str, list[Any]] = {}
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for c in range(group.num_columns):
            chunk = group.column(c)
            path = chunk.path_in_schema.split(".")[0]
            if path in sizes:
                sizes[path] += chunk.total_compressed_size
                footer.setdefault(path, []).append(chunk.statistics)
    stats = []
    for name in columns:
        column = table.column(name)
        lo = hi = None
        kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
        if _orderable(kind) and column.null_count < len(column):
            bounds = _footer_bounds(kind, footer.get(name, []))
            if bounds is None:
                found = pc.min_max(column.cast(kind))
                bounds = (_plain(found["min"].as_py()), _plain(found["max"].as_py()))
            lo, hi = bounds
        stats.append(
            ColumnStat(
                name, lo, hi, column.null_count, len(column) - column.null_count, sizes[name]
            )
        )
    return stats


def _footer_bounds(kind: pa.DataType, chunks: list[Any]) -> tuple[Any, Any] | None:
    """(min, max) over the row groups' statistics, for integer and string columns only."""
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind)) or not chunks:
        return None
    found = [s for s in chunks if s is not None and s.has_min_max]
    if len(found) != sum(1 for s in chunks if s is None or s.num_values > 0):
        return None  # a group with values but no bounds (e.g. a value over the size limit)
    if not found:
        return None
    return min(s.min for s in found), max(s.max for s in found)


def _orderable(kind: pa.DataType) -> bool:
    return not (pa.types.is_nested(kind) or pa.types.is_null(kind))


def _older_events(
    old: pa.Table, upserts: pa.Table, up_at: np.ndarray, known: np.ndarray, field: str | None
) -> np.ndarray:
    """Upserts whose precombine value is below the stored row's (event-time ordering; ties
    go to the incoming row). ``field`` None: commit-time ordering, nothing is older."""
    stale = np.zeros(len(up_at), dtype=bool)
    if field is None or not known.any() or field not in old.column_names:
        return stale
    rows = np.flatnonzero(known)
    theirs = _decoded(old.column(field).take(pa.array(up_at[rows])))
    ours = _decoded(upserts.column(field).take(pa.array(rows))).cast(theirs.type)
    stale[rows] = pc.fill_null(pc.less(ours, theirs), False).to_numpy(zero_copy_only=False)
    return stale


def _decoded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    kind = column.type
    return column.cast(kind.value_type) if pa.types.is_dictionary(kind) else column


def _plain(value: Any) -> Any:
    """A statistics value the metadata format holds exactly; others become None (no pruning)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, decimal.Decimal | dt.time | dt.timedelta):
        return None
    return value
