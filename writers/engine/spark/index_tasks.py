"""The record index of a Spark write, written by Spark tasks: the driver never receives a key.

::

    rewrite tasks (``pipeline._rewrite``)   each task's write statuses without their key
                                   lists (one row each), and the entries those lists make
                                   (``index.record_index.entries_of``) split by record-index
                                   file group in the layout of the write's read point: one
                                   row per (task, group), its entries as an
                                   :class:`EntryPart`
    repartition(groups) + mapInArrow(write)   every entry of a group in one task, which
                                   writes the group's file of the instant, a log or a commit
                                   base (``metadata.writer.write_changes``, ``whole``: written
                                   whole, so a retried task replaces what a failed attempt
                                   left, and durable before the task ends); statuses pass
                                   through
    collect                        the statuses and the files written (``WrittenLog``)

The commit takes the files as ``writers.commit.ahead.IndexByTasks``: in the same layout as
the rest of the write's metadata, conflict rule 5 against that point, rule 4 reading its keys
back from the files when another commit touched the same file groups, rule 7 refusing a
commit base beside another instant's file (a retryable conflict). A key moved between file
groups is a tombstone in one task and an upsert in another; the group's task keeps the
upsert, as the in-process commit does. Everything shipped is plain data.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from lakebraid.index.record_index import entries_of, located_entries
from lakebraid.metadata.arrow_records import flat
from lakebraid.metadata.commits import (
    WriteStatus,
    decode_status,
    encode_status,
    pack_keys,
    unpack_keys,
)
from lakebraid.metadata.hashing import GroupRows
from lakebraid.metadata.slices import ReadPoint
from lakebraid.metadata.table import MetadataTable
from lakebraid.metadata.writer import InstantChanges, WrittenLog, write_changes
from lakebraid.timeline.durable import filesystem
from lakebraid.timeline.error_wire import ships_errors
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.commit.ahead import IndexByTasks, TaskWrite
from lakebraid.writers.write.workers import settle

STATUS = "status"
GROUP = "_braid_index_group"
ENTRIES = "_braid_entries"
LOG = "_braid_log"
TASK_SCHEMA = pa.schema(
    [pa.field(STATUS, pa.binary()), pa.field(GROUP, pa.int32()), pa.field(ENTRIES, pa.binary())]
)
OUTPUT_SCHEMA = f"{STATUS} binary, {LOG} binary"


class IndexSink(msgspec.Struct, frozen=True, kw_only=True):
    """Where the tasks write a write's record-index files (plain data)."""

    root: str  # fsspec URL of the table
    storage: dict[str, Any] = {}
    point: ReadPoint  # the layout the files take
    instant: str
    scoped: bool = False  # a partition-scoped record index (``index.scope``)
    bases: list[int] = []  # groups holding no file: their entries make a commit base
    row_group_rows: int = 16_384  # of a commit base


class EntryPart(msgspec.Struct, frozen=True):
    """One task's entries of one record-index group: upserted keys (``pack_keys``) with the
    index of their location in ``places`` (int32 bytes), and keys removed."""

    keys: bytes
    owners: bytes
    places: list[tuple[str, str]]  # (partition, file id)
    gone: bytes


def sink_of(
    metadata: MetadataTable,
    root: str,
    storage: dict[str, Any],
    point: ReadPoint,
    instant: str,
    scoped: bool,
) -> IndexSink:
    """The sink of a write of ``instant`` whose index files take ``point``'s layout."""
    bases, rows = metadata.commit_bases(instant, point)
    return IndexSink(
        root=root,
        storage=storage,
        point=point,
        instant=instant,
        scoped=scoped,
        bases=sorted(bases),
        row_group_rows=rows,
    )


def task_output(statuses: Sequence[WriteStatus], sink: IndexSink) -> pa.RecordBatch:
    """A rewrite task's rows: each status without its key lists, and an :class:`EntryPart`
    per record-index group its statuses' keys fall in."""
    upserts, gone = entries_of(statuses, sink.scoped)
    bare = [msgspec.structs.replace(s, keys_added=b"", keys_removed=b"") for s in statuses]
    parts = _parts(upserts, gone, sink.point)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([encode_status(s) for s in bare] + [None] * len(parts), pa.binary()),
            pa.array([None] * len(bare) + list(parts), pa.int32()),
            pa.array([None] * len(bare) + list(parts.values()), pa.binary()),
        ],
        schema=TASK_SCHEMA,
    )


