"""Column-statistics values on the wire: the ``min_value`` / ``max_value`` of a
``column_stats`` record (``metadata.records``) in a log block body, and each one alone in a base
file's ``min_value`` / ``max_value`` columns (:func:`encode_stat_value`).

Format (part of record schema version 1). ``None``, ``bool``, ``int`` (-2**63 .. 2**64-1),
``float``, ``str`` and ``bytes`` are the native msgpack types; ``datetime.date``,
``datetime.datetime`` and ``decimal.Decimal`` are msgpack extension types, the first three
carrying one big-endian signed int64:

* ext 1, ``date``: days since 1970-01-01;
* ext 2, naive ``datetime``: microseconds since 1970-01-01T00:00:00 (no time zone);
* ext 3, aware ``datetime``: microseconds since 1970-01-01T00:00:00Z; decodes as a UTC
  datetime (the instant is kept, the original UTC offset is not);
* ext 4, finite ``Decimal`` (a decimal column's bound): its ASCII text as ``str()`` writes it
  (``-12.50``, ``1E-10``: digits and exponent kept, so the column's scale is too), at most
  :data:`DECIMAL_TEXT_MAX` bytes. A lakebraid from before ext 4 refuses a table holding one
  ("unknown msgpack extension type 4") rather than misreading it.

Any other value is refused when encoded (``MetadataTypeError``), an extension that holds no
such value when decoded (``MetadataValueError``).
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import msgspec
from msgspec.msgpack import Ext

from lakebraid.metadata.errors import MetadataTypeError, MetadataValueError

_EXT_DATE, _EXT_NAIVE_DATETIME, _EXT_UTC_DATETIME, _EXT_DECIMAL = 1, 2, 3, 4
DECIMAL_TEXT_MAX = 100  # bytes of a decimal's text: 76 digits (decimal256), sign, point, exponent
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICRO = dt.timedelta(microseconds=1)
PLAIN = frozenset({type(None), bool, int, float, str, bytes})


def stat_to_wire(value: Any) -> Any:
    """``value`` as msgpack encodes it here: itself, or its extension."""
    kind = type(value)
    if kind in PLAIN:
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            code, micros = _EXT_NAIVE_DATETIME, (value - _EPOCH_NAIVE) // _MICRO
        else:
            try:
                value.astimezone(dt.UTC)
            except OverflowError:
                raise MetadataValueError(f"{value!r} cannot be represented in UTC") from None
            code, micros = _EXT_UTC_DATETIME, (value - _EPOCH_UTC) // _MICRO
        return Ext(code, micros.to_bytes(8, "big", signed=True))
    if isinstance(value, dt.date):
        return Ext(_EXT_DATE, (value - _EPOCH_DATE).days.to_bytes(8, "big", signed=True))
    if isinstance(value, decimal.Decimal):
        text = str(value).encode("ascii")
        if not value.is_finite() or len(text) > DECIMAL_TEXT_MAX:
            raise MetadataValueError(f"column statistics cannot hold the decimal {value!r}")
        return Ext(_EXT_DECIMAL, text)
    raise MetadataTypeError(f"column statistics cannot hold a {kind.__name__} ({value!r})")


def stat_from_wire(code: int, data: memoryview) -> Any:
    """The value of an extension (msgspec's ``ext_hook``)."""
    if code == _EXT_DECIMAL:
        return _decimal_from_wire(bytes(data))
    if len(data) != 8:
        raise MetadataValueError(f"extension type {code} must carry 8 bytes, not {len(data)}")
    number = int.from_bytes(data, "big", signed=True)
    try:
        if code == _EXT_DATE:
            return _EPOCH_DATE + dt.timedelta(days=number)
        if code == _EXT_NAIVE_DATETIME:
            return _EPOCH_NAIVE + dt.timedelta(microseconds=number)
        if code == _EXT_UTC_DATETIME:
            return _EPOCH_UTC + dt.timedelta(microseconds=number)
    except OverflowError:
        raise MetadataValueError(f"extension type {code} value {number} is out of range") from None
    raise MetadataValueError(f"unknown msgpack extension type {code} in column statistics")


def _decimal_from_wire(data: bytes) -> decimal.Decimal:
    try:
        value = decimal.Decimal(data.decode("ascii")) if len(data) <= DECIMAL_TEXT_MAX else None
    except (UnicodeDecodeError, decimal.InvalidOperation):
        value = None
    if value is None or not value.is_finite():
        raise MetadataValueError(f"extension type 4 holds no finite decimal: {data[:40]!r}")
    return value


_ENCODER = msgspec.msgpack.Encoder()
_VALUE_DECODER = msgspec.msgpack.Decoder(ext_hook=stat_from_wire)


def encode_stat_value(value: Any) -> bytes:
    """One statistics value as msgpack bytes (the extension types above for dates, times and
    decimals); base files store ``min_value`` / ``max_value`` this way."""
    return _ENCODER.encode(stat_to_wire(value))


def decode_stat_value(data: bytes) -> Any:
    """Inverse of :func:`encode_stat_value`."""
    return _VALUE_DECODER.decode(data)
