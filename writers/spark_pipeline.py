"""The Spark engine's write pipeline: the steps of ``writers.pipeline`` as Spark stages.

For a Spark DataFrame input larger than ``write.inprocess.max.rows``::

    mapInArrow(prepare)            record key, partition path, op, record-index file group
    window dedup                   highest precombine per key wins (then the latest row)
    repartition(record-index file groups) + mapInArrow(tag)     one lookup task per group
    groupBy(partition).count()     inserts per partition -> driver plans the insert slots
    mapInArrow(route)              target file group per row (moves: delete + insert)
    repartition(target groups) + mapInArrow(rewrite)            one task per file group
    collect                        write statuses (msgpack bytes)

Every function shipped to executors is a module-level function bound (``functools.partial``)
to plain data: msgspec-encoded structs, dicts and strings; never a table or timeline object.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import fsspec
import msgspec
import pyarrow as pa
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from metadata.hashing import file_groups_of
from metadata.reader import MetadataReader
from metadata.slices import ReadPoint
from timeline import config as cfg
from timeline.layout import TableLayout
from writers.filegroup import (
    OP,
    OP_UPSERT,
    RECORD_KEY,
    RewriteTask,
    WriteStatus,
    rewrite_file_group,
)
from writers.pipeline import (
    OLD_FILE_ID,
    OLD_PARTITION,
    PARTITION,
    TARGET_FILE_ID,
    WORK_COLUMNS,
    Slot,
    plan_slots,
    prepare,
    route,
    tag,
)

RI_GROUP = "_braid_ri_group"
SEQ = "_braid_seq"
STATUS = "status"


class Context(msgspec.Struct, frozen=True, kw_only=True):
    """What executors need to know about the table (plain data)."""

    root: str  # fsspec URL
    key: str
    partition_fields: list[str]
    precombine: str | None
    point: ReadPoint
    options: dict[str, str]


def _schema_with(schema: pa.Schema, *fields: pa.Field) -> pa.Schema:
    return pa.schema([*schema, *fields])


def _prepare(ctx_bytes: bytes, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    ctx = msgspec.msgpack.decode(ctx_bytes, type=Context)
    groups = ctx.point.group_counts["record_index"]
    for batch in batches:
        table = prepare(pa.Table.from_batches([batch]), ctx.key, ctx.partition_fields)
        table = table.append_column(OP, pa.array([OP_UPSERT] * table.num_rows, pa.int8()))
        ri = file_groups_of(table.column(RECORD_KEY), groups).astype("int32")
        yield from table.append_column(RI_GROUP, pa.array(ri)).to_batches()


def _tag(ctx_bytes: bytes, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    ctx = msgspec.msgpack.decode(ctx_bytes, type=Context)
    fs, root = fsspec.core.url_to_fs(ctx.root)
    reader = MetadataReader(fs, TableLayout(root), ctx.point, cfg.Options(ctx.options))
    for batch in batches:
        table = pa.Table.from_batches([batch])
        found = reader.lookup(table.column(RECORD_KEY))
        yield from tag(table, found).to_batches()


def _route(plan_bytes: bytes, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    plan = msgspec.msgpack.decode(plan_bytes, type=dict[str, list[Slot]])
    for batch in batches:
        yield from route(pa.Table.from_batches([batch]), plan).to_batches()


def _rewrite(tasks_bytes: bytes, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    tasks = msgspec.msgpack.decode(tasks_bytes, type=dict[str, RewriteTask])
    received = list(batches)
    table = pa.Table.from_batches(received) if received else None
    if table is None or table.num_rows == 0:
        return
    ids = table.column(TARGET_FILE_ID).to_pylist()
    parts = table.column(PARTITION).to_pylist()
    payload = table.drop_columns([c for c in (*WORK_COLUMNS, RI_GROUP) if c in table.column_names])
    rows_of: dict[str, list[int]] = {}
    for i, (part, fid) in enumerate(zip(parts, ids, strict=True)):
        rows_of.setdefault(f"{part}\x00{fid}", []).append(i)
    out = []
    for name, rows in rows_of.items():
        status = rewrite_file_group(tasks[name], payload.take(pa.array(rows)))
        out.append(msgspec.msgpack.encode(status))
    yield pa.RecordBatch.from_arrays([pa.array(out, pa.binary())], [STATUS])


def route_frame(
    df: DataFrame,
    ctx: Context,
    *,
    tagging: bool,
    target_rows: int,
    small_rows: Mapping[str, Mapping[str, int]],
) -> DataFrame:
    """Prepared, deduplicated, tagged and routed rows (persisted: planning reads them)."""
    packed = msgspec.msgpack.encode(ctx)
    arrow_in = df.limit(0).toArrow().schema
    prepared_schema = _schema_with(
        arrow_in,
        pa.field(RECORD_KEY, pa.string()),
        pa.field(PARTITION, pa.string()),
        pa.field(OP, pa.int8()),
        pa.field(RI_GROUP, pa.int32()),
    )
    prepared = df.mapInArrow(
        functools.partial(_prepare, packed), from_arrow_schema(prepared_schema)
    )
    order = [F.col(ctx.precombine).desc_nulls_last()] if ctx.precombine else []
    window = Window.partitionBy(RECORD_KEY).orderBy(*order, F.col(SEQ).desc())
    deduped = (
        prepared.withColumn(SEQ, F.monotonically_increasing_id())
        .withColumn("_braid_rank", F.row_number().over(window))
        .where("_braid_rank = 1")
        .drop("_braid_rank", SEQ)
    )
    tagged_schema = _schema_with(
        prepared_schema, pa.field(OLD_PARTITION, pa.string()), pa.field(OLD_FILE_ID, pa.string())
    )
    if tagging:
        groups = ctx.point.group_counts["record_index"]
        tagged = deduped.repartition(groups, RI_GROUP).mapInArrow(
            functools.partial(_tag, packed), from_arrow_schema(tagged_schema)
        )
    else:
        tagged = deduped.withColumn(OLD_PARTITION, F.lit(None).cast("string")).withColumn(
            OLD_FILE_ID, F.lit(None).cast("string")
        )
    tagged = tagged.persist()
    is_new = (F.col(OP) == OP_UPSERT) & (
        F.col(OLD_PARTITION).isNull() | (F.col(OLD_PARTITION) != F.col(PARTITION))
    )
    counts = {
        r[PARTITION]: r["count"] for r in tagged.where(is_new).groupBy(PARTITION).count().collect()
    }
    plan = plan_slots(counts, {}, target_rows=target_rows, small_rows=small_rows)
    routed_schema = _schema_with(tagged_schema, pa.field(TARGET_FILE_ID, pa.string()))
    return tagged.mapInArrow(
        functools.partial(_route, msgspec.msgpack.encode(plan)), from_arrow_schema(routed_schema)
    )


def rewrite_frame(
    routed: DataFrame,
    listing: Mapping[str, Mapping[str, str]],
    *,
    root: str,
    time: str,
    schema: list[tuple[str, str, bool]],
) -> list[WriteStatus]:
    """Rewrite every target file group in its own Spark task; returns the write statuses."""
    targets = sorted(
        (r[PARTITION], r[TARGET_FILE_ID])
        for r in routed.select(PARTITION, TARGET_FILE_ID).distinct().collect()
    )
    if not targets:
        return []
    tasks: dict[str, RewriteTask] = {}
    for n, (partition, file_id) in enumerate(targets):
        tasks[f"{partition}\x00{file_id}"] = RewriteTask(
            root=root,
            partition=partition,
            file_id=file_id,
            old_file=listing.get(partition, {}).get(file_id),
            instant=time,
            write_token=f"{n}-0",
            schema=schema,
        )
    packed = msgspec.msgpack.encode(tasks)
    statuses = (
        routed.repartition(len(targets), PARTITION, TARGET_FILE_ID)
        .mapInArrow(functools.partial(_rewrite, packed), f"{STATUS} binary")
        .collect()
    )
    return [msgspec.msgpack.decode(r[STATUS], type=WriteStatus) for r in statuses]


def count_rows(df: Any) -> int:
    return int(df.count())
