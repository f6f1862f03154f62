"""Undo across an index build: corrected bases of the ``secondary_index`` partition.

An index build (``index.secondary_build``) folds every instant completed before its request
into full bases, like a reindex, so an undo of one of those instants writes corrected bases
for the build's layout (``index.rebase`` calls :func:`rebase_secondary`): the build's entries
of every record key the undone instants did not touch, and for the keys they touched the
entries of the data files that held them as of the build's request without those instants
(record index -> file -> its rows' values), for every column indexed at the build. The keys
touched are those the undone instants logged in the record index and every key of the files
they wrote or replaced (an update in place changes a value but writes no record-index entry).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.secondary import (
    INDEX,
    file_entries,
    file_keys,
    group_of_entries,
    groups_of_keys,
)
from lakebraid.index.undo_points import with_undone
from lakebraid.metadata import settings
from lakebraid.metadata.basefile import base_info, read_base, write_base
from lakebraid.metadata.commits import read_commit
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.slices import ReadPoint
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import TimelineKind

_RECORD_KEY = r"(?s)^[^\x00]*\x00[^\x00]*\x00(?P<k>.*)$"


def record_keys(entries: pa.Array) -> pa.Array:
    """The record key of each entry key (after its second NUL)."""
    return pc.struct_field(pc.extract_regex(entries, _RECORD_KEY), "k")


def rebase_secondary(
    metadata_table: MetadataTable,
    build: Instant,
    base: str,
    undone: frozenset[str],
    keys: pa.Array,
    mine: dict[str, str],
) -> None:
    """Write the corrected bases (time ``base``) of the completed index build ``build``."""
    table = metadata_table.table
    at_build = metadata_table.read_point(build.completion_time)  # its bases, not yet undone
    reader = MetadataReader(metadata_table.fs, metadata_table.layout, at_build, table.options)
    before = with_undone(metadata_table.read_point(build.time), undone, mine)
    keys = pc.unique(pa.concat_arrays([keys, rewritten_keys(metadata_table, undone)]))
    redone = _entries_of_keys(metadata_table, before, keys, sorted(at_build.secondary))
    n = reader.group_count(INDEX)
    redone_groups = pa.array(group_of_entries(redone, n)) if len(redone) else None
    folder = reader.folder(INDEX)
    for index in range(n):
        piece = reader.slice(INDEX, index)
        if piece.base is None:
            continue
        path = f"{folder}/{piece.base}"
        rows = read_base(metadata_table.fs, path, columns=["key"]).column("key")
        rows = rows.combine_chunks().cast(pa.string())
        if len(rows):
            rows = rows.filter(pc.invert(pc.is_in(record_keys(rows), value_set=keys)))
        if redone_groups is not None:
            rows = pa.concat_arrays([rows, redone.filter(pc.equal(redone_groups, index))])
        write_base(
            metadata_table.fs,
            metadata_table.layout.metadata_base_file(str(INDEX), piece.file_group, base),
            pa.table({"key": rows}),
            partition=str(INDEX),
            file_group=piece.file_group,
            instant=base,
            folded=sorted(set(base_info(metadata_table.fs, path).folded) - undone),
            row_group_rows=table.options.get(settings.BASE_ROW_GROUP_ROWS),
        )


def rewritten_keys(metadata_table: MetadataTable, undone: frozenset[str]) -> pa.Array:
    """The record keys of every row in the files the completed ``undone`` commits wrote or
    replaced: their values may have changed in place (which writes no record-index entry)."""
    table = metadata_table.table
    keys = []
    for inst in table.timeline(TimelineKind.GLOBAL).completed():
        if inst.time not in undone or inst.action is not Action.COMMIT:
            continue
        for s in read_commit(table, inst).statuses:
            for name in (s.file_name, s.old_file):
                path = table.layout.data_file(s.partition, name) if name else None
                if path is not None and table.fs.exists(path):
                    keys.append(file_keys(table.fs, path, table.config.record_key))
    keys = [k for k in keys if len(k)]
    return pc.unique(pa.concat_arrays(keys)) if keys else pa.array([], pa.string())


def _entries_of_keys(
    metadata_table: MetadataTable, point: ReadPoint, keys: pa.Array, columns: list[str]
) -> pa.Array:
    """The entries of ``keys`` for ``columns`` as of ``point``: each key's data file (record
    index, ``files`` listing), read for its rows of those keys."""
    table = metadata_table.table
    if not columns or len(keys) == 0:
        return pa.array([], pa.string())
    reader = MetadataReader(metadata_table.fs, metadata_table.layout, point, table.options)
    wanted = groups_of_keys(reader, keys)
    parts = []
    for partition, files in reader.files().items():
        for name in files:
            if (partition, name[:36]) in wanted:
                path = table.layout.data_file(partition, name)
                entries = file_entries(table.fs, path, columns, table.config.record_key)
                for column_entries in entries.values():
                    mask = pc.is_in(record_keys(column_entries), value_set=keys)
                    parts.append(column_entries.filter(mask))
    parts = [p for p in parts if len(p)]
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())
