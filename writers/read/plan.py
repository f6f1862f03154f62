"""Reads of the data table: the file slices as of a read point come from the metadata table's
``files`` partition (data folders are never listed), pruned with ``column_stats``.

A ``where`` given as SQL text is pruned from the text as the session reads it (its time zone,
escaping, case and timestamp settings: :func:`sql_settings`); a Spark Column is first written
as SQL by Spark's own analyzer against the read schema (:func:`filter_sql`: the casts its type
coercion adds stay explicit), then read the same way. Either way the filter runs on the rows.

**NaN and Spark's Parquet filters.** Spark pushes a filter into its Parquet reader, which skips
row groups by their statistics and dictionaries (parquet-mr). For floating-point columns those
disagree with Spark's own comparisons: Parquet statistics leave NaN out (so ``v > 5`` skipped a
row group holding NaN, which Spark sorts above every number) and dictionaries compare ``-0.0``
and ``0.0`` as different (so ``v = 0.0`` skipped a group holding ``-0.0``). The rows were lost
before Spark's own filter saw them, for ``read(where=)`` and ``read().where()`` alike. When
the read schema has a float or double column, :func:`read_spark` therefore turns those
row-group filters off for this read only, as options of its own ``spark.read`` (they reach
the Hadoop configuration of this scan alone; the session's settings are untouched). File
pruning (ours, from ``column_stats``, NaN-aware) is what skips data: a lakebraid file is one
row group unless it outgrows the writer's row group size, so little skipping is lost; the
reader still reads only the columns a query needs. (Disabling ``spark.sql.parquet.filterPushdown``
would be global to the session; a cast of every float column would change ``-0.0``.)

A table on an object store is read by Python workers instead (``writers.read.spark_files``):
Spark's JVM has no connector for the store, and its Parquet filters are not involved.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import msgspec
import pyarrow as pa
from fsspec import AbstractFileSystem
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, from_arrow_type

from lakebraid.index.column_stats import keep_files
from lakebraid.index.file_stats import recorded_columns
from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.scope import is_scoped
from lakebraid.index.secondary import groups_of_keys, matching_groups, wanted_keys
from lakebraid.index.sql_filter import Condition, SqlSettings, parse_conditions
from lakebraid.metadata.commits import schema_as_of
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.durable import is_local, storage_of
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec
from lakebraid.writers.errors import InputError
from lakebraid.writers.read.columns import column
from lakebraid.writers.read.filters import any_of, apply, parse_filters
from lakebraid.writers.read.spark_files import read_files, read_merged
from lakebraid.writers.read.spark_types import spark_schema, spark_type
from lakebraid.writers.read.units import Keep, ReadUnit, read_units
from lakebraid.writers.read.units import plan_units as plan_read_units
from lakebraid.writers.write.datafile import (
    data_schema,
    spec_of,
    virtual_key,
)
from lakebraid.writers.write.operations import ordering

Pair = tuple[str, str]  # (partition, data file name)

# parquet-mr's row-group filters (see the module docstring): off for reads with float columns
NAN_SAFE_PARQUET = {
    "parquet.filter.stats.enabled": "false",
    "parquet.filter.dictionary.enabled": "false",
    "parquet.filter.columnindex.enabled": "false",
    "parquet.filter.bloom.enabled": "false",
}


READ_MODES = ("snapshot", "read_optimized")


def merges_logs(mode: object, path: str) -> bool:
    """Whether a read of ``mode`` merges logs (``snapshot``) or reads bases only."""
    if mode not in READ_MODES:
        raise InputError(
            f"read mode {mode!r} is not one of {', '.join(map(repr, READ_MODES))}", table=path
        )
    return mode == "snapshot"


def table_schema(schema: Sequence[FieldSpec]) -> pa.Schema:
    return data_schema(spec_of(schema))


def read_threads(fs: AbstractFileSystem) -> int:
    """Files read at once in this process (each decoded on its own thread): on an object
    store twice the cores, so one file's download overlaps another's decoding; on a local
    disk one more than the cores (at least 2): while one thread runs a file's Python steps
    (holding the GIL) the others decode, and more only contend for the GIL in the merges of
    merge-on-read slices. 2 cores, alternated reads, median (two runs): 10M rows copy-on-write
    328 / 353 ms on 3 threads against 353 / 386 on 2, merge-on-read 564 / 562 against 555 /
    580; 100 files of 20,000 rows 123 / 117 against 134 / 122 ms; merge-on-read on 8 threads
    1.576 s against 1.416 on 2 (an earlier build)."""
    cores = max(2, os.cpu_count() or 2)
    return cores + 1 if is_local(fs) else 2 * cores


def read_arrow_files(
    fs: AbstractFileSystem, paths: Sequence[str], schema: Sequence[FieldSpec], record_key: str
) -> pa.Table:
    """The rows of ``paths`` (plain data files) in the table's read schema (a virtual record
    key derived): :func:`writers.read.units.read_units` of one unit per file."""
    derive = virtual_key(spec_of(schema), record_key)
    threads = read_threads(fs)
    units = [ReadUnit(path) for path in paths]
    return read_units(fs, units, table_schema(schema), derive, None, threads)


def read_arrow_units(
    table: TableTimelines, point: str | None, units: Sequence[ReadUnit]
) -> pa.Table:
    """The rows of ``units`` of ``point`` (already checked; :func:`plan_units`), read in this
    process: one unit per thread, file slices with logs merged (``writers.read.units``)."""
    fields = schema_as_of(table, point)
    derive = virtual_key(spec_of(fields), table.config.record_key)
    threads = read_threads(table.fs)
    return read_units(table.fs, units, table_schema(fields), derive, ordering(table), threads)


def plan_units(
    table: TableTimelines, point: str | None, keep: Keep | None = None, logs: bool = True
) -> list[ReadUnit]:
    """The one read plan: the file slices of a read point (``point``, already checked) from
    the metadata table's ``files`` listing, minus those ``keep`` (given the (partition, file)
    pairs and the ``column_stats``) rules out (``writers.read.units``; ``logs=False``: base
    files only, a read-optimized read). No data file is opened."""
    return plan_read_units(table.layout, MetadataTable(table).reader(point), keep, logs)


def plan_paths(table: TableTimelines, point: str | None, keep: Keep | None = None) -> list[str]:
    """The data files of :func:`plan_units` (bases and logs)."""
    return [path for unit in plan_units(table, point, keep) for path in unit.paths()]


def keep_matching(
    conditions: Sequence[Condition], schema: pa.Schema, keys: pa.Array | None = None
) -> Keep:
    """The pruning of a read's conditions: the record index for ``keys`` (those of a
    key-equality condition: only the file groups holding them) and the secondary indexes
    (only the file groups whose rows hold a wanted value; ``index.secondary``), then the
    statistics of the columns recorded at the read point (``index.file_stats
    .recorded_columns``: the first ones of the schema and the built ones; a dropped column's
    leftovers are not used)."""

    def keep(pairs: list[Pair], reader: MetadataReader) -> list[Pair]:
        if not conditions:
            return pairs
        types = {f.name: f.type for f in schema}
        groups = matching_groups(reader, conditions, types)
        if keys is not None:
            held = groups_of_keys(reader, keys)
            groups = held if groups is None else groups & held
        if groups is not None:
            pairs = [(p, name) for p, name in pairs if (p, name[:36]) in groups]
        recorded = set(recorded_columns(schema.names, reader.options, reader.point))
        usable = [c for c in conditions if c.column in recorded]
        if not (pairs and usable):
            return pairs
        return keep_files(pairs, reader.column_stats(columns={c.column for c in usable}), usable)

    return keep


def selected_units(
    table: TableTimelines,
    spark: Any,
    point: str | None,
    where: Any,
    schema: pa.Schema | None = None,
    logs: bool = True,
) -> list[ReadUnit]:
    """File slices to read: all of the read point's (already checked), minus those ``where``
    (SQL text or a Spark Column, read as ``spark`` reads it) rules out. ``schema``: the read
    schema at ``point`` when the caller has it; ``logs=False``: base files only."""
    if where is None:
        return plan_units(table, point, logs=logs)
    read_schema = schema or table_schema(schema_as_of(table, point))
    text, settings = filter_sql(spark, read_schema, where)
    conditions = parse_conditions(text, settings) if text is not None else []
    _check_columns(table.path, conditions, read_schema, settings.case_sensitive)
    return _matching_units(table, point, [conditions], read_schema, logs)


def read_arrow(
    table: TableTimelines, point: str | None, logs: bool, filters: object = None
) -> pa.Table:
    """The rows of ``point`` (already checked) read in this process, those ``filters`` hold
    for when given (:func:`filtered_units`)."""
    if filters is None:
        return read_arrow_units(table, point, plan_units(table, point, logs=logs))
    units, expression = filtered_units(table, point, filters, logs)
    return apply(read_arrow_units(table, point, units), expression, filters, table.path)


def filtered_units(
    table: TableTimelines, point: str | None, filters: object, logs: bool = True
) -> tuple[list[ReadUnit], pa.compute.Expression]:
    """File slices an in-process read with pyarrow ``filters`` reads (``writers.read
    .filters``: each conjunction pruned as :func:`selected_units` prunes a ``where``, a file
    kept when any keeps it), and the filters' expression, which the caller runs on the rows."""
    read_schema = table_schema(schema_as_of(table, point))
    conjunctions, expression = parse_filters(filters, read_schema, table.path)
    return _matching_units(table, point, conjunctions, read_schema, logs), expression


