"""Deletes of keys given as a Spark DataFrame, on Spark: the driver never receives a key.

Stages (the delete's half of ``writers.engine.spark.pipeline``)::

    mapInArrow(keys)               canonical key text (``index.keys.key_array``: the table's
                                   key type) and record-index file group of every key
    repartition(index groups) + mapInArrow(tag)   one lookup task per group: keys once each,
                                   located, the absent ones dropped, each routed back to the
                                   file group that holds it as a delete
    distinct + collect             the (partition, file id) of every file group touched
    repartition(targets) + mapInArrow(rewrite)    as an upsert's rewrite stage: a copy-on-write
                                   base rewritten without the keys, or a merge-on-read delete block
    repartition(groups) + mapInArrow   the keys' tombstones as record-index files
                                   (``index_tasks``)
    collect                        write statuses (no keys), the index files

Null keys are refused before anything runs (one is counted, none collected). A table with a
partition-scoped record index needs each key's partition: the frame's partition columns (of
the table's types, checked first), from which the keys task makes each row's index key
(``partition NUL key``); a frame without them takes the in-process path, which refuses it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from time import perf_counter
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_schema

from lakebraid.index.errors import RecordKeyError
from lakebraid.index.file_groups import checked_files, current_files
from lakebraid.index.keys import RECORD_KEY, key_array
from lakebraid.index.lookup import locate
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION, tag
from lakebraid.index.scope import index_keys, is_scoped, split_keys
from lakebraid.metadata.commits import WriteStatus, schema_as_of
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline import config as cfg
from lakebraid.timeline.durable import filesystem
from lakebraid.timeline.error_wire import executor_errors, ships_errors
from lakebraid.timeline.layout import TableLayout
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import text_to_type
from lakebraid.writers import settings
from lakebraid.writers.commit.ahead import TaskWrite
from lakebraid.writers.commit.envelope import run_write
from lakebraid.writers.engine.compaction import Written, compact_if_due
from lakebraid.writers.engine.spark.jobconf import cache, job_settings, refuse_speculation
from lakebraid.writers.engine.spark.pipeline import (
    NULL_ROWS,
    RI_GROUP,
    Context,
    plain,
    rewrite_frame,
)
from lakebraid.writers.engine.spark.write import context, planned
from lakebraid.writers.read.columns import column
from lakebraid.writers.write.datafile import spec_of
from lakebraid.writers.write.filegroup import OP, OP_DELETE
from lakebraid.writers.write.inputs import is_spark_frame, key_partitions
from lakebraid.writers.write.partition_codes import partition_paths
from lakebraid.writers.write.route import PARTITION, TARGET_FILE_ID
from lakebraid.writers.write.workers import settle

KEYS_SCHEMA = pa.schema([pa.field(RECORD_KEY, pa.string()), pa.field(RI_GROUP, pa.int32())])
TAGGED_SCHEMA = pa.schema(
    [
        pa.field(RECORD_KEY, pa.string()),
        pa.field(OLD_PARTITION, pa.string()),
        pa.field(OLD_FILE_ID, pa.string()),
        pa.field(PARTITION, pa.string()),
        pa.field(OP, pa.int8()),
        pa.field(TARGET_FILE_ID, pa.string()),
    ]
)


@ships_errors
def _keys(
    ctx_bytes: bytes, key_type: str | None, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Each key's canonical text and record-index file group."""
    settle()
    ctx = msgspec.msgpack.decode(ctx_bytes, type=Context)
    kind = text_to_type(key_type) if key_type is not None else None
    for batch in batches:
        if batch.column(0).null_count:  # refused by the driver (``delete_frame``)
            raise ValueError(f"{NULL_ROWS}: a key to delete is null")
        keys = key_array(batch.column(0), kind, table=ctx.root, what="delete")
        if ctx.scoped:  # the partition columns follow the key, in the table's field order
            fields = ctx.partition_fields
            columns = {f: batch.column(i) for i, f in enumerate(fields, 1)}
            keys = index_keys(keys, partition_paths(pa.table(columns), fields))
        groups = ctx.point.index_groups(keys).astype("int32")
        yield pa.RecordBatch.from_arrays([keys, pa.array(groups)], schema=KEYS_SCHEMA)


