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

from lakebraid.index.scope import is_scoped
from lakebraid.index.secondary import (
    INDEX,
    file_entries,
    file_keys,
    group_of_entries,
    groups_of_keys,
)
from lakebraid.index.undo_points import correction, write_corrected_bases
from lakebraid.metadata.basefile import read_base
from lakebraid.metadata.commits import read_commit
from lakebraid.metadata.reader import MetadataReader
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
    fix = correction(metadata_table, build, undone, mine)
    keys = pc.unique(pa.concat_arrays([keys, rewritten_keys(metadata_table, undone)]))
    redone = _entries_of_keys(metadata_table, fix.before, keys, sorted(fix.at.point.secondary))
    n = fix.at.group_count(INDEX)
    redone_groups = pa.array(group_of_entries(redone, n)) if len(redone) else None

    def correct(index: int, path: str) -> pa.Table:
        rows = read_base(metadata_table.fs, path, columns=["key"]).column("key")
        rows = rows.combine_chunks().cast(pa.string())
        if len(rows):
            rows = rows.filter(pc.invert(pc.is_in(record_keys(rows), value_set=keys)))
        if redone_groups is not None:
            rows = pa.concat_arrays([rows, redone.filter(pc.equal(redone_groups, index))])
        return pa.table({"key": rows})

    write_corrected_bases(metadata_table, INDEX, fix.at, base, undone, correct)


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
                    scope = s.partition if is_scoped(table.config) else None
                    keys.append(file_keys(table.fs, path, table.config.record_key, scope))
    keys = [k for k in keys if len(k)]
    return pc.unique(pa.concat_arrays(keys)) if keys else pa.array([], pa.string())


def _entries_of_keys(
    metadata_table: MetadataTable, reader: MetadataReader, keys: pa.Array, columns: list[str]
) -> pa.Array:
    """The entries of ``keys`` for ``columns`` as of the reader's point: each key's data file
    (record index, ``files`` listing), read for its rows of those keys."""
    table = metadata_table.table
    if not columns or len(keys) == 0:
        return pa.array([], pa.string())
    wanted = groups_of_keys(reader, keys)
    parts = []
    for partition, files in reader.files().items():
        for name in files:
            if (partition, name[:36]) in wanted:
                path = table.layout.data_file(partition, name)
                scope = partition if is_scoped(table.config) else None
                key = table.config.record_key
                entries = file_entries(table.fs, path, columns, key, scope)
                for column_entries in entries.values():
                    mask = pc.is_in(record_keys(column_entries), value_set=keys)
                    parts.append(column_entries.filter(mask))
    parts = [p for p in parts if len(p)]
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())
