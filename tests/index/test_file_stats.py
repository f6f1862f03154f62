"""Column statistics of written files (``index.file_stats``): bounds of zoned timestamps are
the same instants in UTC, also where the zone's local time has no Python datetime (near
year 1 and year 9999), on both paths (one file's rows; many files' rows grouped); a dictionary
column's bounds are those of the values its rows use, and its file carries no Parquet
statistics."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.file_stats import GroupBounds, column_stats, footer_statistics

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


@settings(deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.text(max_size=3)), min_size=1, max_size=30),
    st.lists(st.text(max_size=3), max_size=4),
)
def test_dictionary_bounds_are_the_used_values_without_parquet_statistics(
    tmp_path_factory, values, unused
):
    plain = pa.array(values, pa.string())
    coded = pc.dictionary_encode(plain)
    # values no row uses widen the dictionary, not the bounds
    extra = pa.array([u for u in unused if u not in set(values)], pa.string())
    wide = pa.DictionaryArray.from_arrays(
        coded.indices, pa.concat_arrays([coded.dictionary, extra])
    )
    table = pa.table({"k": [str(i) for i in range(len(values))], "d": wide, "p": plain})
    path = str(tmp_path_factory.mktemp("f") / "f.parquet")
    collected: list[pq.FileMetaData] = []
    pq.write_table(
        table,
        path,
        write_statistics=footer_statistics(table.schema, "k"),
        metadata_collector=collected,
    )
    chunk = pq.ParquetFile(path).metadata.row_group(0)
    assert chunk.column(1).statistics is None  # the dictionary column: none written
    assert chunk.column(0).statistics is None and chunk.column(2).statistics is not None
    coded_stat, plain_stat = column_stats(table, collected[0], ["d", "p"])
    present = [v for v in values if v is not None]
    want = (min(present, key=str.encode), max(present, key=str.encode)) if present else (None, None)
    assert (coded_stat.min_value, coded_stat.max_value) == want
    assert (plain_stat.min_value, plain_stat.max_value) == want
    assert coded_stat.null_count == plain_stat.null_count == len(values) - len(present)
    assert coded_stat.value_count == plain_stat.value_count == len(present)
