"""The listing and statistics the client answers from the metadata table, with their
arguments checked first: a partition path that is not one of the table's partition paths, or
a column the table does not have, is refused by name. An empty answer then means "no files"
or "no statistics", never a typo.
"""

from __future__ import annotations

import posixpath

from lakebraid.metadata.commits import schema_as_of
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import ColumnStatsRecord
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.errors import InvalidPathError
from lakebraid.timeline.layout import BRAID_DIR, parse_partition_path, partition_path
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.errors import InputError, MissingDataFileError


def listed_files(
    table: TableTimelines, reader: MetadataReader, partition: str | None
) -> dict[str, dict[str, int]]:
    """``{partition path: {file name: size}}`` of ``partition`` (a path as the table writes
    it, ``field=value/...``; "" for an unpartitioned table) or of every partition."""
    if partition is not None:
        check_partition(table, partition)
    return reader.files(partition)


def check_partition(table: TableTimelines, partition: object) -> None:
    """Refuse ``partition`` unless it is a partition path of ``table`` in its written form."""
    fields = table.config.partition_fields
    example = "/".join(f"{f}=<value>" for f in fields) or '"" (the table is unpartitioned)'
    if not isinstance(partition, str):
        raise InputError(
            f"partition must be a partition path such as {example}, got {partition!r}",
            table=table.path,
        )
    try:
        canonical = partition_path(fields, parse_partition_path(partition, fields))
    except InvalidPathError:
        raise InputError(
            f"{partition!r} is not a partition path of this table: its partition paths read "
            f"{example}",
            table=table.path,
        ) from None
    if canonical != partition:
        raise InputError(
            f"partition path {partition!r} is written {canonical!r} in this table; pass that",
            table=table.path,
        )


def column_statistics(
    table: TableTimelines, metadata: MetadataTable, column: str, as_of: object
) -> list[ColumnStatsRecord]:
    """The statistics records of ``column`` in every data file as of ``as_of``."""
    point = table.read_point(as_of)
    names = [f.name for f in schema_as_of(table, point)]
    if column not in names:
        raise InputError(
            f"the table has no column {column!r} (columns: {', '.join(names)})",
            table=table.path,
        )
    return metadata.reader(point).column_stats(column)


def check_listed_present(
    table: TableTimelines, metadata: MetadataTable, as_of: object, missing: str
) -> None:
    """For a read that met ``missing`` gone: raise :class:`AsOfError` when the cleaner has
    passed ``as_of`` since, and :class:`MissingDataFileError` when the read point (read
    afresh) still lists the file and it is not on storage (the table is damaged: reading
    again would fail again), or a metadata file's error when the fresh slice of its group
    still needs it; return when the file has left the table (a concurrent clean or restore:
    the caller says read again)."""
    point = table.read_point(as_of)  # raises AsOfError once the cleaner passed it
    name = posixpath.basename(missing)
    if missing.rsplit("/", 4)[-4:-2] == [BRAID_DIR, "metadata"]:  # a metadata file
        metadata.reader(point).check_gone(name)  # raises when its slice still needs it
        return
    listed = any(name in files for files in metadata.reader(point).files().values())
    if listed and not table.fs.exists(missing):
        raise MissingDataFileError(missing, table=table.path)
