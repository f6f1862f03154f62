"""The write client: insert, bulk_insert, upsert, delete and reads of one lakebraid table.

Every write is one instant through ``writers.commit.Transaction``: data files and the metadata
table's log blocks (files, column_stats, record_index) become visible together at the global
commit point, or not at all. Input is a Spark DataFrame, a pyarrow Table or a pandas
DataFrame; it is checked (``writers.schema``) before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from lakebraid.index.keys import RECORD_KEY, check_key_type, key_array, key_texts
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION, existing_rows, tag
from lakebraid.metadata import settings as metadata_settings
from lakebraid.metadata.arrow_records import empty_table
from lakebraid.metadata.commits import WriteStatus
from lakebraid.metadata.hashing import estimate_file_groups, group_order
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import ColumnStatsRecord, Partition, RecordLocation
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline import config as cfg
from lakebraid.timeline.errors import ConfigError, RetryableError, StateUnknownError
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec, IndexSettings, TableConfig, text_to_type
from lakebraid.writers import settings
from lakebraid.writers.clean import clean
from lakebraid.writers.commit import G, Transaction, schema_as_of
from lakebraid.writers.engine import InProcessEngine, Work
from lakebraid.writers.errors import ConflictDetected, InputError, WriteConflictError, WriteError
from lakebraid.writers.filegroup import OP, OP_DELETE, OP_UPSERT
from lakebraid.writers.markers import sweep_markers
from lakebraid.writers.pipeline import (
    PARTITION,
    TARGET_FILE_ID,
    WORK_COLUMNS,
    codes,
    current_files,
    deduplicate,
    duplicate_keys_error,
    insert_counts,
    plan_slots,
    prepare,
    rewrite_tasks,
    route,
    stale_moves,
)
from lakebraid.writers.read import read_arrow_files, read_spark
from lakebraid.writers.recovery import recover
from lakebraid.writers.restore import restore, savepoint
from lakebraid.writers.rollback import rollback
from lakebraid.writers.schema import (
    check_input,
    is_spark_frame,
    is_table,
    normalize_input,
    to_arrow,
)
from lakebraid.writers.spark import embedded_session
from lakebraid.writers.spark_pipeline import Context, rewrite_frame, route_frame
from lakebraid.writers.validate import validate

# Called with every Spark session a client is given or starts. The package wires the Spark
# data source in here (``writers/__init__.py``), so ``format("lakebraid")`` works on it while
# this module never imports ``writers.datasource`` (which imports this one).
SESSION_HOOKS: list[Callable[[Any], None]] = []


def _on_session(spark: Any) -> None:
    for hook in SESSION_HOOKS:
        hook(spark)


class WriteClient:
    """A handle on one table. ``spark=None``: an embedded ``local[*]`` session on first use."""

    def __init__(self, table: TableTimelines, spark: Any = None):
        self.table = table
        self.metadata = MetadataTable(table)
        self._spark = spark
        if spark is not None:
            _on_session(spark)

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
        **options: object,
    ) -> WriteClient:
        partition_by = _field_list(partition_by, path)
        if schema is not None:
            if record_key in schema.names:
                check_key_type(record_key, schema.field(record_key).type, table=path)
        given = {k: str(v) for k, v in options.items()}
        opts = cfg.Options(given)
        expected = opts.get(settings.EXPECTED_RECORDS)
        groups = 1
        if expected:
            groups = estimate_file_groups(
                expected,
                opts.get(metadata_settings.RECORDS_PER_GROUP),
                opts.get(metadata_settings.MIN_GROUPS),
                opts.get(metadata_settings.MAX_GROUPS),
            )
        config = TableConfig(
            name=path.rstrip("/").rsplit("/", 1)[-1] or "table",
            record_key=record_key,
            partition_fields=list(partition_by),
            precombine_field=precombine,
            schema=[]
            if schema is None
            else [
                FieldSpec(f.name, str(f.type), f.nullable and f.name != record_key) for f in schema
            ],
            index=IndexSettings(record_index_file_groups=groups),
            options=given,
        )
        return cls(TableTimelines.create(path, config), spark)

    @classmethod
    def open(cls, path: str, spark: Any = None, **options: object) -> WriteClient:
        return cls(TableTimelines.open(path, {k: str(v) for k, v in options.items()}), spark)

    @property
    def path(self) -> str:
        return self.table.path

    @property
    def spark(self) -> Any:
        if self._spark is None:
            self._spark = embedded_session()
            _on_session(self._spark)
        return self._spark

    # ---- schema --------------------------------------------------------------------------
    def schema(self, as_of: object = None) -> list[FieldSpec]:
        """The table schema as of a read point: that of the latest visible commit."""
        return schema_as_of(self.table, self.table.read_point(as_of))

    def validate(self) -> list[str]:
        """Compare the metadata table with a rebuild from storage; [] when they agree."""
        return validate(self.table)

    def compact_metadata(self) -> str | None:
        """Compact every metadata file group that has log files; returns the instant."""
        return self.metadata.compact()

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

    def _policy(self, operation: str, duplicates: str | None) -> str:
        """The duplicate-key policy of a write (``upsert`` for upserts)."""
        if operation == "upsert":
            return "upsert"
        if duplicates is None:
            return self.table.options.get(settings.INSERT_DUPLICATES)
        if duplicates not in settings.DUPLICATE_POLICIES:
            raise InputError(
                f"{operation}: duplicates={duplicates!r}; choose one of "
                f"{settings.DUPLICATE_POLICIES}",
                table=self.path,
            )
        return duplicates

    def delete(self, keys: Any) -> str:
        """Delete keys: a list of key values, or a table (Arrow, pandas, Spark) with the record
        key column. Keys that are absent are ignored; null keys are refused."""
        recover(self.table)
        config = self.table.config
        key_type = self._key_type()
        if not is_table(keys):  # key values: a list, set, array, Series (a bare str refused)
            key_col = key_texts(keys, key_type, table=self.path, what="delete")
        else:
            incoming = to_arrow(keys)
            if config.record_key not in incoming.column_names:
                raise WriteError(
                    f"delete: the keys have no record key column {config.record_key!r} "
                    f"(columns: {incoming.column_names})",
                    table=self.path,
                )
            key_col = key_array(
                incoming.column(config.record_key), key_type, table=self.path, what="delete"
            )
        rows = pa.table({RECORD_KEY: pc.unique(key_col)})
        reader = self.metadata.reader()
        found = reader.lookup(rows.column(RECORD_KEY))
        tagged = tag(rows, found)
        tagged = tagged.filter(pc.is_valid(tagged.column(OLD_FILE_ID)))
        tagged = tagged.append_column(PARTITION, tagged.column(OLD_PARTITION))
        tagged = tagged.append_column(
            OP, pa.repeat(pa.scalar(OP_DELETE, pa.int8()), tagged.num_rows)
        )
        routed = tagged.append_column(TARGET_FILE_ID, tagged.column(OLD_FILE_ID))
        listing = current_files(reader.files())
        return self._commit("delete", routed, self.schema(), listing, reader.point.read_at)

    def _key_type(self) -> pa.DataType | None:
        """The record key column's type (None until the first write fixes the schema)."""
        for field in self.table.config.schema or self.schema():
            if field.name == self.table.config.record_key:
                return text_to_type(field.type)
        return None

    def _write(self, data: Any, operation: str, duplicates: str | None = None) -> str:
        recover(self.table)
        policy = self._policy(operation, duplicates)
        if is_spark_frame(data):
            limit = self.table.options.get(settings.SMALL_WRITE_ROWS)
            if limit == 0 or data.count() > limit:
                return self._write_spark(data, operation, policy)
        config = self.table.config
        incoming = normalize_input(to_arrow(data), table=self.path)
        schema = check_input(incoming, config, self.schema(), table=self.path)
        prepared = prepare(incoming, config.record_key, config.partition_fields)
        prepared = deduplicate(prepared, config.precombine_field)
        prepared = prepared.append_column(
            OP, pa.repeat(pa.scalar(OP_UPSERT, pa.int8()), prepared.num_rows)
        )
        reader = self.metadata.reader()
        listing = current_files(reader.files())
        if listing:  # an empty table holds no key: no lookup
            found, at = reader.locate(prepared.column(RECORD_KEY))  # de-duplicated above
            tagged = tag(prepared, found, at)
            tagged, operation = self._duplicates(tagged, operation, policy)
            field = ordering(self.table)
            if field is not None:
                table, key = self.table, config.record_key
                tagged = stale_moves(tagged, table.fs, table.layout, listing, field, key)
        else:
            tagged = tag(prepared, empty_table(Partition.RECORD_INDEX))
        target, small = self._insert_room(reader, listing, operation)
        plan = plan_slots(insert_counts(tagged), listing, target_rows=target, small_rows=small)
        routed = route(tagged, plan)
        return self._commit(operation, routed, schema, listing, reader.point.read_at)

    def _duplicates(self, tagged: pa.Table, operation: str, policy: str) -> tuple[pa.Table, str]:
        """Apply the duplicate-key policy to a tagged write; returns rows and operation."""
        if policy == "upsert":
            return tagged, "upsert" if operation != "bulk_insert" else operation
        existing = existing_rows(tagged)
        count = pc.sum(existing).as_py() or 0
        if count and policy == "fail":
            sample = tagged.column(RECORD_KEY).filter(existing).slice(0, 10).to_pylist()
            raise duplicate_keys_error(operation, count, sample, self.path)
        return (tagged.filter(pc.invert(existing)) if count else tagged), operation

    def _insert_room(
        self, reader: MetadataReader, listing: Mapping[str, Mapping[str, str]], operation: str
    ) -> tuple[int, dict[str, dict[str, int]]]:
        """Target rows per file group, and the small groups inserts may fill first."""
        target = self.table.options.get(settings.TARGET_FILE_ROWS)
        if operation == "bulk_insert":
            return target, {}
        small = min(target, self.table.options.get(settings.SMALL_FILE_ROWS))
        stats = reader.column_stats(self.table.config.record_key)
        return target, _rows_per_group(stats, listing, small)

    def _write_spark(self, frame: Any, operation: str, policy: str) -> str:
        """The Spark engine: every step runs as Spark tasks (``writers.spark_pipeline``)."""
        config = self.table.config
        schema = check_input(frame.limit(0).toArrow(), config, self.schema(), table=self.path)
        checked = [
            config.record_key,
            *([config.precombine_field] if config.precombine_field else []),
        ]
        null = F.lit(False)
        for column in checked:
            null = null | F.col(column).isNull()
        bad = frame.where(null).limit(1)
        if bad.count():  # one row with a null key or precombine value: name it like in-process
            check_input(bad.toArrow(), config, self.schema(), table=self.path)
        reader = self.metadata.reader()
        listing = current_files(reader.files())
        target, small = self._insert_room(reader, listing, operation)
        root = self.table.fs.unstrip_protocol(self.table.layout.root)
        options = {k: str(v) for k, v in self.table.options.given().items()}
        ctx = Context(
            root=root,
            key=config.record_key,
            partition_fields=list(config.partition_fields),
            precombine=config.precombine_field,
            point=reader.point,
            options=options,
            ordering=ordering(self.table),
        )
        if ctx.ordering is not None:  # moves are ordered against the stored rows' files
            ctx = msgspec.structs.replace(ctx, files=listing)
        if policy == "upsert" and operation == "insert":
            operation = "upsert"
        routed = route_frame(
            frame,
            ctx,
            tagging=bool(listing),  # an empty table holds no key: no lookup
            existing=None if operation == "upsert" else policy,
            target_rows=target,
            small_rows=small,
            operation=operation,
            table=self.path,
        )
        spec = [(f.name, f.type, f.nullable) for f in schema]
        tx = Transaction(self.table, self.metadata, operation, reader.point.read_at)
        time = tx.begin()
        try:
            statuses = rewrite_frame(
                routed.frame,
                routed.targets,
                listing,
                root=root,
                time=time,
                schema=spec,
                record_key=config.record_key,
                ordering=ctx.ordering,
            )
            self._finish(tx, statuses, schema)
        except BaseException as exc:
            self._abandon(tx, exc)
            raise
        finally:
            routed.release()
        self.metadata.compact_if_due()
        return time

    def _finish(
        self, tx: Transaction, statuses: list[WriteStatus], schema: list[FieldSpec]
    ) -> None:
        """Commit, or on a conflict roll this write back and raise WriteConflictError."""
        try:
            tx.commit(statuses, schema)
            written = [f"{s.partition}/{s.file_name}".lstrip("/") for s in statuses if s.file_name]
            try:
                sweep_markers(self.table, tx.time, written)  # type: ignore[arg-type]
            except Exception:  # committed already: the cleaner sweeps what this left
                pass
        except ConflictDetected as conflict:
            rollback(self.table, conflict.instant, own=True)  # type: ignore[arg-type]
            tx.close()  # the heartbeat goes last: until then no recovery takes us for dead
            raise WriteConflictError(
                f"{conflict.message}; this write was rolled back and nothing of theirs was "
                "touched: retry it",
                table=self.path,
                instant=conflict.instant,
            ) from None

    def _abandon(self, tx: Transaction, exc: BaseException) -> None:
        """After a failure inside a write, roll its own instant back at once (its files and
        log blocks go, nothing stays pending). Not when the outcome is unknown or the global
        commit completed; if the rollback fails too, the heartbeat is left to expire and the
        next writer's recovery finishes it."""
        time = tx.time
        pending = time is not None and not isinstance(exc, StateUnknownError | RetryableError)
        try:
            if pending:
                target = self.table.timeline(G).get(time, Action.COMMIT)  # type: ignore[arg-type]
                if target is not None and target.is_pending:
                    rollback(self.table, time, own=True)  # type: ignore[arg-type]
            tx.close()
        except Exception:
            tx.close(failed=True)

    def recover(self) -> list[str]:
        """Finish dead rollbacks and roll back dead writes (every write does this first)."""
        return recover(self.table)

    def rollback(self, instant: str) -> str:
        """Undo a pending (dead) or completed commit; returns the rollback instant."""
        return rollback(self.table, instant)  # type: ignore[return-value]

    def clean(self) -> str | None:
        """Delete file slices beyond the retention (``clean.retain.commits``, savepoints)."""
        recover(self.table)
        return clean(self.table)

    def savepoint(self, instant: str) -> str:
        """Keep a commit's files from cleaning and make it a restore point."""
        return savepoint(self.table, instant)

    def restore(self, instant: str) -> str:
        """Return data, metadata and index to a savepointed commit, as one restore instant."""
        recover(self.table)
        return restore(self.table, instant)

    def _commit(
        self,
        operation: str,
        routed: pa.Table,
        schema: list[FieldSpec],
        listing: Mapping[str, Mapping[str, str]],
        read_at: str | None,
    ) -> str:
        tx = Transaction(self.table, self.metadata, operation, read_at)
        time = tx.begin()
        try:
            tasks = _tasks(self.table, routed, listing, time, schema)
            statuses = InProcessEngine().rewrite(tasks)
            self._finish(tx, statuses, schema)
        except BaseException as exc:
            self._abandon(tx, exc)
            raise
        self.metadata.compact_if_due()
        return time

    # ---- reads ---------------------------------------------------------------------------
    # Every ``as_of`` goes through one parser (``timeline.as_of``): an instant time, a datetime
    # or an ISO-8601 string; malformed or out-of-history points raise ``AsOfError``.
    def lookup(self, keys: Sequence[Any], as_of: object = None) -> dict[str, RecordLocation | None]:
        """Where each key lives as of a read point (None: absent). ``keys`` is a sequence
        (a bare string is refused); the answer is keyed by each key's canonical text."""
        texts = key_texts(keys, self._key_type(), table=self.path, what="lookup")
        return self._reader(as_of).locations(texts.to_pylist())

    def files(
        self, partition: str | None = None, as_of: object = None
    ) -> dict[str, dict[str, int]]:
        return self._reader(as_of).files(partition)

    def column_stats(self, column: str, as_of: object = None) -> list[ColumnStatsRecord]:
        return self._reader(as_of).column_stats(column)

    def _reader(self, as_of: object) -> MetadataReader:
        return self.metadata.reader(self.table.read_point(as_of))

    def timeline(self, which: str = "global") -> list[Instant]:
        return list(self.table.timeline(TimelineKind(which)))

    def file_paths(self, as_of: object = None) -> list[str]:
        """Paths of the data files of the table as of a read point (from the metadata table)."""
        return self._paths(self.table.read_point(as_of))

    def _paths(self, point: str | None) -> list[str]:
        """Data file paths as of a checked read point."""
        layout = self.table.layout
        listing = self.metadata.reader(point).files()
        return [
            layout.data_file(p, n) for p, names in sorted(listing.items()) for n in sorted(names)
        ]

    def read_arrow(self, as_of: object = None) -> pa.Table:
        """The table as a pyarrow Table (in-process; small tables and tests)."""
        point = self.table.read_point(as_of)  # checked once; the calls below take it as is
        schema = schema_as_of(self.table, point)
        return read_arrow_files(
            self.table.fs, self._paths(point), schema, self.table.config.record_key
        )

    def read(self, as_of: object = None, where: Any = None) -> Any:
        """A Spark DataFrame of the table now or as of an instant."""
        return read_spark(self, self.table.read_point(as_of), where)


