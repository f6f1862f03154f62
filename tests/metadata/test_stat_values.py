"""The column-statistics value codec (``metadata.stat_values``): every kind of value round
trips with its type (a decimal with its scale), and extensions that hold no value are refused."""

from __future__ import annotations

from decimal import Decimal

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from stat_fixtures import STAT_VALUES

from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.records import ColumnStatsRecord, decode_records, encode_records
from lakebraid.metadata.stat_values import DECIMAL_TEXT_MAX, decode_stat_value, encode_stat_value


@given(STAT_VALUES)
def test_a_value_round_trips_with_its_type(value: object) -> None:
    back = decode_stat_value(encode_stat_value(value))
    assert back == value and type(back) is type(value)
    assert str(back) == str(value)  # a decimal's exponent too


@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_decimal_statistics_round_trip_with_their_scale(value: Decimal) -> None:
    if len(str(value)) > DECIMAL_TEXT_MAX:
        return  # refused: see below
    record = ColumnStatsRecord("c", "p", "f", value, -value, 0, 1, 2)
    (decoded,) = decode_records("column_stats", encode_records("column_stats", [record]))
    assert type(decoded.min_value) is Decimal
    assert str(decoded.min_value) == str(value) and str(decoded.max_value) == str(-value)
    assert decode_stat_value(encode_stat_value(value)).as_tuple() == value.as_tuple()


@pytest.mark.parametrize(
    "payload", [b"NaN", b"-Infinity", b"1.5x", b"\xff", b"", b"1" * (DECIMAL_TEXT_MAX + 1)]
)
def test_a_decimal_extension_that_holds_no_finite_decimal_is_refused(payload: bytes) -> None:
    data = msgspec.msgpack.encode(msgspec.msgpack.Ext(4, payload))
    with pytest.raises(MetadataValueError, match="extension type 4"):
        decode_stat_value(data)
