"""The Spark data source ``lakebraid`` (PySpark's Python Data Source API).

::

    spark.read.format("lakebraid").option("as_of", t).load(path).where("day = '2024-01-02'")
    df.write.format("lakebraid").mode("append").save(path)

:func:`register` adds it to a session; the library calls it for its embedded session
(``writers.engine.spark.session``) and for every session handed to a ``WriteClient``. A table
on an object store takes its file system's options as ``.option("storage_options", json)``
(else S3 reads the AWS environment variables); tasks carry them as plain values.

**Reads.** ``schema()`` is the table schema as of the read point, exactly as
``WriteClient.read`` gives it (``writers.read.plan.table_schema``: the table's columns, then
``_braid_commit_time`` and ``_braid_record_key``). ``partitions()`` lists the file slices of
the read point from the metadata table: one input partition per file slice (a base file, and
in a merge-on-read table its logs). ``read()`` runs in Python workers: it opens its files with
fsspec (``writers.read.spark_files``), merges a slice's logs into its base (newest wins,
deletes remove), conforms the rows to the declared schema and yields Arrow batches carrying
that schema exactly (nullability included). ``.option("mode", "read_optimized")`` reads base
files only (a merge-on-read table as of each file group's last compaction;
``WriteClient.read(mode=)``); ``snapshot``, the default, merges the logs; any other value is
refused naming it. Reader and partitions hold plain values only (URLs, strings, the Arrow
schema), never a table object. A loaded DataFrame keeps the schema of its ``load()``: load
again to see new commits.

**Writes (append only)**: ``writers.engine.spark.datasource_write``.

**The data source prunes no file; filters are Spark's.** Every scan reads every file slice of
the read point, and Spark filters the rows. Pruning by pushed filters cannot be made right in
Spark 4.3: it keeps the partitions and read function of a relation's latest filter pushdown on
the loaded relation's provider (``PythonDataSourceV2.setReadInfo``) and reuses them for any
later scan of that relation that pushes no filter, or that is planned in the same query
(``df.where(a).count(); df.count()`` would count only ``a``'s files, and
``df.where(a).union(df.where(b))`` would read only ``b``'s), and none of this reaches Python.
``.option("pushdown", "true")`` is therefore refused, naming the way to a pruned read:
``WriteClient.read(where=)``, whose DataFrame is made of the files that can match and filtered
by ``where`` (the record index, secondary indexes and column statistics), right however it is
reused.
"""

from __future__ import annotations

import json
import uuid
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from lakebraid.metadata.commits import schema_as_of
from lakebraid.timeline.durable import filesystem
from lakebraid.timeline.errors import ConfigError
from lakebraid.timeline.layout import TableLayout
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec
from lakebraid.writers.engine.spark.datasource_write import LakebraidWriter
from lakebraid.writers.errors import WriteError
from lakebraid.writers.read.plan import merges_logs, plan_units, table_schema
from lakebraid.writers.read.spark_files import FileRead, read_value, task_values
from lakebraid.writers.read.spark_types import spark_schema
from lakebraid.writers.write.datafile import spec_of, virtual_key
from lakebraid.writers.write.operations import ordering
from lakebraid.writers.write.workers import settle

NAME = "lakebraid"
_OWN_OPTIONS = ("path", "as_of", "mode", "pushdown", "storage_options")
_registered: weakref.WeakSet[Any] = weakref.WeakSet()


def register(spark: Any) -> None:
    """Make ``format("lakebraid")`` available in ``spark``. Once per session."""
    if spark in _registered:
        return
    spark.dataSource.register(LakebraidDataSource)
    _registered.add(spark)


# ---- opening the table (planning workers and the commit worker) -------------------------
def _table_options(options: Any) -> dict[str, str]:
    """The options that are table config overrides (all but :data:`_OWN_OPTIONS`)."""
    return {k: str(v) for k, v in dict(options).items() if k.lower() not in _OWN_OPTIONS}


def _storage(options: Any) -> dict[str, Any]:
    """The ``storage_options`` option: a JSON object of the table's file system options."""
    text = dict(options).get("storage_options", "{}")
    try:
        value = json.loads(str(text))
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ConfigError(f"option storage_options must be a JSON object, not {text!r}")
    return value


def _root_url(options: Any, purpose: str) -> str:
    """The table's fsspec URL; a clear error when the path holds no lakebraid table."""
    path = dict(options).get("path")
    if not path:
        raise ConfigError(f"{purpose} needs a table path: load(path) or save(path)")
    fs, root = filesystem(path, _storage(options))
    layout = TableLayout(root)
    if not fs.exists(layout.table_config):
        raise ConfigError(
            f"{path} is not a lakebraid table ({layout.table_config} is missing): check the "
            "path, or create the table first with WriteClient.create(path, record_key=...)",
            table=root,
        )
    return fs.unstrip_protocol(layout.root)


