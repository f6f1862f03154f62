"""The data table's Parquet files: their schema (the table's columns, then
``_braid_commit_time`` and ``_braid_record_key``), reading one checked, conforming rows to a
schema, and the column statistics of a written file.

A table whose record key is a string or integer column has a *virtual* ``_braid_record_key``:
data files do not hold it (it is ``cast(key as string)``, and Arrow and Spark write integers
alike), readers derive it (:func:`conform` with ``derive_key``). Other key types keep the
physical column.

Integrity (``metadata.integrity``): data files are written with Parquet page checksums and
read with them verified, their footer schema checked against pyarrow's ``ARROW:schema`` note;
a damaged file raises :class:`writers.errors.CorruptDataFileError` naming it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.index.keys import RECORD_KEY
from lakebraid.metadata import settings
from lakebraid.metadata.commits import ColumnStat
from lakebraid.metadata.files import open_file
from lakebraid.metadata.integrity import READ_OPTIONS, check_decoded, check_footer, guarded
from lakebraid.timeline import config as cfg
from lakebraid.timeline.table_config import FieldSpec, text_to_type
from lakebraid.writers.errors import CorruptDataFileError

COMMIT_TIME = "_braid_commit_time"
Spec = Sequence[tuple[str, str, bool]]  # (name, type text, nullable) of the table's columns


def spec_of(schema: Sequence[FieldSpec]) -> list[tuple[str, str, bool]]:
    """A table schema as plain (name, type text, nullable) tuples, safe to ship to tasks."""
    return [(f.name, f.type, f.nullable) for f in schema]


def data_schema(schema: Spec) -> pa.Schema:
    """The schema of the table's rows as read: its columns then the meta columns."""
    fields = [pa.field(n, text_to_type(t), nullable) for n, t, nullable in schema]
    fields += [pa.field(COMMIT_TIME, pa.string(), False), pa.field(RECORD_KEY, pa.string(), False)]
    return pa.schema(fields)


def stores_record_key(key_type: pa.DataType) -> bool:
    """Whether data files hold ``_braid_record_key``: not for string and integer keys, whose
    string form every engine derives alike (see the module doc)."""
    textual = pa.types.is_string(key_type) or pa.types.is_large_string(key_type)
    return not (textual or pa.types.is_integer(key_type))


def virtual_key(schema: Spec, record_key: str) -> str | None:
    """``record_key`` when the table's ``_braid_record_key`` is virtual, else None."""
    for name, text, _ in schema:
        if name == record_key:
            return None if stores_record_key(text_to_type(text)) else record_key
    return None


def file_schema(schema: Spec, record_key: str) -> pa.Schema:
    """The schema of data files: :func:`data_schema` less a virtual record key column."""
    full = data_schema(schema)
    if virtual_key(schema, record_key) is None:
        return full
    return full.remove(full.get_field_index(RECORD_KEY))


def conform(table: pa.Table, schema: pa.Schema, derive_key: str | None = None) -> pa.Table:
    """Select and cast ``table`` to ``schema``; missing nullable columns become nulls.
    ``derive_key``: the key column of a virtual ``_braid_record_key``, which is derived
    from it (a physical one an older file may hold is equal and ignored)."""
    columns = []
    for field in schema:
        if field.name == RECORD_KEY and derive_key is not None:
            columns.append(pc.cast(table.column(derive_key), pa.string()))
        elif field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def read_parquet(
    fs: AbstractFileSystem,
    path: str,
    *,
    threads: bool = True,
    dictionaries: pa.Schema | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """A Parquet file (``columns``: only those of them the file has); local files through
    Arrow's own file system (no Python file object crosses into Arrow's I/O threads). The
    dictionary-typed fields of ``dictionaries`` are read as dictionaries (no string per row).
    Page checksums are verified and the footer checked; a damaged file raises
    :class:`CorruptDataFileError`."""
    keep = [f.name for f in dictionaries or [] if pa.types.is_dictionary(f.type)]
    options: dict[str, Any] = dict(read_dictionary=keep or None, **READ_OPTIONS)
    with guarded(path, CorruptDataFileError):
        with (
            open_file(fs, path, memory_map=True) as source,
            pq.ParquetFile(source, **options) as parquet,
        ):
            return _read_checked(parquet, threads, columns)


def _read_checked(
    parquet: pq.ParquetFile, threads: bool, columns: Sequence[str] | None
) -> pa.Table:
    check_footer(parquet.metadata)
    if columns is not None:
        columns = [c for c in columns if c in parquet.schema_arrow.names]
    table = parquet.read(columns=columns, use_threads=threads)
    check_decoded(table)
    return table


def stats_columns(schema: Sequence[FieldSpec], options: cfg.Options) -> list[str]:
    """The columns whose statistics the metadata table records: the first
    ``metadata.column_stats.max.columns`` of the schema."""
    return [f.name for f in schema][: options.get(settings.STATS_MAX_COLUMNS)]


def column_stats(table: pa.Table, meta: pq.FileMetaData, columns: list[str]) -> list[ColumnStat]:
    """Min, max, nulls, values and compressed bytes of each column of a written file.

    Integer and string bounds come from the footer the writer just made (exact: Arrow writes
    untruncated statistics, or none); other types are computed from the rows."""
    sizes = {name: 0 for name in columns}
    footer: dict[str, list[Any]] = {}
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for c in range(group.num_columns):
            chunk = group.column(c)
            path = chunk.path_in_schema.split(".")[0]
            if path in sizes:
                sizes[path] += chunk.total_compressed_size
                footer.setdefault(path, []).append(chunk.statistics)
    stats = []
    for name in columns:
        column = table.column(name)
        lo = hi = None
        kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
        if _orderable(kind) and column.null_count < len(column):
            bounds = _footer_bounds(kind, footer.get(name, []))
            if bounds is None:
                found = pc.min_max(column.cast(kind))
                bounds = (_plain(found["min"].as_py()), _plain(found["max"].as_py()))
            lo, hi = bounds
        stats.append(
            ColumnStat(
                name, lo, hi, column.null_count, len(column) - column.null_count, sizes[name]
            )
        )
    return stats


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


def _orderable(kind: pa.DataType) -> bool:
    return not (pa.types.is_nested(kind) or pa.types.is_null(kind))


def _plain(value: Any) -> Any:
    """A statistics value the metadata format holds exactly; others become None (no pruning)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, decimal.Decimal | dt.time | dt.timedelta):
        return None
    return value
