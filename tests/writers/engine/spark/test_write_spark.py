"""Failures of a Spark write (``writers.engine.spark.write``) that name their cause, with
nothing committed. A row with a null record key or precombine value, or a NaN precombine
value, is met by the first pass over the rows (no job of its own) and refused as the in-process
engine refuses it. A write
whose rows outgrow an Arrow batch: the
embedded session sends rows to Python workers with no cap in bytes
(``writers.engine.spark.session``), so rows too wide for its batch size fail the job; the
write then raises an ``InputError`` naming the table and the setting to lower, and nothing is
committed. The failure is injected in each Spark step of the write (a real one needs batches
of 2 GiB); other failures pass through unchanged."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lakebraid.writers.engine.spark.pipeline as pipeline
import lakebraid.writers.engine.spark.write as spark_write
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError

pytestmark = pytest.mark.xdist_group("spark")
ON_SPARK = {"write.inprocess.max.rows": 0}
OVERSIZED = (
    "Job aborted due to stage failure: org.apache.arrow.vector.util."
    "OversizedAllocationException: Memory required for vector is (2147486000), which is "
    "overflow or more than max allowed (2147483647)"
)


def rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table({"id": ids, "day": [f"d{i % 3}" for i in ids], "ts": [ts] * len(ids)})


def completed_commits(client: WriteClient) -> list[str]:
    done = [i for i in client.timeline() if i.state == "completed"]
    return [i.time for i in done if i.action in ("commit", "deltacommit")]


def nothing_written(after: WriteClient, commits: list[str], rows: int) -> None:
    """The table holds the commits and rows it held before a refused write, nothing pending."""
    assert completed_commits(after) == commits
    assert after.read_arrow().num_rows == rows
    assert [i for i in after.timeline() if i.state != "completed"] == []


def failing(real, message: str):
    def step(*args, **kwargs):
        real(*args, **kwargs)  # the step's own Spark jobs run, then the job "fails"
        raise RuntimeError(message)

    return step


@pytest.mark.parametrize("step", ["route_frame", "rewrite_frame"])
def test_rows_too_wide_for_a_batch_fail_the_write_by_name(tmp_path, spark, monkeypatch, step):
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark)
    client.bulk_insert(rows(list(range(20)), 1))
    commits = completed_commits(client)
    real = getattr(spark_write, step)
    monkeypatch.setattr(spark_write, step, failing(real, OVERSIZED))
    frame = spark.createDataFrame(rows([1, 2, 30], 2).to_pandas())
    with pytest.raises(InputError) as raised:
        WriteClient.open(path, spark, **ON_SPARK).upsert(frame)
    message = str(raised.value)
    assert raised.value.table == path
    assert "spark.sql.execution.arrow.maxRecordsPerBatch=100000" in message
    assert "Nothing was committed" in message
    monkeypatch.undo()
    after = WriteClient.open(path, spark)
    assert after.read_arrow().sort_by("id").column("ts").to_pylist() == [1] * 20
    assert completed_commits(after) == commits
    assert after.validate() == []


def test_other_failures_of_a_spark_step_pass_through(tmp_path, spark, monkeypatch):
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark)
    client.bulk_insert(rows(list(range(5)), 1))
    real = spark_write.rewrite_frame
    monkeypatch.setattr(spark_write, "rewrite_frame", failing(real, "executor lost"))
    frame = spark.createDataFrame(rows([1, 9], 2).to_pandas())
    with pytest.raises(RuntimeError, match="executor lost"):
        WriteClient.open(path, spark, **ON_SPARK).upsert(frame)


def test_an_insert_of_held_keys_on_spark_names_them_and_writes_nothing(tmp_path, spark):
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark)
    client.bulk_insert(rows(list(range(20)), 1))
    commits = completed_commits(client)
    frame = spark.createDataFrame(rows([3, 30, 7], 2).to_pandas())
    with pytest.raises(
        InputError, match=r"2 key\(s\) already exist in the table \('(3|7)', '(3|7)'\)"
    ):
        WriteClient.open(path, spark, **ON_SPARK).insert(frame)
    after = WriteClient.open(path, spark)
    assert completed_commits(after) == commits
    assert after.read_arrow().num_rows == 20


@pytest.mark.parametrize("operation", ["insert", "bulk_insert"])
def test_an_insert_of_a_held_key_moving_back_in_event_time_is_refused(tmp_path, spark, operation):
    """The held key moves partition with a lower precombine value: the event-time check would
    drop the row, but the insert's duplicate rule comes first (as in-process): refused."""
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark)
    client.bulk_insert(rows(list(range(20)), 5))
    commits = completed_commits(client)
    frame = spark.createDataFrame([(3, "elsewhere", 1)], "id long, day string, ts long")
    with pytest.raises(InputError, match=r"1 key\(s\) already exist in the table \('3'\)"):
        getattr(WriteClient.open(path, spark, **ON_SPARK), operation)(frame)
    nothing_written(WriteClient.open(path, spark), commits, 20)


