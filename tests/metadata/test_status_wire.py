"""A write status crosses from a Spark task to the driver as msgpack
(``metadata.commits.encode_status``): its statistics values keep their types (plain msgpack
turned dates and naive timestamps into text, and the column statistics then held text)."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from lakebraid.metadata.commits import ColumnStat, WriteStatus, decode_status, encode_status

UTC = dt.UTC
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(),
    st.dates(min_value=dt.date(1, 1, 2)),
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
    st.datetimes(
        min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
)


@given(st.lists(st.tuples(st.text(min_size=1), values, values), max_size=5))
def test_a_status_round_trips_with_typed_statistics(stats) -> None:
    status = WriteStatus(
        partition="day=1",
        file_id="f",
        file_name="n.parquet",
        old_file=None,
        stats=[ColumnStat(name, lo, hi, 0, 1, 8) for name, lo, hi in stats],
    )
    back = decode_status(encode_status(status))
    assert back == status
    for got, want in zip(back.stats, status.stats, strict=True):
        assert type(got.min_value) is type(want.min_value)
        assert type(got.max_value) is type(want.max_value)
