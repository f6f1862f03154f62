"""Arrow types as Spark's Arrow exchange takes them (``mapInArrow`` batches, a Python data
source's schema).

Spark's JVM reads Arrow timestamps in microseconds only, dates as days, no unsigned integers
and decimals of at most 128 bits. A table may hold any of those (a pyarrow or pandas input
keeps its types), so a Spark read declares, and its Python tasks yield, the types Spark's own
Parquet reader gives the same files: timestamps in microseconds (time zone kept), ``date64``
as ``date32``, ``uint8``/``uint16``/``uint32`` as the next wider signed integer, ``uint64``
as ``decimal(20, 0)``, ``decimal256`` of precision up to 38 as ``decimal128``; inside lists,
structs and maps too. Every value keeps its meaning (a date64 of a Parquet file holds whole
days). Other types pass unchanged (Spark then names the one it cannot take).
"""

from __future__ import annotations

import pyarrow as pa

_UNSIGNED = {8: pa.int16(), 16: pa.int32(), 32: pa.int64(), 64: pa.decimal128(20, 0)}


def spark_type(kind: pa.DataType) -> pa.DataType:
    """The type Spark takes for values of ``kind`` (see the module doc)."""
    if pa.types.is_timestamp(kind) and kind.unit != "us":
        return pa.timestamp("us", kind.tz)
    if pa.types.is_date64(kind):
        return pa.date32()
    if pa.types.is_unsigned_integer(kind):
        return _UNSIGNED[kind.bit_width]
    if isinstance(kind, pa.Decimal256Type) and kind.precision <= 38:
        return pa.decimal128(kind.precision, kind.scale)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = _field(kind.value_field)
        return pa.list_(inner) if pa.types.is_list(kind) else pa.large_list(inner)
    if pa.types.is_fixed_size_list(kind):
        return pa.list_(_field(kind.value_field), kind.list_size)
    if pa.types.is_map(kind):
        return pa.map_(_field(kind.key_field), _field(kind.item_field))
    if pa.types.is_struct(kind):
        return pa.struct([_field(kind.field(i)) for i in range(kind.num_fields)])
    return kind


def _field(field: pa.Field) -> pa.Field:
    return field.with_type(spark_type(field.type))


def spark_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every type as Spark takes it (metadata kept)."""
    return pa.schema([_field(f) for f in schema], metadata=schema.metadata)


def for_spark(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` cast to ``schema`` (a :func:`spark_schema`) when its types differ."""
    return table if table.schema.equals(schema) else table.cast(schema)
