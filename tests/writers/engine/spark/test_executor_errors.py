"""A Spark write meets damage in a task as the in-process engine meets it: the same lakebraid
error class (``timeline.error_wire`` carries it out of the Python worker), not pyspark's
``PythonException``, and nothing committed. Damage in the rewrite stage (a merge-on-read log,
a copy-on-write base file gone, which the commit envelope names as a missing data file) and
in the tagging stage (a record-index file gone)."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pytest

from lakebraid.metadata.errors import MetadataError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import CorruptDataLogError, MissingDataFileError

pytestmark = pytest.mark.xdist_group("spark")
ON_SPARK = {"write.inprocess.max.rows": 0}


def rows(ids: range | list[int], ts: int) -> pa.Table:
    return pa.table({"id": [f"k{i:02d}" for i in ids], "ts": [ts] * len(ids), "v": [ts] * len(ids)})


def committed(path: str) -> list[str]:
    return [i.time for i in WriteClient.open(path).timeline() if i.state == "completed"]


def only_its_rollback(path: str, before: list[str]) -> bool:
    """Since ``before``, the table completed the failed write's own rollback, nothing else."""
    done = [i for i in WriteClient.open(path).timeline() if i.state == "completed"]
    return [i.time for i in done][: len(before)] == before and [
        i.action for i in done[len(before) :]
    ] == ["rollback"]


def table(tmp_path, spark, kind: str) -> str:
    path = str(tmp_path / kind)
    WriteClient.create(path, "id", [], "ts", table_type=kind, **ON_SPARK)
    client = WriteClient.open(path, spark)
    client.upsert(spark.createDataFrame(rows(range(20), 1).to_pandas()))
    client.upsert(spark.createDataFrame(rows(range(5), 2).to_pandas()))
    return path


def writes(path: str, spark):
    client = WriteClient.open(path, spark)
    frame = spark.createDataFrame(rows(range(3), 3).to_pandas())
    return {
        "upsert": lambda: client.upsert(frame),
        "delete": lambda: client.delete(frame.select("id")),
        "in-process upsert": lambda: WriteClient.open(path).upsert(rows(range(3), 3)),
    }


@pytest.mark.parametrize("write", ["upsert", "delete", "in-process upsert"])
def test_a_damaged_log_fails_a_spark_write_as_in_process(tmp_path, spark, write):
    path = table(tmp_path, spark, "merge_on_read")
    (log,) = glob.glob(f"{path}/*.log")
    with open(log, "r+b") as f:
        f.seek(40)
        f.write(b"\xff\xff\xff\xff")
    before = committed(path)
    log_name = os.path.basename(log)
    with pytest.raises(
        CorruptDataLogError, match=f"corrupt data log block in .*{log_name}"
    ) as raised:
        writes(path, spark)[write]()
    assert raised.value.path.endswith(log_name)
    assert only_its_rollback(path, before)


@pytest.mark.parametrize("write", ["upsert", "delete", "in-process upsert"])
def test_a_lost_base_file_fails_a_spark_write_by_name(tmp_path, spark, write):
    path = table(tmp_path, spark, "copy_on_write")
    base = max(glob.glob(f"{path}/*.parquet"), key=lambda name: name.rsplit("_", 1)[1])
    os.remove(base)
    before = committed(path)
    with pytest.raises(MissingDataFileError, match="this write was rolled back") as raised:
        writes(path, spark)[write]()
    assert raised.value.path.endswith(os.path.basename(base))
    assert only_its_rollback(path, before)


@pytest.mark.parametrize("write", ["upsert", "in-process upsert"])
def test_a_lost_record_index_file_fails_the_tagging_as_in_process(tmp_path, spark, write):
    path = table(tmp_path, spark, "copy_on_write")
    index_files = glob.glob(f"{path}/.braid/metadata/record_index/*")
    assert index_files
    for name in index_files:
        os.remove(name)
    before = committed(path)
    with pytest.raises(MetadataError) as raised:
        writes(path, spark)[write]()
    assert "record_index" in str(raised.value)
    assert committed(path) == before
