"""The metadata writer: the changes of one data-table instant -> log blocks in file groups.

The write client calls :func:`write_changes` between the data table's inflight and completed
states of instant ``t``; each touched file group gets one log file ``<group>_<t>.log`` holding
one data block with that group's records, sorted by key. Nothing here is visible until the
global timeline completes ``t``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from lakebraid.metadata.arrow_records import SCHEMAS, flat, index_table
from lakebraid.metadata.basewrite import write_base
from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.gather import fixed_columns, taken_by_key
from lakebraid.metadata.hashing import GroupRows, file_group_id, file_groups_of, stable_hashes
from lakebraid.metadata.keyorder import ordering_words
from lakebraid.metadata.locations import COLUMNS as LOCATION_COLUMNS
from lakebraid.metadata.locations import plain_locations
from lakebraid.metadata.logblock import BlockType
from lakebraid.metadata.logcache import LOGS
from lakebraid.metadata.logwrite import append_blocks, encode_block
from lakebraid.metadata.records import (
    ALL_PARTITIONS_KEY,
    ColumnStatsRecord,
    FilesRecord,
    MetadataRecord,
    Partition,
    instant_to_int,
)
from lakebraid.timeline.durable import replace_whole, sync_new_files
from lakebraid.timeline.layout import TableLayout


@dataclass
class InstantChanges:
    """What one data-table instant changed, as the metadata table records it.

    ``index_upserts`` is an Arrow table with string (or dictionary-of-string) columns ``key``,
    ``partition`` and ``file_id`` (the location of each inserted, updated or moved key as of
    this instant); ``index_deletes`` the keys deleted. A key may not be in both."""

    files_added: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    files_deleted: Mapping[str, Sequence[str]] = field(default_factory=dict)
    partitions_deleted: Sequence[str] = ()
    column_stats: Sequence[ColumnStatsRecord] = ()
    index_upserts: pa.Table | None = None
    index_deletes: Sequence[str] | pa.Array = ()
    # the format hashes (``metadata.hashing.stable_hashes``) of ``index_upserts``' keys, row
    # for row, when the writer has them (no deletes): the index writer routes by them
    index_hashes: np.ndarray | None = None


class WrittenLog(msgspec.Struct, frozen=True):
    """One log file written for an instant (kept in the instant's body for rollback)."""

    partition: str
    file_group: str
    name: str
    size: int
    records: int


def files_records(changes: InstantChanges) -> list[FilesRecord]:
    touched = sorted(set(changes.files_added) | set(changes.files_deleted))
    records = [
        FilesRecord(
            p,
            dict(sorted(changes.files_added.get(p, {}).items())),
            sorted(changes.files_deleted.get(p, ())),
        )
        for p in touched
    ]
    if changes.files_added or changes.partitions_deleted:
        records.append(
            FilesRecord(
                ALL_PARTITIONS_KEY,
                {p: 0 for p in sorted(changes.files_added)},
                sorted(changes.partitions_deleted),
            )
        )
    return records


def index_rows(changes: InstantChanges, instant: str) -> pa.Table:
    """The record-index changes of an instant as columns (tombstones for deleted keys): with
    no deletes the upserts row for row, else in no particular order (the writer sorts each
    file group's rows)."""
    deletes = changes.index_deletes
    if isinstance(deletes, pa.ChunkedArray):
        deletes = deletes.combine_chunks()
    if not isinstance(deletes, pa.Array):
        deletes = pa.array(list(deletes), pa.string())
    upserts = changes.index_upserts
    at = instant_to_int(instant)
    n = len(deletes)
    zeros = pa.array(np.zeros(n, dtype=np.int64))
    gone = pa.table(
        {
            "key": deletes.cast(pa.string()),
            "partition": pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(n, dtype=np.int32)), pa.array([""], pa.string())
            ),
            "file_id_hi": zeros,
            "file_id_lo": zeros,
            "instant": pa.array(np.full(n, at, dtype=np.int64)),
            "deleted": pa.repeat(pa.scalar(True), n),
        }
    )
    if upserts is None or upserts.num_rows == 0:
        return gone
    if n and pc.any(pc.is_in(upserts.column("key"), value_set=deletes)).as_py():
        raise MetadataValueError(f"instant {instant}: a key is both upserted and deleted")
    live = index_table(
        upserts.column("key"),
        upserts.column("partition"),
        upserts.column("file_id"),
        instant,
        coded=not n,  # no deletes: the location columns stay codes of the statuses
    )
    live = live.append_column("deleted", pa.repeat(pa.scalar(False), live.num_rows))
    if not n:
        return live
    return pa.concat_tables([gone, live.cast(gone.schema)])  # partitions stay dictionaries


