"""The validator: rebuild what the metadata table should say from storage and the global
timeline, and report every difference (the metadata table must always describe storage).

Rebuild: every data file under the table's partition folders whose instant is a visible
commit is a version of its file group; a group's current file is its newest visible version,
unless a later visible commit emptied the group (its write status names no new file). In a
merge-on-read table every visible log is also current, unless a visible compaction folded it
(its write status lists it in ``old_logs``). From
the current files: the listing (name, size), the column statistics (recomputed from the
rows) of the recorded columns (``index.file_stats.recorded_columns``: the first ones and the
built ones; statistics the metadata table holds of other columns, as a running build or a
drop leaves them, must be right but may be missing) and each key's location (partition, file
id). The instant a key was inserted is not derivable from files, so locations are compared on
partition and file id. The entries of every visible secondary index are compared with those of
the current files.

Integrity: each current file's CRC-32 is compared with the one its commit's write status
recorded (statuses written before ``crc32`` existed have none: not checked). A damaged or
unreadable file, or an unreadable metadata table, is one problem among the others: every
problem is listed, the validator never stops at the first. Keys the index places in a file
that cannot be read are not reported again. The files older read points still need (a
retained or savepointed point's) are checked by name and size (``validate_retained``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakebraid.index.datalog import data_rows
from lakebraid.index.file_groups import current_slices
from lakebraid.index.file_stats import recorded_columns, rows_stats, same_stats
from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.scope import in_partition, is_scoped
from lakebraid.index.secondary import all_entries, file_entries
from lakebraid.metadata.checksum import crc32
from lakebraid.metadata.commits import WriteStatus, read_commit, schema_as_of
from lakebraid.metadata.errors import MissingMetadataFileError, StorageReadError
from lakebraid.metadata.files import whole_file
from lakebraid.metadata.integrity import guarded
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline import progress
from lakebraid.timeline.errors import LakebraidError
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import TimelineKind, data_file_name_of, parse_data_file_name
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.errors import CorruptDataFileError
from lakebraid.writers.services import commit_points as points
from lakebraid.writers.services.validate_index import compare_index, current_keys
from lakebraid.writers.services.validate_retained import lost_retained_files, still_needed
from lakebraid.writers.write.datafile import (
    data_schema,
    parquet_in,
    spec_of,
    virtual_key,
)
from lakebraid.writers.write.slices import ReadUnit, read_unit

Listing = dict[str, dict[str, int]]
Checksums = dict[tuple[str, str], int]  # (partition, file name) -> CRC-32 its commit recorded


Found = list[tuple[str, str, int]]  # (partition path, file name, size) in storage


def found_files(table: TableTimelines) -> Found:
    """Every file of a data file extension under the table's root, ``.braid/`` left out."""
    fs, root, found = table.fs, table.layout.root, []
    for path, info in fs.find(root, detail=True).items():
        relative = path[len(root) :].lstrip("/")
        if relative.startswith(".braid/") or not relative.endswith((".parquet", ".log")):
            continue
        partition, _, name = relative.rpartition("/")
        found.append((partition, name, int(info["size"])))
    return found


def foreign_files(found: Found) -> list[str]:
    """Files of data file extensions in the table's folders that are not named as lakebraid
    data files (a copied Spark part file, another table's files): no part of the table."""
    return [f"{p}/{n}".lstrip("/") for p, n, _ in found if data_file_name_of(n) is None]


def _statuses(
    table: TableTimelines, visible: Sequence[Instant], order: dict[str, int]
) -> Iterator[tuple[int, WriteStatus]]:
    """(rank of the commit, write status) of every visible commit."""
    for inst in visible:
        if inst.action is not Action.COMMIT:
            continue
        body = read_commit(table, inst)
        for status in body.statuses:
            yield order[inst.time], status


