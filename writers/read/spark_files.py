"""Spark reads of data files on object stores, read by Python workers through fsspec.

Spark's JVM reads local files itself (``spark.read.parquet``), but it reaches an object store
only through a Hadoop connector (S3A and the like) that a plain PySpark install lacks, and
whose credentials would be configured apart from the table's. So for a table on an object
store the read is a DataFrame of file URLs mapped by ``mapInArrow``: each task opens its files
with fsspec from the plain URL and the table's storage options (plain values shipped in the
task, as writes do), checks them as every lakebraid read does (``read_parquet``: page
checksums, footer), conforms them to the read schema (older files lack newer columns, the
virtual record key is derived) and yields Arrow batches of exactly that schema. The Spark data
source's ``read()`` does the same per file.

File slices with merge-on-read logs, on any file system, are read the same way, one slice per
row (:func:`read_merged`): the task reads the base and the logs and merges them
(``writers.read.units.read_unit``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec
import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

from lakebraid.timeline.durable import filesystem
from lakebraid.writers.read.spark_types import for_spark, spark_schema
from lakebraid.writers.write.datafile import conform, read_parquet
from lakebraid.writers.write.slices import ReadUnit, read_unit
from lakebraid.writers.write.workers import settle

URL = "_braid_url"


class FileRead(msgspec.Struct, frozen=True, kw_only=True):
    """What a reading task needs (plain values): how to open files, what to yield."""

    storage: dict[str, Any]
    derive_key: str | None  # the key column of a virtual _braid_record_key
    ordering: str | None = None  # merged slices: the precombine column of event-time order
    keys: tuple[str, ...] | None = None  # merged slices: a read of these record keys only


def read_file(url: str, read: FileRead, schema: pa.Schema) -> pa.Table:
    """One data file, checked and conformed to ``schema``."""
    fs, path = filesystem(url, read.storage)
    return conform(read_parquet(fs, path), schema, read.derive_key)


def _task(
    each: Callable[[Any, FileRead, pa.Schema], pa.Table],
    packed: bytes,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """A read task: ``each`` (:func:`read_file` of a URL, :func:`_merged` of a slice) of
    every row's value."""
    settle()
    read = msgspec.msgpack.decode(packed, type=FileRead)
    yield from _yielded(schema, (each(v, read, schema) for b in batches for v in _rows(b)))


def _rows(batch: pa.RecordBatch) -> list[Any]:
    return batch.column(0).to_pylist()


def _yielded(schema: pa.Schema, tables: Iterator[pa.Table]) -> Iterator[pa.RecordBatch]:
    """Each table's batches (in ``schema``), in exactly the types Spark was promised
    (``spark_schema(schema)``)."""
    out = spark_schema(schema)
    for table in tables:
        for batch in for_spark(table, out).to_batches():
            yield pa.RecordBatch.from_arrays(batch.columns, schema=out)


def read_files(
    spark: Any,
    urls: Sequence[str],
    schema: pa.Schema,
    storage: dict[str, Any],
    derive_key: str | None,
) -> Any:
    """A DataFrame of the rows of ``urls`` with ``schema``, read by Python workers: one task
    per file up to four per core, files spread evenly over the tasks."""
    slices = max(1, min(len(urls), 4 * spark.sparkContext.defaultParallelism))
    packed = msgspec.msgpack.encode(FileRead(storage=storage, derive_key=derive_key))
    frame = spark.createDataFrame([(u,) for u in urls], f"{URL} string")
    return frame.repartition(slices).mapInArrow(
        functools.partial(_task, read_file, packed, schema), from_arrow_schema(spark_schema(schema))
    )


def _merged(unit: dict[str, Any], read: FileRead, schema: pa.Schema) -> pa.Table:
    """One file slice with logs (URLs), merged (``read_unit``)."""
    opened = [filesystem(u, read.storage) for u in [*unit["logs"], unit["base"]] if u]
    fs, paths = opened[0][0], [path for _, path in opened]
    base = paths[-1] if unit["base"] else None
    local = ReadUnit(base, tuple(paths[: len(unit["logs"])]), read.keys, unit["base_size"])
    return read_unit(fs, local, schema, read.derive_key, read.ordering, threads=False)


def read_merged(
    spark: Any,
    units: Sequence[ReadUnit],
    schema: pa.Schema,
    storage: dict[str, Any],
    derive_key: str | None,
    ordering: str | None,
) -> Any:
    """A DataFrame of the merged rows of ``units`` (file slices with logs, as URLs): one
    slice per row, up to four tasks per core. The units' ``keys`` (one read's: the same in
    every unit) travel once, in the task's :class:`FileRead`."""
    slices = max(1, min(len(units), 4 * spark.sparkContext.defaultParallelism))
    keys = units[0].keys if units else None
    read = FileRead(storage=storage, derive_key=derive_key, ordering=ordering, keys=keys)
    packed = msgspec.msgpack.encode(read)
    frame = spark.createDataFrame(
        [((u.base, list(u.logs), u.base_size),) for u in units],
        f"{URL} struct<base: string, logs: array<string>, base_size: bigint>",
    )
    return frame.repartition(slices).mapInArrow(
        functools.partial(_task, _merged, packed, schema), from_arrow_schema(spark_schema(schema))
    )


def task_values(units: Sequence[ReadUnit], url: Callable[[str], str]) -> list[Any]:
    """One plain value per unit for a read task (``url``: a path's URL): a plain file's URL,
    or a slice with logs as ``{"base": url or None, "logs": [urls], "base_size": int}``."""
    return [
        url(u.base)  # type: ignore[arg-type]
        if not u.logs
        else {
            "base": u.base and url(u.base),
            "logs": [url(p) for p in u.logs],
            "base_size": u.base_size,
        }
        for u in units
    ]


def read_value(value: Any, read: FileRead, schema: pa.Schema) -> pa.Table:
    """The rows of one :func:`task_values` value, in ``schema``."""
    return (
        read_file(value, read, schema) if isinstance(value, str) else _merged(value, read, schema)
    )
