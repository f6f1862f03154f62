"""Column statistics of data files: which columns a table records, and the statistics of one
file (a base file from its footer and rows, a merge-on-read log from the rows of its data
blocks), shared by writers (``writers.write.datafile`` re-exports
them), validation and the build of column statistics on a live table
(``index.column_stats_build``).

Recorded columns: the first ``metadata.column_stats.max.columns`` columns of the schema, plus
the columns a completed ``column_stats`` build added (``ReadPoint.stats_columns``); reads prune
only by those, and validation compares only those (:func:`recorded_columns`).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.index.datalog import data_rows
from lakebraid.metadata import settings
from lakebraid.metadata.arrow_records import used_entries
from lakebraid.metadata.commits import ColumnStat
from lakebraid.metadata.files import open_file, whole_file
from lakebraid.metadata.integrity import READ_OPTIONS, check_decoded, check_footer
from lakebraid.metadata.records import ColumnStatsRecord
from lakebraid.metadata.slices import ReadPoint
from lakebraid.timeline import config as cfg
from lakebraid.timeline.table_config import FieldSpec


def stats_columns(schema: Sequence[FieldSpec], options: cfg.Options) -> list[str]:
    """The columns whose statistics the metadata table records by default: the first
    ``metadata.column_stats.max.columns`` of the schema."""
    return [f.name for f in schema][: options.get(settings.STATS_MAX_COLUMNS)]


def recorded_columns(names: Sequence[str], options: cfg.Options, point: ReadPoint) -> list[str]:
    """The columns with statistics as of ``point``: the first
    ``metadata.column_stats.max.columns`` of ``names`` (the schema's column names, in order),
    then the columns built on the live table (``ReadPoint.stats_columns``)."""
    first = list(names)[: options.get(settings.STATS_MAX_COLUMNS)]
    return list(dict.fromkeys([*first, *sorted(point.stats_columns)]))


def file_stats(fs: AbstractFileSystem, path: str, columns: Sequence[str]) -> list[ColumnStat]:
    """The statistics of ``columns`` of one data file (those the file has: a file from before
    a column existed has none for it), computed as the writer computed them."""
    with (
        open_file(fs, path, memory_map=True) as source,
        pq.ParquetFile(source, **READ_OPTIONS) as parquet,
    ):
        check_footer(parquet.metadata)
        present = [c for c in columns if c in parquet.schema_arrow.names]
        if not present:
            return []
        rows = parquet.read(columns=present, use_threads=False)
        check_decoded(rows)
        return column_stats(rows, parquet.metadata, present)


def log_file_stats(fs: AbstractFileSystem, path: str, columns: Sequence[str]) -> list[ColumnStat]:
    """The statistics of ``columns`` of one merge-on-read log file, from the rows of its data
    blocks (:func:`rows_stats`). A damaged block raises
    :class:`~lakebraid.index.errors.CorruptDataLogError` naming the file and offset."""
    return rows_stats(data_rows(whole_file(fs, path), path), None, columns)


def rows_stats(
    rows: pa.Table | None, meta: pq.FileMetaData | None, columns: Sequence[str]
) -> list[ColumnStat]:
    """The statistics of ``columns`` of a file whose rows are ``rows`` (``meta``: its Parquet
    footer, as :func:`column_stats` takes it), as its writer computed them: none for columns
    the rows lack. ``rows`` None: a merge-on-read log of deletes only, which holds no row, so
    every column has no bounds, no nulls and no values, which no condition of a read can
    match (it prunes from every filtered read)."""
    if rows is None:
        return [ColumnStat(c, None, None, 0, 0, 0) for c in columns]
    return column_stats(rows, meta, [c for c in columns if c in rows.column_names])


def stats_record(stat: ColumnStat, partition: str, name: str) -> ColumnStatsRecord:
    """The metadata record of one column's statistics of the data file ``partition/name``."""
    return ColumnStatsRecord(
        stat.column,
        partition,
        name,
        stat.min_value,
        stat.max_value,
        stat.null_count,
        stat.value_count,
        stat.total_size,
    )


def column_stats(
    table: pa.Table, meta: pq.FileMetaData | None, columns: list[str]
) -> list[ColumnStat]:
    """Min, max, nulls, values and compressed bytes of each column of a written file.

    Integer and string bounds come from the footer the writer just made (exact: Arrow writes
    untruncated statistics, or none); an Arrow dictionary column's from the dictionary values
    its rows use (its file has no Parquet statistics: :func:`footer_statistics`); other types
    are computed from the rows. ``meta`` None (a merge-on-read log, no Parquet footer): every
    bound from the rows, sizes 0."""
    sizes, footer = _footer_chunks(meta, columns)
    stats = []
    for name in columns:
        column = table.column(name)
        lo = hi = None
        kind = _bounds_type(column.type)
        if orderable(kind) and column.null_count < len(column):
            coded = pa.types.is_dictionary(column.type)
            bounds = None if coded else _footer_bounds(kind, footer.get(name, []))
            if bounds is None:  # a dictionary's few values, rather than every row's
                found = pc.min_max((_used_values(column) if coded else column).cast(kind))
                bounds = (_plain(found["min"].as_py()), _plain(found["max"].as_py()))
            lo, hi = bounds
        stats.append(
            ColumnStat(
                name, lo, hi, column.null_count, len(column) - column.null_count, sizes[name]
            )
        )
    return stats


def footer_statistics(schema: pa.Schema, record_key: str) -> list[str]:
    """The columns whose Parquet statistics a data file of ``schema`` carries: not the
    record key ``record_key`` (never read: the key column has them) and not the Arrow
    dictionary columns (partition values, commit times, low-cardinality text), for which
    Arrow's writer compares every row's value (a fifth of a 333k-row file's write) while
    :func:`column_stats` takes their bounds from their few dictionary values."""
    return [f.name for f in schema if f.name != record_key and not pa.types.is_dictionary(f.type)]


def _used_values(column: pa.ChunkedArray) -> pa.Array:
    """The distinct values a dictionary column's rows use (a dictionary may hold more)."""
    parts = []
    for chunk in column.chunks:
        dictionary = chunk.dictionary
        if len(dictionary) > 1:
            dictionary = dictionary.filter(pa.array(used_entries(chunk)[0]))
        if chunk.null_count < len(chunk):
            parts.append(dictionary)
    return pa.concat_arrays(parts) if parts else pa.array([], column.type.value_type)


def _footer_chunks(
    meta: pq.FileMetaData | None, columns: list[str], statistics: bool = True
) -> tuple[dict[str, int], dict[str, list[Any]]]:
    """Per column of ``columns``: its compressed bytes in the footer ``meta`` (0 without
    one) and (``statistics``) its row groups' statistics."""
    sizes = {name: 0 for name in columns}
    footer: dict[str, list[Any]] = {}
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)] if meta is not None else []
    for group in groups:
        for c in range(group.num_columns):
            chunk = group.column(c)
            path = chunk.path_in_schema.split(".")[0]
            if path in sizes:
                sizes[path] += chunk.total_compressed_size
                if statistics:
                    footer.setdefault(path, []).append(chunk.statistics)
    return sizes, footer


