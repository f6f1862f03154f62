"""The data table's Parquet files: their schema (the table's columns, then
``_braid_commit_time`` and ``_braid_record_key``), reading one checked, conforming rows to a
schema; the column statistics of a written file are ``index.file_stats``' (re-exported here).

A table whose record key is a string or integer column has a *virtual* ``_braid_record_key``:
data files do not hold it (it is ``cast(key as string)``, and Arrow and Spark write integers
alike), readers derive it (:func:`conform` with ``derive_key``). Other key types keep the
physical column.

Integrity (``metadata.integrity``): data files are written with Parquet page checksums and
read with them verified, their footer schema checked against pyarrow's ``ARROW:schema`` note;
a damaged file raises :class:`writers.errors.CorruptDataFileError` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.index.file_stats import column_stats as column_stats  # re-exported
from lakebraid.index.file_stats import footer_statistics as footer_statistics  # re-exported
from lakebraid.index.file_stats import stats_columns as stats_columns  # re-exported
from lakebraid.index.keys import RECORD_KEY
from lakebraid.metadata.arrow_records import arrow_bytes, fixed_width_array
from lakebraid.metadata.files import decode_threaded, open_file, storage_read
from lakebraid.metadata.integrity import READ_OPTIONS, check_decoded, check_footer, guarded
from lakebraid.timeline.durable import is_local
from lakebraid.timeline.table_config import FieldSpec, text_to_type
from lakebraid.writers.errors import CorruptDataFileError

COMMIT_TIME = "_braid_commit_time"
Spec = Sequence[tuple[str, str, bool]]  # (name, type text, nullable) of the table's columns
# text built in one piece by _decoded at most (above it, fresh pages cost more than Arrow's
# cast: a 2M-row commit time, 34 MB, took 31 ms against Arrow's 19; 1M rows 2.1 against 10)
REPEAT_BYTES = 16 << 20
# the Parquet codec of data files by where they are written: on a local disk LZ4 (Parquet's
# LZ4_RAW), which the reads that follow decode fastest; on an object store zstd, half the bytes
# to upload and download (the benchmark's 333k-row files: LZ4 3.3 MB, written in 78 ms and
# read in 31; zstd 1.6 MB, 106 and 46 ms). Readers take either (a file names its codec).
DATA_CODEC = {True: "lz4", False: "zstd"}  # keyed by ``timeline.durable.is_local``


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


def dictionaries_kept(schema: pa.Schema, found: pa.Schema) -> pa.Schema:
    """``schema`` with the string fields an old file holds as Arrow dictionaries (its
    ``ARROW:schema`` note; ``writers.write.encoding`` chose them) kept as dictionaries."""
    fields = []
    for field in schema:
        kind = found.field(field.name).type if field.name in found.names else None
        if kind is not None and pa.types.is_dictionary(kind) and kind.value_type == field.type:
            field = field.with_type(kind)
        fields.append(field)
    return pa.schema(fields)


def stored_keys(table: pa.Table, derive_key: str | None = None) -> pa.ChunkedArray:
    """The record keys of rows as a data file stores them (``derive_key``: as in
    :func:`conform`), as text."""
    return pc.cast(table.column(derive_key or RECORD_KEY), pa.string())


def conform(table: pa.Table, schema: pa.Schema, derive_key: str | None = None) -> pa.Table:
    """Select and cast ``table`` to ``schema``; missing nullable columns become nulls.
    ``derive_key``: the key column of a virtual ``_braid_record_key``, which is derived
    from it (a physical one an older file may hold is equal and ignored)."""
    if derive_key is None and table.schema.equals(schema, check_metadata=True):
        return table  # already in it (a log block written in the table's schema)
    columns = []
    for field in schema:
        if field.name == RECORD_KEY and derive_key is not None:
            columns.append(stored_keys(table, derive_key))
        elif field.name in table.column_names:
            column = table.column(field.name)
            columns.append(cast_column(column, field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def cast_column(column: pa.ChunkedArray, kind: pa.DataType) -> pa.ChunkedArray:
    """``column`` cast to ``kind`` (itself when it has that type); text dictionaries (a
    file's commit time, a partition column, any low-cardinality column) are decoded by
    :func:`_decoded`, several times faster than Arrow's cast."""
    if column.type == kind:
        return column
    dictionary = pa.types.is_dictionary(column.type)
    if kind != pa.string() or not dictionary or column.type.value_type != kind:
        return column.cast(kind)
    return pa.chunked_array([_decoded(chunk) for chunk in column.chunks], kind)


def _decoded(chunk: pa.DictionaryArray) -> pa.Array:
    """A text dictionary chunk as text, equal to Arrow's cast. Without nulls, when the text
    fits :data:`REPEAT_BYTES`: a chunk whose every row holds a one-value dictionary's value
    is built from that value; a dictionary of values of one width in bytes (commit times,
    codes) by a numpy gather of fixed-width items (a 333k-row chunk: 0.6 ms against Arrow's
    2.6 for one byte, 1.8 against 2.4 for 17); else Arrow's cast."""
    dictionary, count = chunk.dictionary, len(chunk)
    if chunk.null_count or dictionary.null_count or not count or not len(dictionary):
        return chunk.cast(pa.string())
    offsets = np.frombuffer(
        dictionary.buffers()[1], np.int32, len(dictionary) + 1, dictionary.offset * 4
    )
    widths = np.diff(offsets)
    width = int(widths[0])
    if not width or count * width > REPEAT_BYTES or bool((widths != width).any()):
        return chunk.cast(pa.string())
    text = np.frombuffer(
        dictionary.buffers()[2], np.uint8, int(offsets[-1] - offsets[0]), int(offsets[0])
    )
    indices = chunk.indices.to_numpy()
    if not 0 <= indices.min() <= indices.max() < len(dictionary):  # invalid: Arrow's error
        return chunk.cast(pa.string())  # (numpy would count a negative one from the end)
    data, out = arrow_bytes(count * width)  # Arrow's memory, as every buffer of a read
    if len(dictionary) == 1:
        _repeat(out, text)
    else:  # indices checked: "clip" writes straight into ``out`` ("raise" buffers a copy)
        np.take(text.view(f"V{width}"), indices, out=out.view(f"V{width}"), mode="clip")
    return fixed_width_array(pa.string(), count, width, data)


def _repeat(out: np.ndarray, item: np.ndarray) -> None:
    """Fill ``out`` (bytes) with ``item`` repeated: doubling copies, each one ``memcpy``."""
    out[: len(item)] = item
    done = len(item)
    while done < len(out):
        step = min(done, len(out) - done)
        out[done : done + step] = out[:step]
        done += step


def read_parquet(
    fs: AbstractFileSystem,
    path: str,
    *,
    threads: bool = True,
    dictionaries: pa.Schema | None = None,
    columns: Sequence[str] | None = None,
    size: int | None = None,
) -> pa.Table:
    """A Parquet file (``columns``: only those of them the file has); local files through
    Arrow's own file system (no Python file object crosses into Arrow's I/O threads). The
    dictionary-typed fields of ``dictionaries`` are read as dictionaries (no string per row).
    Page checksums are verified and the footer checked; a damaged file raises
    :class:`CorruptDataFileError`, as does a file of another ``size`` than the table lists
    (replaced or cut since its commit: another valid Parquet file would read as this one).
    A whole file on an object store is one GET (no size request, no separate footer read)."""
    keep = [f.name for f in dictionaries or [] if pa.types.is_dictionary(f.type)]
    options: dict[str, Any] = dict(read_dictionary=keep or None, **READ_OPTIONS)
    if columns is None and not is_local(fs):
        with storage_read(path):
            data = fs.cat_file(path)
        _check_size(path, len(data), size)
        return parquet_in(data, path, threads=threads, options=options)[0]
    with guarded(path, CorruptDataFileError):
        with (
            open_file(fs, path, memory_map=True, whole=columns is None) as source,
            pq.ParquetFile(source, **options) as parquet,
        ):
            if isinstance(source, pa.NativeFile):  # local: its size known without a request
                _check_size(path, source.size(), size)
            return _read_checked(parquet, threads, columns)


def _check_size(path: str, actual: int, listed: int | None) -> None:
    if listed is not None and actual != listed:
        raise CorruptDataFileError(
            path, f"it holds {actual} bytes where the table lists {listed} (replaced or cut)"
        )


def parquet_in(
    data: bytes | memoryview | pa.Buffer,
    path: str,
    *,
    threads: bool = True,
    options: dict[str, Any] | None = None,
) -> tuple[pa.Table, pq.FileMetaData]:
    """The rows and the footer of a whole Parquet file held in ``data`` (``path`` names it in
    errors), checked as :func:`read_parquet` checks a file (``options``: the reader's, by
    default :data:`READ_OPTIONS`)."""
    with (
        guarded(path, CorruptDataFileError),
        pq.ParquetFile(pa.BufferReader(data), **(options or READ_OPTIONS)) as parquet,
    ):
        return _read_checked(parquet, threads, None), parquet.metadata


def _read_checked(
    parquet: pq.ParquetFile, threads: bool, columns: Sequence[str] | None
) -> pa.Table:
    meta = parquet.metadata
    check_footer(meta)
    if columns is not None:
        columns = [c for c in columns if c in parquet.schema_arrow.names]
    table = parquet.read(columns=columns, use_threads=decode_threaded(meta, threads))
    check_decoded(table)
    return table


def stamped(upserts: pa.Table, instant: str) -> pa.Table:
    """The upserted rows with this commit's time (one dictionary value, no string per row)."""
    if COMMIT_TIME in upserts.column_names:
        upserts = upserts.drop_columns([COMMIT_TIME])
    stamp = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(upserts.num_rows, dtype=np.int32)), pa.array([instant], pa.string())
    )
    return upserts.append_column(COMMIT_TIME, stamp)
