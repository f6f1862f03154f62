"""The record index of a Spark write is written by Spark tasks (``writers.engine.spark.
index_tasks``): the driver receives write statuses without key lists and the index files the
tasks wrote, on bulk inserts into a new table (commit bases), upserts with new, updated and
moved keys, and deletes, on both table types and both index scopes. The index then answers
each key where its row is read from, and ``validate()`` finds nothing."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient
from lakebraid.writers.commit.ahead import TaskWrite
from lakebraid.writers.engine.spark import pipeline

pytestmark = pytest.mark.xdist_group("spark")
ON_SPARK = {"write.inprocess.max.rows": 0, "metadata.record_index.min.groups": 3}


def rows(ids: list[int], day_of: dict[int, str], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": [day_of.get(i, f"d{i % 3}") for i in ids],
            "ts": [ts] * len(ids),
        }
    )


def watch(monkeypatch: pytest.MonkeyPatch) -> list[TaskWrite]:
    """What the driver receives from each Spark write's tasks."""
    seen: list[TaskWrite] = []
    real = pipeline.index_written

    def watched(*args: Any) -> TaskWrite:
        got = real(*args)
        seen.append(got)
        return got

    monkeypatch.setattr(pipeline, "index_written", watched)
    return seen


def index_entries(done: TaskWrite) -> int:
    assert all(not s.keys_added and not s.keys_removed for s in done.statuses)
    return sum(log.records for log in done.index.logs if log.partition == "record_index")


def check_index(client: WriteClient, scoped: bool) -> None:
    """Every row's key is found in the index where the row is read from, and nothing else."""
    table = client.read_arrow()
    for row in table.select(["id", "day"]).to_pylist():
        where = client.lookup([row["id"]], partition=f"day={row['day']}" if scoped else None)
        assert where[str(row["id"])].partition == f"day={row['day']}", row
    assert client.validate() == []


@pytest.mark.parametrize(
    ("kind", "scope"),
    [("copy_on_write", "global"), ("merge_on_read", "global"), ("copy_on_write", "partition")],
)
def test_spark_writes_send_the_driver_no_key(tmp_path, spark, monkeypatch, kind, scope) -> None:
    seen = watch(monkeypatch)
    path = str(tmp_path / "t")
    scoped = scope == "partition"
    WriteClient.create(
        path, "id", ["day"], "ts", spark=spark, table_type=kind, index_scope=scope, **ON_SPARK
    )
    frame = spark.createDataFrame(rows(list(range(60)), {}, 1).to_pandas())
    WriteClient.open(path, spark).bulk_insert(frame)
    assert index_entries(seen[-1]) == 60
    assert any(log.name.endswith(".parquet") for log in seen[-1].index.logs)  # commit bases
    check_index(WriteClient.open(path, spark), scoped)

    moved = {} if scoped else {3: "d9", 4: "d9"}  # a scoped key's partition is its identity
    upsert = rows([1, 2, 3, 4, 100, 101], moved, 2)
    WriteClient.open(path, spark).upsert(spark.createDataFrame(upsert.to_pandas()))
    # new keys and moved keys get an entry; an update in place none (its group kept it)
    assert index_entries(seen[-1]) == 2 + len(moved)
    check_index(WriteClient.open(path, spark), scoped)
    if scoped:
        return  # deletes of a scoped index take the in-process path
    gone = spark.createDataFrame(pa.table({"id": pa.array([5, 6, 100, 999])}).to_pandas())
    WriteClient.open(path, spark).delete(gone)
    assert index_entries(seen[-1]) == 3  # a tombstone per key present
    after = WriteClient.open(path, spark)
    assert all(v is None for v in after.lookup([5, 6, 100]).values())
    assert after.read_arrow().num_rows == 62 - 3
    check_index(after, scoped)