def _footer_bounds(kind: pa.DataType, chunks: list[Any]) -> tuple[Any, Any] | None:
    """(min, max) over the row groups' statistics, for integer and string columns only."""
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind)) or not chunks:
        return None
    found = [s for s in chunks if s is not None and s.has_min_max]
    if len(found) != sum(1 for s in chunks if s is None or s.num_values > 0):
        return None  # a group with values but no bounds (e.g. a value over the size limit)
    if not found:
        return None
    return min(s.min for s in found), max(s.max for s in found)


def orderable(kind: pa.DataType) -> bool:
    """Whether values of ``kind`` have a min and max (not nested, not all-null)."""
    return not (pa.types.is_nested(kind) or pa.types.is_null(kind))


def _bounds_type(kind: pa.DataType) -> pa.DataType:
    """The type bounds are taken in: a dictionary's values; a zoned timestamp in UTC (the
    same instants; the metadata keeps an aware bound as a UTC instant, and a local time near
    year 1 or 9999 has no Python datetime)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return pa.timestamp(kind.unit, "UTC")
    return kind


def same_stats(recorded: tuple[Any, ...] | None, computed: tuple[Any, ...]) -> bool:
    """Whether a file's statistics as recorded, ``(min, max, nulls, values)``, are those
    :func:`column_stats` computes now. Bounds recorded as None for a decimal column are
    right: writers before decimal statistics left them out (such files prune by nothing)."""
    if recorded == computed:
        return True
    if recorded is None or recorded[:2] != (None, None):
        return False
    return isinstance(computed[0], decimal.Decimal) and recorded[2:] == computed[2:]


def _plain(value: Any) -> Any:
    """A statistics value the metadata format holds exactly; others become None (no pruning)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, decimal.Decimal):
        return value if value.is_finite() else None
    if isinstance(value, dt.time | dt.timedelta):
        return None
    return value


