"""Writes of a Spark DataFrame by the Spark engine: the input check, then every step as Spark
tasks (``writers.engine.spark.pipeline``: prepare, tag, route, rewrite), committed through
the one envelope (``writers.commit.envelope.run_write``). The driver receives write
statuses without keys and the record-index files the tasks wrote (``index_tasks``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from time import perf_counter
from typing import Any

import msgspec
from pyspark.sql import functions as F

from lakebraid.index.file_groups import checked_files, current_files, current_slices
from lakebraid.index.scope import is_scoped
from lakebraid.metadata.commits import WriteStatus, schema_as_of
from lakebraid.metadata.slices import ReadPoint
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.durable import storage_of
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec
from lakebraid.writers.commit.ahead import TaskWrite
from lakebraid.writers.commit.envelope import run_write
from lakebraid.writers.engine.compaction import Written, compact_if_due
from lakebraid.writers.engine.spark.index_tasks import IndexSink, sink_of
from lakebraid.writers.engine.spark.jobconf import job_settings, refuse_speculation
from lakebraid.writers.engine.spark.pipeline import (
    NULL_ROWS,
    Context,
    rewrite_frame,
    route_frame,
)
from lakebraid.writers.errors import InputError
from lakebraid.writers.read.columns import column as spark_column
from lakebraid.writers.write.datafile import spec_of
from lakebraid.writers.write.inputs import check_input, void_columns
from lakebraid.writers.write.logappend import TaskSet, write_tasks
from lakebraid.writers.write.operations import insert_room, ordering


def check_frame(frame: Any, table: TableTimelines) -> list[FieldSpec]:
    """The schema after writing ``frame``; refuses a frame whose schema does not fit. Null
    record keys and precombine values are refused by the pipeline's first pass over the rows
    (:func:`null_rows_named`), not by a job of their own. A column name holding a dot is
    refused: PySpark's ``mapInArrow`` reads it as a struct field path."""
    dotted = [name for name in frame.columns if "." in name]
    if dotted:
        raise InputError(
            f"columns {dotted} hold a '.', which the Spark engine cannot pass to its Python "
            "tasks (PySpark reads it as a struct field); rename them, or write the rows "
            "in-process (write.inprocess.max.rows above their count)",
            table=table.path,
        )
    return check_input(
        frame.limit(0).toArrow(), table.config, schema_as_of(table), table=table.path
    )


@contextmanager
def null_rows_named(frame: Any, table: TableTimelines) -> Iterator[None]:
    """Turn the failure of a tagging task that met a row with a null record key or precombine
    value, or a NaN precombine value (``pipeline.NULL_ROWS``), into the input check's error,
    which names the column: one such row is collected to check it. Nothing has been written
    then."""
    try:
        yield
    except Exception as exc:
        if NULL_ROWS not in str(exc):
            raise
        config = table.config
        checked = [
            config.record_key,
            *([config.precombine_field] if config.precombine_field else []),
        ]
        null = F.lit(False)
        for column in checked:
            null = null | spark_column(column).isNull()
        floating = {f.name for f in frame.schema if f.dataType.typeName() in ("float", "double")}
        if config.precombine_field in floating:
            null = null | F.isnan(spark_column(config.precombine_field))
        bad = frame.where(null).limit(1).toArrow()
        check_input(bad, config, schema_as_of(table), table=table.path)  # raises InputError
        raise


def context(
    table: TableTimelines,
    point: ReadPoint,
    listing: dict[str, dict[str, str]],
    files: dict[str, dict[str, int]],
    spec: list[tuple[str, str, bool]],
) -> Context:
    """What the executors need; under event-time ordering also the stored rows' files (and
    in a merge-on-read table the slices to merge them from)."""
    config = table.config
    ctx = Context(
        root=table.fs.unstrip_protocol(table.layout.root),
        storage=storage_of(table.fs),
        key=config.record_key,
        partition_fields=list(config.partition_fields),
        precombine=config.precombine_field,
        point=point,
        options={k: str(v) for k, v in table.options.given().items()},
        ordering=ordering(table),
        scoped=is_scoped(config),
    )
    if ctx.ordering is None:
        return ctx
    merge_on_read = config.merge_on_read
    slices = current_slices(files) if merge_on_read else {}
    return msgspec.structs.replace(
        ctx, files=listing, slices=slices, spec=spec, merge_on_read=merge_on_read
    )


