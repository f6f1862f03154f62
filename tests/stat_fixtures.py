"""A hypothesis strategy of every value a column statistic holds (``metadata.stat_values``),
for the codec's tests and those of the formats that carry it (metadata log blocks, write
statuses)."""

from __future__ import annotations

import datetime as dt

from hypothesis import strategies as st

from lakebraid.metadata.stat_values import DECIMAL_TEXT_MAX

STAT_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(),
    st.dates(),
    st.datetimes(),
    st.datetimes(
        min_value=dt.datetime(1, 1, 2),
        max_value=dt.datetime(9999, 12, 30),
        timezones=st.just(dt.UTC),
    ),
    st.decimals(allow_nan=False, allow_infinity=False).filter(
        lambda d: len(str(d)) <= DECIMAL_TEXT_MAX
    ),
)
