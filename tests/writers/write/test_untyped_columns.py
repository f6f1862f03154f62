"""A new column holding only nulls (Arrow type null: no type yet) is left out of the table,
as Delta Lake drops void columns, so a later write's values give it their type; nothing else
of the write changes. On both engines and both table types, read in-process and by Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError
from lakebraid.writers.write.inputs import _misfit

pytestmark = pytest.mark.xdist_group("spark")


def _frame(client: WriteClient, rows: pa.Table, on_spark: bool):
    return client.spark.createDataFrame(rows.to_pandas(), schema=None) if on_spark else rows


@pytest.mark.parametrize("on_spark", [False, True])
@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_an_untyped_column_is_left_out_until_values_give_it_a_type(
    tmp_path, spark, table_type, on_spark
):
    options = {"write.inprocess.max.rows": 0} if on_spark else {}
    path = str(tmp_path / "t")
    client = WriteClient.create(
        path, "id", ["day"], "ts", table_type=table_type, spark=spark, **options
    )
    first = pa.table({"id": ["a", "b"], "day": ["d1", "d2"], "ts": [1, 1], "v": pa.nulls(2)})
    if on_spark:  # a Spark column of nulls only: NullType
        frame = spark.createDataFrame(
            [("a", "d1", 1, None), ("b", "d2", 1, None)], "id string, day string, ts long, v void"
        )
    else:
        frame = first
    before = client.upsert(frame)
    assert [f.name for f in client.schema()] == ["id", "day", "ts"]
    client.upsert(pa.table({"id": ["c", "a"], "day": ["d3", "d1"], "ts": [2, 2], "v": [5, 6]}))
    assert [(f.name, f.type) for f in client.schema()][-1] == ("v", "int64")
    want = [("a", 6), ("b", None), ("c", 5)]
    got = client.read_arrow().select(["id", "v"]).sort_by("id").to_pylist()
    assert [(r["id"], r["v"]) for r in got] == want
    spark_rows = sorted((r["id"], r["v"]) for r in client.read().select("id", "v").collect())
    assert spark_rows == want
    assert "v" not in client.read_arrow(as_of=before).column_names
    assert client.validate() == []


def test_a_key_or_partition_column_of_nulls_only_is_still_refused(tmp_path):
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    with pytest.raises(InputError, match="'day' holds nulls only"):
        client.upsert(pa.table({"id": ["a"], "day": pa.nulls(1), "ts": [1]}))


def test_a_column_a_table_holds_as_null_names_what_to_do():
    text = _misfit(pa.field("v", pa.int64()), pa.null())
    assert "'v' was first written with nulls only" in text and "another name" in text
    assert "cast it to null" not in text
