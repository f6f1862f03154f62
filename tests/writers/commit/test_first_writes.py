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


def write_between(monkeypatch, path: str, rows: pa.Table) -> list[str]:
    """Make the next in-process write run another writer's whole upsert of ``rows`` after its
    own reads and before its commit; the list receives that upsert's instant."""
    real, others = inprocess.run_write, []

    def other_write_first(*args, **kwargs):
        if not others:  # once: the other writer's upsert runs no write of its own first
            others.append("running")
            others[0] = WriteClient.open(path).upsert(rows)
        return real(*args, **kwargs)

    monkeypatch.setattr(inprocess, "run_write", other_write_first)
    return others


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
@pytest.mark.parametrize("op", ["upsert", "insert", "bulk_insert"])
def test_a_write_that_read_an_empty_table_conflicts_with_a_commit_made_since(
    tmp_path, monkeypatch, table_type, op
):
    path = str(tmp_path / "t")
    WriteClient.create(path, "id", [], "v", table_type=table_type)
    others = write_between(monkeypatch, path, pa.table({"id": [999], "v": [1]}))
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
    write_between(monkeypatch, path, pa.table({"id": [1], "v": [1]}))
    WriteClient.open(path).upsert(pa.table({"id": [2], "v": [2]}))
    monkeypatch.undo()
    after = WriteClient.open(path)
    assert sorted(r["id"] for r in after.read_arrow().to_pylist()) == [1, 2]
    assert after.validate() == []
