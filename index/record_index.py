"""The record index's rules on the write path: tagging rows with their current location, the
index entries a commit's write statuses make, and the keys a commit writes (for the conflict
check). Lookups by key live in ``lakebraid.index.lookup`` (``lookup``, ``locate``,
``locations``); both engines tag through :func:`tag`.

Tagged rows carry two work columns, dictionary<int32, string> (null for keys the index does
not hold): ``_braid_old_partition`` and ``_braid_old_file_id``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.scope import in_partition
from lakebraid.metadata.arrow_records import flat
from lakebraid.metadata.basefile import read_base
from lakebraid.metadata.commits import WriteStatus, unpack_keys
from lakebraid.metadata.logblock import read_log_file
from lakebraid.metadata.logcache import index_log_table
from lakebraid.metadata.records import ints_to_file_id
from lakebraid.metadata.writer import InstantChanges, WrittenLog

OLD_PARTITION = "_braid_old_partition"
OLD_FILE_ID = "_braid_old_file_id"


def tag(table: pa.Table, found: pa.Table, at: pa.Array | None = None) -> pa.Table:
    """Add each row's current location (old partition, old file id; null for new keys).

    ``found`` is a record-index lookup result (key, partition, file_id_hi, file_id_lo);
    ``at``: the row of ``found`` of each row's key (null: absent), when the lookup knows it
    (``index.lookup.locate``), else matched here."""
    if found.num_rows == 0:  # nothing to look up (inserts): every row is new
        missing = _null_texts(table.num_rows)
        return table.append_column(OLD_PARTITION, missing).append_column(OLD_FILE_ID, missing)
    if at is None:
        # each row's position among the found keys (a hash of the found keys, probed by the
        # batch; keeps the batch order, unlike a join)
        at = pc.index_in(table.column(RECORD_KEY), value_set=flat(found.column("key")))
    partitions = pc.dictionary_encode(flat(found.column("partition")))
    return table.append_column(OLD_PARTITION, partitions.take(at)).append_column(
        OLD_FILE_ID, _file_ids(found).take(at)
    )


def _file_ids(found: pa.Table) -> pa.DictionaryArray:
    """File ids from the index's (hi, lo) integer pairs, converted once per file id."""
    if found.num_rows == 0:
        return _null_texts(0)
    hi = found.column("file_id_hi").to_numpy()
    lo = found.column("file_id_lo").to_numpy()
    pairs = np.stack([hi, lo], axis=1).astype("<i8").tobytes()
    packed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), len(hi), [None, pa.py_buffer(pairs)]
    )
    encoded = pc.dictionary_encode(packed)
    names = [
        ints_to_file_id(*(int(v) for v in np.frombuffer(pair, dtype="<i8")))
        for pair in encoded.dictionary.to_pylist()
    ]
    return pa.DictionaryArray.from_arrays(encoded.indices, pa.array(names, pa.string()))


def _null_texts(n: int) -> pa.DictionaryArray:
    """``n`` nulls of the work columns' type (dictionary<int32, string>)."""
    return pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array([], pa.string()))


def existing_rows(tagged: pa.Table) -> pa.Array:
    """Rows of a tagged insert whose key the table already holds (anywhere)."""
    return pc.is_valid(tagged.column(OLD_FILE_ID))


def entries_of(statuses: Sequence[WriteStatus], scoped: bool = False) -> tuple[pa.Table, pa.Array]:
    """The index entries a commit's write statuses make: (key, partition, file_id) upserts
    for the keys each new file holds that it did not before, and the keys that left the table
    (a key moved between groups is an upsert only). ``scoped``: the index keys are
    partition-scoped (``index.scope``)."""
    keys: list[pa.Array] = []
    gone: list[pa.Array] = []
    counts: list[int] = []
    parts: list[str] = []
    ids: list[str] = []
    for s in statuses:
        if s.file_name is not None:
            new = in_partition(unpack_keys(s.keys_added), s.partition if scoped else None)
            keys.append(new)
            counts.append(len(new))
            parts.append(s.partition)
            ids.append(s.file_id)
        gone.append(in_partition(unpack_keys(s.keys_removed), s.partition if scoped else None))
    # each status's partition and file id once, as dictionaries (no string per key)
    owner = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    return located_entries(keys, owner, list(zip(parts, ids, strict=True)), gone)


def located_entries(
    keys: Sequence[pa.Array],
    owner: np.ndarray,
    places: Sequence[tuple[str, str]],
    gone: Sequence[pa.Array],
) -> tuple[pa.Table, pa.Array]:
    """Upserts of ``keys`` (concatenated) located at ``places[owner]`` ((partition, file id)
    pairs, as two dictionaries sharing ``owner``), and the ``gone`` keys no upsert holds, once
    each (a key moved between groups is an upsert only)."""
    codes = pa.array(owner, pa.int32())
    upserts = pa.table(
        {
            "key": _concat(list(keys)),
            "partition": pa.DictionaryArray.from_arrays(
                codes, pa.array([p for p, _ in places], pa.string())
            ),
            "file_id": pa.DictionaryArray.from_arrays(
                codes, pa.array([f for _, f in places], pa.string())
            ),
        }
    )
    removed = _concat(list(gone))
    if len(removed) and upserts.num_rows:
        removed = removed.filter(pc.invert(pc.is_in(removed, value_set=upserts.column("key"))))
    return upserts, pc.unique(removed)


def _concat(arrays: list[pa.Array]) -> pa.Array:
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())


def index_keys(changes: InstantChanges) -> set[str]:
    """The record keys whose index entry a commit writes."""
    keys = set(pa.array(changes.index_deletes, pa.string()).to_pylist())
    if changes.index_upserts is not None:
        keys.update(changes.index_upserts.column("key").to_pylist())
    return keys


def logged_keys(fs: AbstractFileSystem, folder: str, logs: Iterable[WrittenLog]) -> set[str]:
    """The record keys a commit's record-index log files and commit bases (in ``folder``)
    wrote or deleted."""
    keys: set[str] = set()
    for log in logs:
        if log.partition != "record_index":
            continue
        if log.name.endswith(".parquet"):  # a commit base (``metadata.writer``)
            keys.update(read_base(fs, f"{folder}/{log.name}", ["key"]).column("key").to_pylist())
            continue
        logged = index_log_table(read_log_file(fs, f"{folder}/{log.name}"))  # tombstones too
        keys.update(logged.column("key").to_pylist())
    return keys
