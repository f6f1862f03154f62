"""The Spark engine's write pipeline: the steps of ``writers.write.route`` as Spark stages.

For a Spark DataFrame input larger than ``write.inprocess.max.rows``::

    repartition(record key) + mapInArrow(prepare, dedup, tag)   record key, partition path
                                   and op of every row; duplicates merged; each row tagged
                                   with its location (a task per core, each looking up
                                   its keys in every group, whatever the input's
                                   partitions; inserts into an empty table: no
                                   lookup) and the format's key
                                   hash; cached (without the record key's text,
                                   which the rewrite derives again from the key
                                   column: one string per row less to carry)
                                   Past ``SINGLE_PASS_GROUPS`` groups: mapInArrow(prepare)
                                   finds each row's group first and the shuffle is by group
    count (builds the cache)       inserts per partition and the file groups touched,
                                   counted by each tagging task into an accumulator
                                   (``writers.engine.spark.summary``) -> the driver plans
                                   the insert slots
    route (Spark SQL, no Python)   target file group per row (moves: delete + insert): the
                                   slots' hash ranges joined by partition
                                   (``writers.engine.spark.routing``)
    repartition(tasks) + mapInArrow(rewrite)   the file groups dealt by estimated cost to
                                   ``routing.rewrite_tasks`` tasks: one per core, or per
                                   ``routing.TASK_ROWS`` rows when that is more
                                   (a task each when they bring ``routing.ALONE_ROWS`` rows
                                   each: a bulk insert; ``routing.deal``, ``task_keys``), each
                                   group's rows whole in one
                                   task: its base rewritten, or in a merge-on-read table one
                                   log appended to its slice (``writers.write.logappend``)
    repartition(groups) + mapInArrow   the statuses' keys as record-index files, each group's
                                   in one task (``index_tasks``)
    collect                        write statuses (msgpack bytes, no keys), the index files

The shuffle by the record key's column (Spark's own hash) comes before any Python step, so
the input's rows pass through Python once before the rewrite (twice for a table of many
record-index groups), on every core whatever the input's partitioning.

Every function shipped to executors is a module-level function bound (``functools.partial``)
to plain data: msgspec-encoded structs, dicts and strings; never a table or timeline object.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any, NamedTuple

import msgspec
import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.accumulators import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from lakebraid.index.file_groups import DataSlice
from lakebraid.index.keys import RECORD_KEY, key_text
from lakebraid.index.lookup import locate
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION, tag
from lakebraid.metadata.arrow_records import empty_table
from lakebraid.metadata.hashing import group_order
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import Partition
from lakebraid.metadata.slices import ReadPoint
from lakebraid.timeline import config as cfg
from lakebraid.timeline.durable import filesystem
from lakebraid.timeline.error_wire import executor_errors, ships_errors
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.commit.ahead import IndexByTasks, TaskWrite
from lakebraid.writers.engine.spark.index_tasks import TASK_SCHEMA, IndexSink, task_output
from lakebraid.writers.engine.spark.index_tasks import written as index_written
from lakebraid.writers.engine.spark.jobconf import cache
from lakebraid.writers.engine.spark.routing import (
    KEY_HASH,
    deal,
    rewrite_costs,
    rewrite_tasks,
    route_rows,
    task_keys,
)
from lakebraid.writers.engine.spark.summary import Counts, CountsParam, summarize, task_counts
from lakebraid.writers.read.columns import column
from lakebraid.writers.write.filegroup import OP, OP_UPSERT
from lakebraid.writers.write.inputs import nan_count
from lakebraid.writers.write.logappend import IN_GROUP, TaskSet
from lakebraid.writers.write.route import (
    PARTITION,
    TARGET_FILE_ID,
    WORK_COLUMNS,
    base_rows,
    deduplicate,
    key_hashes,
    plain,
    prepare,
    row_index_keys,
    stale_moves,
    with_key_hashes,
)
from lakebraid.writers.write.slices import slice_rows
from lakebraid.writers.write.slots import plan_slots
from lakebraid.writers.write.workers import settle

RI_GROUP = "_braid_ri_group"
# up to this many record-index groups, the rows are tagged in one Python pass, every task
# looking its keys up in every group (tasks x groups lookups); beyond, a first pass finds
# each row's group and the shuffle gives each group its task (one lookup each)
SINGLE_PASS_GROUPS = 16
TASK = "_braid_task"  # the rewrite's shuffle key: the task of each file group
# what a tagging task raises on a row with a null record key or precombine value (the
# first pass over the input checks them, so no job of its own reads the input for it)
NULL_ROWS = "lakebraid: null key or precombine value"  # or a NaN precombine value
TARGET = "_braid_target"  # a row's file group, as its index in the rewrite's targets


class Routed(NamedTuple):
    frame: DataFrame
    targets: list[tuple[str, str]]
    cached: DataFrame  # persisted by route_frame
    rows: int  # the rows routed (before moves add their delete rows)
    costs: list[float]  # each target's estimated rewrite cost (``routing.rewrite_costs``)

    def release(self) -> None:
        self.cached.unpersist()


class Context(msgspec.Struct, frozen=True, kw_only=True):
    """What executors need to know about the table (plain data)."""

    root: str  # fsspec URL
    storage: dict[str, Any] = {}  # storage options to open it (timeline.durable.storage_of)
    key: str
    partition_fields: list[str]
    precombine: str | None
    point: ReadPoint
    options: dict[str, str]
    ordering: str | None = None  # the precombine field under event-time ordering
    scoped: bool = False  # a partition-scoped record index (``index.scope``)
    files: dict[str, dict[str, str]] = {}  # partition -> file id -> name (for ordering)
    # merge-on-read under ordering: the slices and schema to merge a group's stored rows
    slices: dict[str, dict[str, DataSlice]] = {}
    spec: list[tuple[str, str, bool]] = []
    merge_on_read: bool = False
    existing: str | None = None  # an insert's duplicate-key policy (``route_frame``)


def _schema_with(schema: pa.Schema, *fields: pa.Field) -> pa.Schema:
    return pa.schema([*schema, *fields])


def _prepared(table: pa.Table, ctx: Context) -> pa.Table:
    for name in (ctx.key, ctx.precombine):
        if name is not None and table.column(name).null_count:
            raise ValueError(f"{NULL_ROWS}: a row of the input has a null {name!r}")
    if ctx.precombine is not None and nan_count(table.column(ctx.precombine)):
        raise ValueError(f"{NULL_ROWS}: a row of the input has a NaN {ctx.precombine!r}")
    table = prepare(table, ctx.key, ctx.partition_fields)
    return table.append_column(OP, pa.repeat(pa.scalar(OP_UPSERT, pa.int8()), table.num_rows))


@ships_errors
def _prepare(ctx_bytes: bytes, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Rows prepared, with their record-index file group (the shuffle key of a table of
    many groups)."""
    settle()
    ctx = msgspec.msgpack.decode(ctx_bytes, type=Context)
    for batch in batches:
        table = _prepared(pa.Table.from_batches([batch]), ctx)
        groups = ctx.point.index_groups(row_index_keys(table, ctx.scoped)).astype("int32")
        yield from plain(table.append_column(RI_GROUP, pa.array(groups))).to_batches()


