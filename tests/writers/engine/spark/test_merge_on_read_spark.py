"""Merge-on-read writes of the Spark engine against copy-on-write writes of the in-process
engine: the same random upserts (in-batch duplicates, keys moving partitions), inserts and
deletes, with data compactions at random points, read the same now and as of every earlier
instant; the record index answers the same; ``validate()`` is clean on both. The rows reach
the merge-on-read table as Spark DataFrames with ``write.inprocess.max.rows=0``, so every
step runs as Spark tasks (appends to file groups' logs in executors)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from table_fixtures import DAYS

from lakebraid.timeline.layout import parse_data_file_name
from lakebraid.writers.client import WriteClient

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.slow]
COLUMNS = ["id", "day", "ts", "amount"]


def batch(rng: random.Random, keys: list[str], n: int, ts: int, spread: int) -> pa.Table:
    """``n`` rows over ``keys`` (duplicates likely, each with its own ts: a Spark shuffle
    keeps no input order, so ties would not be repeatable), random days (keys move)."""
    chosen = [rng.choice(keys) for _ in range(n)]
    return pa.table(
        {
            "id": chosen,
            "day": [rng.choice(DAYS) for _ in chosen],
            "ts": [ts + rng.randrange(spread) * n + i for i, _ in enumerate(chosen)],
            "amount": [float(rng.randrange(1000)) for _ in chosen],
        }
    )


def rows(client: WriteClient, as_of: str | None = None) -> dict[str, tuple]:
    found = client.read_arrow(as_of).select(COLUMNS).to_pylist()
    assert len(found) == len({r["id"] for r in found}), "a key appears twice"
    return {r["id"]: (r["day"], r["ts"], r["amount"]) for r in found}


def located(client: WriteClient, keys: list[str]) -> dict[str, str | None]:
    return {k: (at.partition if at else None) for k, at in client.lookup(keys).items()}


@pytest.mark.parametrize(("seed", "mode"), [(11, "commit_time"), (12, "event_time")])
def test_spark_merge_on_read_reads_as_copy_on_write_at_every_instant(
    tmp_path, spark, seed: int, mode: str
) -> None:
    rng = random.Random(seed)
    options = {
        "metadata.compact.max.log.files": 3,
        "metadata.compact.log.ratio": 0,
        "write.merge.mode": mode,
    }
    cow = WriteClient.create(str(tmp_path / "cow"), "id", ["day"], "ts", **options)
    mor = WriteClient.create(
        str(tmp_path / "mor"),
        "id",
        ["day"],
        "ts",
        table_type="merge_on_read",
        spark=spark,
        **{**options, "write.inprocess.max.rows": 0, "compaction.inline": False},
    )
    keys = [f"k{i:03d}" for i in range(50)]
    first = batch(rng, keys[:30], 30, 0, 1)
    first = pa.Table.from_pylist(list({r["id"]: r for r in first.to_pylist()}.values()))
    pairs = [(cow.bulk_insert(first), mor.bulk_insert(spark.createDataFrame(first.to_pandas())))]
    logs: list[str] = []
    for step in range(7):
        if rng.random() < 0.3:
            before = rows(mor)
            done = mor.compact(min_log_files=rng.choice([1, 2]))
            if done is not None:
                pairs.append((pairs[-1][0], done))
            assert rows(mor) == before
        choice = rng.random()
        if choice < 0.25:
            gone = rng.sample(keys, 7)
            frame = spark.createDataFrame([(k,) for k in gone], "id string")
            pairs.append((cow.delete(gone), mor.delete(frame)))
        else:
            ts = 1000 * (step + 1) if mode == "commit_time" else 0
            data = batch(rng, keys, 20, ts, 1 if mode == "commit_time" else 40)
            frame = spark.createDataFrame(data.to_pandas())
            if choice < 0.4:  # stored keys skipped, new ones inserted (small groups' logs)
                pairs.append((cow.insert(data, "drop"), mor.insert(frame, "drop")))
            else:
                pairs.append((cow.upsert(data), mor.upsert(frame)))
        assert rows(mor) == rows(cow), f"step {step}"
        logs += [p for p in mor.file_paths() if p.endswith(".log") and p not in logs]
    for at_cow, at_mor in pairs:
        assert rows(mor, at_mor) == rows(cow, at_cow), at_mor
    assert located(mor, keys) == located(cow, keys)
    assert len(logs) >= 3, "the merge-on-read writes appended few logs"
    for path in logs:
        assert parse_data_file_name(path.rsplit("/", 1)[1]).kind == "log"
    assert mor.validate() == [] and cow.validate() == []
    assert mor.compact() is not None and rows(mor) == rows(cow)
    assert mor.validate() == []
