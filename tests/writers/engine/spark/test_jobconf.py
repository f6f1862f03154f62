"""The session settings of the Spark pipeline's own jobs (``writers.engine.spark.jobconf``):
set for the block only, and a write leaves the user's session as it found it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine.spark.jobconf import (
    ADAPTIVE,
    ARROW_BATCH,
    CACHE_BATCH,
    COMPRESSED_CACHE,
    cache_settings,
    job_settings,
)

pytestmark = pytest.mark.xdist_group("spark")
KEY = "spark.lakebraid.test.setting"


def test_settings_hold_inside_the_block_and_are_put_back(spark) -> None:
    spark.conf.set(ADAPTIVE, "true")
    with job_settings(spark, {ADAPTIVE: "false", KEY: "x"}):
        assert spark.conf.get(ADAPTIVE) == "false"
        assert spark.conf.get(KEY) == "x"
    assert spark.conf.get(ADAPTIVE) == "true"
    assert spark.conf.get(KEY, None) is None  # unset again: the session had no value


def test_settings_are_put_back_when_the_block_fails(spark) -> None:
    spark.conf.set(KEY, "mine")
    with pytest.raises(RuntimeError, match="job failed"):
        with job_settings(spark, {KEY: "theirs"}):
            raise RuntimeError("job failed")
    assert spark.conf.get(KEY) == "mine"
    spark.conf.unset(KEY)


def test_the_cache_batch_follows_the_sessions_arrow_batch(spark) -> None:
    before = spark.conf.get(ARROW_BATCH)
    try:
        spark.conf.set(ARROW_BATCH, "2500")  # a user's lower batch for wide rows
        assert cache_settings(spark) == {
            ADAPTIVE: "false",
            COMPRESSED_CACHE: "false",
            CACHE_BATCH: "2500",
        }
    finally:
        spark.conf.set(ARROW_BATCH, before)


@pytest.mark.parametrize("adaptive", ["true", "false"])
def test_a_spark_write_leaves_the_sessions_settings_as_they_were(tmp_path, spark, adaptive):
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark)
    spark.conf.set(ADAPTIVE, adaptive)
    spark.conf.set(COMPRESSED_CACHE, "true")
    spark.conf.set(CACHE_BATCH, "777")
    rows = pa.table({"id": [1, 2, 3], "day": ["a", "b", "a"], "ts": [1, 1, 1]})
    client.bulk_insert(rows)
    frame = spark.createDataFrame(rows.to_pandas()).selectExpr("id", "day", "ts + 1 as ts")
    WriteClient.open(path, spark, **{"write.inprocess.max.rows": 0}).upsert(frame)
    WriteClient.open(path, spark, **{"write.inprocess.max.rows": 0}).delete(frame.select("id"))
    assert spark.conf.get(ADAPTIVE) == adaptive
    assert spark.conf.get(COMPRESSED_CACHE) == "true"
    assert spark.conf.get(CACHE_BATCH) == "777"
    assert WriteClient.open(path, spark).read_arrow().num_rows == 0
    spark.conf.set(ADAPTIVE, "true")
    spark.conf.unset(CACHE_BATCH)
