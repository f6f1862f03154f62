"""A read as of a write that a rollback or a restore undid is refused by name, never answered
with some other state: every reader that takes ``as_of`` (rows, lookups, listings, column
statistics, schema) raises :class:`AsOfError` naming the write and the instant that undid
it. Writes that stand, and points in time that name no write, read as before."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.timeline.as_of import AsOfError
from lakebraid.writers.client import WriteClient


def rows(ids: list[str], ts: int) -> pa.Table:
    return pa.table({"id": ids, "p": ["x"] * len(ids), "ts": [ts] * len(ids)})


@pytest.fixture
def client(tmp_path: Path) -> WriteClient:
    return WriteClient.create(str(tmp_path / "t"), "id", ["p"], "ts")


def readers(c: WriteClient, as_of: str) -> list:
    return [
        lambda: c.read_arrow(as_of=as_of),
        lambda: c.lookup(["a"], as_of=as_of),
        lambda: c.files(as_of=as_of),
        lambda: c.column_stats("ts", as_of=as_of),
        lambda: c.schema(as_of=as_of),
    ]


def ids(c: WriteClient, as_of: str | None = None) -> list[str]:
    return sorted(c.read_arrow(as_of=as_of).column("id").to_pylist())


def test_as_of_a_rolled_back_write_names_it_and_its_rollback(client) -> None:
    t1 = client.upsert(rows(["a", "b"], 1))
    t2 = client.upsert(rows(["a", "c"], 2))
    undo = client.rollback(t2)
    for read in readers(client, t2):
        with pytest.raises(AsOfError, match=f"names write {t2}, undone by instant {undo}") as err:
            read()
        assert err.value.instant == t2
    assert ids(client, t1) == ["a", "b"]  # the write before it still reads
    assert ids(client) == ["a", "b"]
    t3 = client.upsert(rows(["d"], 3))
    assert ids(client, t3) == ["a", "b", "d"]  # and a later write


def test_as_of_a_write_a_restore_undid_names_the_restore(client) -> None:
    t1 = client.upsert(rows(["a"], 1))
    client.savepoint(t1)
    t2 = client.upsert(rows(["b"], 2))
    t3 = client.upsert(rows(["c"], 3))
    undo = client.restore(t1)
    for gone in (t2, t3):
        for read in readers(client, gone):
            with pytest.raises(AsOfError, match=f"names write {gone}, undone by instant {undo}"):
                read()
    assert ids(client, t1) == ["a"]
    assert ids(client) == ["a"]


def test_a_point_in_time_between_writes_is_not_refused(client) -> None:
    """Only a write's own time names it: the completion time of the undone write is a point
    in completion order, whose state (without the undone write) reads as before."""
    client.upsert(rows(["a"], 1))
    t2 = client.upsert(rows(["b"], 2))
    done = next(i for i in client.timeline() if i.time == t2).completion_time
    client.rollback(t2)
    assert done is not None
    assert ids(client, done) == ["a"]
