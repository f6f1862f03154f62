"""Merge-on-read under schema evolution (``evolution_fixtures``), in-process, against
copy-on-write and the model: both read as the model now and as of every earlier instant,
before and after a final compaction, and ``validate()`` is clean. The Spark engine writes the
merge-on-read table in ``engine/spark/test_merge_on_read_spark_schema.py``."""

from __future__ import annotations

import random

import pytest
from evolution_fixtures import OPTIONS, check_history, evolve, upsert_all

from lakebraid.writers.client import WriteClient


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_schema_evolution_reads_as_the_model_on_both_types(tmp_path, seed: int) -> None:
    rng = random.Random(seed)
    cow = WriteClient.create(str(tmp_path / "cow"), "id", ["day"], "ts", **OPTIONS)
    mor = WriteClient.create(
        str(tmp_path / "mor"), "id", ["day"], "ts", table_type="merge_on_read", **OPTIONS
    )
    clients = [cow, mor]
    history = evolve(rng, clients, lambda data: upsert_all([(c, data) for c in clients]), 14)
    assert len(mor.schema()) > 4, "no column was added"
    check_history(clients, history)
    assert cow.validate() == [] and mor.validate() == []
    assert mor.compact() is not None
    check_history(clients, history)
    assert mor.validate() == []
