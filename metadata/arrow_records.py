"""Metadata records as Arrow tables: the column layout of base files (format version 1).

A base file holds the *full state* of a file group (no tombstones, no deletes kept), one row
per key, sorted by ``key``. Columns per partition:

=================  =========================================================================
partition          columns (Arrow types)
=================  =========================================================================
``files``          ``key: string, names: list<string>, sizes: list<int64>`` -- the files of
                   one data partition (or, under the all-partitions key, the partition paths
                   with size 0), names ascending, ``sizes[i]`` the size of ``names[i]``
``column_stats``   ``key: string, column: string, partition: string, file: string,
                   min_value: binary, max_value: binary, null_count: int64,
                   value_count: int64, total_size: int64``; min/max are msgpack bytes of
                   ``metadata.stat_values.encode_stat_value`` (dates, datetimes and
                   decimals as its extension types)
``record_index``   ``key: string, partition: string, file_id_hi: int64, file_id_lo: int64,
                   instant: int64`` -- dictionary encoded in Parquet, so the repeated
                   partition, file id and instant cost almost nothing per key
=================  =========================================================================

This module converts between those tables and the records of ``metadata.records``; the record
index also has a vectorised path (:func:`index_table`) that never builds Python records.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.keyorder import fixed_view, sort_order
from lakebraid.metadata.records import (
    ColumnStatsRecord,
    FilesRecord,
    MetadataRecord,
    Partition,
    RecordIndexRecord,
    SecondaryIndexRecord,
    file_id_to_ints,
    instant_to_int,
)
from lakebraid.metadata.stat_values import decode_stat_value, encode_stat_value

KEY = "key"

SCHEMAS: dict[Partition, pa.Schema] = {
    Partition.FILES: pa.schema(
        [(KEY, pa.string()), ("names", pa.list_(pa.string())), ("sizes", pa.list_(pa.int64()))]
    ),
    Partition.COLUMN_STATS: pa.schema(
        [
            (KEY, pa.string()),
            ("column", pa.string()),
            ("partition", pa.string()),
            ("file", pa.string()),
            ("min_value", pa.binary()),
            ("max_value", pa.binary()),
            ("null_count", pa.int64()),
            ("value_count", pa.int64()),
            ("total_size", pa.int64()),
        ]
    ),
    Partition.RECORD_INDEX: pa.schema(
        [
            (KEY, pa.string()),
            ("partition", pa.string()),
            ("file_id_hi", pa.int64()),
            ("file_id_lo", pa.int64()),
            ("instant", pa.int64()),
        ]
    ),
    Partition.SECONDARY_INDEX: pa.schema([(KEY, pa.string())]),
}
# the record index's log rows as columns: a base file's columns, then ``deleted`` (tombstones)
INDEX_LOG_SCHEMA = SCHEMAS[Partition.RECORD_INDEX].append(pa.field("deleted", pa.bool_()))


def empty_table(partition: Partition | str) -> pa.Table:
    return SCHEMAS[Partition(partition)].empty_table()


def records_to_table(partition: Partition | str, records: Sequence[MetadataRecord]) -> pa.Table:
    """Live records (no tombstones) -> a base-file table (not sorted here)."""
    partition = Partition(partition)
    schema = SCHEMAS[partition]
    if partition is Partition.FILES:
        files: Sequence[FilesRecord] = records  # type: ignore[assignment]
        columns = [
            [r.key for r in files],
            [sorted(r.added) for r in files],
            [[r.added[n] for n in sorted(r.added)] for r in files],
        ]
    elif partition is Partition.COLUMN_STATS:
        stats: Sequence[ColumnStatsRecord] = records  # type: ignore[assignment]
        columns = [
            [r.key for r in stats],
            [r.column for r in stats],
            [r.partition for r in stats],
            [r.file for r in stats],
            [encode_stat_value(r.min_value) for r in stats],
            [encode_stat_value(r.max_value) for r in stats],
            [r.null_count for r in stats],
            [r.value_count for r in stats],
            [r.total_size for r in stats],
        ]
    elif partition is Partition.SECONDARY_INDEX:
        columns = [[r.key for r in records]]
    else:
        index: Sequence[RecordIndexRecord] = records  # type: ignore[assignment]
        columns = [
            [r.key for r in index],
            [r.partition for r in index],
            [r.file_id_hi for r in index],
            [r.file_id_lo for r in index],
            [r.instant for r in index],
        ]
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def table_to_records(partition: Partition | str, table: pa.Table) -> list[MetadataRecord]:
    """Inverse of :func:`records_to_table`."""
    partition = Partition(partition)
    if partition is Partition.FILES:  # column by column: no dict per row
        keys, names, sizes = (table.column(c).to_pylist() for c in (KEY, "names", "sizes"))
        return [
            FilesRecord(key, dict(zip(n, s, strict=True)), [])
            for key, n, s in zip(keys, names, sizes, strict=True)
        ]
    rows = table.select(SCHEMAS[partition].names).to_pylist()
    if partition is Partition.COLUMN_STATS:
        return [
            ColumnStatsRecord(
                r["column"],
                r["partition"],
                r["file"],
                decode_stat_value(r["min_value"]),
                decode_stat_value(r["max_value"]),
                r["null_count"],
                r["value_count"],
                r["total_size"],
            )
            for r in rows
        ]
    if partition is Partition.SECONDARY_INDEX:
        return [SecondaryIndexRecord(r[KEY]) for r in rows]
    return [
        RecordIndexRecord(r[KEY], r["partition"], r["file_id_hi"], r["file_id_lo"], r["instant"])
        for r in rows
    ]


def index_table(
    keys: pa.Array | pa.ChunkedArray,
    partitions: pa.Array | pa.ChunkedArray,
    file_ids: pa.Array | pa.ChunkedArray,
    instant: str,
    *,
    coded: bool = False,
) -> pa.Table:
    """Record-index rows for ``keys`` at one instant, vectorised: file ids (canonical UUID
    strings) are converted once per distinct value. ``coded``: when ``partitions`` is a
    dictionary of the file ids' own index array (a write's statuses), the four location
    columns stay dictionaries of that array (no int64 per row; the base writer's
    ``metadata.locations.encode`` reads the codes); else the integers are written out."""
    encoded = pc.dictionary_encode(file_ids)  # a dictionary passes through as it is
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks() if encoded.num_chunks else pa.array([], pa.string())
    if not isinstance(encoded, pa.DictionaryArray):
        encoded = pc.dictionary_encode(encoded)
    pairs = [file_id_to_ints(f) for f in encoded.dictionary.to_pylist()]
    entries = ([p[0] for p in pairs], [p[1] for p in pairs], [instant_to_int(instant)] * len(pairs))
    codes = encoded.indices
    located = [pa.DictionaryArray.from_arrays(codes, pa.array(e, pa.int64())) for e in entries]
    parts = flat(partitions)
    shared = pa.types.is_dictionary(parts.type) and parts.indices.equals(codes)
    if not (coded and shared and not codes.null_count):
        located = [column.cast(pa.int64()) for column in located]
    schema = SCHEMAS[Partition.RECORD_INDEX]
    for at, column in enumerate([partitions, *located], 1):  # a dictionary partition kept so
        schema = schema.set(at, schema.field(at).with_type(column.type))
    return pa.Table.from_arrays(
        [
            pa.array(keys, pa.string()) if not isinstance(keys, pa.ChunkedArray) else keys,
            partitions,
            *located,
        ],
        schema=schema,
    )


def flat(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array of a column (chunks combined, no copy of a single chunk, which
    may then start at an offset; an empty one of its type)."""
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0)
        return column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    return column