@pytest.mark.parametrize("column", ["id", "ts"])
@pytest.mark.parametrize("held", [False, True], ids=["empty table", "tagged"])
@pytest.mark.parametrize("single_pass", [True, False], ids=["one pass", "by index group"])
def test_a_null_key_or_precombine_value_on_spark_is_refused_by_name(
    tmp_path, spark, monkeypatch, column, held, single_pass
):
    if not single_pass:
        monkeypatch.setattr(pipeline, "SINGLE_PASS_GROUPS", 0)
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark)
    if held:
        client.bulk_insert(rows(list(range(20)), 1))
    commits = completed_commits(client)
    given = rows(list(range(10, 40)), 2).to_pylist()
    given[17][column] = None  # one row among many, in one of several input partitions
    frame = spark.createDataFrame(given, "id long, day string, ts long").repartition(4)
    expected = "null record key 'id'" if column == "id" else "null precombine value 'ts'"
    with pytest.raises(InputError, match=expected) as raised:
        WriteClient.open(path, spark, **ON_SPARK).upsert(frame)
    assert raised.value.table == path
    nothing_written(WriteClient.open(path, spark), commits, 20 if held else 0)


@pytest.mark.parametrize("held", [False, True], ids=["empty table", "tagged"])
def test_a_nan_precombine_value_on_spark_is_refused_by_name(tmp_path, spark, held):
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark)
    if held:
        client.bulk_insert(rows(list(range(20)), 1).set_column(2, "ts", pa.array([1.0] * 20)))
    commits = completed_commits(client)
    given = rows(list(range(10, 40)), 2).to_pylist()
    for row in given:
        row["ts"] = float(row["ts"])
    given[17]["ts"] = float("nan")  # one row among many, in one of several input partitions
    frame = spark.createDataFrame(given, "id long, day string, ts double").repartition(4)
    with pytest.raises(InputError, match="NaN precombine value 'ts'") as raised:
        WriteClient.open(path, spark, **ON_SPARK).upsert(frame)
    assert raised.value.table == path
    nothing_written(WriteClient.open(path, spark), commits, 20 if held else 0)


def test_time_columns_on_spark_keep_typed_statistics(tmp_path, spark):
    """A TIMESTAMP column (with time zone) used to fail every Spark-engine write; date and
    TIMESTAMP_NTZ statistics came back from the tasks as text, so ``validate()`` reported every
    file and data skipping on them was lost."""
    import datetime as dt

    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark, **ON_SPARK)
    frame = spark.sql(
        "select id, concat('d', id % 2) as day, 1L as ts, "
        "date_add(date'2024-01-01', cast(id as int)) as d, "
        "timestamp_ntz'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, cast(id as int)) as tn, "
        "timestamp'2024-01-01 00:00:00' as at from range(4)"
    )
    client.upsert(frame)
    stats = {(s.partition, s.column): (s.min_value, s.max_value) for s in client.column_stats("d")}
    assert stats[("day=d0", "d")] == (dt.date(2024, 1, 1), dt.date(2024, 1, 3))
    assert all(
        type(v) is dt.datetime
        for s in client.column_stats("tn")
        for v in (s.min_value, s.max_value)
    )
    assert client.validate() == []
    assert len(client.file_paths(where="d = date'2024-01-04'")) == 1
    assert client.read_arrow().num_rows == 4


@pytest.mark.parametrize("on_spark", [True, False], ids=["spark engine", "in-process"])
def test_spark_array_columns_are_written(tmp_path, spark, on_spark):
    """Spark's Arrow lists name their items ``element`` (not null); the table holds them as
    ``list<item: ...>``, the same values (every Spark array column was refused, with advice to
    cast it to the list type it was)."""
    path = str(tmp_path / "t")
    options = ON_SPARK if on_spark else {}
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark, **options)
    client.upsert(spark.sql("select 1L id, 'd' day, 1L ts, array(1, 2) arr"))
    client.upsert(spark.sql("select 2L id, 'd' day, 1L ts, array(3) arr"))
    assert [f.type for f in client.schema() if f.name == "arr"] == ["list<item: int32>"]
    got = sorted((r["id"], r["arr"]) for r in client.read_arrow().to_pylist())
    assert got == [(1, [1, 2]), (2, [3])]
    assert client.validate() == []
