"""Merge-on-read under schema evolution (``evolution_fixtures``) written by the Spark engine
(``write.inprocess.max.rows=0``: every upsert appends logs in executors, the rows given as
Spark DataFrames) against copy-on-write written in-process and the model: both read as the
model now and as of every earlier instant, before and after a final compaction; a wider type
is refused by name on both engines, nothing written; ``validate()`` is clean."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from evolution_fixtures import OPTIONS, check_history, evolve, upsert_all

from lakebraid.writers.client import WriteClient

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.slow]


def test_spark_schema_evolution_reads_as_the_model(tmp_path, spark) -> None:
    cow = WriteClient.create(str(tmp_path / "cow"), "id", ["day"], "ts", **OPTIONS)
    path = str(tmp_path / "mor")
    WriteClient.create(
        path,
        "id",
        ["day"],
        "ts",
        table_type="merge_on_read",
        **OPTIONS,
        **{"write.inprocess.max.rows": 0},
    )
    mor = WriteClient.open(path, spark)

    refused = []

    def write(data: pa.Table) -> list[str] | None:
        done = upsert_all([(cow, data), (mor, spark.createDataFrame(data.to_pandas()))])
        refused.append(done is None)
        return done

    history = evolve(random.Random(2), [cow, mor], write, 8)
    assert len(mor.schema()) > 4, "no column was added"
    assert any(refused), "no wider type was given"
    check_history([cow, mor], history)
    assert cow.validate() == [] and mor.validate() == []
    assert mor.compact() is not None
    check_history([cow, mor], history)