class GroupBounds:
    """Per-group statistics of the rows of many small files held in one table, sorted by
    file (``groups``: each row's file, ascending): the min and max of each column and its
    nulls, as :func:`column_stats` computes them from one file's rows (one hash aggregation
    per column instead of one ``min_max`` per file and column). Sizes are the file's own:
    :meth:`stats` takes each written file's footer."""

    def __init__(self, table: pa.Table, groups: np.ndarray, count: int, columns: list[str]):
        self.columns = columns
        self.rows = np.bincount(groups, minlength=count)
        self.bounds: dict[str, tuple[list[Any], list[Any]]] = {}
        self.nulls: dict[str, np.ndarray] = {}
        keys = pa.array(groups)
        for name in columns:
            column = table.column(name)
            kind = _bounds_type(column.type)
            valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
            self.nulls[name] = np.bincount(groups[~valid], minlength=count)
            if orderable(kind):
                self.bounds[name] = _group_min_max(keys, column.cast(kind), count)

    def stats(self, group: int, meta: pq.FileMetaData) -> list[ColumnStat]:
        """The statistics of ``group``'s file, its column sizes from ``meta`` (its footer)."""
        sizes, _ = _footer_chunks(meta, self.columns, statistics=False)  # bounds are ours
        found = []
        for name in self.columns:
            lo, hi = (b[group] for b in self.bounds[name]) if name in self.bounds else (None, None)
            nulls = int(self.nulls[name][group])
            values = int(self.rows[group]) - nulls
            found.append(ColumnStat(name, lo, hi, nulls, values, sizes[name]))
        return found


def _group_min_max(keys: pa.Array, column: pa.ChunkedArray, count: int) -> tuple[list, list]:
    """Each group's (min, max) of ``column`` (None for a group of nulls only), as
    :func:`column_stats` gives them: exact for integers and strings, :func:`_plain` for the
    rest. Every column type a table accepts has a hash kernel (half floats are refused on
    input, as ``min_max`` has none for them either)."""
    low: list[Any] = [None] * count
    high: list[Any] = [None] * count
    found = pa.table({"g": keys, "v": column}).group_by("g", use_threads=False)
    found = found.aggregate([("v", "min_max")])
    pairs = found.column("v_min_max").combine_chunks()
    lows, highs = pairs.field("min").to_pylist(), pairs.field("max").to_pylist()
    for g, lo, hi in zip(found.column("g").to_pylist(), lows, highs, strict=True):
        if lo is not None:
            low[g], high[g] = _plain(lo), _plain(hi)
    return low, high