def ordering(table: TableTimelines) -> str | None:
    """The precombine field when stored rows are ordered by event time (``write.merge.mode``)."""
    if table.options.get(settings.MERGE_MODE) != "event_time":
        return None
    return table.config.precombine_field


def _field_list(fields: object, path: str) -> list[str]:
    """``partition_by`` as a list of names: a bare string is refused (``"day"`` would be the
    fields ``d``, ``a``, ``y``)."""
    if fields is None:
        return []
    if isinstance(fields, str | bytes) or not isinstance(fields, Sequence):
        raise ConfigError(
            f"partition_by must be a list of field names such as [{fields!r}], not "
            f"{type(fields).__name__} {fields!r}",
            table=path,
        )
    bad = [f for f in fields if not isinstance(f, str)]
    if bad:
        raise ConfigError(f"partition_by: field names must be strings, got {bad}", table=path)
    return list(fields)


def _rows_per_group(
    stats: Sequence[ColumnStatsRecord], listing: Mapping[str, Mapping[str, str]], target: int
) -> dict[str, dict[str, int]]:
    """partition -> file id -> rows, for the current file groups under ``target`` rows (the
    small-file limit)."""
    current = {(p, name): fid for p, groups in listing.items() for fid, name in groups.items()}
    small: dict[str, dict[str, int]] = {}
    for s in stats:
        fid = current.get((s.partition, s.file))
        if fid is not None and s.value_count < target:
            small.setdefault(s.partition, {})[fid] = s.value_count
    return small


