"""Column statistics of written files (``index.file_stats``): bounds of zoned timestamps are
the same instants in UTC, also where the zone's local time has no Python datetime (near
year 1 and year 9999), on both paths (one file's rows; many files' rows grouped)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.file_stats import GroupBounds, column_stats

UTC = dt.UTC
EDGES = [dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, tzinfo=UTC)]


@settings(deadline=None)
@given(
    st.lists(
        st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23)).map(
            lambda t: t.replace(tzinfo=UTC)
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from(["America/New_York", "Asia/Tokyo", "UTC"]),
)
def test_zoned_timestamp_bounds_are_their_instants_in_utc(times, zone):
    values = pa.array([*times, *EDGES], pa.timestamp("us", zone))
    table = pa.table({"t": values})
    (stat,) = column_stats(table, None, ["t"])
    assert (stat.min_value, stat.max_value) == (min([*times, *EDGES]), max([*times, *EDGES]))
    grouped = GroupBounds(table, np.zeros(len(values), np.int64), 1, ["t"])
    low, high = grouped.bounds["t"]
    assert (low[0], high[0]) == (stat.min_value, stat.max_value)
