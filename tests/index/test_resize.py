"""The record index's automatic resize, an inline service: after a metadata compaction, a
reindex to the estimate once entries per file group pass the growth factor. Expected states
come from plain models of what was written."""

from __future__ import annotations

import logging

import pyarrow as pa

from lakebraid.index import reindex as reindex_module
from lakebraid.writers.client import WriteClient

SMALL = {
    "write.merge.mode": "commit_time",
    "metadata.compact.max.log.files": 2,
    "metadata.compact.log.ratio": 0,  # fold at 2 logs whatever the base (tiny tables)
    "metadata.record_index.records.per.group": 20,
}


def rows(lo: int, hi: int, value: int) -> pa.Table:
    ids = [f"k-{i:05d}" for i in range(lo, hi)]
    n = len(ids)
    return pa.table({"id": ids, "day": ["d0"] * n, "ts": [value] * n, "v": [value] * n})


def groups(client: WriteClient) -> int:
    return client.metadata.read_point().group_counts["record_index"]


def reindexes(client: WriteClient) -> list[str]:
    return [i.time for i in client.timeline("metadata") if i.action == "reindex" and i.is_completed]


def check(client: WriteClient, n: int, value_of: dict[str, int]) -> None:
    found = client.lookup([f"k-{i:05d}" for i in range(n + 10)])
    assert {k for k, loc in found.items() if loc is not None} == set(value_of)
    table = client.read_arrow()
    assert (
        dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))
        == value_of
    )
    assert client.validate() == []


def test_the_index_grows_itself_past_the_factor(tmp_path) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **SMALL)
    model: dict[str, int] = {}
    client.upsert(rows(0, 30, 1))  # 30 entries in 1 group: under 20 x 2
    model.update(dict.fromkeys(rows(0, 30, 1).column("id").to_pylist(), 1))
    client.upsert(rows(0, 10, 2))  # the second log file: compacted inline, still 30 entries
    model.update(dict.fromkeys(rows(0, 10, 2).column("id").to_pylist(), 2))
    assert groups(client) == 1 and reindexes(client) == []
    for step in range(3):
        batch = rows(30 + step * 20, 50 + step * 20, 3)
        client.upsert(batch)
        model.update(dict.fromkeys(batch.column("id").to_pylist(), 3))
    # 90 entries passed 40 per group at a compaction: resharded to the estimate
    assert reindexes(client), "no automatic resize ran"
    assert groups(client) >= 3
    check(client, 90, model)


def test_the_resize_can_be_turned_off(tmp_path) -> None:
    options = {**SMALL, "metadata.record_index.auto.resize": False}
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **options)
    for step in range(5):
        client.upsert(rows(step * 30, step * 30 + 30, step))
    assert groups(client) == 1 and reindexes(client) == []


def test_a_failing_service_never_fails_the_write(tmp_path, monkeypatch, caplog) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **SMALL)

    def broken(metadata_table, groups=None):
        raise OSError("disk full while resharding")

    monkeypatch.setattr(reindex_module, "reshard", broken)
    model: dict[str, int] = {}
    with caplog.at_level(logging.WARNING, logger="lakebraid"):
        for step in range(4):
            batch = rows(step * 30, step * 30 + 30, step)
            client.upsert(batch)  # committed, whatever the resize does
            model.update(dict.fromkeys(batch.column("id").to_pylist(), step))
    assert "inline record-index resize failed (the write stands): disk full" in caplog.text
    assert groups(client) == 1
    check(client, 120, model)
    monkeypatch.undo()
    for value in (8, 9):  # the next compaction checks the size again
        client.upsert(rows(0, 30, value))
        model.update(dict.fromkeys(rows(0, 30, value).column("id").to_pylist(), value))
    assert groups(client) > 1
    check(client, 120, model)
