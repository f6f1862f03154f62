"""Two first writes of one key into an empty table: the one that commits second, whose reads
saw the table empty, must conflict with the one that committed in between (its read point and
its instant), or the key would live in two file groups. Found by a hostile trial: two threads
upserting key 999 into a new table both committed, 5 times out of 5. Here the other write is
run deterministically between the write's reads and its commit."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lakebraid.writers.engine.inprocess as inprocess
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteConflictError


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
@pytest.mark.parametrize("op", ["upsert", "insert", "bulk_insert"])
def test_a_write_that_read_an_empty_table_conflicts_with_a_commit_made_since(
    tmp_path, monkeypatch, table_type, op
):
    path = str(tmp_path / "t")
    WriteClient.create(path, "id", [], "v", table_type=table_type)
    real = inprocess.run_write
    others: list[str] = []

    def other_write_first(*args, **kwargs):
        if not others:  # once: the other writer's whole upsert, after this one's reads
            others.append("running")
            others[0] = WriteClient.open(path).upsert(pa.table({"id": [999], "v": [1]}))
        return real(*args, **kwargs)

    monkeypatch.setattr(inprocess, "run_write", other_write_first)
    with pytest.raises(WriteConflictError) as raised:
        getattr(WriteClient.open(path), op)(pa.table({"id": [999], "v": [2]}))
    assert others[0] in str(raised.value)  # names the commit it conflicts with
    monkeypatch.undo()
    after = WriteClient.open(path)
    assert after.read_arrow().select(["id", "v"]).to_pylist() == [{"id": 999, "v": 1}]
    assert after.validate() == []


def test_first_writes_of_other_keys_both_commit(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    WriteClient.create(path, "id", [], "v")
    real = inprocess.run_write
    done: list[str] = []

    def other_write_first(*args, **kwargs):
        if not done:
            done.append("running")
            done[0] = WriteClient.open(path).upsert(pa.table({"id": [1], "v": [1]}))
        return real(*args, **kwargs)

    monkeypatch.setattr(inprocess, "run_write", other_write_first)
    WriteClient.open(path).upsert(pa.table({"id": [2], "v": [2]}))
    monkeypatch.undo()
    after = WriteClient.open(path)
    assert sorted(r["id"] for r in after.read_arrow().to_pylist()) == [1, 2]
    assert after.validate() == []
