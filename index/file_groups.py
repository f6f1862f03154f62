"""The data table's file groups as the metadata table lists them: the current base file of
each group, its current file slice (base and merge-on-read logs), and the groups small enough
for inserts to fill first (from ``column_stats`` row counts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from lakebraid.index.errors import DamagedListingError
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import ColumnStatsRecord
from lakebraid.timeline.layout import parse_data_file_name


class DataSlice(msgspec.Struct, frozen=True):
    """The current file slice of one data file group: its base file and, in a merge-on-read
    table, the log files a reader merges over it, oldest first (plain data: safe to send to
    Spark executors)."""

    partition: str
    file_id: str
    base: str | None
    logs: tuple[str, ...] = ()


def current_files(listing: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, str]]:
    """partition -> file id -> newest base file name, from a ``files`` partition listing
    (log files are left out: :func:`current_slices` has them)."""
    current: dict[str, dict[str, str]] = {}
    for partition, files in listing.items():
        groups = current.setdefault(partition, {})
        for name in files:
            parsed = parse_data_file_name(name)
            if parsed.kind != "base":
                continue
            known = groups.get(parsed.file_id)
            if known is None or parse_data_file_name(known).instant < parsed.instant:
                groups[parsed.file_id] = name
    return current


def checked_files(reader: MetadataReader) -> dict[str, dict[str, int]]:
    """``reader``'s ``files`` listing (partition -> file name -> size), checked by
    :func:`check_one_base`: what reads, writes and compactions plan from."""
    listing = reader.files()
    check_one_base(listing, reader.layout.root)
    return listing


def check_one_base(listing: Mapping[str, Mapping[str, int]], table: str | None = None) -> None:
    """Raise :class:`DamagedListingError` when a partition of ``listing`` names two base files
    of one file group. Every commit that writes a new base of a group also removes the old one
    from the listing, in the same metadata log, so a visible listing never holds two; it does
    when the completion of the commit that removed one was lost (the ``.braid/global``
    completion file deleted: its log is no longer visible, but later commits that built on it
    are), or one of its metadata logs was. A read would return both versions of every row of
    the group, a write would plan from a wrong table: neither is allowed. One pass over the
    names of partitions that list more than one file (a file id ends at its first ``_``)."""
    for partition, files in listing.items():
        if len(files) < 2:
            continue
        ids = [name.partition("_")[0] for name in files if name.endswith(".parquet")]
        if len(set(ids)) == len(ids):
            continue
        seen: dict[str, str] = {}
        for name in sorted(n for n in files if n.endswith(".parquet")):
            fid = parse_data_file_name(name).file_id
            if fid in seen:
                raise DamagedListingError(
                    f"the metadata table lists two base files of file group {fid} in "
                    f"partition {partition!r}: {seen[fid]} and {name}. A completed commit "
                    "removes the old base when it writes a new one, so a completion file under "
                    ".braid/global (or a metadata log) that a later commit built on is missing. "
                    "Nothing was read or written; restore the missing file from a backup "
                    "(`lakebraid timeline` shows the instants left pending, `validate()` the "
                    "damage), or restore the table to a savepoint",
                    table=table,
                )
            seen[fid] = name


def current_slices(listing: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, DataSlice]]:
    """partition -> file id -> its current :class:`DataSlice`, from a ``files`` partition
    listing. Every log file listed belongs to the slice: a compaction removes from the listing
    the logs it folded (and the base it replaced), so a log it did not fold stays, even one of
    an instant older than the new base. Logs are in instant order, which is their completion
    order: two writes that append to one group concurrently conflict (one is undone)."""
    slices: dict[str, dict[str, DataSlice]] = {}
    for partition, groups in current_files(listing).items():
        slices[partition] = {fid: DataSlice(partition, fid, name) for fid, name in groups.items()}
    for partition, files in listing.items():
        logs: dict[str, list[tuple[str, str]]] = {}
        for name in files:
            parsed = parse_data_file_name(name)
            if parsed.kind == "log":
                logs.setdefault(parsed.file_id, []).append((parsed.instant, name))
        groups = slices.setdefault(partition, {})
        for fid, found in logs.items():
            base = groups[fid].base if fid in groups else None
            names = tuple(name for _, name in sorted(found))
            groups[fid] = DataSlice(partition, fid, base, names)
    return slices


def small_groups(rows: Mapping[tuple[str, str], int], target: int) -> dict[str, dict[str, int]]:
    """partition -> file id -> rows, for the file groups of ``rows`` (:func:`group_rows`)
    under ``target`` rows (the small-file limit)."""
    small: dict[str, dict[str, int]] = {}
    for (partition, fid), count in rows.items():
        if count < target:
            small.setdefault(partition, {})[fid] = count
    return small


def group_rows(
    stats: Sequence[ColumnStatsRecord], listing: Mapping[str, Mapping[str, str]]
) -> dict[tuple[str, str], int]:
    """(partition, file id) -> rows of the group's current base file, from statistics
    records of one column (their value counts); files no longer current are left out."""
    current = {(p, name): fid for p, groups in listing.items() for fid, name in groups.items()}
    rows: dict[tuple[str, str], int] = {}
    for s in stats:
        fid = current.get((s.partition, s.file))
        if fid is not None:
            rows[(s.partition, fid)] = s.value_count
    return rows
