"""Writes on an S3 table while the store fails requests at random: 503 SlowDown, 500,
connection resets, and PUTs whose reply is lost after the server stored them (the loopback
server's proxy, ``writers.cli.loopback_s3``). Afterwards the table equals a model of the
operations that returned success, nothing else is visible, and ``validate()`` is clean."""

from __future__ import annotations

import random
import time
from collections import Counter

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient

pytestmark = pytest.mark.slow
OPTIONS = {"heartbeat.interval.ms": 200, "heartbeat.expiry.ms": 2000}
OPERATIONS = 10  # benchmarks/object_store.py runs 200; 10 here: 8 upserts, 2 deletes (seed 13)
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def rows(keys: list[str], ts: int, rng: random.Random) -> pa.Table:
    return pa.table(
        {
            "id": keys,
            "day": [rng.choice(DAYS) for _ in keys],  # keys move between partitions
            "ts": [ts] * len(keys),
            "v": [rng.randrange(1000) for _ in keys],
        }
    )


def run_operations(
    c: WriteClient, rng: random.Random, count: int, model: dict[str, dict]
) -> Counter[str]:
    """``count`` random upserts and deletes; the model takes those that returned."""
    outcomes: Counter[str] = Counter()
    keys = [f"k{i:03d}" for i in range(120)]
    for step in range(count):
        if rng.random() < 0.7:
            data = rows(rng.sample(keys, 15), 10 + step, rng)
            try:
                c.upsert(data)
            except Exception as exc:
                outcomes[type(exc).__name__] += 1
                continue
            model.update({r["id"]: r for r in data.to_pylist()})
        else:
            gone = rng.sample(keys, 5)
            try:
                c.delete(gone)
            except Exception as exc:
                outcomes[type(exc).__name__] += 1
                continue
            for key in gone:
                model.pop(key, None)
        outcomes["ok"] += 1
    return outcomes


def test_random_store_failures_lose_nothing_and_show_nothing_failed(loopback_s3, s3_url):
    rng = random.Random(13)
    url = s3_url()
    c = WriteClient.create(url, "id", ["day"], "ts", **OPTIONS)
    first = rows([f"k{i:03d}" for i in range(0, 120, 2)], 1, rng)
    c.bulk_insert(first)
    model = {r["id"]: r for r in first.to_pylist()}
    loopback_s3.reset_counts()
    loopback_s3.inject(0.05, seed=13)
    try:
        outcomes = run_operations(c, rng, OPERATIONS, model)
    finally:
        loopback_s3.inject(0)
    faults = loopback_s3.faults()
    print(f"outcomes {dict(outcomes)}; faults injected {dict(faults)}")
    assert sum(faults.values()) >= 10 and set(faults) == {"503", "500", "reset", "lost"}, faults
    assert outcomes["ok"] >= OPERATIONS // 2, outcomes
    time.sleep(2.2)  # a failed writer's heartbeat expires
    reader = WriteClient.open(url)
    reader.recover()
    seen = {r["id"]: r for r in reader.read_arrow().select(["id", "day", "ts", "v"]).to_pylist()}
    assert seen == model
    assert reader.validate() == []
    assert not reader.table.dead_instants()
