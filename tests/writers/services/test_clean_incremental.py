"""The cleaner reads only the commits completed since where the previous clean stopped
(``CleanPlan.scan_from``), yet still deletes a file that lived through many cleans once a
later commit replaces it, and keeps what every retained read point and savepoint needs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lakebraid.timeline.bodies import CleanPlan
from lakebraid.writers.client import WriteClient
from lakebraid.writers.services import clean as clean_module

OPTIONS = {"clean.inline": False, "clean.retain.commits": 2, "archive.inline": False}


def rows(day: str, value: int) -> pa.Table:
    keys = [f"{day}-{i}" for i in range(3)]
    return pa.table({"id": keys, "day": [day] * 3, "ts": [value] * 3, "v": [value] * 3})


def files(path: Path, day: str) -> set[str]:
    return {p.name for p in (path / f"day={day}").glob("*.parquet")}


def values(client: WriteClient, as_of: object = None) -> dict[str, int]:
    table = client.read_arrow(as_of)
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def test_a_long_lived_file_is_cleaned_once_replaced(tmp_path, monkeypatch) -> None:
    path = tmp_path / "t"
    client = WriteClient.create(str(path), "id", ["day"], "ts", **OPTIONS)
    client.upsert(rows("a", 0))
    old_a = files(path, "a")
    for value in range(1, 16):  # partition a untouched while b churns and cleans run
        client.upsert(rows("b", value))
        if value % 5 == 0:
            client.clean()
    assert files(path, "a") == old_a and len(files(path, "b")) <= 3
    reads: list[str] = []
    real = clean_module.read_commit
    monkeypatch.setattr(
        clean_module, "read_commit", lambda t, i: reads.append(i.time) or real(t, i)
    )
    client.upsert(rows("a", 100))
    client.upsert(rows("b", 101))
    client.upsert(rows("b", 102))
    done = client.clean()
    assert done is not None
    assert not files(path, "a") & old_a and len(files(path, "a")) == 1
    assert len(reads) <= 2 + 5  # the commits since the previous clean's retained point
    plan = client.table.store.read_typed(
        clean_module.G, next(i for i in client.timeline() if i.time == done), CleanPlan
    )
    assert plan.scan_from and plan.swept_to
    now = values(client)
    assert {k: v for k, v in now.items() if k.startswith("a")} == {f"a-{i}": 100 for i in range(3)}
    assert client.validate() == []


def test_savepointed_files_survive_incremental_cleans(tmp_path) -> None:
    path = tmp_path / "t"
    client = WriteClient.create(str(path), "id", ["day"], "ts", **OPTIONS)
    first = client.upsert(rows("a", 1))
    client.savepoint(first)
    for value in range(2, 14):
        client.upsert(rows("a", value))
        if value % 3 == 0:
            client.clean()
    assert values(client, first) == {f"a-{i}": 1 for i in range(3)}
    client.restore(first)
    assert values(client) == {f"a-{i}": 1 for i in range(3)}
    for value in range(20, 26):
        client.upsert(rows("a", value))
    client.clean()
    assert values(client) == {f"a-{i}": 25 for i in range(3)}
    assert values(client, first) == {f"a-{i}": 1 for i in range(3)}
    assert client.validate() == []
