"""Per-file-group work of a write, as plain functions over pyarrow data (engine independent).

A :class:`RewriteTask` names one file group of the data table and how to rewrite it
(copy-on-write): the rows of its current base file, updated in place, minus the keys deleted,
followed by the new rows, become a new base file
``<file id>_<write token>_<instant>.parquet``. Its marker (``writers.write.marking``: a file
marker, or the engine's batch marker) is created before the file, so a crashed write can be
rolled back from its markers alone. The result is a :class:`WriteStatus`.

Incoming rows carry the table's columns plus ``_braid_record_key`` (string) and ``_braid_op``
(int8: :data:`OP_UPSERT` or :data:`OP_DELETE`). Everything here is picklable plain data, so the
Spark engine can run it in executors.

The files' schema, reading and statistics are ``writers.write.datafile``'s. A write status
records ``crc32``, the CRC-32 of the whole new file, which ``validate()`` checks (statuses of
commits written before this field have ``None``: nothing to check).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.index.keys import RECORD_KEY
from lakebraid.metadata.arrow_records import flat
from lakebraid.metadata.checksum import crc32
from lakebraid.metadata.commits import WriteStatus, pack_keys
from lakebraid.metadata.files import local_path, open_file
from lakebraid.metadata.integrity import (
    WRITE_OPTIONS,
    Crc32Writer,
    file_crc32,
)
from lakebraid.metadata.keyorder import sort_order
from lakebraid.timeline.durable import filesystem, is_local, make_durable, make_folder
from lakebraid.timeline.layout import TableLayout, data_file_name
from lakebraid.writers.write.datafile import (
    COMMIT_TIME,
    DATA_CODEC,
    column_stats,
    conform,
    dictionaries_kept,
    file_schema,
    footer_statistics,
    read_parquet,
    stamped,
)
from lakebraid.writers.write.encoding import choose
from lakebraid.writers.write.marking import mark

OP = "_braid_op"
OP_UPSERT, OP_DELETE = 0, 1
BUFFERED_ROWS = 65_536  # a local file of at most this many rows is built in memory


class RewriteTask(msgspec.Struct, frozen=True, kw_only=True):
    root: str  # fsspec URL of the table
    storage: dict[str, Any] = {}  # storage options to open it (timeline.durable.storage_of)
    record_key: str  # the table's record key column
    partition: str
    file_id: str
    old_file: str | None
    instant: str
    write_token: str
    schema: list[tuple[str, str, bool]]  # (name, type text, nullable) of the table
    precombine: str | None = None

    def output(self) -> str:
        """The path (relative to the table root) of the file the task writes, if any."""
        return f"{self.partition}/{self.file_name()}".lstrip("/")

    def file_name(self) -> str:
        return data_file_name(self.file_id, self.write_token, self.instant)


def rewrite_file_group(
    task: RewriteTask, incoming: pa.Table, *, sync: bool = True, marked: bool = False
) -> WriteStatus:
    """Rewrite one file group with ``incoming`` (upserts and deletes); see the module doc.

    The old rows keep their order: an updated row takes its old place, a deleted one drops
    out, new rows follow (a new group's rows sorted by key). One hash of the old keys and one
    ``take`` build the new file; no sort of the whole group. ``sync=False``: the caller makes
    the file durable (:func:`timeline.durable.make_durable`) before it commits;
    ``marked=True``: the caller's batch marker names the file (``writers.write.marking``)."""
    fs, root = filesystem(task.root, task.storage)
    layout = TableLayout(root)
    old, schema, key_column = _stored_rows(fs, layout, task)
    upserts, deletes = _split(incoming)
    new_keys = flat(upserts.column(RECORD_KEY))
    up_at, del_at = _old_positions(old, key_column, new_keys, deletes)
    known = up_at >= 0
    updated = known & ~_older_events(old, upserts, up_at, known, task.precombine)
    fresh = np.flatnonzero(~known)  # an older event of a stored key is neither
    if task.old_file is None and len(fresh) > 1:  # a new group: its rows sorted by key
        keys = new_keys if len(fresh) == len(new_keys) else new_keys.take(pa.array(fresh))
        fresh = fresh[sort_order(keys).to_numpy()]
    n_old = old.num_rows
    source = np.arange(n_old, dtype=np.int64)
    source[up_at[updated]] = n_old + np.flatnonzero(updated)
    keep = np.ones(n_old, dtype=bool)
    removed_at = del_at[del_at >= 0]
    keep[removed_at] = False
    order = np.concatenate([source[keep], n_old + fresh])
    new = conform(stamped(upserts, task.instant), schema)
    combined = pa.concat_tables([old, new]) if n_old else new  # a new group: one chunk
    in_place = len(order) == combined.num_rows and bool(np.all(np.diff(order) > 0))
    result = combined if in_place else combined.take(pa.array(order))
    status = dict(
        partition=task.partition,
        file_id=task.file_id,
        old_file=task.old_file,
        inserts=len(fresh),
        updates=int(updated.sum()),
        deletes=len(removed_at),
        keys_added=pack_keys(new_keys.filter(pa.array(~known)) if known.any() else new_keys),
        keys_removed=pack_keys(deletes.filter(pa.array(del_at >= 0))),
    )
    if result.num_rows == 0:
        return WriteStatus(file_name=None, **status)  # type: ignore[arg-type]
    return write_group_file(fs, layout, task, result, status, sync, marked)


def _split(incoming: pa.Table) -> tuple[pa.Table, pa.Array]:
    """The upsert rows and the deleted keys of a task's rows (no copy when all upsert)."""
    is_upsert = pc.equal(incoming.column(OP), OP_UPSERT)
    if pc.all(is_upsert).as_py():  # every row (or none) upserts
        return incoming, pa.array([], pa.string())
    deletes = incoming.filter(pc.invert(is_upsert)).column(RECORD_KEY)
    return incoming.filter(is_upsert), flat(deletes)


def _stored_rows(
    fs: AbstractFileSystem, layout: TableLayout, task: RewriteTask
) -> tuple[pa.Table, pa.Schema, str]:
    """The group's current rows (none for a new group), the schema of the new file and the
    column holding the stored record keys."""
    stored, schema = schemas(tuple(task.schema), task.record_key, partition_columns(task))
    key_column = RECORD_KEY if RECORD_KEY in stored.names else task.record_key
    if task.old_file is None:
        return schema.empty_table(), schema, key_column
    # one thread: engines run several rewrites at once (Arrow's pool would oversubscribe)
    path = f"{layout.partition_dir(task.partition)}/{task.old_file}"
    old = read_parquet(fs, path, threads=False, dictionaries=schema)
    schema = dictionaries_kept(schema, old.schema)
    return conform(old, schema), schema, key_column


def partition_columns(task: RewriteTask) -> tuple[str, ...]:
    """The names of the partition columns in the task's partition path, sorted."""
    return tuple(sorted(part.split("=", 1)[0] for part in task.partition.split("/") if part))


def _old_positions(
    old: pa.Table, key_column: str, new_keys: pa.Array, deletes: pa.Array
) -> tuple[np.ndarray, np.ndarray]:
    """The old row of each upsert and of each delete (-1: not stored in this group). The
    old keys probe a hash of the (few) incoming ones: no hash of the whole group."""
    n_up = len(new_keys)
    up_at = np.full(n_up, -1, dtype=np.int64)
    del_at = np.full(len(deletes), -1, dtype=np.int64)
    if old.num_rows and n_up + len(deletes):
        touched = pa.concat_arrays([new_keys, deletes])
        old_keys = flat(pc.cast(old.column(key_column), pa.string()))
        hit = pc.fill_null(pc.index_in(old_keys, value_set=touched), -1)
        hit = hit.to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(hit >= 0)
        which = hit[rows]
        is_up = which < n_up
        up_at[which[is_up]] = rows[is_up]
        del_at[which[~is_up] - n_up] = rows[~is_up]
    return up_at, del_at


def write_group_file(
    fs: AbstractFileSystem,
    layout: TableLayout,
    task: RewriteTask,
    result: pa.Table,
    status: dict[str, Any],
    sync: bool,
    marked: bool = False,
) -> WriteStatus:
    """Write the group's new file (its marker first, unless ``marked``) and describe it."""
    name = task.file_name()
    local = is_local(fs)
    if not marked:
        mark(fs, layout, task.instant, task.partition, name)
    folder = layout.partition_dir(task.partition)
    make_folder(fs, folder)
    path = f"{folder}/{name}"
    collected: list[pq.FileMetaData] = []
    # record keys are unique: no dictionary; the statistics of _braid_record_key are never
    # read (the table's key column has them) and cost a comparison per row
    result, dictionary = choose(result, plain={task.record_key, RECORD_KEY})
    options: dict[str, Any] = dict(
        metadata_collector=collected,
        use_dictionary=dictionary,
        write_statistics=footer_statistics(result.schema, RECORD_KEY),
        **WRITE_OPTIONS,
    )
    size, crc = write_parquet(fs, path, result, options, local)
    if sync:
        make_durable(fs, path)
    return WriteStatus(
        file_name=name,
        size=size,
        crc32=crc,
        rows=result.num_rows,
        stats=column_stats(result, collected[0], [n for n, _, _ in task.schema]),
        **status,
    )


def write_parquet(
    fs: AbstractFileSystem, path: str, result: pa.Table, options: dict[str, Any], local: bool
) -> tuple[int, int]:
    """Write ``result`` to ``path`` (``options``: ``pq.write_table``'s, the codec left to
    :data:`~lakebraid.writers.write.datafile.DATA_CODEC`); its size and CRC-32. A small local
    file is built in memory and written in one call (its CRC from the buffer); a large one by
    Arrow's own file I/O, its CRC read back from the page cache; an object store's is counted
    as it uploads."""
    if local and result.num_rows <= BUFFERED_ROWS:
        data = encode_parquet(result, options, local)
        write_local(local_path(fs, path) or path, data)
        return data.size, crc32(data)
    options = dict(options, compression=DATA_CODEC[local])
    with open_file(fs, path, "wb") as handle:  # local: Arrow's own file I/O
        counted = handle if local else Crc32Writer(handle)  # type: ignore[arg-type]
        pq.write_table(result, counted, **options)
        size = int(counted.tell())  # the bytes written: no request for the file's size
    return size, file_crc32(fs, path) if local else counted.crc  # type: ignore[union-attr]


def encode_parquet(result: pa.Table, options: dict[str, Any], local: bool) -> pa.Buffer:
    """``result`` as a whole Parquet file built in memory (``options`` as
    :func:`write_parquet`'s)."""
    sink = pa.BufferOutputStream()
    pq.write_table(result, sink, **dict(options, compression=DATA_CODEC[local]))
    return sink.getvalue()


def write_local(path: str, data: pa.Buffer) -> None:
    """Create (or replace) the local file ``path`` holding ``data``: three system calls."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        view, written = memoryview(data), 0
        while written < len(view):
            written += os.write(fd, view[written:])
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=256)
def schemas(
    spec: tuple[tuple[str, str, bool], ...], record_key: str, partition_columns: tuple[str, ...]
) -> tuple[pa.Schema, pa.Schema]:
    """The stored schema of the table's data files, and the schema a rewrite builds: the
    string columns that repeat one value for many rows -- the commit time and the partition
    columns (one value per file group) -- as dictionaries: a rewrite reads, takes and writes
    their indices, and Parquet gets the dictionary as is instead of hashing a string per row.
    The file's data is the same; only its Arrow schema note says dictionary, and every reader
    conforms columns to the table schema. Cached: every task of a write asks the same."""
    stored = file_schema(list(spec), record_key)
    repeating = {COMMIT_TIME, *partition_columns}
    fields = [
        f.with_type(pa.dictionary(pa.int32(), f.type))
        if f.name in repeating and pa.types.is_string(f.type)
        else f
        for f in stored
    ]
    return stored, pa.schema(fields)


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
