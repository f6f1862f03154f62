"""The canonical text of a record key: the one rule every path follows (writes, lookups,
deletes, the record index, the conflict check, virtual keys on read).

A key value's text is Arrow's cast of the value *in the table's key type* to ``string``:

* ``string`` / ``large_string``: the value itself;
* integers: decimal digits with a leading ``-`` for negatives (``7``, ``-12``);
* ``date32``: ``YYYY-MM-DD``; ``timestamp[unit, tz]``: Arrow's ISO text at the unit's
  precision; ``decimal``: the digits at the column's scale (``1.50`` in ``decimal(5, 2)``);
* ``bool``: ``true`` / ``false``.

A value given to ``lookup`` or ``delete`` is first converted to the table's key type (so
``lookup([7])`` and ``lookup(["7"])`` both find the integer key 7, and ``Decimal("1.5")``
finds ``1.50``), then cast to text. A value the conversion would change is refused, never
rounded or truncated: ``2.5``, ``True`` or a number past the type's range for an integer key,
a datetime with a time for a date key (``delete([2.5])`` would otherwise delete key 2); text
is parsed (``"07"`` is the integer 7). Null keys are refused everywhere. Floating-point key
columns are refused when the key type is first fixed: their text does not round-trip
(``1.0`` prints as ``1``, ``0.1 + 0.2`` as ``0.30000000000000004``), so equality of keys
would depend on how the caller wrote the number.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.errors import RecordKeyError

RECORD_KEY = "_braid_record_key"  # the column of a key's canonical text


def key_type_problem(data_type: pa.DataType) -> str | None:
    """Why ``data_type`` cannot be a record key type (None: it can)."""
    if pa.types.is_dictionary(data_type):
        return key_type_problem(data_type.value_type)
    if (
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_integer(data_type)
        or pa.types.is_date32(data_type)
        or pa.types.is_timestamp(data_type)
        or pa.types.is_decimal(data_type)
        or pa.types.is_boolean(data_type)
    ):
        return None
    if pa.types.is_floating(data_type):
        return (
            f"a floating-point key ({data_type}) does not round-trip through text (1.0 reads "
            "as 1); use an integer, decimal or string key column"
        )
    return (
        f"type {data_type} cannot be a record key; use a string, integer, date, timestamp "
        "or decimal column"
    )


def check_key_type(column: str, data_type: pa.DataType, *, table: str | None) -> None:
    problem = key_type_problem(data_type)
    if problem is not None:
        raise RecordKeyError(f"record key column {column!r}: {problem}", table=table)


def key_text(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The canonical text of a key column already in the table's key type."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return pc.cast(column, pa.string())


def key_texts(
    keys: object,
    key_type: pa.DataType | None,
    *,
    table: str | None,
    what: str,
) -> pa.Array | pa.ChunkedArray:
    """Canonical texts (a string column) of caller-given keys for ``what`` (``lookup``, ``delete``).

    ``keys`` is any iterable of keys (a list, set, tuple, NumPy array, pandas Series or Arrow
    array); a bare ``str``/``bytes`` or a mapping is refused (``lookup("k1")`` would otherwise
    look up ``"k"`` and ``"1"``); no key may be null; each is converted to
    ``key_type`` (the table's; None when the table has no schema yet: the values' own type)."""
    if isinstance(keys, pa.Array | pa.ChunkedArray):
        return key_array(keys, key_type, table=table, what=what)
    if isinstance(keys, str | bytes | Mapping) or not isinstance(keys, Iterable):
        raise RecordKeyError(
            f"{what}: keys must be a list of keys, not {type(keys).__name__} {keys!r:.60}; "
            f"write {what}([key]) for one key",
            table=table,
        )
    keys = [k.item() if hasattr(k, "item") and not isinstance(k, str) else k for k in keys]
    nulls = [i for i, k in enumerate(keys) if k is None]
    if nulls:
        raise RecordKeyError(
            f"{what}: {len(nulls)} null key(s) (first at position {nulls[0]}); record keys are "
            "never null",
            table=table,
        )
    return key_array(keys, key_type, table=table, what=what)


def key_array(
    keys: Sequence[object] | pa.Array | pa.ChunkedArray,
    key_type: pa.DataType | None,
    *,
    table: str | None,
    what: str,
) -> pa.Array | pa.ChunkedArray:
    """Keys (values or an Arrow column) as canonical text, converted to ``key_type`` first."""
    values = keys if isinstance(keys, pa.Array | pa.ChunkedArray) else _values(keys, key_type)
    if values is not None and not isinstance(keys, pa.Array | pa.ChunkedArray):
        _check_exact(keys, values, table=table, what=what)
    if values is None:
        raise RecordKeyError(
            f"{what}: keys {list(keys)[:10]!r:.200} are not all values of the table's key "
            f"type {key_type} (mixed or unsupported types, text that does not parse, or "
            f"numbers out of its range); pass keys of type {key_type}",
            table=table,
        )
    if len(values) == 0:
        return pa.array([], pa.string())
    if values.null_count:
        raise RecordKeyError(
            f"{what}: {values.null_count} null key(s); record keys are never null", table=table
        )
    if key_type is not None and values.type != key_type:
        try:
            values = pc.cast(values, key_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise RecordKeyError(
                f"{what}: keys of type {values.type} cannot be read as the table's key type "
                f"{key_type} ({exc}); pass keys of type {key_type}",
                table=table,
            ) from None
    elif key_type is None:
        check_key_type("key", values.type, table=table)
    return key_text(values)


def _values(keys: Sequence[object], key_type: pa.DataType | None) -> pa.Array | None:
    """Python key values as one Arrow array: in ``key_type`` directly when they fit, else one
    by one through their own type (``"20"`` for an integer key); None if neither works."""
    try:
        return pa.array(list(keys), key_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        pass
    try:
        if key_type is None:
            return pa.array(list(keys))
        return pa.array([pc.cast(pa.scalar(k), key_type).as_py() for k in keys], key_type)
    except (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        OverflowError,
        TypeError,
    ):
        return None


def _check_exact(keys: Sequence[object], values: pa.Array, *, table: str | None, what: str) -> None:
    """Refuse the first key that ``values`` (the keys in the table's key type) holds as
    another value: Arrow's conversion of Python values truncates floats to integers
    (``2.5`` -> 2), reads booleans as numbers and datetimes as dates. Text is parsed, not
    compared; keys of the type's own Python type (int for integers, str) are exact."""
    kind = values.type
    natural = int if pa.types.is_integer(kind) else str if pa.types.is_string(kind) else None
    if natural is not None and all(type(k) is natural or type(k) is str for k in keys):
        return
    for key, value in zip(keys, values.to_pylist(), strict=True):
        if isinstance(key, str) or _same(key, value):
            continue
        raise RecordKeyError(
            f"{what}: key {key!r:.80} is not a value of the table's key type {kind} (it would "
            f"be read as {value!r:.80}); pass keys of type {kind}",
            table=table,
        )


def _same(key: object, value: object) -> bool:
    """Whether ``value`` (a key converted to the table's key type) is ``key`` itself."""
    if isinstance(value, str):  # a number as text: as Python prints it (not 1.0 as "1")
        return not isinstance(key, bool) and str(key) == value
    if isinstance(key, bool) != isinstance(value, bool):
        return False
    if type(key) is dt.datetime and type(value) is dt.date:
        return False  # a datetime read as its date drops the time (equal at midnight too)
    if isinstance(key, dt.datetime) and isinstance(value, dt.datetime):
        if key.tzinfo is None and value.tzinfo is not None:  # Arrow reads it as UTC
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return bool(key == value)
