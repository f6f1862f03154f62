"""Merged reads of the metadata table as of a read point.

The per-file-group functions (:func:`slice_table`, :func:`slice_records`) take plain values
(a file system, a folder, a :class:`metadata.slices.FileSlice`, keys) so an engine can run
them in Spark tasks; :class:`MetadataReader` is the driver-side convenience that lists the
metadata partitions once, builds slices for a :class:`metadata.slices.ReadPoint` and maps the
functions over file groups with a thread pool. Record-index lookups by key (``lookup``,
``locate``, ``locations``) live in ``lakebraid.index.lookup``, built on a reader's
:meth:`MetadataReader.group_table` and :meth:`MetadataReader.map_groups`.

Merge rule: the base file (full state of the group) then every log file of the slice, oldest
completion first; within the logs newest wins per key, ``files`` records merge cumulatively,
tombstones and delete blocks remove the key.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from lakebraid.metadata import settings
from lakebraid.metadata.arrow_records import (
    KEY,
    empty_table,
    merge_by_key,
    records_to_table,
    table_to_records,
)
from lakebraid.metadata.basefile import SIZES, base_info, read_base, remote
from lakebraid.metadata.baselookup import lookup_base
from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.hashing import file_group_id, file_groups_of
from lakebraid.metadata.indexfold import drop_keys, index_log_state
from lakebraid.metadata.keyorder import wanted_keys
from lakebraid.metadata.logblock import BlockType, LogBlock, block_records
from lakebraid.metadata.logcache import LOGS
from lakebraid.metadata.records import (
    ALL_PARTITIONS_KEY,
    RECORD_TYPES,
    ColumnStatsRecord,
    FilesRecord,
    MetadataRecord,
    Partition,
    column_stats_key,
    column_stats_prefix,
    merge_records,
)
from lakebraid.metadata.slices import (
    FileSlice,
    MetadataFile,
    ReadPoint,
    build_slice,
    group_files,
    lost_error,
    lost_logs,
    parse_name,
    recorded_size,
)
from lakebraid.timeline import config as cfg
from lakebraid.timeline.durable import list_sizes
from lakebraid.timeline.layout import TableLayout

T = TypeVar("T")
_key_of = operator.attrgetter("key")
LogState = dict[str, MetadataRecord | None]  # None: deleted by a delete block


def fold_logs(
    partition: Partition, blocks: Iterable[LogBlock], keys: frozenset[str] | None = None
) -> LogState:
    """The net effect of log blocks (in merge order), tombstones kept; ``keys``: only those."""
    state: LogState = {}
    cumulative = partition is Partition.FILES
    merge = RECORD_TYPES[partition].merge  # a block decodes to its partition's records
    for block in blocks:
        if block.header.partition != partition:  # what the merge below relies on
            raise MetadataValueError(
                f"{block.path} at offset {block.offset}: a {block.header.partition} block "
                f"among {partition} logs"
            )
        if block.block_type is BlockType.DATA:
            records = block_records(block)
            if keys is not None:
                records = [r for r in records if r.key in keys]
            if not cumulative:  # newest replaces: no per-record merge needed
                state.update(zip(map(_key_of, records), records, strict=True))
                continue
            for record in records:
                older = state.get(record.key)
                state[record.key] = merge(older, record, keep_tombstones=True)  # type: ignore[arg-type]
        elif block.block_type is BlockType.DELETE:
            gone = block.keys if keys is None else [k for k in block.keys if k in keys]
            state.update(dict.fromkeys(gone))
    return state


def _is_live(record: MetadataRecord | None) -> bool:
    """False for a delete-block entry or a tombstone (files records have none)."""
    if record is None:
        return False
    return isinstance(record, FilesRecord) or not record.deleted


def _log_blocks(fs: AbstractFileSystem, folder: str, piece: FileSlice) -> list[LogBlock]:
    return [
        block
        for name, size in piece.log_files()
        for block in LOGS.blocks(fs, f"{folder}/{name}", size)
    ]


def slice_table(
    fs: AbstractFileSystem,
    folder: str,
    partition: Partition,
    piece: FileSlice,
    keys: pa.Array | None = None,
    scan_fraction: float = 0.3,
    threads: int = 1,
    unique: bool = False,
) -> tuple[pa.Table, str]:
    """Merged rows of one file slice (``keys``: only those, unique) for the partitions whose
    records replace each other (``record_index``, ``column_stats``); also how the base was
    read ("seek", "scan" or "none")."""
    if partition is Partition.FILES:
        raise MetadataValueError("files records merge cumulatively: use slice_records")
    mode = "none"
    if keys is not None:  # sorted once here: the base lookup and the logs' match need it
        keys, unique = wanted_keys(keys, pa.string(), unique=unique), True
    if piece.base is None:
        rows = empty_table(partition)
    elif keys is None:
        rows, mode = read_base(fs, f"{folder}/{piece.base}"), "scan"
    else:
        rows, mode = lookup_base(
            fs,
            f"{folder}/{piece.base}",
            keys,
            scan_fraction=scan_fraction,
            threads=threads,
            unique=unique,
        )
    if partition is Partition.RECORD_INDEX:
        return _apply_index_logs(rows, fs, folder, piece, keys), mode
    state = fold_logs(partition, _log_blocks(fs, folder, piece))
    if not state:
        return rows, mode
    changed = pa.array(list(state), pa.string())
    rows = rows.filter(pc.invert(pc.is_in(rows.column(KEY), value_set=changed)))
    live = [r for r in state.values() if _is_live(r)]
    if keys is not None and live:
        wanted = pc.is_in(pa.array([r.key for r in live], pa.string()), value_set=keys)
        live = [r for r, keep in zip(live, wanted.to_pylist(), strict=True) if keep]
    added = records_to_table(partition, live)
    return pa.concat_tables([rows.select(added.schema.names).cast(added.schema), added]), mode


def _apply_index_logs(
    rows: pa.Table,
    fs: AbstractFileSystem,
    folder: str,
    piece: FileSlice,
    keys: pa.Array | None,
) -> pa.Table:
    """Record-index base rows with the slice's log files applied, vectorised: newest wins
    per key, tombstones remove it (``keys``: sorted and unique, only those)."""
    state = index_log_state(fs, folder, piece, keys)
    if state is None:
        return rows
    if rows.num_rows:  # base rows the logs replace or delete
        rows = drop_keys(rows, state.column(KEY))
    live = state.filter(pc.invert(state.column("deleted")))
    live = live.drop_columns(["deleted", "_seq"])
    rows = rows.select(live.schema.names).cast(live.schema)
    if keys is not None:  # a lookup: callers match by key, order is not needed
        return pa.concat_tables([rows, live])
    return merge_by_key(rows, live)  # a whole slice (a fold): sorted for its new base


def slice_records(
    fs: AbstractFileSystem,
    folder: str,
    partition: Partition,
    piece: FileSlice,
    keys: frozenset[str] | None = None,
    prefixes: tuple[str, ...] | None = None,
) -> dict[str, MetadataRecord]:
    """Merged records of one file slice, as Python records keyed by key (any partition);
    ``keys``: only those, ``prefixes``: only keys starting with one of them (the others are
    neither converted nor merged)."""
    state: dict[str, MetadataRecord] = {}
    if piece.base is not None:
        base = read_base(fs, f"{folder}/{piece.base}")
        if keys is not None:
            wanted = pa.array(sorted(keys), pa.string())
            base = base.filter(pc.is_in(base.column(KEY), value_set=wanted))
        if prefixes is not None:
            base = base.filter(_starts_with_any(base.column(KEY), prefixes))
        state = {r.key: r for r in table_to_records(partition, base)}
    folded = fold_logs(partition, _log_blocks(fs, folder, piece), keys)
    if prefixes is not None:
        folded = {k: r for k, r in folded.items() if k.startswith(prefixes)}
    for key, record in folded.items():
        if not _is_live(record):
            state.pop(key, None)
            continue
        older = state.get(key)
        if older is None:  # folded records are in merged form: nothing to apply them to
            state[key] = record  # type: ignore[assignment]
            continue
        merged = merge_records(partition, older, record)  # type: ignore[arg-type]
        if merged is None:
            state.pop(key, None)
        else:
            state[key] = merged
    return state


def _starts_with_any(keys: pa.ChunkedArray, prefixes: tuple[str, ...]) -> pa.ChunkedArray:
    hit = pc.starts_with(keys, prefixes[0]) if prefixes else pa.repeat(False, len(keys))
    for prefix in prefixes[1:]:
        hit = pc.or_(hit, pc.starts_with(keys, prefix))
    return hit


class MetadataReader:
    """Reads of the metadata table of one table as of one read point (driver side)."""

    def __init__(
        self, fs: AbstractFileSystem, layout: TableLayout, point: ReadPoint, options: cfg.Options
    ):
        self.fs, self.layout, self.point, self.options = fs, layout, point, options
        self._listings: dict[Partition, dict[str, list[MetadataFile]]] = {}
        self._slices: dict[tuple[Partition, int], FileSlice] = {}  # of the listings above
        self.last_modes: dict[str, str] = {}  # file group -> how its base was read (last call)

    # ---- slices ----------------------------------------------------------------------
    def folder(self, partition: Partition) -> str:
        return self.layout.metadata_partition_dir(str(partition))

    def group_count(self, partition: Partition) -> int:
        return self.point.group_counts[str(partition)]

    def listing(self, partition: Partition) -> dict[str, list[MetadataFile]]:
        """The partition's files by file group (listed once per reader)."""
        return self._listing(partition)

    def _listing(self, partition: Partition) -> dict[str, list[MetadataFile]]:
        if partition not in self._listings:
            folder = self.folder(partition)
            names = list_sizes(self.fs, folder)
            for name, size in names:  # base files open without asking the store their size
                if size and name.endswith(".parquet"):
                    SIZES.put(f"{folder}/{name}", size)
            self._listings[partition] = group_files(names)
        return self._listings[partition]

    def slice(self, partition: Partition, index: int) -> FileSlice:
        if (partition, index) in self._slices:
            return self._slices[(partition, index)]
        group, folder = file_group_id(str(partition), index), self.folder(partition)
        files = self._listing(partition).get(group, [])
        found = build_slice(
            group,
            files,
            self.point,
            lambda name: frozenset(base_info(self.fs, f"{folder}/{name}").folded),
        )
        for name, (commit, listed) in lost_logs(found, files, self.point).items():
            recorded = recorded_size(self.point, commit, group, name)
            # a size of 0 may be a store that lists none: ask the file's own
            if listed != 0 or self.fs.size(f"{folder}/{name}") < recorded:
                raise lost_error(self.point, f"{folder}/{name}", self.layout.root, commit)
        self._slices[(partition, index)] = found
        return found

    def check_gone(self, name: str) -> None:
        """For a metadata file (``name``: its file name) a read found gone: raise the error
        of this reader's slice of its group when the slice cannot be built without it (the
        table is damaged: a read again fails again); return when the file has left the
        group's slice (a concurrent clean)."""
        parsed = parse_name(name)
        prefix, _, index = parsed.file_group.rpartition("-") if parsed else ("", "", "")
        if prefix in Partition.__members__.values() and index.isdigit():
            self.slice(Partition(prefix), int(index))

    def slices(self, partition: Partition) -> list[FileSlice]:
        return [self.slice(partition, i) for i in range(self.group_count(partition))]

    def threads(self) -> int:
        """Threads for reads of file groups: ``metadata.lookup.threads``, at most one per
        core on a local disk (threads past the cores only pay off while reads wait on a
        network: on 2 cores 2 threads looked 1,000 keys up in 10 groups 15% faster than 4)."""
        threads = self.options.get(settings.LOOKUP_THREADS)
        return threads if remote(self.fs) else min(threads, os.cpu_count() or 1)

    def map_groups(self, work: Callable[[int], T], groups: Sequence[int], most: int = 0) -> list[T]:
        """``work`` of every file-group index, on up to :meth:`threads` (or ``most``) threads."""
        threads = min(most or self.threads(), self.threads(), len(groups))
        if threads <= 1:
            return [work(i) for i in groups]
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(work, groups))

    # ---- generic reads ---------------------------------------------------------------
    def group_records(
        self,
        partition: Partition,
        index: int,
        keys: frozenset[str] | None = None,
        prefixes: tuple[str, ...] | None = None,
    ) -> dict[str, MetadataRecord]:
        piece = self.slice(partition, index)
        return slice_records(self.fs, self.folder(partition), partition, piece, keys, prefixes)

    def all_records(
        self, partition: Partition, prefixes: tuple[str, ...] | None = None
    ) -> dict[str, MetadataRecord]:
        """Every live record of a partition (``prefixes``: whose key starts with one of
        them)."""
        merged: dict[str, MetadataRecord] = {}
        for part in self.map_groups(
            lambda i: self.group_records(partition, i, prefixes=prefixes),
            range(self.group_count(partition)),
        ):
            merged.update(part)
        return dict(sorted(merged.items()))

    def group_table(
        self,
        partition: Partition,
        index: int,
        keys: pa.Array | None = None,
        threads: int = 1,
        unique: bool = False,
    ) -> pa.Table:
        piece = self.slice(partition, index)
        fraction = self.options.get(settings.LOOKUP_SCAN_FRACTION)
        folder = self.folder(partition)
        rows, mode = slice_table(self.fs, folder, partition, piece, keys, fraction, threads, unique)
        self.last_modes[piece.file_group] = mode
        return rows

    # ---- files and column stats --------------------------------------------------------
    def partitions(self) -> list[str]:
        """Data partition paths, from the all-partitions record."""
        record = self._files_record(ALL_PARTITIONS_KEY)
        return sorted(record.added) if record is not None else []

    def _files_record(self, key: str) -> FilesRecord | None:
        index = int(file_groups_of([key], self.group_count(Partition.FILES))[0])
        record = self.group_records(Partition.FILES, index, frozenset([key])).get(key)
        return record  # type: ignore[return-value]

    def files(self, partition: str | None = None) -> dict[str, dict[str, int]]:
        """``{partition path: {file name: size}}`` of one partition or of all."""
        if partition is not None:
            record = self._files_record(partition)
            return {partition: dict(record.added)} if record is not None else {}
        records = self.all_records(Partition.FILES)
        return {
            key: dict(r.added)  # type: ignore[union-attr]
            for key, r in records.items()
            if key != ALL_PARTITIONS_KEY and r.added  # type: ignore[union-attr]
        }

    def column_stats(
        self,
        column: str | None = None,
        columns: Iterable[str] | None = None,
        partitions: Iterable[str] | None = None,
    ) -> list[ColumnStatsRecord]:
        """The statistics records of every data file: of all columns, of ``column``, or of
        ``columns`` (only their records are converted); ``partitions``: of the files of these
        data partitions only (their keys' prefixes, so the others are not converted either)."""
        wanted = {column} if column is not None else None if columns is None else set(columns)
        within = None if partitions is None else set(partitions)
        prefixes = None  # a key is column NUL partition NUL file
        if wanted is not None and within is None:
            prefixes = tuple(column_stats_prefix(c) for c in wanted)
        elif wanted is not None and within is not None:
            prefixes = tuple(column_stats_key(c, p, "") for c in wanted for p in within)
        records = self.all_records(Partition.COLUMN_STATS, prefixes).values()
        return [
            r
            for r in records
            if isinstance(r, ColumnStatsRecord)  # keys name columns
            and (within is None or r.partition in within)
        ]