def _matching_units(
    table: TableTimelines,
    point: str | None,
    conjunctions: Sequence[Sequence[Condition]],
    schema: pa.Schema,
    logs: bool,
) -> list[ReadUnit]:
    """The units of ``point`` that any of ``conjunctions`` may match (:func:`keep_matching`
    each: the record index for the keys one names, unless the index is partition-scoped,
    which needs each key's partition). With one conjunction naming record keys, the log
    blocks whose footers rule them out are skipped too (the filter drops other keys' rows)."""
    types = {f.name: f.type for f in schema}
    scoped = is_scoped(table.config)
    keys = [
        None if scoped else wanted_keys(conditions, table.config.record_key, types)
        for conditions in conjunctions
    ]
    keeps = [keep_matching(c, schema, k) for c, k in zip(conjunctions, keys, strict=True)]
    units = plan_units(table, point, keeps[0] if len(keeps) == 1 else any_of(keeps), logs)
    if len(keys) != 1 or keys[0] is None:
        return units
    wanted = tuple(keys[0].to_pylist())
    return [msgspec.structs.replace(u, keys=wanted) if u.logs else u for u in units]


def _check_columns(
    path: str, conditions: Sequence[Condition], schema: pa.Schema, case_sensitive: bool
) -> None:
    """Refuse a filter one of whose comparisons names no column of the read schema (Spark
    would not resolve it either; a read that ignored it would return every file)."""
    names = set(schema.names)
    folded = {n.lower() for n in names}
    for condition in conditions:
        name = condition.column
        if name in names or (not case_sensitive and name.lower() in folded):
            continue
        raise InputError(
            f"the filter compares {name!r}, which is no column of the table at this read "
            f"point (columns: {', '.join(schema.names)}); correct the filter (if {name!r} is a "
            "function without arguments, write it with parentheses)",
            table=path,
        )