def _parts(upserts: pa.Table, gone: pa.Array, point: ReadPoint) -> dict[int, bytes]:
    """The entries split by record-index group, each group's an encoded :class:`EntryPart`."""
    n = point.group_counts["record_index"]
    keys = flat(upserts.column("key"))
    owners = flat(upserts.column("partition")).indices.to_numpy(zero_copy_only=False)
    places = list(
        zip(
            flat(upserts.column("partition")).dictionary.to_pylist(),
            flat(upserts.column("file_id")).dictionary.to_pylist(),
            strict=True,
        )
    )
    live = GroupRows(point.index_groups(keys) if len(keys) else np.empty(0, np.int64), n)
    dead = GroupRows(point.index_groups(gone) if len(gone) else np.empty(0, np.int64), n)
    out: dict[int, bytes] = {}
    for group in sorted(set(live.present) | set(dead.present)):
        at = live.rows(group)
        used, local = np.unique(owners[at], return_inverse=True)
        part = EntryPart(
            keys=pack_keys(keys.take(pa.array(at))),
            owners=local.astype(np.int32).tobytes(),
            places=[places[i] for i in used.tolist()],
            gone=pack_keys(gone.take(pa.array(dead.rows(group)))),
        )
        out[group] = msgspec.msgpack.encode(part)
    return out


@ships_errors
def _write(sink_bytes: bytes, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Pass this task's statuses through; write the files of the groups whose entries it
    holds (every entry of each: the shuffle is by group) and yield them."""
    settle()
    sink = msgspec.msgpack.decode(sink_bytes, type=IndexSink)
    statuses: list[bytes] = []
    parts: list[EntryPart] = []
    for batch in batches:
        found = batch.column(STATUS).to_pylist(), batch.column(ENTRIES).to_pylist()
        for status, entries in zip(*found, strict=True):
            if status is not None:
                statuses.append(status)
            elif entries is not None:
                parts.append(msgspec.msgpack.decode(entries, type=EntryPart))
    logs: list[bytes] = []
    if parts:
        fs, root = filesystem(sink.root, sink.storage)
        point, bases = sink.point, frozenset(sink.bases)
        written = write_changes(
            fs,
            TableLayout(root),
            sink.instant,
            _changes(parts),
            point.group_counts,
            1,
            point.index_groups,
            bases,
            sink.row_group_rows,
            whole=True,
        )
        logs = [msgspec.msgpack.encode(log) for log in written]
    if statuses or logs:
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(statuses + [None] * len(logs), pa.binary()),
                pa.array([None] * len(statuses) + logs, pa.binary()),
            ],
            [STATUS, LOG],
        )


def _changes(parts: Sequence[EntryPart]) -> InstantChanges:
    """The index changes of whole groups from their parts: the upserts with one location
    dictionary, and the keys removed that no part upserts (a key moved between groups)."""
    keys, owners, places, gone = [], [], [], []
    for part in parts:
        keys.append(unpack_keys(part.keys))
        owners.append(np.frombuffer(part.owners, np.int32) + len(places))
        places.extend(part.places)
        gone.append(unpack_keys(part.gone))
    upserts, removed = located_entries(keys, np.concatenate(owners), places, gone)
    return InstantChanges(index_upserts=upserts, index_deletes=removed)


def written(frame: DataFrame, sink: IndexSink, tasks: int) -> TaskWrite:
    """Run the rewrite's output ``frame`` (:data:`TASK_SCHEMA`) through the index tasks
    (``tasks`` of them at most); the statuses and the files, collected."""
    packed = msgspec.msgpack.encode(sink)
    groups = sink.point.group_counts["record_index"]
    out = frame.repartition(max(1, min(groups, tasks)), GROUP).mapInArrow(
        functools.partial(_write, packed), OUTPUT_SCHEMA
    )
    statuses: list[WriteStatus] = []
    logs: list[WrittenLog] = []
    for row in out.collect():
        if row[STATUS] is not None:
            statuses.append(decode_status(row[STATUS]))
        else:
            logs.append(msgspec.msgpack.decode(row[LOG], type=WrittenLog))
    return TaskWrite(statuses, IndexByTasks(sink.point, logs))