@ships_errors
def _tag(ctx_bytes: bytes, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """This task's keys (every copy of a key is here) once each, located; the present ones
    as deletes routed to the file group holding them."""
    settle()
    ctx = msgspec.msgpack.decode(ctx_bytes, type=Context)
    received = list(batches)
    if not received:
        return
    keys = pc.unique(pa.Table.from_batches(received).column(RECORD_KEY).combine_chunks())
    fs, root = filesystem(ctx.root, ctx.storage)
    reader = MetadataReader(fs, TableLayout(root), ctx.point, cfg.Options(ctx.options))
    texts = split_keys(keys)[1] if ctx.scoped else keys  # the data files' key text
    tagged = tag(pa.table({RECORD_KEY: texts}), *locate(reader, keys))
    tagged = tagged.filter(pc.is_valid(tagged.column(OLD_FILE_ID)))
    tagged = tagged.append_column(PARTITION, tagged.column(OLD_PARTITION))
    tagged = tagged.append_column(OP, pa.repeat(pa.scalar(OP_DELETE, pa.int8()), tagged.num_rows))
    tagged = tagged.append_column(TARGET_FILE_ID, tagged.column(OLD_FILE_ID))
    yield from plain(tagged).cast(TAGGED_SCHEMA).to_batches()


def _keyed(frame: Any, table: TableTimelines, schema: list[Any]) -> Any:
    """The key column of ``frame`` under a plain name for mapInArrow, then (a partition-scoped
    index) its partition columns, whose types are checked against the table's first (a value
    of another type would name another partition path)."""
    config = table.config
    picked = [column(config.record_key).alias("key")]
    if is_scoped(config):
        fields = config.partition_fields
        sample = frame.select(*fields).limit(0).toArrow()
        key_partitions(config, 0, None, sample, table=table.path, what="delete", schema=schema)
        picked += [column(f).alias(f"_braid_p{i}") for i, f in enumerate(fields)]
    return frame.select(*picked)


def _key_type(table: TableTimelines, schema: list[Any]) -> str | None:
    for field in schema:
        if field.name == table.config.record_key:
            return str(field.type)
    return None


def deletes_on_spark(table: TableTimelines, keys: Any) -> bool:
    """Whether keys are deleted here: a Spark DataFrame holding the record key (and, for a
    partition-scoped record index, the partition columns), more rows than
    ``write.inprocess.max.rows`` (0: always)."""
    if not is_spark_frame(keys):
        return False
    needed = [table.config.record_key]
    needed += list(table.config.partition_fields) if is_scoped(table.config) else []
    if not all(name in keys.columns for name in needed):
        return False  # the in-process path refuses it, naming the columns
    limit = table.options.get(settings.SMALL_WRITE_ROWS)
    return bool(limit == 0 or keys.count() > limit)


def delete_frame(table: TableTimelines, metadata: MetadataTable, frame: Any) -> str:
    """Delete the keys of ``frame``'s record key column (absent keys are ignored) as one
    commit; returns its instant time."""
    started = perf_counter()
    refuse_speculation(frame.sparkSession, table.path)
    config = table.config
    reader = metadata.reader()
    files = checked_files(reader)
    listing = current_files(files)
    schema = schema_as_of(table)
    ctx = context(table, reader.point, listing, files, spec_of(schema))
    packed = msgspec.msgpack.encode(ctx)
    keys = _keyed(frame, table, schema).mapInArrow(
        functools.partial(_keys, packed, _key_type(table, schema)), from_arrow_schema(KEYS_SCHEMA)
    )
    groups = reader.point.group_counts["record_index"]
    written = Written()
    tagged = cache(
        keys.repartition(groups, RI_GROUP).mapInArrow(
            functools.partial(_tag, packed), from_arrow_schema(TAGGED_SCHEMA)
        )
    )
    with job_settings(frame.sparkSession):  # every Spark job of the delete
        try:
            try:
                with executor_errors():  # a task's lakebraid error raised as itself
                    found = tagged.select(OLD_PARTITION, OLD_FILE_ID).distinct().collect()
            except Exception as exc:  # _keys refused a key: nothing is written yet
                refused = _refused_key(exc, table.path)
                if refused is None:
                    raise
                raise refused from None
            targets = sorted((row[0], row[1]) for row in found)

            def write(time: str) -> list[WriteStatus] | TaskWrite:
                found = (listing, files)
                task_set, sink = planned(metadata, ctx, targets, found, spec_of(schema), time)
                return rewrite_frame(tagged, targets, task_set, sink)

            read_at = reader.point.read_at
            recorded = written.recording(write)
            time = run_write(table, metadata, "delete", read_at, schema, recorded, started)
        finally:
            tagged.unpersist()
    if config.merge_on_read:
        compact_if_due(table, metadata, written)  # never fails the write
    return time


def _refused_key(exc: Exception, table: str) -> RecordKeyError | None:
    """A key the key job refused, as the in-process delete reports it (naming this table): a
    null key, or a key ``index.keys.key_array`` refused in a task; None for any other failure."""
    if NULL_ROWS in str(exc):
        return RecordKeyError("delete: null key(s); record keys are never null", table=table)
    if isinstance(exc, RecordKeyError):
        return RecordKeyError(exc.message, table=table)
    return None
