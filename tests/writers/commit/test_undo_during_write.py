"""A rollback or restore that completes while another write is between its reads and its
commit (conflict rule 8, ``writers.commit.conflicts.undid_my_reads``). The write built its
files on a commit the undo removes: committing would bring the undone rows back (a rewritten
file group holds them, a compaction folds them into a base) or, for an undone delete, list two
files of one group. The write must get a retryable conflict, and the table must read as the
undo left it. Each undo runs for real, in the window between the write's files and its commit
(``Transaction.commit`` interposed), on both table types."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient
from lakebraid.writers.commit import transaction
from lakebraid.writers.errors import WriteConflictError

KINDS = ["copy_on_write", "merge_on_read"]


def rows(ids: list[str], v: int) -> pa.Table:
    return pa.table({"id": ids, "p": ["x"] * len(ids), "v": [v] * len(ids), "ts": [v] * len(ids)})


def values(c: WriteClient) -> list[tuple[str, int]]:
    return sorted((r["id"], r["v"]) for r in c.read_arrow().to_pylist())


def create(tmp_path, kind: str) -> WriteClient:
    path = str(tmp_path / "t")
    return WriteClient.create(
        path, "id", ["p"], "ts", table_type=kind, **{"compaction.inline": False}
    )


def before_commit(monkeypatch, undo) -> None:
    """Run ``undo`` once, as the next commit's check is about to begin."""
    real, ran = transaction.Transaction.commit, []

    def interposed(self, *args, **kwargs):
        if not ran:
            ran.append(undo())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(transaction.Transaction, "commit", interposed)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("undone", ["upsert", "delete"])
def test_a_rollback_during_a_write_of_the_same_group_conflicts(tmp_path, monkeypatch, kind, undone):
    c = create(tmp_path, kind)
    c.upsert(rows(["k1", "k2"], 1))
    b = c.delete(["k1"]) if undone == "delete" else c.upsert(rows(["k1"], 2))
    before_commit(monkeypatch, lambda: WriteClient.open(c.path).rollback(b))
    with pytest.raises(WriteConflictError, match="a rollback or restore of a commit its reads"):
        c.upsert(rows(["k2"], 3))
    monkeypatch.undo()
    after = WriteClient.open(c.path)
    assert values(after) == [("k1", 1), ("k2", 1)]
    assert after.validate() == []
    after.upsert(rows(["k2"], 3))  # the retry
    assert values(after) == [("k1", 1), ("k2", 3)]


@pytest.mark.parametrize("undone", ["upsert", "delete"])
def test_a_rollback_during_a_compaction_conflicts(tmp_path, monkeypatch, undone):
    c = create(tmp_path, "merge_on_read")
    c.upsert(rows(["k1", "k2"], 1))
    b = c.delete(["k2"]) if undone == "delete" else c.upsert(rows(["k1"], 2))
    before_commit(monkeypatch, lambda: WriteClient.open(c.path).rollback(b))
    with pytest.raises(WriteConflictError):
        c.compact()
    monkeypatch.undo()
    after = WriteClient.open(c.path)
    assert values(after) == [("k1", 1), ("k2", 1)]
    assert sorted(k for k, at in after.lookup(["k1", "k2"]).items() if at) == ["k1", "k2"]
    assert after.validate() == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_restore_completing_during_a_write_conflicts(tmp_path, monkeypatch, kind):
    c = create(tmp_path, kind)
    saved = c.upsert(rows(["k1", "k2"], 1))
    c.savepoint(saved)
    c.upsert(rows(["k1", "k3"], 2))  # undone by the restore
    before_commit(monkeypatch, lambda: WriteClient.open(c.path).restore(saved))
    with pytest.raises(WriteConflictError):
        c.upsert(rows(["k2"], 3))
    monkeypatch.undo()
    after = WriteClient.open(c.path)
    assert values(after) == [("k1", 1), ("k2", 1)]
    assert after.validate() == []
