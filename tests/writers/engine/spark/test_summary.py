"""The per-task counts the Spark engine plans insert slots from
(``writers.engine.spark.summary``): each task's counts equal a row-by-row count of its
tagged rows, the accumulator adds them per group in any order and grouping, and a Spark
upsert with the ``drop`` and ``fail`` policies counts only what it writes. PySpark's driver
keeps every accumulator it made for good; a write leaves its counts in none of them."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark import accumulators

from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION
from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine.spark.summary import CountsParam, task_counts
from lakebraid.writers.errors import InputError
from lakebraid.writers.write.filegroup import OP, OP_DELETE, OP_UPSERT
from lakebraid.writers.write.route import PARTITION

pytestmark = pytest.mark.xdist_group("spark")
ON_SPARK = {"write.inprocess.max.rows": 0}
PARTS = ["p=a", "p=b", "p=c"]
FILES = ["f1", "f2"]
row = st.tuples(
    st.sampled_from(PARTS),
    st.one_of(st.none(), st.tuples(st.sampled_from(PARTS), st.sampled_from(FILES))),
    st.sampled_from([OP_UPSERT, OP_DELETE]),
)


def tagged(rows: list) -> pa.Table:
    return pa.table(
        {
            PARTITION: pa.array([p for p, _, _ in rows], pa.string()),
            OP: pa.array([op for _, _, op in rows], pa.int8()),
            OLD_PARTITION: pa.array([o[0] if o else None for _, o, _ in rows], pa.string()),
            OLD_FILE_ID: pa.array([o[1] if o else None for _, o, _ in rows], pa.string()),
        }
    )


def model(rows: list) -> dict:
    counts: dict = {}
    for partition, old, op in rows:
        group = (partition, old[0] if old else None, old[1] if old else None)
        new = op == OP_UPSERT and (old is None or old[0] != partition)
        had = counts.get(group, (0, 0))
        counts[group] = (had[0] + 1, had[1] + int(new))
    return counts


@settings(max_examples=150, deadline=None)
@given(st.lists(row, max_size=60))
def test_a_task_counts_its_rows_per_group_as_a_row_by_row_count(rows) -> None:
    assert task_counts(tagged(rows)) == model(rows)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(row, max_size=20), max_size=6))
def test_the_accumulator_adds_task_counts_per_group(tasks) -> None:
    param = CountsParam()
    total = param.zero({})
    for rows in reversed(tasks):  # the order tasks finish in does not matter
        total = param.addInPlace(total, task_counts(tagged(rows)))
    assert total == model([r for rows in tasks for r in rows])


def frame_rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table({"id": ids, "day": [f"d{i % 3}" for i in ids], "ts": [ts] * len(ids)})


def test_policies_count_only_the_rows_written(tmp_path, spark) -> None:
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark)
    client.bulk_insert(frame_rows(list(range(30)), 1))
    frame = spark.createDataFrame(frame_rows([2, 5, 40, 41, 42], 2).to_pandas())
    WriteClient.open(path, spark, **ON_SPARK).insert(frame, duplicates="drop")
    after = WriteClient.open(path, spark)
    got = {r["id"]: r["ts"] for r in after.read_arrow().to_pylist()}
    assert got == {**{i: 1 for i in range(30)}, 40: 2, 41: 2, 42: 2}
    assert after.validate() == []
    with pytest.raises(InputError, match=r"1 key\(s\) already exist in the table \('41'\)"):
        again = spark.createDataFrame(frame_rows([41, 50], 3).to_pandas())
        WriteClient.open(path, spark, **ON_SPARK).insert(again)
    assert WriteClient.open(path, spark).read_arrow().num_rows == 33


def test_a_write_leaves_no_counts_in_the_drivers_accumulators(tmp_path, spark) -> None:
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark)
    client.bulk_insert(frame_rows(list(range(30)), 1))
    known = set(accumulators._accumulatorRegistry)
    for ts in (2, 3):
        frame = spark.createDataFrame(frame_rows([1, 7, 60 + ts], ts).to_pandas())
        WriteClient.open(path, spark, **ON_SPARK).upsert(frame)
    made = [a for aid, a in accumulators._accumulatorRegistry.items() if aid not in known]
    assert len(made) == 2  # one per write: it did count through an accumulator
    assert [a.value for a in made] == [{}, {}]
    assert WriteClient.open(path, spark).read_arrow().num_rows == 32