@pytest.mark.parametrize("same_key", [True, False])
def test_a_key_another_commit_indexed_meanwhile_is_a_conflict(
    tmp_path, spark, monkeypatch, same_key
) -> None:
    """Conflict rule 4 reads the Spark write's keys back from the files its tasks wrote: an
    in-process insert of the same new key into another partition, committed between the
    Spark write's tasks and its commit, makes it a retryable conflict (nothing of it stays);
    another key does not."""
    from lakebraid.writers.errors import WriteConflictError

    path = str(tmp_path / "t")
    WriteClient.create(path, "id", ["day"], "ts", spark=spark, **ON_SPARK)
    WriteClient.open(path).bulk_insert(rows(list(range(30)), {}, 1))
    theirs = 500 if same_key else 501
    real = pipeline.index_written

    def meanwhile(*args: Any) -> TaskWrite:
        got = real(*args)
        WriteClient.open(path).insert(rows([theirs], {theirs: "d1"}, 3))
        return got

    monkeypatch.setattr(pipeline, "index_written", meanwhile)
    frame = spark.createDataFrame(rows([500, 503], {}, 2).to_pandas())  # both into d2
    if same_key:
        with pytest.raises(WriteConflictError):
            WriteClient.open(path, spark).upsert(frame)
    else:
        WriteClient.open(path, spark).upsert(frame)
    after = WriteClient.open(path, spark)
    ids = sorted(after.read_arrow().column("id").to_pylist())
    mine = [] if same_key else [500, 503]
    assert ids == sorted([*range(30), theirs, *mine])
    assert after.lookup([500])["500"].partition == ("day=d1" if same_key else "day=d2")
    assert after.validate() == []


def test_a_commit_base_beside_another_instants_file_is_retried(
    tmp_path, spark, monkeypatch
) -> None:
    """A Spark write's tasks gave the empty record-index groups commit bases; an in-process
    insert commits into the same groups meanwhile: rule 7 refuses the Spark write (the driver
    has no entries to rewrite as logs), its retry writes logs, and every row is indexed."""
    from lakebraid.writers.errors import WriteConflictError

    path = str(tmp_path / "t")
    WriteClient.create(path, "id", ["day"], "ts", spark=spark, **ON_SPARK)
    real = pipeline.index_written
    calls: list[TaskWrite] = []

    def meanwhile(*args: Any) -> TaskWrite:
        got = real(*args)
        calls.append(got)
        if len(calls) == 1:  # only the first attempt meets the other writer
            WriteClient.open(path).insert(rows(list(range(100, 130)), {}, 3))
        return got

    monkeypatch.setattr(pipeline, "index_written", meanwhile)
    frame = spark.createDataFrame(rows(list(range(30)), {}, 1).to_pandas())
    with pytest.raises(WriteConflictError):
        WriteClient.open(path, spark).bulk_insert(frame)
    assert any(log.name.endswith(".parquet") for log in calls[0].index.logs)
    WriteClient.open(path, spark).bulk_insert(frame)  # the retry: the groups hold files now
    assert not any(log.name.endswith(".parquet") for log in calls[-1].index.logs)
    after = WriteClient.open(path, spark)
    assert sorted(after.read_arrow().column("id").to_pylist()) == [*range(30), *range(100, 130)]
    check_index(after, scoped=False)


def test_speculative_task_attempts_are_refused_before_anything_is_written(
    tmp_path, spark, monkeypatch
) -> None:
    """Two attempts of one Spark task would write the same files: a session that runs
    speculative attempts gets a ConfigError naming the setting, from writes and deletes,
    and the table is left as it was."""
    from pyspark import SparkConf

    from lakebraid.timeline.errors import ConfigError

    path = str(tmp_path / "t")
    WriteClient.create(path, "id", ["day"], "ts", spark=spark, **ON_SPARK)
    WriteClient.open(path).bulk_insert(rows(list(range(10)), {}, 1))
    before = sorted(p.name for p in (tmp_path / "t").rglob("*"))
    real = spark.sparkContext.getConf()
    speculating = SparkConf().setAll(real.getAll()).set("spark.speculation", "true")
    monkeypatch.setattr(spark.sparkContext, "getConf", lambda: speculating)
    frame = spark.createDataFrame(rows([1, 50], {}, 2).to_pandas())
    with pytest.raises(ConfigError, match=r"spark\.speculation"):
        WriteClient.open(path, spark).upsert(frame)
    keys = spark.createDataFrame(pa.table({"id": pa.array([1, 2])}).to_pandas())
    with pytest.raises(ConfigError, match=r"spark\.speculation"):
        WriteClient.open(path, spark).delete(keys)
    assert sorted(p.name for p in (tmp_path / "t").rglob("*")) == before
    assert sorted(WriteClient.open(path).read_arrow().column("id").to_pylist()) == list(range(10))