def route(
    partition: Partition, records: Sequence[MetadataRecord], n_groups: int
) -> dict[str, list[MetadataRecord]]:
    """Records by file group id, each list sorted by key; duplicate keys are refused."""
    by_group: dict[str, list[MetadataRecord]] = defaultdict(list)
    if not records:
        return by_group
    keys = [r.key for r in records]
    if len(set(keys)) != len(keys):
        raise MetadataValueError(f"{partition}: a key appears twice in one instant's changes")
    indexes = file_groups_of(keys, n_groups)
    names = {int(i): file_group_id(str(partition), int(i)) for i in set(indexes.tolist())}
    for record, index in zip(records, indexes.tolist(), strict=True):
        by_group[names[index]].append(record)
    for group in by_group.values():
        group.sort(key=lambda r: r.key)
    return by_group


# record-index entries per file group (mean) from which the groups are written on threads:
# below it each group's work is mostly Python and two threads wait for each other's GIL (an
# append of 20,000 keys in 2 groups: 4.3 ms on one thread against 5.8 on two; 200,000 keys
# in 20 groups 50 ms either way); a bulk insert of 10M keys in 10 groups takes 3.8 s against
# 4.4 on one thread
THREADED_GROUP_ROWS = 100_000


def write_changes(
    fs: AbstractFileSystem,
    layout: TableLayout,
    instant: str,
    changes: InstantChanges,
    group_counts: Mapping[str, int],
    threads: int = 1,
    index_groups: Callable[..., np.ndarray] | None = None,
    base_groups: frozenset[int] = frozenset(),
    row_group_rows: int = 16_384,
    *,
    whole: bool = False,
) -> list[WrittenLog]:
    """Write the log blocks of one instant; returns the log files written. ``index_groups``:
    the record index's routing (``ReadPoint.index_groups``; default: by hash).
    ``base_groups``: record-index groups that hold no file at all, whose entries go into a
    *commit base* (a base file named by this instant, folding just it, ``row_group_rows``
    rows per row group) instead of a log that a compaction would soon rewrite. ``whole``:
    each record-index log file is written whole, replacing one an earlier attempt of the
    same Spark task left (``writers.engine.spark.index_tasks``: a task holds every entry of
    its groups), not appended to."""
    per_partition: dict[Partition, list[MetadataRecord]] = {
        Partition.FILES: list(files_records(changes)),
        Partition.COLUMN_STATS: list(changes.column_stats),
    }
    n = group_counts[str(Partition.RECORD_INDEX)]
    router = index_groups or (lambda keys, hashes=None: file_groups_of(keys, n, hashes))
    direct = (base_groups, row_group_rows)
    written = _write_index(fs, layout, instant, changes, n, router, threads, direct, whole=whole)
    for partition, records in per_partition.items():
        groups = route(partition, records, group_counts[str(partition)])
        for group, group_records in sorted(groups.items()):
            blob = encode_block(
                BlockType.DATA,
                instant=instant,
                partition=partition,
                file_group=group,
                records=group_records,
            )
            written.append(
                _append(fs, layout, instant, partition, group, blob, len(group_records))[0]
            )
    _make_durable(fs, layout, written)
    return written


def _make_durable(fs: AbstractFileSystem, layout: TableLayout, written: list[WrittenLog]) -> None:
    """The instant's log files made durable together, before any instant names them (each
    appended unsynced): on a local disk their fsyncs and their folders' overlap
    (``timeline.durable.sync_new_files``). Commit bases are durable already; a log on an
    object store is whole once its create returns."""
    logs = [w for w in written if w.name.endswith(".log")]
    sync_new_files(fs, [f"{layout.metadata_partition_dir(w.partition)}/{w.name}" for w in logs])


def _append(
    fs: AbstractFileSystem,
    layout: TableLayout,
    instant: str,
    partition: Partition,
    group: str,
    blob: bytes,
    records: int,
) -> tuple[WrittenLog, bool]:
    """Append one encoded block to the group's log file of ``instant``; whether that created
    the file (:func:`~lakebraid.metadata.logwrite.append_blocks`)."""
    path = layout.metadata_log_file(str(partition), group, instant)
    created = append_blocks(fs, path, [blob], sync=False)  # durable later: _make_durable
    name = path.rsplit("/", 1)[-1]
    return WrittenLog(str(partition), group, name, len(blob), records), created


def _put(
    fs: AbstractFileSystem,
    layout: TableLayout,
    instant: str,
    group: str,
    blob: bytes,
    records: int,
) -> WrittenLog:
    """Write one block as a record-index group's whole log file of ``instant`` (a file of a
    pending instant that only this group's one task writes: a retried task's attempt
    replaces what a failed one left, never torn: ``timeline.durable.replace_whole``). Not
    yet durable."""
    partition = str(Partition.RECORD_INDEX)
    path = layout.metadata_log_file(partition, group, instant)
    replace_whole(fs, path, blob)
    return WrittenLog(partition, group, path.rsplit("/", 1)[-1], len(blob), records)