def _open(root: str, options: dict[str, str], storage: dict[str, Any]) -> TableTimelines:
    """The table at ``root`` with the data source's config overrides (no Spark session)."""
    return TableTimelines.open(root, options, storage)


def _schema(table: TableTimelines, as_of: object) -> list[FieldSpec]:
    """The table schema as of a user's ``as_of`` (checked: ``TableTimelines.read_point``)."""
    return schema_as_of(table, table.read_point(as_of))


# ---- planning --------------------------------------------------------------------------
def plan_files(
    root: str,
    as_of: str | None,
    options: dict[str, str] | None = None,
    storage: dict[str, Any] | None = None,
    logs: bool = True,
) -> list[Any]:
    """One read task's value per file slice of the read point (a URL, or a merge-on-read
    slice's base and logs: ``spark_files.task_values``; ``writers.read.plan.plan_units``, no
    data file is opened). ``logs=False``: base files only (a read-optimized read)."""
    table = _open(root, options or {}, storage or {})
    return task_values(
        plan_units(table, table.read_point(as_of), None, logs), table.fs.unstrip_protocol
    )


def _refuse_pushdown(options: Any, root: str) -> None:
    """``pushdown`` may only be ``false``: see the module doc for why pruning is refused."""
    value = str(options.get("pushdown", "false"))
    if value.lower() == "false":
        return
    raise ConfigError(
        f"lakebraid table {root}: option pushdown={value!r} is not supported: Spark 4.3 reuses "
        "a loaded DataFrame's pruned file list for its later scans, which would silently miss "
        "rows, so the data source reads every file and Spark filters the rows. For a read "
        "that opens only the files that can match, use "
        "WriteClient.open(path, spark=spark).read(where=...) (record index, secondary "
        "indexes, column statistics); or drop the option",
        table=root,
    )


# ---- the data source -----------------------------------------------------------------------
class LakebraidDataSource(DataSource):
    """``format("lakebraid")``: options ``path`` (load/save), ``as_of`` and ``mode`` (reads),
    and any table config key as a runtime override (e.g. ``write.target.file.rows``)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        root = _root_url(self.options, "spark.read.format('lakebraid')")
        table = _open(root, _table_options(self.options), _storage(self.options))
        return from_arrow_schema(
            spark_schema(table_schema(_schema(table, self.options.get("as_of"))))
        )

    def reader(self, schema: StructType) -> LakebraidReader:
        root = _root_url(self.options, "spark.read.format('lakebraid')")
        _refuse_pushdown(self.options, root)
        logs = merges_logs(self.options.get("mode", "snapshot"), root)
        as_of, storage = self.options.get("as_of"), _storage(self.options)
        table = _open(root, _table_options(self.options), storage)
        derive = virtual_key(spec_of(_schema(table, as_of)), table.config.record_key)
        read = FileRead(storage=storage, derive_key=derive, ordering=ordering(table))
        options = _table_options(self.options)
        return LakebraidReader(root, as_of, options, schema, read=read, logs=logs)

    def writer(self, schema: StructType, overwrite: bool) -> LakebraidWriter:
        root = _root_url(self.options, "df.write.format('lakebraid')")
        if overwrite:
            raise WriteError(
                f"lakebraid table {root}: overwrite is not supported by the Spark data source; "
                "use mode('append') to insert rows, or the write client "
                "(WriteClient.open(path).upsert / .delete) to replace or remove rows",
                table=root,
            )
        return LakebraidWriter(
            root, uuid.uuid4().hex, _table_options(self.options), _storage(self.options)
        )


class LakebraidReader(DataSourceReader):
    def __init__(
        self,
        root: str,
        as_of: str | None,
        options: dict[str, str],
        schema: StructType,
        *,
        read: FileRead,
        logs: bool = True,
    ):
        self.root = root
        self.logs = logs  # False: read-optimized, base files only
        self.read_spec = read  # storage options, the key column of a virtual record key
        self.as_of = as_of
        self.options = options
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")  # what Spark checks
        # no pushFilters: the base class pushes nothing, so Spark filters every row

    def partitions(self) -> Sequence[InputPartition]:
        values = plan_files(self.root, self.as_of, self.options, self.read_spec.storage, self.logs)
        return [InputPartition(value) for value in values]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        settle()
        if partition.value is None:
            return  # no file selected: Spark still runs one empty partition
        table = read_value(partition.value, self.read_spec, self.arrow_schema)
        for batch in table.to_batches():
            yield pa.RecordBatch.from_arrays(batch.columns, schema=self.arrow_schema)
