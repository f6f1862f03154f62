"""How a data file's columns are encoded: which get a Parquet dictionary, and which string
columns travel as Arrow dictionaries through a rewrite.

Arrow's Parquet writer tries a dictionary for every column and falls back to plain encoding once
a column chunk's dictionary passes ``dictionary_pagesize_limit`` (1 MiB): a column of mostly
distinct values (ids, amounts, fine timestamps) is hashed row by row for nothing, which costs
about a third of that column's write. And a string column of few distinct values (a status, a
country) is decoded to one string per row on every read, taken and hashed again on write,
although its Parquet data is dictionary-encoded anyway.

:func:`choose` decides per column from a sample of rows (fixed seed, so every engine decides
alike for the same rows): the number of distinct values among ``SAMPLE`` rows drawn with
replacement is compared with what a column of ``d`` equally common values would show
(``d (1 - exp(-s / d))``), for the ``d`` whose dictionary just reaches the limit and for
``d`` = ``MOSTLY_DISTINCT`` of the rows; a file of at most ``SAMPLE`` rows counts its distinct
values exactly. A column expected to overflow, or whose values are mostly distinct, is written
without a dictionary: a dictionary that cannot shrink the values much only adds work (20,000
distinct int64 on 2 cores: write 1.60 ms with one against 1.00 plain, read 0.45 against 0.37,
198 KB against 161; strings 3.24 / 1.21 ms against 2.17 / 0.71). Below the threshold the
dictionary keeps its place for the smaller file (half as many int64 values as rows: 105 KB
against 142 plain, for writes 1.51 against 1.11 ms and reads 0.37 against 0.29). Files under
``SMALL_ROWS`` keep Arrow's defaults. A string column of few distinct values becomes an
Arrow dictionary, so the file's ``ARROW:schema`` note says so and the next rewrite reads its
indices, not its strings (:func:`writers.write.filegroup.rewrite_file_group`). Arrow
dictionaries that grew past the limit are decoded again. The Parquet data is the standard
encoding either way; the choice only changes speed and, slightly, size.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.arrow_records import used_entries

DICTIONARY_LIMIT = 1 << 20  # bytes: pyarrow's default dictionary_pagesize_limit
ROW_GROUP_ROWS = 1 << 20  # pyarrow's default row group size: one dictionary per chunk
SAMPLE = 8192  # rows drawn per column (with replacement)
SMALL_ROWS = 1024  # smaller files keep Arrow's defaults: nothing to win
MOSTLY_DISTINCT = 0.75  # a column of at least this many distinct values per row: no dictionary
FEW = SAMPLE // 8  # a string column with at most this many distinct sampled values is "few"
_PICKS: dict[int, pa.Array] = {}


def choose(table: pa.Table, plain: Collection[str] = ()) -> tuple[pa.Table, list[str]]:
    """``table`` with low-cardinality string columns as Arrow dictionaries (and overflowing
    dictionaries decoded), and the names of the columns to write with a Parquet dictionary.
    ``plain``: columns never dictionary-encoded (known unique)."""
    columns, dictionary = [], []
    for field, column in zip(table.schema, table.columns, strict=True):
        if field.name in plain:
            columns.append(column)
            continue
        column, use = _choose_one(column, table.num_rows)
        columns.append(column)
        if use:
            dictionary.append(field.name)
    fields = [f.with_type(c.type) for f, c in zip(table.schema, columns, strict=True)]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields)), dictionary


def _choose_one(column: pa.ChunkedArray, rows: int) -> tuple[pa.ChunkedArray, bool]:
    kind = column.type
    if pa.types.is_dictionary(kind):
        if column.num_chunks == 1 and len(column.chunk(0).dictionary) <= 1:
            return column, True  # one value (a new group's commit time, its partition)
        column = compacted(column)
        values = sum(len(chunk.dictionary) for chunk in column.chunks)
        width = _width(kind.value_type, pa.concat_arrays([c.dictionary for c in column.chunks]))
        if values * width <= DICTIONARY_LIMIT:
            return column, True
        return column.cast(kind.value_type), False
    if rows < SMALL_ROWS or not _dictionary_candidate(kind):
        return column, True  # Arrow's default
    sample = column.take(_picks(rows)) if rows > SAMPLE else column
    distinct = distinct_values(sample)
    limit = DICTIONARY_LIMIT / _width(kind, sample)
    chunk = min(rows, ROW_GROUP_ROWS)
    if chunk > limit and distinct > _drawn(limit, rows):
        return column, False  # the dictionary would overflow: plain from the start
    if distinct > _drawn(MOSTLY_DISTINCT * rows, rows):
        return column, False  # mostly distinct values: a dictionary saves little
    if _textual(kind) and distinct <= FEW:
        return pc.dictionary_encode(column), True
    return column, True


def distinct_values(values: pa.Array | pa.ChunkedArray) -> int:
    """The distinct non-null values, as ``pc.count_distinct`` counts them, from ``pc.unique``
    (8,192 sampled int64 or strings: 0.21-0.23 ms against 0.37-0.48; a 20,000-row append
    chooses for four columns)."""
    return len(pc.unique(values)) - (1 if values.null_count else 0)


def _drawn(values: float, rows: int) -> float:
    """The distinct values a column of ``values`` equally common values shows in
    :func:`choose`'s sample of a ``rows``-row file: ``SAMPLE`` rows drawn with replacement, or
    every row of a file of at most ``SAMPLE`` rows (then ``values`` itself)."""
    if rows <= SAMPLE:
        return values
    return values * -math.expm1(-SAMPLE / values)


def compacted(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A dictionary column as one chunk whose dictionary holds only the values its rows use,
    in their first order. A rewrite takes rows of the old file, whose dictionary keeps every
    value it was read with, and Parquet writes an Arrow dictionary as it is: without this the
    commit-time column's dictionary would gain one value per commit that touched the file
    group, used or not. One pass over the indices; no value is hashed."""
    merged = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    dictionary, indices = merged.dictionary, merged.indices
    if len(dictionary) == 0 or merged.null_count == len(merged):
        return pa.chunked_array([merged], column.type)
    used, at, valid = used_entries(merged)
    if used.all():
        return pa.chunked_array([merged], column.type)
    keep = np.flatnonzero(used)
    renumber = np.zeros(len(dictionary), dtype=at.dtype)
    renumber[keep] = np.arange(len(keep), dtype=at.dtype)
    mask = None if valid is None else ~valid
    fresh = pa.array(renumber[at], type=indices.type, mask=mask)
    compact = pa.DictionaryArray.from_arrays(fresh, dictionary.take(pa.array(keep)))
    return pa.chunked_array([compact], column.type)


def _picks(rows: int) -> pa.Array:
    """SAMPLE row positions in [0, rows), the same for the same ``rows`` (fixed seed)."""
    picks = _PICKS.get(rows)
    if picks is None:
        rng = np.random.default_rng(rows)
        picks = pa.array(rng.integers(0, rows, SAMPLE))
        if len(_PICKS) > 64:
            _PICKS.clear()
        _PICKS[rows] = picks
    return picks


def _dictionary_candidate(kind: pa.DataType) -> bool:
    """Types Arrow's Parquet writer dictionary-encodes (not booleans or nested types)."""
    return (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_temporal(kind)
        or pa.types.is_decimal(kind)
        or _textual(kind)
    )


def _textual(kind: pa.DataType) -> bool:
    return (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _width(kind: pa.DataType, values: pa.Array | pa.ChunkedArray) -> float:
    """Bytes one dictionary entry takes in Parquet's PLAIN encoding."""
    if _textual(kind):
        valid = len(values) - values.null_count
        if not valid:
            return 4.0
        return 4.0 + pc.sum(pc.binary_length(values)).as_py() / valid
    return max(1.0, kind.bit_width / 8)