def selected_paths(table: TableTimelines, spark: Any, point: str | None, where: Any) -> list[str]:
    """The data files (bases and logs) of :func:`selected_units`."""
    return [p for unit in selected_units(table, spark, point, where) for p in unit.paths()]


def empty_frame(spark: Any, schema: pa.Schema) -> Any:
    """An empty DataFrame of ``schema`` (Spark types as the data source declares them: a
    timestamp without time zone is timestamp_ntz, not Spark's inferred timestamp)."""
    spark_arrow = spark_schema(schema)
    return spark.createDataFrame(spark_arrow.empty_table(), schema=from_arrow_schema(spark_arrow))


def _conf(spark: Any, key: str) -> str | None:
    try:
        return str(spark.conf.get(key))
    except Exception:  # an unknown or unreadable setting: the caller assumes the worst
        return None


def sql_settings(spark: Any, schema: pa.Schema) -> SqlSettings:
    """How the session reads SQL text (an unreadable setting makes pruning more careful);
    ``spark`` None: as the embedded session's defaults read it (``SqlSettings()``)."""
    try:
        spark_types = from_arrow_schema(spark_schema(schema)).fields
        types = {f.name: f.dataType.simpleString() for f in spark_types}
    except Exception:  # a type PySpark cannot map: no cast of a column is understood
        types = {}
    if spark is None:
        return SqlSettings(column_types=types)
    return SqlSettings(
        time_zone=_conf(spark, "spark.sql.session.timeZone"),
        timestamp_ltz=_conf(spark, "spark.sql.timestampType") == "TIMESTAMP_LTZ",
        escaped_string_literals=_conf(spark, "spark.sql.parser.escapedStringLiterals") != "false",
        double_quoted_identifiers=_conf(spark, "spark.sql.ansi.doubleQuotedIdentifiers") != "false",
        case_sensitive=_conf(spark, "spark.sql.caseSensitive") != "false",
        column_types=types,
    )