def rebuild(table: TableTimelines, found: Found | None = None) -> tuple[Listing, Checksums]:
    """The current files from storage (``found``: the files of :func:`found_files`, listed
    now when not given), and the checksums their commits recorded."""
    visibility = table.visibility()
    order = {i.time: n for n, i in enumerate(visibility.visible)}
    newest: dict[str, tuple[int, str, str, int]] = {}
    logs: list[tuple[str, str, int]] = []
    for partition, name, size in found_files(table) if found is None else found:
        parsed = data_file_name_of(name)  # None: a foreign file (:func:`foreign_files`)
        rank = None if parsed is None else order.get(parsed.instant)
        if parsed is None or rank is None:
            continue
        if parsed.kind == "log":  # merge-on-read: every visible log is in its slice
            logs.append((partition, name, size))
            continue
        known = newest.get(parsed.file_id)
        if known is None or rank > known[0]:
            newest[parsed.file_id] = (rank, partition, name, size)
    emptied: dict[str, int] = {}  # file id -> rank of the commit that emptied the group
    checksums: Checksums = {}
    folded: set[tuple[str, str]] = set()  # logs a visible compaction folded
    for rank, status in _statuses(table, visibility.visible, order):
        folded.update((status.partition, name) for name in status.old_logs)
        if status.file_name is None:
            emptied[status.file_id] = rank
        elif status.crc32 is not None:
            checksums[(status.partition, status.file_name)] = status.crc32
    listing: Listing = {}
    for file_id, (rank, partition, name, size) in newest.items():
        if emptied.get(file_id, -1) > rank:
            continue
        listing.setdefault(partition, {})[name] = size
    for partition, name, size in logs:
        if (partition, name) not in folded:
            listing.setdefault(partition, {})[name] = size
    return listing, checksums


def validate(table: TableTimelines) -> list[str]:
    """Every difference between the metadata table (now) and a rebuild from storage, and
    every damaged or unreadable file. One snapshot of the timelines, loaded before storage is
    listed, serves every part: a commit that completes meanwhile is not visible in it, and
    its files, listed or not, are no part of the rebuild (writers may run alongside)."""
    with table.store.load_scope():
        for kind in TimelineKind:
            table.timeline(kind)
        damaged = points.damaged_bodies(table)
        if damaged:  # the rebuild reads every commit's body
            return damaged
        validator = _Validator(table)
        problems = validator.run()
    if validator.retained:  # fresh timelines: a clean since may have released them
        needed = still_needed(table)
        problems += [p for f, p in validator.retained.items() if f in needed]
    return problems


