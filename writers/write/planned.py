"""The record-index entries of a write known from its routing, before any file is written.

A write whose every row inserts a key the table does not hold (its record-index tag is null:
a first load, an append of new events) gives each key exactly one entry, the file group its
routing chose (``writers.write.route``): a new group, or a small group the rows join. Such a
write can have its record-index log blocks written while its data files are written
(``writers.commit.ahead``). Any other write (an update, a move, a delete) has entries that
depend on what its rewrites find, and takes them from its write statuses after the files.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.record_index import OLD_FILE_ID
from lakebraid.metadata.arrow_records import flat
from lakebraid.metadata.writer import InstantChanges
from lakebraid.writers.write.filegroup import OP, OP_UPSERT
from lakebraid.writers.write.partition_codes import codes, file_id_homes
from lakebraid.writers.write.route import PARTITION, TARGET_FILE_ID, key_hashes, row_index_keys


def inserts_only(routed: pa.Table) -> bool:
    """Whether every row of ``routed`` (tagged and routed) upserts a key the table does not
    hold: then :func:`inserted_entries` are its record-index entries. Two column scans."""
    n = routed.num_rows
    if n == 0 or OLD_FILE_ID not in routed.column_names or OP not in routed.column_names:
        return False
    if routed.column(OLD_FILE_ID).null_count != n:
        return False
    bounds = pc.min_max(routed.column(OP)).as_py()
    return bounds["min"] == OP_UPSERT and bounds["max"] == OP_UPSERT


def inserted_changes(routed: pa.Table, scoped: bool = False) -> InstantChanges | None:
    """The record-index changes of an insert-only write (:func:`inserts_only`): its upserts
    (:func:`inserted_entries`) and, for a global index, their keys' hashes as routing found
    them (``route.KEY_HASH``, when the rows carry it). None as :func:`inserted_entries`."""
    entries = inserted_entries(routed, scoped)
    if entries is None:
        return None
    return InstantChanges(index_upserts=entries, index_hashes=key_hashes(routed, scoped))


def inserted_entries(routed: pa.Table, scoped: bool = False) -> pa.Table | None:
    """The record-index upserts of an insert-only write (:func:`inserts_only`): columns
    ``key`` (the index key: ``scoped``, partition-scoped), ``partition`` and ``file_id``
    (dictionaries sharing one index array, one value per file group), a row per routed row,
    in their order. None when a file id is routed into two partitions (never planned so: the
    write then takes its entries from its statuses)."""
    (parts, ids), names = codes([routed.column(PARTITION), routed.column(TARGET_FILE_ID)])
    if len(ids) and (int(parts.min()) < 0 or int(ids.min()) < 0):
        return None  # a null partition or target: not a routed insert
    home = file_id_homes(parts, ids, len(names))
    if home is None:
        return None
    present = np.flatnonzero(home >= 0)  # the file ids' codes among the names
    number = np.zeros(len(names), dtype=np.int32)
    number[present] = np.arange(len(present), dtype=np.int32)  # each file id's entry number
    owner = pa.array(number[ids])
    return pa.table(
        {
            "key": row_index_keys(routed, scoped),
            "partition": pa.DictionaryArray.from_arrays(owner, names.take(home[present])),
            "file_id": pa.DictionaryArray.from_arrays(owner, names.take(present)),
        }
    )


def planned_counts(entries: pa.Table) -> dict[tuple[str, str], int]:
    """Rows planned per (partition, file id) of :func:`inserted_entries`."""
    owner = flat(entries.column("file_id"))  # one chunk as written: no copy of its indices
    counts = np.bincount(
        owner.indices.to_numpy(zero_copy_only=False), minlength=len(owner.dictionary)
    )
    parts = flat(entries.column("partition")).dictionary.to_pylist()
    ids = owner.dictionary.to_pylist()
    return {(p, f): int(c) for p, f, c in zip(parts, ids, counts.tolist(), strict=True)}