def filter_sql(spark: Any, schema: pa.Schema, where: Any) -> tuple[str | None, SqlSettings]:
    """``where`` as SQL text and the settings to read it with. A Column is written by Spark's
    analyzer against an empty frame of ``schema`` (its SQL escapes strings and quotes names
    canonically); one it cannot write (or a Spark Connect Column) gives None: no pruning."""
    if where is None:
        return None, SqlSettings()
    settings = sql_settings(spark, schema)
    if isinstance(where, str):
        return where, settings
    canonical = msgspec.structs.replace(  # Spark's own SQL: TIMESTAMP '...' is always LTZ
        settings, escaped_string_literals=False, double_quoted_identifiers=False, timestamp_ltz=True
    )
    try:
        frame = empty_frame(spark, schema).where(where)
        return str(frame._jdf.queryExecution().analyzed().condition().sql()), canonical
    except Exception:  # not a classic Column, or one Spark refuses (the read then says why)
        return None, settings


def read_spark(
    table: TableTimelines, spark: Any, point: str | None, where: Any, logs: bool = True
) -> Any:
    """A DataFrame of the table as of ``point``, a point the caller has already checked
    (``TableTimelines.read_point``); ``logs=False``: base files only (read-optimized)."""
    fields = schema_as_of(table, point)
    schema = table_schema(fields)
    units = selected_units(table, spark, point, where, schema, logs)
    derive = virtual_key(spec_of(fields), table.config.record_key)
    url = table.fs.unstrip_protocol
    merged = [
        ReadUnit(u.base and url(u.base), tuple(map(url, u.logs)), u.keys, u.base_size)
        for u in units
        if u.logs
    ]
    urls = [url(u.base) for u in units if not u.logs and u.base is not None]
    storage = storage_of(table.fs)
    if not urls:
        frame = empty_frame(spark, schema)
    elif not is_local(table.fs):  # no Hadoop connector needed: Python workers read them
        frame = read_files(spark, urls, schema, storage, derive)
    else:
        # page checksums verified on any session, not only the embedded one
        reader = spark.read.option("mergeSchema", "true").option(
            "parquet.page.verify-checksum.enabled", "true"
        )
        if any(pa.types.is_floating(f.type) for f in schema):
            reader = reader.options(**NAN_SAFE_PARQUET)
        frame = _table_columns(reader.parquet(*urls), schema, derive)
    if merged:  # file slices with logs: merged by Python workers, one task per slice
        frame = frame.unionByName(
            read_merged(spark, merged, schema, storage, derive, ordering(table))
        )
    if where is not None:
        frame = frame.where(where)
    return frame


def _table_columns(frame: Any, schema: pa.Schema, derive: str | None) -> Any:
    """``frame`` (data files read by Spark) in the table's read schema: the virtual record key
    derived, and a column none of the files holds (added to the table after they were
    written) as nulls of its type, as every other read gives it (a type PySpark cannot map
    from Arrow is left out, as Spark's own read of those files leaves it)."""
    columns = []
    for field in schema:
        n = field.name
        if n == RECORD_KEY and derive is not None:
            columns.append(column(derive).cast("string").alias(n))
        elif n in frame.columns:
            columns.append(column(n))
        else:
            try:
                kind = from_arrow_type(spark_type(field.type))
            except Exception:  # PySpark has no Spark type for it
                continue
            columns.append(F.lit(None).cast(kind).alias(n))
    return frame.select(*columns)