class _Validator:
    def __init__(self, table: TableTimelines):
        self.table = table
        self.problems: list[str] = []
        self.found = found_files(table)
        self.expected, self.checksums = rebuild(table, self.found)
        self.reader = MetadataTable(table).reader()
        self.schema = schema_as_of(table)
        self.stats: dict[tuple[str, str, str], tuple[object, ...]] | None = None  # unread
        self.held: dict[tuple[str, str], list[str]] = {}  # (partition, file) -> stats columns
        # the current files' keys and their groups (partition, file id): validate_index
        self.current, self.owners, _ = current_keys({})
        self.damaged: set[tuple[str, str]] = set()  # (partition, file id) of unreadable files
        self.retained: dict[tuple[str, str], str] = {}  # file older points need -> problem
        self.lost: set[str] = set()  # "partition/name" of the lost metadata files reported

    def attempt(self, what: str, work: Callable[[], None]) -> None:
        """Run one part of the validation; a lakebraid error is a problem, then go on (a lost
        metadata file that every part meets is reported by the first)."""
        try:
            work()
        except StorageReadError:  # the store failed, not the table: no finding
            raise
        except LakebraidError as exc:
            if isinstance(exc, MissingMetadataFileError):
                lost = "/".join(exc.filename.rsplit("/", 2)[-2:])
                if lost in self.lost:
                    return
                self.lost.add(lost)
            self.problems.append(f"{what}: {exc}")

    def run(self) -> list[str]:
        self.attempt("metadata table", self.compare_listing)
        self.attempt("column_stats", self.load_stats)
        seen: set[tuple[str, str, str]] = set()
        total = sum(len(files) for files in self.expected.values())
        groups: dict[tuple[str, str], pa.Array] = {}  # (partition, file id) -> its keys
        with progress.task("validate data files", total=total) as bar:
            for partition, files in sorted(self.expected.items()):
                for name in sorted(files):
                    self._check_one(partition, name, seen, groups)
                    bar.advance()
        self._merge_slices(groups)
        readable = {g: keys for g, keys in groups.items() if g not in self.damaged}
        # a damaged log: the group's keys are unknown (reported once above)
        self.current, self.owners, repeated = current_keys(readable)
        self.problems += repeated
        for extra in sorted(set(self.stats or {}) - seen):
            if (extra[0], parse_data_file_name(extra[1]).file_id) not in self.damaged:
                self.problems.append(
                    f"column_stats: {extra[0]}/{extra[1]} {extra[2]} has no visible file"
                )
        self.attempt("record_index", self.compare_index)
        lost = points.lost_metadata_logs(self.table, self.lost)
        self.problems += points.lost_commit_points(self.table) + lost
        self.attempt("secondary_index", self.compare_secondary)
        self.attempt("retained file slices", self.check_retained)  # see validate()
        for path in foreign_files(self.found)[:20]:
            self.problems.append(
                f"{path}: not a lakebraid data file name, so no part of the table (never read, "
                "never cleaned): move it out of the table's folder"
            )
        return self.problems

    def _check_one(
        self,
        partition: str,
        name: str,
        seen: set[tuple[str, str, str]],
        groups: dict[tuple[str, str], pa.Array],
    ) -> None:
        """Read one data file: a base's keys into its group's, the columns of its (or a log's)
        statistics seen."""
        parsed = parse_data_file_name(name)
        try:
            if parsed.kind == "log":
                keys, columns = None, self.check_log(partition, name)
            else:
                keys, columns = self.check_file(partition, name)
        except StorageReadError:
            raise
        except LakebraidError as exc:
            self.problems.append(f"data file: {exc}")
            self.damaged.add((partition, parsed.file_id))
            return
        seen.update((partition, name, column) for column in columns)
        if keys is not None:
            groups[(partition, parsed.file_id)] = keys

    def _merge_slices(self, groups: dict[tuple[str, str], pa.Array]) -> None:
        """The keys of every merge-on-read slice with logs: its base and logs merged."""
        slices = current_slices(self.expected)
        spec = spec_of(self.schema)
        derive = virtual_key(spec, self.table.config.record_key)
        schema = data_schema(spec)
        for partition, pieces in sorted(slices.items()):
            for file_id, piece in sorted(pieces.items()):
                if not piece.logs or (partition, file_id) in self.damaged:
                    continue
                unit = ReadUnit.of(self.table.layout, piece)
                try:  # a slice whose logs are not all listed (read_unit's check_complete)
                    rows = read_unit(self.table.fs, unit, schema, derive, None)
                except LakebraidError as exc:
                    self.problems.append(f"data files: {exc}")
                    self.damaged.add((partition, file_id))
                    continue
                scope = partition if is_scoped(self.table.config) else None
                keys = in_partition(pc.cast(rows.column(RECORD_KEY), pa.string()), scope)
                groups[(partition, file_id)] = keys

    def check_log(self, partition: str, name: str) -> list[str]:
        """Check one merge-on-read log (checksum, every block, the statistics of its data
        rows); returns the columns it has statistics for."""
        path = self.table.layout.data_file(partition, name)
        rows = data_rows(self.checked_bytes(partition, name, path), path, thorough=True)
        return self.compare_stats(partition, name, rows, None)

    def compare_secondary(self) -> None:
        """The entries of every visible secondary index against those of the current files."""
        columns = sorted(self.reader.point.secondary)
        if not columns:
            return
        table, want = self.table, set()
        for partition, files in sorted(self.expected.items()):
            for name in sorted(files):
                parsed = parse_data_file_name(name)
                if parsed.kind == "log" or (partition, parsed.file_id) in self.damaged:
                    continue  # merge-on-read tables keep no secondary index
                path = table.layout.data_file(partition, name)
                scope = partition if is_scoped(table.config) else None
                key = table.config.record_key
                found = file_entries(table.fs, path, columns, key, scope)
                for entries in found.values():
                    want.update(entries.to_pylist())
        have = set(all_entries(self.reader, columns).to_pylist())
        for entry in sorted(want - have)[:20]:
            self.problems.append(f"secondary_index: {_entry_text(entry)} is missing")
        for entry in sorted(have - want)[:20]:
            self.problems.append(f"secondary_index: {_entry_text(entry)} is in no current file")

    @functools.cached_property
    def listed(self) -> Listing:
        """The metadata table's listing (read once; a failed read is tried again)."""
        return self.reader.files()

    def check_retained(self) -> None:
        current = {(p, name) for p, files in self.listed.items() for name in files}
        self.retained = lost_retained_files(self.table, self.found, current)

    def compare_listing(self) -> None:
        actual = self.listed
        for partition in sorted(set(self.expected) | set(actual)):
            want, have = self.expected.get(partition, {}), actual.get(partition, {})
            for name in sorted(set(want) | set(have)):
                if want.get(name) != have.get(name):
                    self.problems.append(
                        f"files: {partition}/{name}: storage says size {want.get(name)}, "
                        f"the metadata table says {have.get(name)}"
                    )

    def load_stats(self) -> None:
        self.stats = {
            (s.partition, s.file, s.column): (s.min_value, s.max_value, s.null_count, s.value_count)
            for s in self.reader.column_stats()
        }
        for partition, file, column in self.stats:
            self.held.setdefault((partition, file), []).append(column)

    def checked_bytes(self, partition: str, name: str, path: str) -> pa.Buffer:
        """The whole data file (read once: its checksum, then its rows, come from these
        bytes), its CRC-32 compared with the one its commit recorded."""
        with guarded(path, CorruptDataFileError):
            data = whole_file(self.table.fs, path)
        recorded = self.checksums.get((partition, name))
        if recorded is None:
            return data
        crc = crc32(data)
        if crc != recorded:
            self.problems.append(
                f"checksum: {partition}/{name}: the file's CRC-32 is {crc:08x}, its commit "
                f"recorded {recorded:08x}: the file is damaged (restore it from a backup, or "
                f"roll back the commit that wrote it)"
            )
        return data

    def check_file(self, partition: str, name: str) -> tuple[pa.Array, list[str]]:
        """Check one current data file (checksum, column statistics); returns its record
        keys and the columns it has statistics for."""
        path = self.table.layout.data_file(partition, name)
        rows, meta = parquet_in(self.checked_bytes(partition, name, path), path)
        with guarded(path, CorruptDataFileError):  # the footer's text is not checksummed
            columns = self.compare_stats(partition, name, rows, meta)
        spec = spec_of(self.schema)
        derive = virtual_key(spec, self.table.config.record_key)
        keys = rows.column(RECORD_KEY) if derive is None else rows.column(derive)
        scope = partition if is_scoped(self.table.config) else None
        keys = in_partition(pc.cast(keys, pa.string()), scope)
        return keys, columns  # each once: validate_index reports a key met twice

    def compare_stats(
        self, partition: str, name: str, rows: pa.Table | None, meta: pq.FileMetaData | None
    ) -> list[str]:
        """The file's statistics, recomputed from ``rows``, against the metadata table's;
        returns the columns compared. ``rows`` None: a log of deletes only, whose statistics
        say it holds no row (writers before those recorded none: a missing record is right)."""
        names = [f.name for f in self.schema]
        recorded = recorded_columns(names, self.table.options, self.reader.point)
        held = self.held.get((partition, name), [])  # also of columns no longer recorded
        columns = []
        for stat in rows_stats(rows, meta, list(dict.fromkeys([*recorded, *held]))):
            columns.append(stat.column)
            if self.stats is None:
                continue  # the metadata table's statistics could not be read (a problem)
            got = self.stats.get((partition, name, stat.column))
            want = (stat.min_value, stat.max_value, stat.null_count, stat.value_count)
            if not same_stats(got, want) and not (rows is None and got is None):
                self.problems.append(
                    f"column_stats: {partition}/{name} {stat.column}: "
                    f"file says {want}, the metadata table says {got}"
                )
        return columns

    def compare_index(self) -> None:
        """The record index against the current files' keys (``validate_index``)."""
        found = compare_index(self.reader, self.current, self.owners, self.damaged)
        self.problems += found


def _entry_text(entry: str) -> str:
    column, value, key = entry.split("\x00", 2)
    return f"column {column!r} value {value!r} key {key!r}"