def used_entries(
    chunk: pa.DictionaryArray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Which entries of a dictionary chunk's dictionary its rows use (numpy booleans), its
    indices as numpy integers (a null's as 0) and which rows are valid (None: no nulls). One
    pass over the indices; no value is hashed."""
    indices = chunk.indices
    valid = None if chunk.null_count == 0 else pc.is_valid(indices).to_numpy(zero_copy_only=False)
    at = pc.fill_null(indices, 0).to_numpy(zero_copy_only=False)
    used = np.zeros(len(chunk.dictionary), dtype=bool)
    used[at if valid is None else at[valid]] = True
    return used, at, valid


def filtered(table: pa.Table, keep: np.ndarray) -> pa.Table:
    """The rows of ``table`` where ``keep`` (numpy booleans, one per row) is true. A chunk
    with no nulls that still carries a validity bitmap (as Parquet decodes a nullable column)
    is filtered without it: Arrow's filter takes its slower null-aware path for any bitmap
    (333k int64: 0.93 ms against 0.40), and an all-valid bitmap changes no value."""
    mask = bool_array(keep)
    columns = [pa.chunked_array([_dense(c) for c in col.chunks], col.type) for col in table.columns]
    return pa.Table.from_arrays([c.filter(mask) for c in columns], schema=table.schema)


def bool_array(values: np.ndarray) -> pa.BooleanArray:
    """numpy booleans as an Arrow boolean array (no nulls), their bits packed by numpy: 333k
    values in 0.05 ms, where ``pa.array`` takes 0.35-0.8."""
    bits = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
    return pa.BooleanArray.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def _dense(chunk: pa.Array) -> pa.Array:
    """``chunk`` without its validity bitmap when it has no nulls and its type is one of flat
    buffers (numbers, booleans, text, binary); any other chunk as it is."""
    kind = chunk.type
    if chunk.null_count or kind.num_fields or isinstance(kind, pa.BaseExtensionType):
        return chunk
    if pa.types.is_dictionary(kind) or pa.types.is_null(kind):
        return chunk
    buffers = chunk.buffers()
    if buffers[0] is None:
        return chunk
    return pa.Array.from_buffers(kind, len(chunk), [None, *buffers[1:]], 0, chunk.offset)


def first_per_key(table: pa.Table, key: str, order: Sequence[tuple[str, str]]) -> pa.Table:
    """One row per value of ``key``: the first after sorting by ``order`` (pairs of column
    and ``"ascending"``/``"descending"``) within each key, e.g. the newest by a rank column.
    The result is sorted by key."""
    table = table.sort_by([(key, "ascending"), *order])
    keys = table.column(key).combine_chunks()
    if len(keys) < 2:
        return table
    first = pc.not_equal(keys[1:], keys[:-1]).cast(pa.bool_())
    return table.filter(pa.concat_arrays([pa.array([True]), first]))


def joined_runs(tables: Sequence[pa.Table], key: str = "key") -> pa.Table | None:
    """``tables`` (each sorted by a unique ``key``) as one table sorted by key when no two
    share a key range: concatenated in the order of their first keys, no row moved (logs of
    appends of ever larger keys); None when ranges overlap (the caller merges them). Keys
    compare as Python values: code point order is UTF-8 byte order."""
    filled = [t for t in tables if t.num_rows]
    if len(filled) <= 1:
        return filled[0] if filled else (tables[0] if tables else None)
    spans = sorted(
        (t.column(key)[0].as_py(), t.column(key)[-1].as_py(), i) for i, t in enumerate(filled)
    )
    if any(spans[j][1] >= spans[j + 1][0] for j in range(len(spans) - 1)):
        return None
    return pa.concat_tables([filled[i] for _, _, i in spans])


def merge_by_key(left: pa.Table, right: pa.Table, key: str = "key") -> pa.Table:
    """``left`` and ``right`` (one schema, each sorted by a unique ``key``, no key in both) as
    one table sorted by key: the two concatenated when one's keys all come after the other's
    (appends of ever larger keys: no row moves), else a merge of the two runs when their keys
    have one width (numpy searches of ``right``'s keys in ``left``'s), else a sort."""
    if not right.num_rows:
        return left
    if not left.num_rows:
        return right
    joined = joined_runs([left, right], key)
    if joined is not None:
        return joined
    both = pa.concat_tables([left, right])
    ours, theirs = (fixed_view(flat(t.column(key))) for t in (left, right))
    if ours is None or theirs is None or ours.itemsize != theirs.itemsize:
        return both.take(sort_order(both.column(key)))
    places = np.searchsorted(ours, theirs) + np.arange(len(theirs))  # right's rows, merged
    order = np.empty(len(ours) + len(theirs), dtype=np.int64)
    from_left = np.ones(len(order), dtype=bool)
    from_left[places] = False
    order[places] = len(ours) + np.arange(len(theirs))
    order[from_left] = np.arange(len(ours))
    return both.take(pa.array(order))


def arrow_bytes(size: int) -> tuple[pa.Buffer, np.ndarray]:
    """A new buffer of ``size`` bytes from Arrow's memory pool and a writable numpy view of
    it. Arrays built on it hold no Python object: a buffer wrapping one (``pa.py_buffer``,
    zero-copy numpy) needs the interpreter to be released, and the last reference dropped by
    an Arrow thread (a compute plan's task) while the interpreter exits aborts the process.
    Every buffer a read returns is one of these or Arrow's own."""
    buffer = pa.allocate_buffer(size)
    return buffer, np.frombuffer(buffer, np.uint8)


def pool_copy(items: np.ndarray) -> tuple[pa.Buffer, np.ndarray]:
    """A copy of ``items`` in a buffer of Arrow's pool (:func:`arrow_bytes`), and the copy's
    items (writable)."""
    buffer, raw = arrow_bytes(items.nbytes)
    copy = raw.view(items.dtype)
    copy[:] = items
    return buffer, copy


def pool_buffer(data: bytes | memoryview | pa.Buffer) -> pa.Buffer:
    """``data`` as a buffer of Arrow's pool: itself when a ``pa.Buffer`` (the caller's promise
    that it is Arrow's own, as ``metadata.files.whole_file``'s are), else a copy."""
    if isinstance(data, pa.Buffer):
        return data
    return pool_copy(np.frombuffer(data, np.uint8))[0]


# the offset type of each variable-width kind whose values can be items of one width
TEXT_OFFSETS = {
    pa.string(): np.dtype(np.int32),
    pa.binary(): np.dtype(np.int32),
    pa.large_string(): np.dtype(np.int64),
    pa.large_binary(): np.dtype(np.int64),
}


def fixed_width_array(kind: pa.DataType, count: int, width: int, data: pa.Buffer) -> pa.Array:
    """An array of ``kind`` without nulls over ``data``, ``count`` items of ``width`` bytes
    each: the item buffer of a fixed-width type, or the values of text and binary kinds
    (:data:`TEXT_OFFSETS`), whose offsets are made in Arrow's pool."""
    offset = TEXT_OFFSETS.get(kind)
    if offset is None:
        return pa.Array.from_buffers(kind, count, [None, data])
    ends, view = arrow_bytes((count + 1) * offset.itemsize)
    np.multiply(np.arange(count + 1, dtype=offset), width, out=view.view(offset))
    return pa.Array.from_buffers(kind, count, [None, ends, data])


def identity(array: pa.Array) -> tuple[int, ...]:
    """What makes two arrays the same values without comparing them: the same buffers at the
    same offset and length."""
    where = [b.address if b is not None else 0 for b in array.buffers()]
    return (*where, array.offset, len(array))
