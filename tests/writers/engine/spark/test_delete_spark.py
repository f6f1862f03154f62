"""Deletes of keys given as a Spark DataFrame run on Spark (``writers.engine.spark.delete``):
the driver never converts the keys to Arrow, and the table afterwards equals a model, on both
table types, with repeated, absent and re-typed keys; null keys are refused with nothing
written."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lakebraid.writers.client as client_module
from lakebraid.index.errors import RecordKeyError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError

pytestmark = pytest.mark.xdist_group("spark")
ON_SPARK = {"write.inprocess.max.rows": 0}


def rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": [f"d{i % 3}" for i in ids],
            "ts": [ts] * len(ids),
            "v": [float(i) for i in ids],
        }
    )


def no_driver_collect(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(data: object) -> None:
        raise AssertionError("the delete's keys were converted on the driver")

    monkeypatch.setattr(client_module, "to_arrow", refuse)


@pytest.mark.parametrize("kind", ["copy_on_write", "merge_on_read"])
def test_keys_of_a_frame_are_deleted_on_spark(tmp_path, spark, monkeypatch, kind) -> None:
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", table_type=kind, spark=spark)
    client.bulk_insert(rows(list(range(30)), 1))
    client.upsert(rows([1, 2, 40], 2))
    before = client.timeline()[-1].time
    no_driver_collect(monkeypatch)
    gone = [1, 4, 4, 7, 40, 999]  # a key twice, one never written; int32: cast to int64
    frame = spark.createDataFrame(pa.table({"id": pa.array(gone, pa.int32())}).to_pandas())
    WriteClient.open(path, spark, **ON_SPARK).delete(frame)
    after = WriteClient.open(path, spark)
    kept = [k for k in sorted(set(range(30)) | {40}) if k not in gone]
    assert sorted(after.read_arrow().column("id").to_pylist()) == kept
    found = after.lookup([1, 4, 7, 40, 0, 2])
    assert [found[str(k)] is None for k in (1, 4, 7, 40, 0, 2)] == [True] * 4 + [False] * 2
    assert after.validate() == []
    assert len(after.read_arrow(as_of=before)) == 31  # the delete is one commit after it
    if kind == "merge_on_read":
        after.compact()
        assert sorted(after.read_arrow().column("id").to_pylist()) == kept
        assert after.validate() == []


def test_a_null_key_is_refused_and_nothing_is_written(tmp_path, spark) -> None:
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark)
    client.bulk_insert(rows(list(range(5)), 1))
    commits = len(client.timeline())
    frame = spark.createDataFrame([(1,), (None,)], "id long")
    with pytest.raises(RecordKeyError, match="delete: null key"):
        WriteClient.open(path, spark, **ON_SPARK).delete(frame)
    assert len(client.timeline()) == commits
    assert sorted(client.read_arrow().column("id").to_pylist()) == list(range(5))


def test_a_key_not_of_the_key_type_is_refused_by_name(tmp_path, spark) -> None:
    """7.5 is no int64 key: refused as in-process, not as a worker's traceback."""
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark, **ON_SPARK)
    client.upsert(rows([7, 8], 1))
    keys = spark.createDataFrame([(7.5,), (8.0,)], "id double")
    with pytest.raises(RecordKeyError, match="keys of type double cannot be read as the table's"):
        client.delete(keys)
    assert client.read_arrow().num_rows == 2 and client.validate() == []


def test_dotted_column_names_on_spark(tmp_path, spark) -> None:
    """A name holding a dot is a struct path to Spark: a Spark-engine write refuses such
    columns by name (PySpark's mapInArrow cannot pass them); a Spark delete by such a key and a
    Spark read of such columns work."""
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "k.x", ["day"], "t.s", spark=spark, **ON_SPARK)
    frame = spark.createDataFrame(
        [(1, "d", 1, 5), (2, "d", 1, 6)], "a long, b string, c long, d long"
    )
    frame = frame.toDF("k.x", "day", "t.s", "v.w")
    with pytest.raises(InputError, match=r"columns \['k.x', 't.s', 'v.w'\] hold a '.'"):
        client.upsert(frame)
    WriteClient.open(path, spark, **{"write.inprocess.max.rows": 10}).upsert(frame)
    client.delete(spark.createDataFrame([(2,)], "a long").toDF("k.x"))
    assert [r["v.w"] for r in client.read().collect()] == [5]
    assert client.read(where="`v.w` = 5").count() == 1 and client.validate() == []


@pytest.mark.parametrize("kind", ["copy_on_write", "merge_on_read"])
def test_a_scoped_index_deletes_a_frame_of_keys_and_partitions_on_spark(
    tmp_path, spark, monkeypatch, kind
) -> None:
    """A partition-scoped index: the same key lives in several partitions, and a frame of
    (key, partition column) rows deletes just those rows, on Spark (the keys are never
    converted on the driver); a partition column of another type is refused naming it, and
    a frame without the partition columns is refused by the in-process path, nothing
    deleted."""
    path = str(tmp_path / "t")
    client = WriteClient.create(
        path, "id", ["day"], "ts", table_type=kind, index_scope="partition", spark=spark
    )
    both = pa.concat_tables([rows(list(range(12)), 1), rows(list(range(12)), 1)])
    both = both.set_column(1, "day", pa.array(["d0"] * 12 + ["d1"] * 12))
    client.bulk_insert(both)
    no_driver_collect(monkeypatch)
    gone = pa.table(
        {"id": pa.array([1, 2, 2, 5, 99], pa.int64()), "day": ["d0", "d0", "d1", "d1", "d0"]}
    )
    WriteClient.open(path, spark, **ON_SPARK).delete(spark.createDataFrame(gone.to_pandas()))
    after = WriteClient.open(path, spark)
    left = sorted((r["day"], r["id"]) for r in after.read_arrow().to_pylist())
    removed = {("d0", 1), ("d0", 2), ("d1", 2), ("d1", 5)}
    everything = {(d, i) for d in ("d0", "d1") for i in range(12)}
    assert left == sorted(everything - removed)
    assert after.lookup([1], partition="day=d0")["1"] is None
    assert after.lookup([1], partition="day=d1")["1"] is not None
    assert after.validate() == []
    wrong = spark.createDataFrame(pa.table({"id": pa.array([3]), "day": [7]}).to_pandas())
    with pytest.raises(InputError, match="day"):
        WriteClient.open(path, spark, **ON_SPARK).delete(wrong)
    keys_only = spark.createDataFrame(pa.table({"id": pa.array([3])}).to_pandas())
    monkeypatch.undo()  # the in-process path converts the frame, then refuses it
    with pytest.raises(RecordKeyError, match="partition-scoped"):
        WriteClient.open(path, spark, **ON_SPARK).delete(keys_only)
    assert sorted((r["day"], r["id"]) for r in after.read_arrow().to_pylist()) == left