def _write_index(
    fs: AbstractFileSystem,
    layout: TableLayout,
    instant: str,
    changes: InstantChanges,
    n: int,
    router: Callable[..., np.ndarray],
    threads: int = 1,
    direct: tuple[frozenset[int], int] = (frozenset(), 16_384),
    *,
    whole: bool = False,
) -> list[WrittenLog]:
    """Record-index log blocks, encoded from columns (no per-record objects). Rows are split
    by file group first; each group is sorted, checked, encoded and appended on its own (on
    ``threads`` threads when the groups are large: :data:`THREADED_GROUP_ROWS`). ``whole``:
    each group's log file is written whole (:func:`_put`), not appended to."""
    partition = Partition.RECORD_INDEX
    rows = index_rows(changes, instant)
    if rows.num_rows == 0:
        return []
    rows = rows.combine_chunks()
    keys = flat(rows.column("key"))
    hashes = changes.index_hashes  # the upserts' own, in their order when nothing is deleted
    known = hashes is not None and not len(changes.index_deletes) and len(hashes) == len(keys)
    groups = router(keys, _checked(keys, hashes)) if known else router(keys)
    views = fixed_columns(rows)  # each group's keys gathered as fixed-width items
    words = ordering_words(keys, views.get("key"))  # and ordered before they are taken
    members = GroupRows(groups, n)  # each group's rows, found on its own thread

    def one(number: int) -> WrittenLog:
        part = taken_by_key(rows, "key", members.rows(number), (), words, views)  # by key
        keys = part.column("key")
        if len(keys) > 1 and pc.any(pc.equal(keys[1:], keys[:-1])).as_py():
            raise MetadataValueError(f"{partition}: a key appears twice in one instant's changes")
        group = file_group_id(str(partition), number)
        if number in direct[0]:
            return _commit_base(fs, layout, instant, group, part, direct[1])
        part = plain_locations(part, partition_too=False)  # a log block stores the integers
        blob = encode_block(
            BlockType.DATA,
            instant=instant,
            partition=partition,
            file_group=group,
            columns=part,
        )
        if whole:
            return _put(fs, layout, instant, group, blob, part.num_rows)
        log, created = _append(fs, layout, instant, partition, group, blob, part.num_rows)
        if created:  # a new file holding just this block (no request for its size)
            path = layout.metadata_log_file(str(partition), group, instant)
            LOGS.remember_index_table(path, len(blob), part)
        return log

    groups = len(members.present)
    if threads <= 1 or groups <= 1 or rows.num_rows < THREADED_GROUP_ROWS * groups:
        return [one(number) for number in members.present]
    with ThreadPoolExecutor(min(threads, groups)) as pool:
        return list(pool.map(one, members.present))


def _checked(keys: pa.Array, hashes: np.ndarray, samples: int = 64) -> np.ndarray:
    """``hashes`` (given as ``InstantChanges.index_hashes``), once a sample of them, spread
    over the keys, equals the keys' own: hashes out of step with their keys would route
    entries to groups where lookups never search."""
    at = np.unique(np.linspace(0, len(keys) - 1, min(samples, len(keys))).astype(np.int64))
    if not np.array_equal(stable_hashes(keys.take(pa.array(at))), hashes[at]):
        raise MetadataValueError("record-index hashes given do not match their keys")
    return hashes


def _commit_base(
    fs: AbstractFileSystem,
    layout: TableLayout,
    instant: str,
    group: str,
    rows: pa.Table,
    row_group_rows: int,
) -> WrittenLog:
    """A record-index group's entries as a base file of ``instant`` (the group held no file:
    its deletes, of keys no group holds, are dropped)."""
    partition = str(Partition.RECORD_INDEX)
    deleted = rows.column("deleted")
    live = rows.filter(pc.invert(deleted)) if pc.any(deleted).as_py() else rows
    schema = SCHEMAS[Partition.RECORD_INDEX]
    for name in LOCATION_COLUMNS:  # dictionaries stay so: locations encodes their codes
        at = schema.get_field_index(name)
        schema = schema.set(at, schema.field(at).with_type(live.schema.field(name).type))
    path = layout.metadata_base_file(partition, group, instant)
    size = write_base(
        fs,
        path,
        live.select(schema.names).cast(schema),
        partition=partition,
        file_group=group,
        instant=instant,
        folded=[instant],
        row_group_rows=row_group_rows,
    )
    return WrittenLog(partition, group, path.rsplit("/", 1)[-1], size, live.num_rows)
