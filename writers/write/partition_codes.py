"""Rows' partition paths and string columns as dictionary codes, for routing a write.

:func:`partition_paths`: the encoded partition path of every row (``timeline.layout
.partition_path``), a dictionary array built once per distinct combination of the partition
columns' values; :func:`codes`: string or dictionary columns as int32 indices into one shared
dictionary. Both keep the rows' text out of Python: each column is dictionary-encoded once.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.timeline.layout import partition_path

SPLIT_ROWS = 1 << 20  # plain rows from which a column is encoded on a thread per core


def partition_paths(table: pa.Table, fields: Sequence[str]) -> pa.Array:
    """The encoded partition path of every row, as a dictionary array: each field is
    dictionary-encoded, and a path is built once per distinct combination of values."""
    return encode_partitions(table, fields)[0]


def encode_partitions(
    table: pa.Table, fields: Sequence[str]
) -> tuple[pa.Array, dict[str, pa.ChunkedArray]]:
    """:func:`partition_paths`, and each partition field of type string as the dictionary
    column its encoding made (the same values, one dictionary over every chunk): a write can
    take and store those indices instead of the text."""
    if not fields:
        return _repeat_text("", table.num_rows), {}
    shifted: list[np.ndarray] = []  # per field: its value's code + 1 (0: null)
    values: list[list[str | None]] = []
    coded: dict[str, pa.ChunkedArray] = {}
    for field in fields:
        column = table.column(field)
        found, dictionary, unified = _value_codes(column)
        if column.type == pa.string() and unified is not None:
            coded[field] = unified
        values.append([None, *pc.cast(dictionary, pa.string()).to_pylist()])
        shifted.append(found + 1)  # int32: one field's codes need no wider type
    radix = math.prod(len(options) for options in values)  # exact (Python integers)
    if radix > 1 << 62:  # mixed-radix numbers would overflow: group the code rows instead
        combos, dense = np.unique(np.stack(shifted, axis=1), axis=0, return_inverse=True)
        rows = [[values[f][c] for f, c in enumerate(combo)] for combo in combos.tolist()]
    else:
        distinct, dense = _combined(shifted, values)
        rows = []
        for combo in distinct.tolist():
            row = []
            for options in values:
                combo, code = divmod(combo, len(options))
                row.append(options[code])
            rows.append(row)
    paths = [partition_path(fields, row) for row in rows]
    return pa.DictionaryArray.from_arrays(
        pa.array(np.asarray(dense).reshape(-1).astype(np.int32, copy=False)),
        pa.array(paths, pa.string()),
    ), coded


def _combined(
    shifted: Sequence[np.ndarray], values: Sequence[Sequence[object]]
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct mixed-radix numbers of the fields' shifted codes, and each row's index
    among them (one field: its codes as they are, no 64-bit copy of the rows)."""
    if len(shifted) == 1:
        return np.arange(len(values[0])), shifted[0]
    combined = np.zeros(len(shifted[0]), dtype=np.int64)
    scale = 1
    for codes_of_field, options in zip(shifted, values, strict=True):
        combined += codes_of_field.astype(np.int64) * scale
        scale *= len(options)
    if scale <= 1 << 22:  # a table of every combination: no sort of the rows
        seen = np.zeros(scale, dtype=bool)
        seen[combined] = True
        return np.flatnonzero(seen), (np.cumsum(seen) - 1)[combined]
    distinct, dense = np.unique(combined, return_inverse=True)
    return distinct, dense


def _value_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array, pa.ChunkedArray | None]:
    """:func:`codes` of one column of any type (its dictionary keeps the column's type), and
    the column as dictionaries of that one dictionary (None for a column of no chunks)."""
    chunks = _encoded(column.chunks)
    if not chunks:
        return np.empty(0, np.int32), pa.array([], column.type), None
    unified = pa.chunked_array(chunks).unify_dictionaries()
    return *_indices(unified), unified