def planned(
    metadata: MetadataTable,
    ctx: Context,
    targets: list[tuple[str, str]],
    found: tuple[dict[str, dict[str, str]], dict[str, dict[str, int]]],
    spec: list[tuple[str, str, bool]],
    time: str,
) -> tuple[TaskSet, IndexSink]:
    """The tasks of a Spark write of instant ``time`` to the file groups ``targets`` (``found``:
    the read point's listing and files), and where its tasks write its record index."""
    listing, files = found
    config = metadata.table.config
    tasks = write_tasks(
        targets,
        listing,
        files,
        config.merge_on_read,
        root=ctx.root,
        storage=ctx.storage,
        time=time,
        schema=spec,
        record_key=config.record_key,
        ordering=ctx.ordering,
    )
    sink = sink_of(metadata, ctx.root, ctx.storage, ctx.point, time, ctx.scoped)
    return TaskSet.of(tasks), sink


def write_frame(
    table: TableTimelines, metadata: MetadataTable, frame: Any, operation: str, policy: str
) -> str:
    """Insert, bulk insert or upsert a DataFrame as one commit; returns its instant time."""
    started = perf_counter()
    refuse_speculation(frame.sparkSession, table.path)
    config = table.config
    schema = check_frame(frame, table)
    frame = frame.drop(*void_columns(frame.columns, schema))
    reader = metadata.reader()
    files = checked_files(reader)
    listing = current_files(files)
    room = insert_room(table, reader, listing, operation)
    merge_on_read = config.merge_on_read
    spec = spec_of(schema)
    ctx = context(table, reader.point, listing, files, spec)
    if policy == "upsert" and operation == "insert":
        operation = "upsert"
    written = Written()

    def write(time: str) -> list[WriteStatus] | TaskWrite:
        task_set, sink = planned(metadata, ctx, routed.targets, (listing, files), spec, time)
        frame, targets, key = routed.frame, routed.targets, config.record_key
        return rewrite_frame(frame, targets, task_set, sink, routed.rows, key, routed.costs)

    spark = frame.sparkSession
    with arrow_limits(spark, table.path), null_rows_named(frame, table), job_settings(spark):
        routed = route_frame(
            frame,
            ctx,
            tagging=bool(listing),  # an empty table holds no key: no lookup
            existing=None if operation == "upsert" else policy,
            target_rows=room.target,
            small_rows=room.small,
            operation=operation,
            table=table.path,
            stored=room.rows,
        )
        try:
            read_at = reader.point.read_at
            recorded = written.recording(write)
            time = run_write(table, metadata, operation, read_at, schema, recorded, started)
        finally:
            routed.release()
    if merge_on_read:
        compact_if_due(table, metadata, written)  # never fails the write
    return time


BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"


@contextmanager
def arrow_limits(spark: Any, table: str) -> Iterator[None]:
    """Name the cause when a Spark job of the write fails because one Arrow batch of rows
    outgrew an Arrow buffer (2 GiB in one column): rows too wide for the session's
    ``maxRecordsPerBatch`` without a cap in bytes (``writers.engine.spark.session``). A
    failure inside ``run_write`` reaches it after the write was rolled back."""
    try:
        yield
    except Exception as exc:
        if "OversizedAllocationException" not in str(exc):
            raise
        rows = spark.conf.get(BATCH_ROWS, "10000")
        raise InputError(
            f"a batch of up to {rows} rows sent to Spark's Python workers outgrew an Arrow "
            f"buffer (2 GiB in one column): the rows are too wide for {BATCH_ROWS}={rows}; "
            "lower it (or set spark.sql.execution.arrow.maxBytesPerBatch below 2147483647) "
            "and write again. Nothing was committed.",
            table=table,
        ) from exc
