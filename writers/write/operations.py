"""The rules every write operation shares, whichever engine runs it: the duplicate-key policy
of inserts (``insert.duplicates``), how stored rows are ordered (``write.merge.mode``) and
where inserts go (target rows per file group, small groups filled first).

Operations: ``insert`` (small file groups first), ``bulk_insert`` (new file groups only),
``upsert`` (new keys inserted, existing ones updated) and ``delete``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.file_groups import group_rows, small_groups
from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.record_index import existing_rows
from lakebraid.metadata.reader import MetadataReader
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers import settings
from lakebraid.writers.errors import InputError, WriteError
from lakebraid.writers.write.route import duplicate_keys_error

INDEX_KINDS = ("secondary", "column_stats")


def check_index_kind(kind: str, path: str) -> None:
    """Refuse an index kind the client does not build, by name."""
    if kind not in INDEX_KINDS:
        raise WriteError(
            f"index kind {kind!r} is not supported (kinds: {', '.join(map(repr, INDEX_KINDS))})",
            table=path,
        )


def refuse_indexes(table: TableTimelines, kind: str) -> None:
    """A secondary index on a merge-on-read table is refused: an update appended to a log
    would need the row's former value to drop its entry, which a log append does not read.
    Column statistics are built on either table type (a log's from its data blocks)."""
    if kind == "secondary" and table.config.merge_on_read:
        raise WriteError(
            "a secondary index on a merge-on-read table is not available in this version (an "
            "update appended to a log does not read the row's former value, whose entry it "
            "would have to remove); column statistics (kind='column_stats') are",
            table=table.path,
        )


def resolve_policy(table: TableTimelines, operation: str, duplicates: str | None) -> str:
    """The duplicate-key policy of a write: ``upsert`` for upserts, else ``duplicates`` or
    the table's ``insert.duplicates``."""
    if operation == "upsert":
        return "upsert"
    if duplicates is None:
        return table.options.get(settings.INSERT_DUPLICATES)
    if duplicates not in settings.DUPLICATE_POLICIES:
        raise InputError(
            f"{operation}: duplicates={duplicates!r}; choose one of {settings.DUPLICATE_POLICIES}",
            table=table.path,
        )
    return duplicates


def apply_duplicates(
    tagged: pa.Table, operation: str, policy: str, path: str
) -> tuple[pa.Table, str]:
    """Apply the duplicate-key policy to tagged rows; returns rows and operation (an insert
    whose policy is ``upsert`` runs as an upsert)."""
    if policy == "upsert":
        return tagged, "upsert" if operation != "bulk_insert" else operation
    existing = existing_rows(tagged)
    count = pc.sum(existing).as_py() or 0
    if count and policy == "fail":
        sample = tagged.column(RECORD_KEY).filter(existing).slice(0, 10).to_pylist()
        raise duplicate_keys_error(operation, count, sample, path)
    return (tagged.filter(pc.invert(existing)) if count else tagged), operation


def ordering(table: TableTimelines) -> str | None:
    """The precombine field when stored rows are ordered by event time (``write.merge.mode``)."""
    if table.options.get(settings.MERGE_MODE) != "event_time":
        return None
    return table.config.precombine_field


class Room(NamedTuple):
    """Where a write's inserts may go (:func:`insert_room`)."""

    target: int  # rows per file group
    small: dict[str, dict[str, int]]  # partition -> file id -> rows, of the small groups
    rows: dict[tuple[str, str], int]  # (partition, file id) -> rows, of every group looked up


def insert_room(
    table: TableTimelines,
    reader: MetadataReader,
    listing: Mapping[str, Mapping[str, str]],
    operation: str,
    inserting: Collection[str] | None = None,
) -> Room:
    """Target rows per file group, the small groups inserts may fill first and the rows of
    every current group, of the partitions ``inserting`` names (those that receive new rows;
    None: not known, every partition). None are looked up for a bulk insert, nor for a write
    that inserts no row (``inserting`` empty); only the named partitions' file statistics
    are read."""
    target = table.options.get(settings.TARGET_FILE_ROWS)
    if operation == "bulk_insert" or (inserting is not None and not inserting):
        return Room(target, {}, {})
    small = min(target, table.options.get(settings.SMALL_FILE_ROWS))
    stats = reader.column_stats(table.config.record_key, partitions=inserting)
    rows = group_rows(stats, listing)
    return Room(target, small_groups(rows, small), rows)