def _encoded(chunks: Sequence[pa.Array]) -> list[pa.Array]:
    """``chunks`` as dictionary arrays (each its own dictionary). From ``SPLIT_ROWS`` plain
    rows they are encoded on a thread per core (Arrow's hash kernel releases the GIL), a chunk
    that large cut into a piece per core (10M rows of a 30-value text column: 0.14 s against
    0.26 on one thread)."""
    cores = os.cpu_count() or 1
    plain = sum(len(c) for c in chunks if not pa.types.is_dictionary(c.type))
    if cores < 2 or plain < SPLIT_ROWS:
        return [_encode(c) for c in chunks]
    pieces: list[pa.Array] = []
    for chunk in chunks:
        if len(chunk) >= SPLIT_ROWS and not pa.types.is_dictionary(chunk.type):
            step = -(-len(chunk) // cores)
            pieces += [chunk.slice(at, step) for at in range(0, len(chunk), step)]
        else:
            pieces.append(chunk)
    with ThreadPoolExecutor(cores) as pool:
        return list(pool.map(_encode, pieces))


def _encode(chunk: pa.Array) -> pa.Array:
    return chunk if pa.types.is_dictionary(chunk.type) else pc.dictionary_encode(chunk)


def _unified(chunks: Sequence[pa.Array]) -> tuple[np.ndarray, pa.Array]:
    """The indices of dictionary arrays (int32, -1 for null) over one unified dictionary."""
    return _indices(pa.chunked_array(chunks).unify_dictionaries())


def _indices(unified: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """The indices of dictionary chunks sharing one dictionary (int32, -1 for null), and it.
    One chunk of int32 indices without nulls (a write's partition paths) is viewed, not
    copied: the array is then read-only."""
    indices = [_chunk_indices(c) for c in unified.chunks]
    found = indices[0] if len(indices) == 1 else np.concatenate(indices)
    return _distinct(found.astype(np.int32, copy=False), unified.chunk(0).dictionary)


def _distinct(found: np.ndarray, dictionary: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Codes into a dictionary without repeats: Arrow unifies several chunks' dictionaries
    but passes one chunk's through as it is, which may name a value twice (a caller's
    dictionary column); such codes are renumbered to the value's first place."""
    unique = pc.unique(dictionary)
    if len(unique) == len(dictionary):
        return found, dictionary
    first = pc.index_in(dictionary, value_set=unique, skip_nulls=False).to_numpy(False)
    renumbered = np.where(found >= 0, first.astype(np.int32)[found], np.int32(-1))
    return renumbered.astype(np.int32, copy=False), unique


def _chunk_indices(chunk: pa.DictionaryArray) -> np.ndarray:
    """A chunk's indices, -1 where null (a view of them when none is)."""
    if not chunk.indices.null_count:
        return chunk.indices.to_numpy()
    return pc.fill_null(chunk.indices, -1).to_numpy(zero_copy_only=False)


def codes(columns: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[list[np.ndarray], pa.Array]:
    """The values of string or dictionary columns as indices into one shared dictionary
    (int32 numpy arrays, -1 for null), and that dictionary: equal values, equal codes. A
    column of nulls only (old locations of keys all new) is not encoded."""
    chunks: list[pa.Array] = []
    lengths, empty = [], []  # per column: its rows, and whether every one is null
    for column in columns:
        parts = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        lengths.append(sum(len(p) for p in parts))
        empty.append(column.null_count == lengths[-1])  # all -1: nothing to encode
        for part in [] if empty[-1] else parts:
            if not pa.types.is_dictionary(part.type):
                part = pc.dictionary_encode(part.cast(pa.string()))
            chunks.append(part.cast(pa.dictionary(pa.int32(), pa.string())))
    if not chunks:
        return [np.full(n, -1, np.int32) for n in lengths], pa.array([], pa.string())
    indices, dictionary = _unified(chunks)
    sizes = [n for n, none in zip(lengths, empty, strict=True) if not none]
    encoded = iter(np.split(indices, np.cumsum(sizes)[:-1]))
    pairs = zip(lengths, empty, strict=True)
    return [np.full(n, -1, np.int32) if none else next(encoded) for n, none in pairs], dictionary


def counted_values(column: pa.Array | pa.ChunkedArray) -> dict[str, int]:
    """The rows of each value of a string or dictionary column without nulls, counted on its
    :func:`codes` (no text hashed per row)."""
    (found,), names = codes([column])
    if len(found) and int(found.min()) < 0:
        raise ValueError("counted_values: the column holds a null")
    per_code = np.bincount(found, minlength=len(names)).tolist()
    return {n: c for n, c in zip(names.to_pylist(), per_code, strict=True) if c}


def _repeat_text(text: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, dtype=np.int32)), pa.array([text], pa.string())
    )


def file_id_homes(parts: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray | None:
    """The partition code of each file id code (:func:`codes` of rows' partitions ``parts``
    and target file ids ``ids``, ``n`` codes in all; -1 for a code no row targets), or None
    when a file id is met in two partitions (never written so)."""
    home = np.full(n, -1, dtype=np.int64)
    home[ids] = parts  # the last row's partition of each file id
    return None if np.any(home[ids] != parts) else home
