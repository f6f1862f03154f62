"""Reads of the data table: the file slices as of a read point come from the metadata table's
``files`` partition (data folders are never listed), pruned with ``column_stats``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from fsspec import AbstractFileSystem
from pyspark.sql import functions as F

from timeline.table_config import FieldSpec
from writers.filegroup import RECORD_KEY, conform, data_schema, read_parquet, virtual_key
from writers.pruning import prune


def table_schema(schema: Sequence[FieldSpec]) -> pa.Schema:
    return data_schema(spec_of(schema))


def spec_of(schema: Sequence[FieldSpec]) -> list[tuple[str, str, bool]]:
    return [(f.name, f.type, f.nullable) for f in schema]


def read_arrow_files(
    fs: AbstractFileSystem, paths: Sequence[str], schema: Sequence[FieldSpec], record_key: str
) -> pa.Table:
    """The rows of ``paths`` in the table's read schema (a virtual record key derived)."""
    target = table_schema(schema)
    derive = virtual_key(spec_of(schema), record_key)

    def one(path: str, threads: bool) -> pa.Table:
        return conform(read_parquet(fs, path, threads=threads), target, derive)

    if len(paths) <= 1:
        parts = [one(path, True) for path in paths]
    else:  # many files: one per thread (each read single-threaded), in order
        with ThreadPoolExecutor(min(len(paths), max(2, os.cpu_count() or 2))) as pool:
            parts = list(pool.map(lambda path: one(path, False), paths))
    return pa.concat_tables(parts) if parts else target.empty_table()


def selected_paths(client: Any, as_of: str | None, where: Any) -> list[str]:
    """Data files to read: all of the read point's, minus those ``where`` rules out."""
    reader = client.metadata.reader(as_of)
    listing = reader.files()
    pairs = [(p, name) for p, files in sorted(listing.items()) for name in sorted(files)]
    if where is not None and pairs:
        pairs = prune(pairs, reader.column_stats(), where)
    layout = client.table.layout
    return [layout.data_file(p, name) for p, name in pairs]


def read_spark(client: Any, as_of: str | None, where: Any) -> Any:
    spark = client.spark
    schema = table_schema(client.schema(as_of))
    paths = selected_paths(client, as_of, where)
    if not paths:
        frame = spark.createDataFrame(schema.empty_table())
    else:
        fs = client.table.fs
        urls = [fs.unstrip_protocol(p) for p in paths]
        frame = spark.read.option("mergeSchema", "true").parquet(*urls)
        derive = virtual_key(spec_of(client.schema(as_of)), client.table.config.record_key)
        columns = [
            F.col(derive).cast("string").alias(RECORD_KEY)
            if n == RECORD_KEY and derive is not None
            else F.col(n)
            for n in schema.names
            if n in frame.columns or (n == RECORD_KEY and derive is not None)
        ]
        frame = frame.select(*columns)
    if where is not None:
        frame = frame.where(where)
    return frame