@ships_errors
def _dedup_tag(
    ctx_bytes: bytes,
    prepared: bool,
    tagging: bool,
    counts: Accumulator[Counts],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Deduplicate a task's rows (every row of a key is in this task) and tag them with
    their current location, or with none when ``tagging`` is off; their counts are added to
    accumulator ``counts`` (``writers.engine.spark.summary``)."""
    settle()
    ctx = msgspec.msgpack.decode(ctx_bytes, type=Context)
    received = list(batches)
    if not received:
        return
    table = pa.Table.from_batches(received)
    if prepared:
        table = table.drop_columns([RI_GROUP])
    else:
        table = _prepared(table, ctx)
    table = deduplicate(with_key_hashes(table), ctx.precombine, ctx.scoped)  # hashed once
    if tagging:
        fs, root = filesystem(ctx.root, ctx.storage)
        reader = MetadataReader(fs, TableLayout(root), ctx.point, cfg.Options(ctx.options))
        keys, hashes = row_index_keys(table, ctx.scoped), key_hashes(table, ctx.scoped)
        table = tag(table, *locate(reader, keys, hashes))  # keys are unique now
        if ctx.ordering is not None and ctx.existing != "fail":  # "fail": a held key refuses
            table = stale_moves(table, _stored_rows(ctx, fs, root), ctx.ordering, ctx.key)
    else:  # an empty table holds no key: every row is new
        table = tag(table, empty_table(Partition.RECORD_INDEX))
    at = table.schema.get_field_index(KEY_HASH)  # last, as the declared schema has it
    table = table.remove_column(at).append_column(table.field(at), table.column(at))
    table = plain(table.drop_columns([RECORD_KEY]))  # derived again by _rewrite
    counts.add(task_counts(table))
    yield from table.to_batches()


def _stored_rows(ctx: Context, fs: Any, root: str) -> Any:
    """How ``stale_moves`` reads a group's stored rows: its base file, or in a merge-on-read
    table its slice merged (a log may hold the newer row)."""
    layout = TableLayout(root)
    if ctx.merge_on_read:
        return partial(slice_rows, fs, layout, ctx.slices, ctx.spec, ctx.key, ctx.ordering)
    return partial(base_rows, fs, layout, ctx.files)


@ships_errors
def _rewrite(
    tasks_bytes: bytes,
    names: list[str],
    key: str | None,
    sink_bytes: bytes,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Rewrite (merge-on-read: append to) each file group whose rows reached this task: its
    rows carry the group's index in ``names`` (``TARGET``, see :func:`rewrite_frame`), and
    their record key's text is derived from column ``key`` (None: they carry it). The
    statuses' keys leave as index entries (``index_tasks.task_output``)."""
    settle()
    tasks = msgspec.msgpack.decode(tasks_bytes, type=TaskSet)
    sink = msgspec.msgpack.decode(sink_bytes, type=IndexSink)
    received = list(batches)
    table = pa.Table.from_batches(received) if received else None
    if table is None or table.num_rows == 0:
        return
    target = table.column(TARGET)
    if target.null_count:
        raise ValueError(
            f"{target.null_count} rows reached the rewrite without a target file group "
            "(a routing bug): nothing was written"
        )
    payload = table.drop_columns([TARGET])
    if key is not None:
        payload = payload.append_column(RECORD_KEY, key_text(payload.column(key)))
    groups = target.to_numpy()
    # each group's rows together, in their order (a radix sort of small group numbers)
    order = group_order(groups, len(names))
    ordered = groups[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(order)]
    payload = payload.take(pa.array(order))  # one take; each group's rows a slice of it
    spans = zip(starts.tolist(), ends.tolist(), strict=True)
    groups = [(names[int(ordered[s])], payload.slice(s, e - s)) for s, e in spans]
    yield task_output(tasks.run_all(groups, attempt=_attempt()), sink)


def _attempt() -> int:
    """This Spark task attempt's id (unique in the Spark application; 0 outside a task): the
    rewrite's files carry it in their write token (``TaskSet.run``)."""
    context = TaskContext.get()
    return int(context.taskAttemptId()) if context is not None else 0


def route_frame(
    df: DataFrame,
    ctx: Context,
    *,
    tagging: bool,
    target_rows: int,
    small_rows: Mapping[str, Mapping[str, int]],
    existing: str | None = None,
    operation: str = "upsert",
    table: str = "",
    stored: Mapping[tuple[str, str], int] | None = None,
) -> Routed:
    """Prepared, deduplicated, tagged and routed rows, and the (partition, file id) of every
    file group they touch (call ``Routed.release`` after the rewrite). Tagging shuffles by
    record-index file group (one lookup task per group); without it, by record key. Either
    way all rows of a key meet in one task. ``existing`` is an insert's duplicate-key policy
    (``fail``: raise before anything is written; ``drop``: leave those rows out). ``stored``:
    the rows of current groups' base files (``operations.Room.rows``), which the rewrite's
    dealing of groups to tasks weighs."""
    prepared_schema = _schema_with(
        to_arrow_schema(df.schema, timezone="UTC"),  # only its Spark types are used
        pa.field(RECORD_KEY, pa.string()),
        pa.field(PARTITION, pa.string()),
        pa.field(OP, pa.int8()),
    )
    tally = df.sparkSession.sparkContext.accumulator({}, CountsParam())
    ctx = msgspec.structs.replace(ctx, existing=existing)  # before the event-time check
    cached = _tagged(df, ctx, tagging, prepared_schema, tally)
    held = F.col(OLD_FILE_ID).isNotNull()  # keys the table already holds
    tagged = cached.where(~held) if existing == "drop" and tagging else cached
    try:
        with executor_errors():  # a tagging task's lakebraid error raised as itself
            counts, touched, rows = summarize(cached, tally, ctx.key, existing, operation, table)
    except BaseException:
        cached.unpersist()
        raise
    plan = plan_slots(counts, {}, target_rows=target_rows, small_rows=small_rows)
    costs = rewrite_costs(touched, plan, counts, stored or {})
    targets = sorted(costs)  # the groups touched and the slots
    return Routed(route_rows(tagged, plan), targets, cached, rows, [costs[t] for t in targets])


def _tagged(
    df: DataFrame,
    ctx: Context,
    tagging: bool,
    prepared_schema: pa.Schema,
    counts: Accumulator[Counts],
) -> DataFrame:
    """The rows prepared, de-duplicated and tagged, persisted (shuffled so all rows of a key
    meet in one task)."""
    packed = msgspec.msgpack.encode(ctx)
    tagged_schema = from_arrow_schema(
        _schema_with(
            pa.schema([f for f in prepared_schema if f.name != RECORD_KEY]),
            pa.field(OLD_PARTITION, pa.string()),
            pa.field(OLD_FILE_ID, pa.string()),
            pa.field(KEY_HASH, pa.int64()),
        )
    )
    groups = ctx.point.group_counts["record_index"] if tagging else 0
    if groups > SINGLE_PASS_GROUPS:  # a task per group, each looking up in its group only
        with_group = _schema_with(prepared_schema, pa.field(RI_GROUP, pa.int32()))
        prepared = df.mapInArrow(functools.partial(_prepare, packed), from_arrow_schema(with_group))
        work = functools.partial(_dedup_tag, packed, True, True, counts)
        return cache(prepared.repartition(groups, RI_GROUP).mapInArrow(work, tagged_schema))
    # every task looks up in every group (tasks x groups lookups): a task per core, not per
    # input partition (an 8-partition input of a 1M-row upsert into 10 groups on 2 cores:
    # prepare 2.2-2.7 s in 2 tasks against 3.2-3.4 in 8); each holds 1/cores of the rows, as
    # an insert into an empty table always did
    tasks = max(2, df.sparkSession.sparkContext.defaultParallelism)
    shuffled = df.repartition(tasks, column(ctx.key))  # every row of a key in one task
    work = functools.partial(_dedup_tag, packed, False, tagging, counts)
    return cache(shuffled.mapInArrow(work, tagged_schema))


def rewrite_frame(
    routed: DataFrame,
    targets: list[tuple[str, str]],
    tasks: TaskSet,
    sink: IndexSink,
    rows: int = 0,
    key: str | None = None,
    costs: list[float] | None = None,
) -> TaskWrite:
    """Rewrite (merge-on-read: append to) every target file group, the groups dealt to
    :func:`rewrite_tasks` Spark tasks (all rows of a group in one), and write the record
    index from their statuses' keys by Spark tasks (``sink``: ``index_tasks``; the driver
    never receives a key); returns the statuses (without keys) and the index files. Each row
    gets its group's index in ``targets`` (``TARGET``) and, when a group takes appends,
    ``IN_GROUP`` (whether the group holds its key: an update or a delete there), both in
    Spark SQL; the routing columns are dropped before the
    shuffle, so only the rows' own columns and those two reach Python. ``key``: the record
    key column, for rows without ``_braid_record_key`` (``route_frame``'s, which leave the
    JVM without it: the rewrite derives it from the key column); None: the rows carry it.
    ``costs``: each target's estimated cost, by which the groups are dealt
    (``routing.deal``); None: in turn."""
    if not targets:
        return TaskWrite([], IndexByTasks(sink.point, []))
    packed = msgspec.msgpack.encode(tasks)
    spark = routed.sparkSession
    count = rewrite_tasks(spark, len(targets), rows)
    dealt = task_keys(spark, count)  # a key per task
    chosen = deal(costs, count) if costs is not None else [i % count for i in range(len(targets))]
    keys = pa.table(
        {
            "_task_partition": [p for p, _ in targets],
            "_task_file_id": [f for _, f in targets],
            TASK: pa.array([dealt[task] for task in chosen], pa.int64()),
            TARGET: pa.array(range(len(targets)), pa.int32()),
        }
    )
    own = (F.col(PARTITION) == F.col("_task_partition")) & (
        F.col(TARGET_FILE_ID) == F.col("_task_file_id")
    )
    frame = routed.join(F.broadcast(spark.createDataFrame(keys)), own, "left")
    if tasks.appends:
        held = (F.col(OLD_FILE_ID) == F.col(TARGET_FILE_ID)) & (
            F.col(OLD_PARTITION) == F.col(PARTITION)
        )
        frame = frame.withColumn(IN_GROUP, F.coalesce(held, F.lit(False)))
    routing = (*WORK_COLUMNS, RI_GROUP, "_task_partition", "_task_file_id")  # KEY_HASH among them
    frame = frame.drop(*[c for c in routing if c in frame.columns])
    names = [f"{partition}\x00{file_id}" for partition, file_id in targets]
    rewrite = functools.partial(_rewrite, packed, names, key, msgspec.msgpack.encode(sink))
    shape = from_arrow_schema(TASK_SCHEMA)
    with executor_errors():  # a task's lakebraid error (or missing file) raised as itself
        out = frame.repartition(count, TASK).drop(TASK).mapInArrow(rewrite, shape)
        return index_written(out, sink, count)
