"""Spark reads of tables holding types Spark's Arrow exchange does not take as they are
(``writers.read.spark_types``): timestamps in seconds and milliseconds, date64, unsigned
integers, decimal256, also inside lists. Merge-on-read slices with logs (merged
by Python tasks) and the Spark data source read them as Spark's Parquet reader reads a
copy-on-write table of them, values unchanged."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakebraid.writers.client import WriteClient
from lakebraid.writers.read.spark_types import for_spark, spark_schema, spark_type

WHEN = dt.datetime(2024, 1, 1, 0, 0, 1)
COLUMNS = {
    "ts_s": pa.array([WHEN, WHEN], pa.timestamp("s")),
    "ts_ms_tz": pa.array([WHEN, WHEN], pa.timestamp("ms", tz="UTC")),
    "date64": pa.array([dt.date(2024, 1, 1)] * 2, pa.date64()),
    "u8": pa.array([255, 0], pa.uint8()),
    "u32": pa.array([2**32 - 1, 0], pa.uint32()),
    "u64": pa.array([2**64 - 1, 0], pa.uint64()),
    "dec256": pa.array([Decimal("1.50000"), None], pa.decimal256(20, 5)),
    "list_ms": pa.array([[WHEN], []], pa.list_(pa.timestamp("ms"))),
    "list_u16": pa.array([[65535], None], pa.list_(pa.uint16())),
    "list_ns": pa.array([[WHEN], None], pa.list_(pa.timestamp("ns"))),  # stored as us
}


def test_each_type_maps_to_the_one_spark_reads_from_parquet():
    assert spark_type(pa.timestamp("s")) == pa.timestamp("us")
    assert spark_type(pa.timestamp("ms", tz="Europe/Paris")) == pa.timestamp("us", "Europe/Paris")
    assert spark_type(pa.date64()) == pa.date32()
    expected = [pa.int16(), pa.int32(), pa.int64(), pa.decimal128(20, 0)]
    unsigned = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
    assert [spark_type(t) for t in unsigned] == expected
    assert spark_type(pa.decimal256(38, 2)) == pa.decimal128(38, 2)
    assert spark_type(pa.decimal256(40, 2)) == pa.decimal256(40, 2)  # Spark names it
    assert spark_type(pa.map_(pa.uint8(), pa.date64())) == pa.map_(pa.int16(), pa.date32())
    for kept in (pa.int64(), pa.string(), pa.timestamp("us", "UTC"), pa.date32(), pa.null()):
        assert spark_type(kept) == kept


@given(
    st.lists(st.integers(0, 2**64 - 1) | st.none(), max_size=20),
    st.lists(st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)), max_size=20),
)
def test_values_keep_their_meaning_once_cast(unsigned, times):
    table = pa.table(
        {
            "u": pa.array(unsigned, pa.uint64()),
            "t": pa.array(
                [[t.replace(microsecond=t.microsecond // 1000 * 1000)] for t in times]
                + [None] * (len(unsigned) - len(times)),
                pa.list_(pa.timestamp("ms")),
            )
            if len(times) <= len(unsigned)
            else pa.nulls(len(unsigned), pa.list_(pa.timestamp("ms"))),
        }
    )
    cast = for_spark(table, spark_schema(table.schema))
    assert cast.schema == spark_schema(table.schema)
    assert [None if v is None else int(v) for v in cast["u"].to_pylist()] == unsigned
    assert cast["t"].to_pylist() == table["t"].to_pylist()


def _expected(table: pa.Table) -> list[dict]:
    cast = for_spark(table, spark_schema(table.schema))
    return sorted(cast.to_pylist(), key=lambda r: r["id"])


def _collected(frame) -> list[dict]:
    found = [r.asDict(recursive=True) for r in frame.select(*["id", *COLUMNS]).collect()]
    for row in found:  # Spark gives local naive datetimes for zoned timestamps: compare UTC
        if row["ts_ms_tz"] is not None:
            row["ts_ms_tz"] = row["ts_ms_tz"].astimezone(dt.UTC)
    return sorted(found, key=lambda r: r["id"])


@pytest.mark.xdist_group("spark")
@pytest.mark.parametrize("table_type", ["merge_on_read", "copy_on_write"])
def test_spark_reads_every_type_after_an_update(tmp_path, spark, table_type):
    path = str(tmp_path / "t")
    client = WriteClient.create(
        path, "id", ["p"], "v", table_type=table_type, spark=spark
    )  # two partitions: a's slice gets a log, b's stays a plain file (the read unions them)
    first = pa.table({"id": ["a", "b"], "p": ["x", "y"], "v": [1, 1], **COLUMNS})
    client.bulk_insert(first)
    update = first.slice(1, 1).set_column(2, "v", pa.array([2]))
    client.upsert(update.set_column(0, "id", pa.array(["a"])).set_column(1, "p", pa.array(["x"])))
    want = _expected(pa.table({"id": ["a", "b"], **{c: COLUMNS[c].take([1, 1]) for c in COLUMNS}}))
    for row in want:
        if row["ts_ms_tz"] is not None:
            row["ts_ms_tz"] = row["ts_ms_tz"].astimezone(dt.UTC)
    assert _collected(client.read()) == want
    assert _collected(spark.read.format("lakebraid").load(path)) == want
