"""The small partitioned table most tests use (``pythonpath`` in pyproject.toml puts this
folder on the path, so tests and state machines import it as ``table_fixtures``)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakebraid.timeline.table_config import FieldSpec, IndexSettings, TableConfig

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def small_config(name: str = "t", index: IndexSettings | None = None) -> TableConfig:
    """Record key ``id`` (string), partitioned by ``day``, precombine ``ts`` (int64)."""
    return TableConfig(
        name=name,
        record_key="id",
        partition_fields=["day"],
        precombine_field="ts",
        schema=[
            FieldSpec("id", "string", False),
            FieldSpec("day", "string"),
            FieldSpec("ts", "int64"),
        ],
        index=index if index is not None else IndexSettings(),
    )


def random_batch(rng: random.Random, keys: list[str], n: int, ts: int) -> pa.Table:
    """n rows (id, day, ts, amount) over ``keys`` (duplicates likely), random days (keys move
    partitions), ts from ``ts`` to ``ts + 2``."""
    chosen = [rng.choice(keys) for _ in range(n)]
    return pa.table(
        {
            "id": chosen,
            "day": [rng.choice(DAYS) for _ in chosen],
            "ts": [ts + rng.randrange(3) for _ in chosen],
            "amount": [float(rng.randrange(1000)) for _ in chosen],
        }
    )


def standing_commits(client: Any) -> int:
    """Completed commits that stand (a write undone after a conflict does not count)."""
    undone = client.table.visibility().undone
    return sum(
        i.is_completed and i.action.value == "commit" and i.time not in undone
        for i in client.timeline()
    )


def wait_for_commits(client: Any, more: int, seconds: float = 120.0) -> None:
    """Until ``more`` commits beyond those standing now stand (another process writes them),
    or ``seconds`` pass: a build made to run while a writer commits."""
    count, deadline = standing_commits(client), time.monotonic() + seconds
    while standing_commits(client) < count + more and time.monotonic() < deadline:
        time.sleep(0.05)


RETAIN_ONE = {"clean.inline": False, "clean.retain.commits": 1}  # a clean keeps one commit


def four_keys(value: int) -> pa.Table:
    """Keys k0..k3 of day d0, their ``ts`` and ``v`` both ``value`` (newer values win)."""
    keys = [f"k{i}" for i in range(4)]
    return pa.table({"id": keys, "day": ["d0"] * 4, "ts": [value] * 4, "v": [value] * 4})


def versioned_rows(keys: list[str], value: int) -> pa.Table:
    """``keys`` in partition ``p=a``, their ``v`` and ``ts`` both ``value`` (newer values win)."""
    n = len(keys)
    v = pa.array([value] * n, pa.int64())
    return pa.table({"id": keys, "p": ["a"] * n, "v": v, "ts": v})


def snapshot(client: Any) -> tuple:
    """Every file of a table (heartbeats left out) and its three timelines: equal before and
    after a refused call when the call changed nothing."""
    files = sorted(
        str(p) for p in Path(client.path).rglob("*") if p.is_file() and "heartbeats" not in str(p)
    )
    return files, client.timeline("global"), client.timeline("data"), client.timeline("metadata")
