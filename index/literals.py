"""Which literals of an equality or ``in`` condition an index may look up as values of the
column (the record index for the record key, a secondary index for its column).

An index finds rows whose stored value *is* the value looked up, so a literal may be looked up
only when Spark compares the column with it by that same value. Spark compares a column with a
literal of another type by casting one of them: ``bigint_col = 9007199254740993e0`` is
``CAST(bigint_col AS DOUBLE) = 9.007199254740992E15``, true for 2^53 and 2^53 + 1 alike, while
Arrow reads the double as the one integer 2^53 (and ``2.5`` as 2); a ``TIMESTAMP`` literal
against a ``TIMESTAMP_NTZ`` column is compared in the session's time zone. So a literal is
looked up only when its Python type is the column type's own (:func:`index_values`); any other
literal leaves the condition to the column statistics and to the reader's filter, which prune
less but never drop a matching row.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence

import pyarrow as pa


def index_values(values: Sequence[object], kind: pa.DataType) -> pa.Array | None:
    """``values`` as an array of ``kind`` when every one is of ``kind``'s own Python type and
    converts exactly; else None (the index is not used for the condition)."""
    if not values or not all(_own(value, kind) for value in values):
        return None
    try:
        return pa.array(list(values), kind)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None  # out of the type's range, or a decimal of more digits: not a value of it


def _own(value: object, kind: pa.DataType) -> bool:
    """Whether ``value`` is of ``kind``'s own Python type (a bool is no integer)."""
    if pa.types.is_integer(kind):
        return type(value) is int
    if pa.types.is_floating(kind):
        return type(value) in (float, int)  # Arrow refuses an int a double cannot hold
    if pa.types.is_decimal(kind):
        return type(value) in (decimal.Decimal, int)  # Arrow refuses a value it would round
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return type(value) is str
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return type(value) is bytes
    if pa.types.is_boolean(kind):
        return type(value) is bool
    if pa.types.is_date(kind):
        return type(value) is dt.date
    if pa.types.is_timestamp(kind):  # a zone on both sides or on neither
        return type(value) is dt.datetime and (value.tzinfo is None) == (kind.tz is None)
    return False