def _tasks(
    table: TableTimelines,
    routed: pa.Table,
    listing: Mapping[str, Mapping[str, str]],
    time: str,
    schema: Sequence[FieldSpec],
) -> list[Work]:
    """One rewrite task per target file group, with the positions of its rows in the payload
    (the engine takes them on its threads)."""
    if routed.num_rows == 0:
        return []
    (parts, ids), names = codes([routed.column(PARTITION), routed.column(TARGET_FILE_ID)])
    order = group_order(ids, len(names))  # rows by file id (radix sort of small codes)
    parts, ids = parts[order], ids[order]
    if np.any((ids[1:] == ids[:-1]) & (parts[1:] != parts[:-1])):  # one id, two partitions
        pairs = parts.astype(np.int64) * len(names) + ids
        again = np.argsort(pairs, kind="stable")
        order, parts, ids = order[again], parts[again], ids[again]
    starts = np.flatnonzero(
        np.concatenate([[True], (ids[1:] != ids[:-1]) | (parts[1:] != parts[:-1])])
    )
    payload = routed.drop_columns([c for c in WORK_COLUMNS if c in routed.column_names])
    payload = payload.combine_chunks()
    root = table.fs.unstrip_protocol(table.layout.root)
    spec = [(f.name, f.type, f.nullable) for f in schema]
    text = names.to_pylist()
    targets = [(text[parts[i]], text[ids[i]]) for i in starts.tolist()]
    tasks = rewrite_tasks(
        targets,  # type: ignore[arg-type]
        listing,
        root=root,
        time=time,
        schema=spec,
        record_key=table.config.record_key,
        ordering=ordering(table),
    )
    ends = [*starts.tolist()[1:], len(order)]
    return [
        Work(task, payload, order[start:end])
        for task, start, end in zip(tasks, starts.tolist(), ends, strict=True)
    ]
