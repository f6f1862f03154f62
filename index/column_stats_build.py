"""Column statistics of more columns, built on a live table and dropped; which columns a
write records.

By default the metadata table records statistics for the first
``metadata.column_stats.max.columns`` columns of the schema (``index.file_stats``). A build of
columns ``cs`` is one ``index`` instant of the metadata timeline (body
``timeline.bodies.IndexPlan``, kind ``column_stats``, ``columns`` = ``cs``), made exactly as a
secondary-index build (``index.secondary_build.run_rewrite``), of the ``column_stats``
partition::

    lock:   t = next time; requested (op build, kind column_stats, columns, the partition's
            group count); snapshot S = the read point (every commit completed before the request)
    read the partition as of S less the records of cs, and the statistics of cs of every data
    file of S (a base file's footer and rows, a merge-on-read log's data-block rows: computed
    as their writers compute them)
    inflight; a full base per file group, folding S's instants
    lock:   completed, unless a rollback or restore began since (it could undo what S folds)

Writers keep committing meanwhile: from the request on, every write that chooses its metadata
layout sees the running build and records the statistics of ``cs`` too (:func:`stats_maintained`;
the write statuses hold every column's), so the base (as of S) plus those writes' logs hold
every current file's statistics of ``cs`` when the build completes and reads start pruning by
them (``ReadPoint.stats_columns``). A write that chose its layout before the request conflicts
(retryably, ``writers.commit.conflicts.indexed_during``). A drop of one column is the same
instant with op drop: bases without its records; reads stop using it at its completion and
writes stop recording it. An undo of a commit a build or drop folded writes corrected bases
(``index.column_stats_rebase``).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.errors import CorruptDataLogError, IndexLayerError
from lakebraid.index.file_stats import (
    file_stats,
    log_file_stats,
    orderable,
    recorded_columns,
    stats_columns,
    stats_record,
)
from lakebraid.index.secondary_build import run_rewrite
from lakebraid.metadata import settings
from lakebraid.metadata.arrow_records import SCHEMAS, records_to_table
from lakebraid.metadata.basewrite import write_base
from lakebraid.metadata.commits import schema_as_of
from lakebraid.metadata.hashing import file_group_id
from lakebraid.metadata.integrity import guarded
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import ColumnStatsRecord, Partition
from lakebraid.metadata.slices import ReadPoint
from lakebraid.metadata.table import MetadataTable
from lakebraid.metadata.writer import route
from lakebraid.timeline.bodies import IndexPlan
from lakebraid.timeline.instant import Action, Instant, State
from lakebraid.timeline.layout import TimelineKind, parse_data_file_name
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec, text_to_type

KIND = "column_stats"
STATS = Partition.COLUMN_STATS
SCHEMA = SCHEMAS[STATS]
Rows = tuple[list[pa.Table], list[ColumnStatsRecord]]  # kept rows per group, new records


def stats_maintained(
    metadata_table: MetadataTable, point: ReadPoint, schema: Sequence[FieldSpec]
) -> list[str]:
    """The columns whose statistics a write whose metadata layout is ``point`` records: the
    recorded ones (``index.file_stats.recorded_columns``), and those of running builds (its
    running drops still count: the column is visible until the drop completes)."""
    table = metadata_table.table
    columns = recorded_columns([f.name for f in schema], table.options, point)
    for time in point.pending_indexes:  # listed by the read point: no listing here
        if not table.is_alive(time):
            continue
        requested = Instant(time, Action.INDEX, State.REQUESTED)
        plan = table.store.read_typed(TimelineKind.METADATA, requested, IndexPlan)
        if plan.kind == KIND and plan.op == "build":
            columns += plan.columns
    return list(dict.fromkeys(columns))


def build_stats(metadata_table: MetadataTable, columns: str | Sequence[str]) -> str:
    """Record the statistics of ``columns`` (beyond the default ones) from now on, built for
    every current file; returns the index instant."""
    names = check_stats_columns(metadata_table.table, columns, metadata_table.read_point())
    return _rewrite(metadata_table, IndexPlan(op="build", kind=KIND, columns=names))


def drop_stats(metadata_table: MetadataTable, column: str) -> str:
    """Stop recording (and pruning by) the statistics of a built column; returns the
    instant."""
    built = metadata_table.read_point().stats_columns
    if column not in built:
        raise IndexLayerError(
            f"no column-statistics index on column {column!r} (built: "
            f"{sorted(built) or 'none'}; the first metadata.column_stats.max.columns columns "
            "always have statistics)",
            table=metadata_table.table.path,
        )
    return _rewrite(metadata_table, IndexPlan(op="drop", kind=KIND, columns=[column]))


def check_stats_columns(
    table: TableTimelines, columns: str | Sequence[str], point: ReadPoint
) -> list[str]:
    """The columns of a build as a list; refuses an empty or repeated list, a column that is
    not in the schema, a partition field, one without an order (nested, null) or one that
    already has statistics."""
    if isinstance(columns, str):
        names = [columns]
    elif isinstance(columns, Sequence | set | frozenset):
        names = list(columns)
    else:
        names = []
    if not names or any(not isinstance(c, str) or not c for c in names):
        raise IndexLayerError(
            f"column statistics need one or more column names, not {columns!r}", table=table.path
        )
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise IndexLayerError(f"column {twice[0]!r} is named twice", table=table.path)
    schema = schema_as_of(table)
    fields = {f.name: f for f in schema}
    default = stats_columns(schema, table.options)
    for column in names:
        if column in table.config.partition_fields:
            why = "is a partition field: reads already prune by it"
        elif column not in fields:
            why = f"is not in the table (columns: {sorted(fields)})"
        elif not orderable(text_to_type(fields[column].type)):
            why = f"has type {fields[column].type}, whose values have no order (no min/max)"
        elif column in default:
            why = "already has statistics (one of the first metadata.column_stats.max.columns)"
        elif column in point.stats_columns:
            why = f"already has statistics (built by {point.stats_columns[column]})"
        else:
            continue
        raise IndexLayerError(f"column statistics: column {column!r} {why}", table=table.path)
    return names


def built_records(
    table: TableTimelines, files: Sequence[tuple[str, str]], columns: Sequence[str]
) -> list[ColumnStatsRecord]:
    """The statistics records of ``columns`` of the data files ``files`` ((partition, file
    name) pairs), read from the files: base files as Parquet, merge-on-read logs from the rows
    of their data blocks (``index.file_stats.log_file_stats``), as their writers computed them."""

    def one(pair: tuple[str, str]) -> list[ColumnStatsRecord]:
        partition, name = pair
        path = table.layout.data_file(partition, name)

        def damaged(where: str, why: str) -> IndexLayerError:
            return IndexLayerError(f"data file {where} cannot be read ({why})", table=table.path)

        read = log_file_stats if parse_data_file_name(name).kind == "log" else file_stats
        try:
            with guarded(path, damaged):
                found = read(table.fs, path, columns)
        except FileNotFoundError:
            raise damaged(path, "it is gone: was it cleaned?") from None
        except CorruptDataLogError as exc:  # named by file and offset: the table added
            raise CorruptDataLogError(exc.path, exc.offset, exc.reason, table=table.path) from exc
        return [stats_record(s, partition, name) for s in found]

    threads = max(1, min(table.options.get(settings.WRITE_THREADS), len(files)))
    with ThreadPoolExecutor(threads) as pool:
        return [r for records in pool.map(one, files) for r in records]


def without_columns(rows: pa.Table, columns: Sequence[str]) -> pa.Table:
    """Base rows of ``column_stats`` less the records of ``columns``, in the base schema."""
    rows = rows.select(SCHEMA.names).cast(SCHEMA)
    if not columns or not len(rows):
        return rows
    drop = pc.is_in(rows.column("column"), value_set=pa.array(list(columns), pa.string()))
    return rows.filter(pc.invert(drop))


def _rewrite(metadata_table: MetadataTable, plan: IndexPlan) -> str:
    return run_rewrite(
        metadata_table,
        plan,
        str(STATS),
        lambda point: point.group_counts[str(STATS)],
        lambda point, full: _rows_as_of(metadata_table, point, full),
        lambda rows, n, time, folded: _write_bases(metadata_table, rows, n, time, folded),
    )


def _rows_as_of(metadata_table: MetadataTable, point: ReadPoint, plan: IndexPlan) -> Rows:
    """Each file group's rows as of ``point`` less the plan's columns, and (a build) their
    records of every data file as of ``point``."""
    table = metadata_table.table
    reader = MetadataReader(metadata_table.fs, metadata_table.layout, point, table.options)
    kept = [
        without_columns(reader.group_table(STATS, index), plan.columns)
        for index in range(reader.group_count(STATS))
    ]
    added: list[ColumnStatsRecord] = []
    if plan.op == "build":
        files = [(p, name) for p, names in sorted(reader.files().items()) for name in sorted(names)]
        added = built_records(table, files, plan.columns)
    return kept, added


def routed_tables(records: Sequence[ColumnStatsRecord], n: int) -> list[pa.Table]:
    """``records`` as base rows of each of the ``n`` file groups."""
    routed = route(STATS, list(records), n)
    return [
        records_to_table(STATS, routed.get(file_group_id(str(STATS), index), [])).cast(SCHEMA)
        for index in range(n)
    ]


def _write_bases(
    metadata_table: MetadataTable, rows: Rows, n: int, time: str, folded: list[str]
) -> None:
    kept, added = rows
    row_groups = metadata_table.table.options.get(settings.BASE_ROW_GROUP_ROWS)
    for index, new in enumerate(routed_tables(added, n)):
        group = file_group_id(str(STATS), index)
        write_base(
            metadata_table.fs,
            metadata_table.layout.metadata_base_file(str(STATS), group, time),
            pa.concat_tables([kept[index], new]),
            partition=str(STATS),
            file_group=group,
            instant=time,
            folded=folded,
            row_group_rows=row_groups,
        )
