"""The write client: insert, bulk_insert, upsert, delete, reads and table services of one
lakebraid table, as one handle.

A facade: each method checks its input (a Spark DataFrame, a pyarrow Table or a pandas
DataFrame) and hands over to the room that does the work. Writes go to an engine
(``writers.engine.inprocess`` for pyarrow and pandas input and small DataFrames,
``writers.engine.spark`` for the rest), each committing through
``writers.commit.envelope.run_write``: data files and the metadata table's log blocks become
visible together at the global commit point, or not at all. Reads: ``writers.read.plan``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, NoReturn

import pyarrow as pa

from lakebraid.index.column_stats_build import build_stats, drop_stats
from lakebraid.index.keys import check_key_type, key_array, key_texts
from lakebraid.index.lookup import locations
from lakebraid.index.reindex import reshard
from lakebraid.index.scope import index_keys, key_of
from lakebraid.index.secondary_build import build_index, drop_index
from lakebraid.index.sizing import estimate_groups
from lakebraid.metadata.commits import schema_as_of
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import ColumnStatsRecord, RecordLocation
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline import config as cfg
from lakebraid.timeline import table_config
from lakebraid.timeline.archiver import ArchiveResult, archive
from lakebraid.timeline.durable import check_url
from lakebraid.timeline.instant import Instant
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec, IndexSettings, TableConfig, text_to_type
from lakebraid.writers import settings
from lakebraid.writers.commit.retry import retrying
from lakebraid.writers.engine.compaction import compact_data
from lakebraid.writers.engine.inprocess import delete_keys, write_rows
from lakebraid.writers.engine.spark.delete import delete_frame, deletes_on_spark
from lakebraid.writers.engine.spark.session import attach, embedded_session, reading_session
from lakebraid.writers.engine.spark.write import write_frame
from lakebraid.writers.errors import VanishedFileError, WriteError
from lakebraid.writers.read import listing, plan
from lakebraid.writers.services.clean import clean
from lakebraid.writers.services.describe import describe
from lakebraid.writers.services.history import history
from lakebraid.writers.services.recovery import recover
from lakebraid.writers.services.restore import delete_savepoint, restore, savepoint
from lakebraid.writers.services.rollback import rollback
from lakebraid.writers.services.validate import validate
from lakebraid.writers.write.inputs import (
    field_list,
    is_spark_frame,
    is_table,
    key_partitions,
    to_arrow,
)
from lakebraid.writers.write.operations import check_index_kind, refuse_indexes, resolve_policy


class WriteClient:
    """A handle on one table. ``spark=None``: an embedded ``local[*]`` session on first use."""

    def __init__(self, table: TableTimelines, spark: Any = None):
        if not isinstance(table, TableTimelines):
            raise WriteError(
                f"WriteClient takes an opened table, not {table!r:.80}: use "
                "WriteClient.open(path), or WriteClient.create(path, ...)"
            )
        self.table = table
        self.metadata = MetadataTable(table)
        self._spark = attach(spark) if spark is not None else None

    # ---- create / open -----------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str,
        record_key: str,
        partition_by: Sequence[str] = (),
        precombine: str | None = None,
        spark: Any = None,
        schema: pa.Schema | None = None,
        index_scope: str = "global",
        storage_options: Mapping[str, object] | None = None,
        table_type: str = "copy_on_write",
        **options: object,
    ) -> WriteClient:
        """A new table at ``path`` (a local path or an fsspec URL such as ``s3://bucket/t``;
        ``storage_options`` go to the file system, else S3 takes the AWS environment
        variables). ``index_scope="partition"``: a record key is unique within its partition
        (the same key may live in several), see ``index.scope``. ``table_type``:
        ``"copy_on_write"`` (a write rewrites the file groups it touches) or
        ``"merge_on_read"`` (writes append log blocks that reads merge and compactions fold)."""
        check_url(path)
        partition_by = field_list(partition_by, path)
        if schema is not None and record_key in schema.names:
            check_key_type(record_key, schema.field(record_key).type, table=path)
        given = {k: str(v) for k, v in options.items()}
        opts = cfg.Options(given)  # the estimate of groups applies min.groups too
        groups = estimate_groups(opts, opts.get(settings.EXPECTED_RECORDS))
        config = TableConfig(
            format_version=table_config.version_for(table_type, index_scope),
            table_type=table_type,
            name=path.rstrip("/").rsplit("/", 1)[-1] or "table",
            record_key=record_key,
            partition_fields=list(partition_by),
            precombine_field=precombine,
            schema=[  # the key column is never nullable
                FieldSpec(f.name, str(f.type), f.nullable and f.name != record_key)
                for f in (schema or [])
            ],
            index=IndexSettings(record_index_file_groups=groups, record_index_scope=index_scope),
            options=given,
        )
        return cls(TableTimelines.create(path, config, None, storage_options), spark)

    @classmethod
    def open(
        cls,
        path: str,
        spark: Any = None,
        storage_options: Mapping[str, object] | None = None,
        **options: object,
    ) -> WriteClient:
        runtime = {k: str(v) for k, v in options.items()}
        return cls(TableTimelines.open(path, runtime, storage_options), spark)

    @property
    def path(self) -> str:
        return self.table.path

    @property
    def spark(self) -> Any:
        if self._spark is None:
            self._spark = embedded_session()
        return self._spark

    # ---- schema --------------------------------------------------------------------------
    def schema(self, as_of: object = None) -> list[FieldSpec]:
        """The table schema as of a read point: that of the latest visible commit."""
        return schema_as_of(self.table, self.table.read_point(as_of))

    def validate(self) -> list[str]:
        """Compare the metadata table with a rebuild from storage; [] when they agree."""
        return validate(self.table)

    def reindex(self, groups: int | None = None) -> str:
        """Rewrite the record index into ``groups`` file groups (default: estimated from its
        entry count) while writers keep committing; returns the reindex instant. Writes that
        overlap it fail with a retryable ``WriteConflictError``; no entry is lost. Dead
        writes and undos are finished first (a pending undo would stop the reindex)."""
        recover(self.table)
        return reshard(self.metadata, groups)

    def create_index(self, columns: str | Sequence[str], kind: str = "secondary") -> str:
        """Build an index on the live table, while writers keep committing; returns the index
        instant. ``kind="secondary"``: an index (value -> record keys) of the column
        ``columns``; reads with ``col = v`` or ``col in (...)`` open only files holding those
        values. ``kind="column_stats"``: statistics of more columns (beyond the first
        ``metadata.column_stats.max.columns``) that writes record and reads prune by."""
        check_index_kind(kind, self.path)
        refuse_indexes(self.table, kind)
        recover(self.table)
        if kind == "column_stats":
            return build_stats(self.metadata, columns)
        return build_index(self.metadata, columns)  # type: ignore[arg-type]

    def drop_index(self, column: str, kind: str = "secondary") -> str:
        """Drop the secondary index (or, ``kind="column_stats"``, the built statistics) of
        ``column``; returns the instant."""
        check_index_kind(kind, self.path)
        recover(self.table)
        if kind == "column_stats":
            return drop_stats(self.metadata, column)
        return drop_index(self.metadata, column)

    def indexes(self, as_of: object = None, kind: str = "secondary") -> dict[str, Any]:
        """The indexes of ``kind`` as of a read point: column -> the instant that built it
        (``"column_stats"``: built statistics, beyond the first columns' that always exist;
        ``"all"``: ``{kind: {column: instant}}`` for both kinds)."""
        if kind != "all":
            check_index_kind(kind, self.path)
        point = self._reader(as_of).point
        found = {"secondary": dict(point.secondary), "column_stats": dict(point.stats_columns)}
        return found if kind == "all" else found[kind]

    def compact(self, min_log_files: int = 1) -> str | None:
        """Fold the logs of every merge-on-read file group holding at least ``min_log_files``
        of them into a new base, as one commit; returns its instant (None: nothing due)."""
        recover(self.table)
        return compact_data(self.table, self.metadata, min_log_files)

    def compact_metadata(self) -> str | None:
        """Compact every metadata file group that has log files; returns the instant."""
        return self.metadata.compact()

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """One plain dict per completed instant, newest first (at most ``limit``): times,
        action, operation, state, a write's metrics, what a service undid, kept or cleaned."""
        return history(self.table, limit)

    def show(self) -> dict[str, Any]:
        """The table as a plain dict: schema and keys, partitions, files, rows, bytes on disk
        by part, record-index groups, indexes, what the services last did and do next
        (``writers.services.describe``; no data file is read)."""
        return describe(self.table, self.metadata)

    # ---- writes --------------------------------------------------------------------------
    def insert(self, data: Any, duplicates: str | None = None) -> str:
        """Add new keys (small file groups first). Keys the table holds: ``duplicates``
        (default: the table's ``insert.duplicates``, ``fail``)."""
        return self._write(data, "insert", duplicates)

    def bulk_insert(self, data: Any, duplicates: str | None = None) -> str:
        """Add new keys in new file groups only; keys the table holds as for ``insert``."""
        return self._write(data, "bulk_insert", duplicates)

    def upsert(self, data: Any) -> str:
        """Insert new keys, update existing ones (the precombine field orders rows)."""
        return self._write(data, "upsert")

    def delete(self, keys: Any, partition: Any = None) -> str:
        """Delete keys: a list of key values, or a table (Arrow, pandas, Spark: deleted on
        Spark) with the record key column. Absent keys are ignored; null keys are refused. A
        partition-scoped index needs each key's partition: ``partition=`` (a mapping of the
        partition fields to values, or a path) or the rows' partition columns."""
        return retrying(self.table, partial(self._delete, keys, partition), "delete")

    def _delete(self, keys: Any, partition: Any) -> str:
        recover(self.table)
        if partition is None and deletes_on_spark(self.table, keys):
            return delete_frame(self.table, self.metadata, keys)
        config, schema = self.table.config, self.table.config.schema or self.schema()
        key_type = self._key_type(schema)
        if not is_table(keys):  # key values: a list, set, array, Series (a bare str refused)
            key_col, rows = key_texts(keys, key_type, table=self.path, what="delete"), None
        else:
            rows, key = to_arrow(keys), config.record_key
            if key not in rows.column_names:
                raise WriteError(
                    f"delete: the keys have no record key column {key!r} "
                    f"(columns: {rows.column_names})",
                    table=self.path,
                )
            key_col = key_array(rows.column(key), key_type, table=self.path, what="delete")
        parts = key_partitions(  # rows' partition columns: of the types the table gives
            config, len(key_col), partition, rows, table=self.path, what="delete", schema=schema
        )
        return delete_keys(self.table, self.metadata, key_col, parts)

    def _key_type(self, schema: Sequence[FieldSpec] = ()) -> pa.DataType | None:
        """The record key column's type (None until a write fixes it); ``schema``: the table's."""
        for field in schema or self.table.config.schema or self.schema():
            if field.name == self.table.config.record_key:
                return text_to_type(field.type)
        return None

    def _write(self, data: Any, operation: str, duplicates: str | None = None) -> str:
        """Run ``operation``, again after a lost conflict (``write.conflict.retries``)."""
        attempt = partial(self._scoped_write, data, operation, duplicates)
        return retrying(self.table, attempt, operation)

    def _scoped_write(self, data: Any, operation: str, duplicates: str | None) -> str:
        recover(self.table)
        policy = resolve_policy(self.table, operation, duplicates)
        if is_spark_frame(data):
            limit = self.table.options.get(settings.SMALL_WRITE_ROWS)
            if limit == 0 or data.count() > limit:
                return write_frame(self.table, self.metadata, data, operation, policy)
        return write_rows(self.table, self.metadata, to_arrow(data), operation, policy)

    def recover(self) -> list[str]:
        """Settle dead writers' instants (every write does this first) and decided commits."""
        return recover(self.table, settle=True)

    def rollback(self, instant: str) -> str:
        """Undo a pending (dead) or completed commit; returns the rollback instant."""
        return rollback(self.table, instant)  # type: ignore[return-value]

    def clean(self) -> str | None:
        """Delete file slices beyond the retention (``clean.retain.commits``, savepoints)."""
        recover(self.table)
        return clean(self.table)

    def archive(self, keep: int | None = None) -> ArchiveResult | None:
        """Move all but the newest ``keep`` (default ``archive.min.instants``) global instants
        into the timeline archive, as far as pending work allows (``timeline.archiver``);
        None when nothing moved."""
        return archive(self.table, keep)

    def savepoint(self, instant: str) -> str:
        """Keep a commit's files from cleaning and make it a restore point."""
        return savepoint(self.table, instant)

    def delete_savepoint(self, instant: str) -> str:
        """Delete a commit's savepoint (no longer kept, nor restorable); returns its undo."""
        recover(self.table)
        return delete_savepoint(self.table, instant)

    def restore(self, instant: str) -> str:
        """Return data, metadata and index to a savepointed commit, as one restore instant."""
        recover(self.table)
        return restore(self.table, instant)

    # ---- reads ---------------------------------------------------------------------------
    # Every ``as_of`` goes through one parser (``timeline.as_of``): an instant time, a datetime
    # or an ISO-8601 string; malformed or out-of-history points raise ``AsOfError``.
    def lookup(
        self, keys: Sequence[Any], as_of: object = None, partition: Any = None
    ) -> dict[str, RecordLocation | None]:
        """Where each key lives as of a read point (None: absent). ``keys`` is a sequence
        (a bare string is refused); the answer is keyed by each key's canonical text. A table
        with a partition-scoped index answers for one ``partition`` (a mapping of the
        partition fields to values, or a partition path)."""
        texts = key_texts(keys, self._key_type(), table=self.path, what="lookup")
        parts = key_partitions(
            self.table.config, len(texts), partition, None, table=self.path, what="lookup"
        )
        with self._reading(as_of):
            found = locations(self._reader(as_of), index_keys(texts, parts).to_pylist())
        scoped = parts is not None
        return {key_of(k, scoped): where for k, where in found.items()}

    def files(
        self, partition: str | None = None, as_of: object = None
    ) -> dict[str, dict[str, int]]:
        return listing.listed_files(self.table, self._reader(as_of), partition)

    def column_stats(self, column: str, as_of: object = None) -> list[ColumnStatsRecord]:
        return listing.column_statistics(self.table, self.metadata, column, as_of)

    def _reader(self, as_of: object) -> MetadataReader:
        return self.metadata.reader(self.table.read_point(as_of))

    @contextmanager
    def _reading(self, as_of: object) -> Iterator[None]:
        """An in-process read, checked again when it ends: if a clean passed its read point
        meanwhile (deleting files it may have missed, or have found gone), the read fails
        instead of answering with part of the table: :class:`AsOfError` for an ``as_of``
        now older than the retention, :class:`VanishedFileError` (retryable) otherwise."""
        latest = self.table.visibility().latest() if as_of is None else None
        try:
            yield
        except FileNotFoundError as exc:
            self._vanished(as_of, exc.filename or str(exc))
        if latest is None:
            self.table.read_point(as_of)  # raises AsOfError once a clean passed it
            return
        now = self.table.timeline()
        retained = self.table.retained_from(now, self.table.visibility(global_timeline=now))
        if retained is not None and latest.completion_time < retained:
            self._vanished(as_of, "its files")

    def _vanished(self, as_of: object, missing: str) -> NoReturn:
        point = "now" if as_of is None else f"as of {as_of}"
        listing.check_listed_present(self.table, self.metadata, as_of, missing)
        raise VanishedFileError(
            f"{missing} was removed while reading {point} (a concurrent clean or restore); "
            "read again (if it keeps failing, run validate())",
            table=self.path,
        ) from None

    def timeline(self, which: str = "global") -> list[Instant]:
        return list(self.table.timeline(which))

    def file_paths(self, as_of: object = None, where: Any = None) -> list[str]:
        """Paths of the data files of the table as of a read point (from the metadata table),
        minus those ``where`` (SQL text or a Spark Column) rules out by their statistics."""
        with self.table.store.load_scope():  # one listing per timeline for the whole plan
            point = self.table.read_point(as_of)
            if where is None:
                return plan.plan_paths(self.table, point)
            session = reading_session(self._spark, where)
            return plan.selected_paths(self.table, session, point, where)

    def read_arrow(
        self, as_of: object = None, mode: str = "snapshot", filters: object = None
    ) -> pa.Table:
        """The table as a pyarrow Table (in-process; small tables and tests). ``mode``:
        ``snapshot`` (bases and logs merged) or ``read_optimized`` (base files only: a
        merge-on-read table's rows as of each group's last compaction, faster). ``filters``:
        pyarrow's, ``[("day", "=", "2024-01-02"), ("fare", ">", 10)]`` (all hold) or a list
        of such lists (any holds): those rows, from the files that may hold them only."""
        logs = plan.merges_logs(mode, self.path)
        with self._reading(as_of):
            with self.table.store.load_scope():  # one listing per timeline (the check after
                point = self.table.read_point(as_of)  # the read lists afresh: ``_reading``)
                return plan.read_arrow(self.table, point, logs, filters)

    def read(self, as_of: object = None, where: Any = None, mode: str = "snapshot") -> Any:
        """A Spark DataFrame of the table now or as of an instant (``mode``: see
        :meth:`read_arrow`)."""
        logs = plan.merges_logs(mode, self.path)
        point = self.table.read_point(as_of)
        return plan.read_spark(self.table, self.spark, point, where, logs)
