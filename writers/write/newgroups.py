"""New file groups of few rows, written as one batch.

A write across many partitions (5,000 partitions of a few rows each) makes one new file group
per partition. :func:`writers.write.filegroup.rewrite_file_group` would spend about 2 ms of
Python on each (schema, conform, commit time, key sort, encoding choice, statistics, key
packing) beside a 0.2 ms Parquet write. :func:`write_new_groups` does that work once over the
rows of all the groups: one take, one filter, one conform, one sort by (group, record key),
one hash aggregation per column for the statistics; each file is then a zero-copy slice
written by pyarrow on a few threads (:data:`WRITE_THREADS`).

The files and statuses are those ``rewrite_file_group`` makes for the same task and rows (the
same rows in the same order, schema note, encodings, statistics, keys, size and CRC-32:
``tests/writers/write/test_newgroups.py`` compares them; a dictionary column holding several
values in one file, which no write makes, may list them in another order), and the same rules
hold: a file's marker (unless the caller's batch marker names it) exists before the file, and a
file is durable (unless the caller makes it so) before its status is returned. A group
qualifies (:func:`qualifies`) when it is new (no old file) and its rows are at most
:data:`SMALL_GROUP_ROWS`, below which ``writers.write.encoding.choose`` keeps Arrow's defaults
for every plain column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.index.file_stats import GroupBounds, footer_statistics
from lakebraid.index.keys import RECORD_KEY
from lakebraid.metadata.arrow_records import bool_array, flat
from lakebraid.metadata.checksum import crc32
from lakebraid.metadata.commits import WriteStatus, pack_keys
from lakebraid.metadata.files import local_path
from lakebraid.metadata.integrity import WRITE_OPTIONS
from lakebraid.timeline.durable import filesystem, is_local, make_durable, make_folder
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.write.creator import Creator
from lakebraid.writers.write.datafile import conform, stamped
from lakebraid.writers.write.encoding import SMALL_ROWS, choose
from lakebraid.writers.write.filegroup import (
    OP,
    OP_UPSERT,
    RewriteTask,
    encode_parquet,
    partition_columns,
    schemas,
    write_parquet,
)
from lakebraid.writers.write.marking import mark

SMALL_GROUP_ROWS = 8_192  # rows of a new group written in a batch
# threads writing the files: two (5,000 one-file partitions, alternated: 2 threads 3.1-3.7 s,
# 4 threads 3.4-4.3 s, 8 threads 4.0-5.3 s: more contend for the GIL more than they overlap
# the disk), four when each file is also fsynced on its own (a wait on the disk, no GIL)
WRITE_THREADS, SYNC_WRITE_THREADS = 2, 4
# local files of groups this small (mean rows), none fsynced on its own, are encoded on the
# calling thread and created by a writers.write.creator.Creator on I/O threads: each file's
# encoding is mostly Python, and two encoding threads wait for each other's GIL (a write of
# 5,000 one-file partitions of 4 rows on tmpfs: 1.55 s on one thread against 2.55 on two;
# groups of 500 rows 1.26 against 1.55, of 2,000 rows 1.69 against 1.82, of 8,000 rows 2.8
# against 2.6)
ONE_THREAD_ROWS = 4_096


def qualifies(task: object, rows: int) -> bool:
    """Whether a task with ``rows`` incoming rows can be written by :func:`write_new_groups`."""
    return isinstance(task, RewriteTask) and task.old_file is None and rows <= SMALL_GROUP_ROWS


def write_new_groups(
    tasks: Sequence[RewriteTask],
    rows: pa.Table,
    positions: Sequence[np.ndarray],
    *,
    sync: bool = True,
    marked: bool = False,
    done: Callable[[], object] | None = None,
) -> list[WriteStatus]:
    """The statuses of new groups ``tasks`` (each :func:`qualifies`), task ``i`` given the
    rows of ``rows`` at ``positions[i]``, in the order of ``tasks``; see the module doc.
    ``sync=False``: the caller makes the files durable; ``marked``: its batch marker names
    them; ``done``: called after each file."""
    if not tasks:
        return []
    _check_one_write(tasks)
    batch = _Batch(tasks, rows, positions)
    fs, root = filesystem(tasks[0].root, tasks[0].storage)
    target = _Target(fs, TableLayout(root), sync, marked)

    def one(i: int) -> WriteStatus:
        status = _write_one(target, batch, i)
        if done is not None:
            done()
        return status

    threads = _threads(is_local(fs), sync, sum(batch.rows) / len(tasks))
    if threads == 1:
        return _encoded_here(target, batch, done)
    with ThreadPoolExecutor(min(threads, len(tasks))) as pool:
        return list(pool.map(one, range(len(tasks))))


def _threads(local: bool, sync: bool, mean_rows: float) -> int:
    """Threads writing a batch's files (see :data:`ONE_THREAD_ROWS`); 1: encoded on the
    calling thread, created by a :class:`~writers.write.creator.Creator`."""
    if sync:
        return SYNC_WRITE_THREADS
    return 1 if local and mean_rows < ONE_THREAD_ROWS else WRITE_THREADS


def _encoded_here(
    target: _Target, batch: _Batch, done: Callable[[], object] | None
) -> list[WriteStatus]:
    """The statuses of a batch of small local groups, unsynced: each file marked (unless
    batch-marked) and encoded on this thread, its folder and file made by a ``Creator``."""
    filled = [task for task, rows in zip(batch.tasks, batch.rows, strict=True) if rows]
    folders = [target.layout.partition_dir(task.partition) for task in filled]
    with Creator(target.fs, folders, done) as creator:
        statuses = [_write_one(target, batch, i, creator) for i in range(len(batch.tasks))]
        creator.finish()
    return statuses


class _Target(NamedTuple):
    fs: AbstractFileSystem
    layout: TableLayout
    sync: bool
    marked: bool


def _write_one(
    target: _Target, batch: _Batch, i: int, creator: Creator | None = None
) -> WriteStatus:
    """Group ``i``'s file (its marker first unless batch-marked, durable if ``sync``) and
    status; an empty group writes nothing. ``creator``: the file is encoded here and handed
    to it, which makes its folder and creates it (local, unsynced)."""
    fs, layout = target.fs, target.layout
    task = batch.tasks[i]
    if not batch.rows[i]:
        return WriteStatus(file_name=None, **batch.status(i))
    name = task.file_name()
    if not target.marked:
        mark(fs, layout, task.instant, task.partition, name)
    folder = layout.partition_dir(task.partition)
    path = f"{folder}/{name}"
    piece, options, collected = batch.file(i)
    if creator is not None:
        data = encode_parquet(piece, options, local=True)
        creator.create(folder, local_path(fs, path) or path, data)
        size, crc = data.size, crc32(data)
    else:
        make_folder(fs, folder)
        size, crc = write_parquet(fs, path, piece, options, is_local(fs))
        if target.sync:
            make_durable(fs, path)
    stats = batch.bounds.stats(i, collected[0])
    return WriteStatus(
        file_name=name, size=size, crc32=crc, rows=batch.rows[i], stats=stats, **batch.status(i)
    )


def _check_one_write(tasks: Sequence[RewriteTask]) -> None:
    first = tasks[0]
    shared = (first.root, first.instant, first.record_key, first.schema, first.precombine)
    for task in tasks:
        if not qualifies(task, 0):
            raise ValueError(f"file group {task.file_id} is not new: it cannot be batched")
        if (task.root, task.instant, task.record_key, task.schema, task.precombine) != shared:
            raise ValueError("batched file groups must belong to one write of one table")


class _Batch:
    """The rows of every group of the batch, filtered, stamped, conformed and sorted by
    (group, key) once; :meth:`file` slices one group's rows out of them."""

    def __init__(self, tasks: Sequence[RewriteTask], rows: pa.Table, positions: Sequence[Any]):
        first = tasks[0]
        self.tasks = tasks
        count = len(tasks)
        taken = rows.take(pa.array(np.concatenate(positions).astype(np.int64, copy=False)))
        group = np.repeat(np.arange(count, dtype=np.int32), [len(p) for p in positions])
        upsert = pc.equal(taken.column(OP), OP_UPSERT).to_numpy(zero_copy_only=False)
        if not upsert.all():  # a delete of a key no new group holds removes nothing
            taken, group = taken.filter(bool_array(upsert)), group[upsert]
        keys = flat(taken.column(RECORD_KEY))
        self.rows: list[int] = np.bincount(group, minlength=count).tolist()
        self.starts: list[int] = np.concatenate([[0], np.cumsum(self.rows)]).tolist()
        self.keys = keys  # each group's keys in the order they came (copied out to be packed)
        by_group = pa.table({"g": pa.array(group), "k": keys})
        order = pc.sort_indices(by_group, sort_keys=[("g", "ascending"), ("k", "ascending")])
        _, self.schema = schemas(tuple(first.schema), first.record_key, partition_columns(first))
        new = conform(stamped(taken, first.instant), self.schema).take(order)
        self.table = new.combine_chunks()
        stats = [name for name, _, _ in first.schema]
        self.bounds = GroupBounds(self.table, group[order.to_numpy()], count, stats)
        self.plain = {first.record_key, RECORD_KEY}
        self.dictionary = [n for n in self.schema.names if n not in self.plain]
        self.statistics = footer_statistics(self.table.schema, RECORD_KEY)  # unless chosen
        self._single_values()

    def status(self, i: int) -> dict[str, Any]:
        """The fields of group ``i``'s status that do not depend on its file."""
        task, n = self.tasks[i], self.rows[i]
        return dict(
            partition=task.partition,
            file_id=task.file_id,
            old_file=None,
            inserts=n,
            updates=0,
            deletes=0,
            keys_added=pack_keys(pa.concat_arrays([self.keys.slice(self.starts[i], n)])),
            keys_removed=b"",
        )

    def file(self, i: int) -> tuple[pa.Table, dict[str, Any], list[pq.FileMetaData]]:
        """Group ``i``'s rows as its file holds them, the Parquet options to write them, and
        the list the writer leaves the file's footer in."""
        piece = self.table.slice(self.starts[i], self.rows[i])
        values = self.values[i]
        if values is not None:  # each dictionary column cut to its one value
            columns = list(piece.columns)
            zeros = self.zeros.slice(0, self.rows[i])
            for at, value in zip(self.encoded, values, strict=True):
                whole = self.dictionaries[at]
                columns[at] = pa.DictionaryArray.from_arrays(zeros, whole.slice(value, 1))
            piece, dictionary = pa.Table.from_arrays(columns, schema=piece.schema), self.dictionary
        statistics = self.statistics
        # a dictionary column of several values (or nulls) in this file: the full rule; a
        # large file: its plain columns decide as a file of its own (their types may change)
        if values is None or piece.num_rows >= SMALL_ROWS:
            piece, dictionary = choose(piece, plain=self.plain)
            statistics = footer_statistics(piece.schema, RECORD_KEY)
        collected: list[pq.FileMetaData] = []
        options: dict[str, Any] = dict(
            metadata_collector=collected,
            use_dictionary=dictionary,
            write_statistics=statistics,
            **WRITE_OPTIONS,
        )
        return piece, options, collected

    def _single_values(self) -> None:
        """Per group, the one value of each dictionary column (``values[g]``: its index in the
        batch's dictionary per column of ``encoded``; None when a column of the group holds
        nulls or several values). A slice keeps the whole batch's dictionary; a group's own
        conform would give that one value."""
        count = len(self.rows)
        self.values: list[list[int] | None] = [None] * count
        schema = self.table.schema
        self.encoded = [i for i, f in enumerate(schema) if pa.types.is_dictionary(f.type)]
        if self.table.num_rows == 0 or any(
            schema[i].type.index_type != pa.int32() for i in self.encoded
        ):
            return  # nothing to write, or an index type this batch does not cut
        self.dictionaries = {i: self.table.column(i).chunk(0).dictionary for i in self.encoded}
        self.zeros = pa.array(np.zeros(max(self.rows), dtype=np.int32))
        starts = np.asarray(self.starts[:-1])
        filled = np.asarray(self.rows) > 0
        found = np.zeros((count, len(self.encoded)), dtype=np.int64)
        single = filled.copy()
        for c, at in enumerate(self.encoded):
            chunk = self.table.column(at).chunk(0)
            if chunk.null_count:
                single &= False  # nulls in the batch: every file takes the full rule
                continue
            indices = chunk.indices.to_numpy()
            low = np.minimum.reduceat(indices, starts[filled])  # some group has rows
            high = np.maximum.reduceat(indices, starts[filled])
            found[filled, c] = low
            single[filled] &= low == high
        rows = found.tolist()
        self.values = [rows[g] if single[g] else None for g in range(count)]
