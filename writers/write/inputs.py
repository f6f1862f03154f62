"""Input of a write: conversion to Arrow and the checks that run before anything is written.

Schema rules: the record key and every partition field must be present, keys must not be
null, ``_braid_*`` names are reserved. A column the table has keeps its type (integers and
floats may arrive narrower and are widened); a new column is added as nullable; a nullable
column missing from the input is written as nulls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.errors import RecordKeyError
from lakebraid.index.keys import check_key_type
from lakebraid.index.scope import check_partition_given, is_scoped, partition_of
from lakebraid.timeline.errors import ConfigError
from lakebraid.timeline.table_config import (
    FieldSpec,
    TableConfig,
    canonical_type,
    text_to_type,
    type_to_text,
)
from lakebraid.writers.errors import InputError
from lakebraid.writers.write.partition_codes import partition_paths

_WIDENS = {
    pa.int8(): (pa.int16(), pa.int32(), pa.int64()),
    pa.int16(): (pa.int32(), pa.int64()),
    pa.int32(): (pa.int64(),),
    pa.float32(): (pa.float64(),),
    pa.string(): (pa.large_string(),),
}


def is_spark_frame(data: Any) -> bool:
    return hasattr(data, "toArrow") and hasattr(data, "sparkSession")


def is_table(data: Any) -> bool:
    """A table-like input (Arrow table or batch, pandas or Spark DataFrame)."""
    return (
        isinstance(data, pa.Table | pa.RecordBatch)
        or is_spark_frame(data)
        or (type(data).__module__.startswith("pandas") and hasattr(data, "columns"))
    )


def to_arrow(data: Any) -> pa.Table:
    """A pyarrow Table from a pyarrow Table/RecordBatch, a pandas or a Spark DataFrame."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    try:
        if is_spark_frame(data):
            return data.toArrow()
        if type(data).__module__.startswith("pandas"):
            return pa.Table.from_pandas(data, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InputError(
            f"cannot convert the {type(data).__name__} to Arrow: {exc}; a column of a type "
            "tables do not hold (struct, map) or of mixed types is the usual cause: cast or "
            "drop it"
        ) from None
    raise InputError(
        f"cannot write a {type(data).__name__}: pass a Spark DataFrame, a pyarrow Table or a "
        "pandas DataFrame"
    )


def normalize_input(incoming: pa.Table, *, table: str) -> pa.Table:
    """Input columns in the types a table stores: dictionary columns decoded (pandas
    categoricals), ``timestamp[ns]`` (pandas datetimes) as ``timestamp[us]``, in list elements
    too: Spark cannot read nanosecond Parquet timestamps. A value with sub-microsecond digits
    is refused, never truncated."""
    for at, field in enumerate(incoming.schema):
        kind = _stored(field.type)
        if kind == field.type:
            continue
        try:
            column = incoming.column(at).cast(kind)
        except pa.ArrowInvalid as exc:
            raise InputError(
                f"column {field.name!r} ({field.type}) cannot be stored as {kind} without loss "
                f"({exc}); round it to microseconds first",
                table=table,
            ) from None
        incoming = incoming.set_column(at, pa.field(field.name, kind, field.nullable), column)
    return incoming


def _stored(kind: pa.DataType) -> pa.DataType:
    """The type values of ``kind`` are stored as (see :func:`normalize_input`)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_timestamp(kind) and kind.unit == "ns":
        return pa.timestamp("us", tz=kind.tz)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = kind.value_field.with_type(_stored(kind.value_type))
        return pa.list_(inner) if pa.types.is_list(kind) else pa.large_list(inner)
    return kind


def spark_problem(data_type: pa.DataType) -> str | None:
    """Why a column of ``data_type`` could not be stored in Parquet or read back by Spark
    (None: it can)."""
    if pa.types.is_decimal(data_type) and data_type.scale < 0:
        wide = data_type.precision - data_type.scale
        return (
            "Parquet cannot store a decimal of negative scale; cast it to "
            f"decimal128({wide}, 0)" + (" or string" if wide > 38 else "")
        )
    if pa.types.is_float16(data_type):
        return "Spark cannot read half floats; cast it to float32"
    if pa.types.is_decimal(data_type) and data_type.precision > 38:
        return "Spark reads decimals of at most 38 digits; cast it to decimal128(38, s) or string"
    if pa.types.is_list(data_type):
        return spark_problem(data_type.value_type)
    return None


def _misfit(field: pa.Field, want: pa.DataType) -> str:
    if pa.types.is_null(want):  # a table written before untyped columns were left out
        return (
            f"column {field.name!r} was first written with nulls only, so the table holds it "
            f"as type null, which values of type {field.type} cannot change; write them into "
            "a column of another name"
        )
    return (
        f"column {field.name!r} has type {field.type} in the input but {want} in the table; "
        f"cast it to {want} (changing a column's type is not supported)"
    )


def _untyped(field: pa.Field, config: TableConfig, table: str) -> bool:
    """Whether a new input column has no type yet (all nulls, type null): the table leaves it
    out (no file holds it, as Delta Lake drops void columns), so its first values later give
    it their type. A key, precombine or partition column needs its type now: refused."""
    if not pa.types.is_null(field.type):
        return False
    if field.name in {config.record_key, config.precombine_field, *config.partition_fields}:
        raise InputError(
            f"column {field.name!r} holds nulls only (type null), so it gives the table no "
            "type for it; cast it to the type of its values, e.g. pa.nulls(n, pa.string())",
            table=table,
        )
    return True


def void_columns(names: Sequence[str], schema: Sequence[FieldSpec]) -> list[str]:
    """The input columns ``names`` that the schema after the write leaves out (untyped new
    columns): the engines drop them before writing."""
    kept = {f.name for f in schema}
    return [n for n in names if n not in kept]


def _fits(kind: pa.DataType, want: pa.DataType) -> bool:
    """Whether values of ``kind`` are written to a column of type ``want`` (the same type,
    or a narrower integer or float it widens)."""
    return kind == want or canonical_type(kind) == want or want in _WIDENS.get(kind, ())


def nan_count(column: pa.ChunkedArray | pa.Array) -> int:
    """Rows of a floating-point column holding NaN (0 for any other type)."""
    if not pa.types.is_floating(column.type):
        return 0
    return int(pc.sum(pc.is_nan(column)).as_py() or 0)


def _check_columns(incoming: pa.Table, config: TableConfig, table: str) -> None:
    """The record key, precombine and partition columns are present (key and precombine
    without nulls); no reserved or repeated column name."""
    names = incoming.column_names
    if len(set(names)) != len(names):  # first: a repeated name cannot be read by name
        raise InputError(f"duplicate column names in the input: {names}", table=table)
    folded = [n.lower() for n in names]
    if "" in names or len(set(folded)) != len(folded):
        raise InputError(
            f"column names must be non-empty and differ in more than case (Spark reads them "
            f"case-insensitively): {names}",
            table=table,
        )
    key = config.record_key
    if key not in names:
        raise InputError(
            f"the input has no record key column {key!r} (columns: {names}); add it or "
            "rename the key column",
            table=table,
        )
    nulls = incoming.column(key).null_count
    if nulls:
        raise InputError(
            f"{nulls} rows have a null record key {key!r}: every row needs a key; drop or fill "
            "them before writing",
            table=table,
        )
    pre = config.precombine_field
    if pre is not None and pre not in names:
        raise InputError(
            f"the input has no precombine column {pre!r} (columns: {names}); every write "
            "needs it to order rows of one key",
            table=table,
        )
    if pre is not None and incoming.column(pre).null_count:
        raise InputError(
            f"{incoming.column(pre).null_count} rows have a null precombine value {pre!r}: "
            "rows of one key could not be ordered; fill them before writing",
            table=table,
        )
    nan = nan_count(incoming.column(pre)) if pre is not None else 0
    if nan:
        raise InputError(
            f"{nan} rows have a NaN precombine value {pre!r}: NaN is neither higher nor lower "
            "than any value, so rows of one key could not be ordered; replace them before "
            "writing",
            table=table,
        )
    missing = [f for f in config.partition_fields if f not in names]
    if missing:
        raise InputError(
            f"the input lacks partition field(s) {missing} of the table (partitioned by "
            f"{config.partition_fields}); columns given: {names}",
            table=table,
        )
    _check_reserved(names, table)


def _check_reserved(names: list[str], table: str) -> None:
    reserved = [n for n in names if n.startswith("_braid_")]
    if reserved:
        raise InputError(
            f"column names {reserved} are reserved for lakebraid (a read adds them to every "
            "row it returns); drop them before writing, e.g. frame.drop(*names) on Spark or "
            "table.drop_columns(names) on Arrow",
            table=table,
        )


def check_input(
    incoming: pa.Table, config: TableConfig, current: Sequence[FieldSpec], *, table: str
) -> list[FieldSpec]:
    """Check ``incoming`` against the table; returns the table schema after this write."""
    _check_columns(incoming, config, table)
    key = config.record_key
    if key not in {f.name for f in current}:  # the key's type is fixed by this write
        try:
            check_key_type(key, incoming.schema.field(key).type, table=table)
        except RecordKeyError as exc:
            raise InputError(exc.message, table=table) from None
    names = incoming.column_names
    known = {f.name: f for f in current}
    schema = list(current)
    for field in incoming.schema:
        held = known.get(field.name)
        if held is not None:
            want = text_to_type(held.type)
            if not _fits(field.type, want):
                raise InputError(_misfit(field, want), table=table)
            continue
        try:
            text = type_to_text(field.type)
        except ConfigError as exc:
            raise InputError(f"column {field.name!r}: {exc.message}", table=table) from None
        problem = spark_problem(field.type)
        if problem is not None:
            raise InputError(f"column {field.name!r} ({field.type}): {problem}", table=table)
        if _untyped(field, config, table):
            continue  # left out until a write gives it values (void_columns)
        nullable = field.name != key and (field.nullable or bool(current))
        schema.append(FieldSpec(field.name, text, nullable))
    absent = [f.name for f in current if f.name not in names and not f.nullable]
    if absent:
        raise InputError(
            f"the input lacks non-nullable column(s) {absent} of the table", table=table
        )
    return schema


def key_partitions(
    config: TableConfig,
    n: int,
    partition: object,
    rows: pa.Table | None,
    *,
    table: str,
    what: str,
    schema: Sequence[FieldSpec] = (),
) -> pa.Array | None:
    """The partition path of each of ``n`` keys a ``what`` (lookup, delete) names, for a
    table whose record index is partition-scoped (None for a global index): one
    ``partition`` for all (a mapping of the partition fields to values, or a path), else the
    partition columns of ``rows`` (a delete given rows), which must have the types
    ``schema`` (the table's) gives them: a value of another type would name another path."""
    fields = config.partition_fields
    from_rows = rows is not None and all(f in rows.column_names for f in fields)
    if not is_scoped(config) or partition is not None or not from_rows:
        check_partition_given(config, partition, table=table, what=what)
    if not is_scoped(config):
        return None
    if partition is None:
        assert rows is not None
        _check_partition_types(rows, fields, schema, table, what)
        return partition_paths(rows, fields)
    if from_rows:
        raise InputError(
            f"{what}: both partition= and rows with the partition columns {fields} given; give one",
            table=table,
        )
    return pa.repeat(pa.scalar(partition_of(config, partition, table=table, what=what)), n)


def _check_partition_types(
    rows: pa.Table, fields: Sequence[str], schema: Sequence[FieldSpec], table: str, what: str
) -> None:
    known = {f.name: text_to_type(f.type) for f in schema}
    for name in fields:
        kind = rows.schema.field(name).type
        kind = kind.value_type if pa.types.is_dictionary(kind) else kind
        want = known.get(name)
        if want is not None and not _fits(kind, want):
            raise InputError(
                f"{what}: partition column {name!r} has type {kind} in the keys but {want} in "
                f"the table; cast it to {want} (a value of another type names another "
                "partition)",
                table=table,
            )


def field_list(fields: object, path: str) -> list[str]:
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
