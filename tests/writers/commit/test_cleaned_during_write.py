"""A write whose conflict check must read the record-index files of a commit completed after
its read point, when a metadata compaction folded them and a clean removed them meanwhile (another
process's services): the write gets a retryable conflict naming the file, not a permanent
error that reads like corruption (``MissingMetadataFileError`` names its file)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakebraid.metadata import basefile
from lakebraid.writers.client import WriteClient
from lakebraid.writers.commit import transaction
from lakebraid.writers.errors import VanishedFileError, WriteConflictError


def rows(key: str, part: str) -> pa.Table:
    return pa.table({"id": [key], "p": [part], "v": [1], "ts": [1]})


def test_a_conflict_check_meeting_cleaned_index_files_is_retryable(tmp_path, monkeypatch):
    options = {
        "clean.retain.commits": 1,
        "clean.inline": False,
        "metadata.compact.max.log.files": 0,
    }
    c = WriteClient.create(str(tmp_path / "t"), "id", ["p"], "ts", **options)
    # the write below updates a key: an insert of new keys only writes its index blocks
    # ahead, before the others write, and they then log beside them (test_ahead.py)
    c.insert(rows("a", "x"))
    other = WriteClient.open(c.path)
    real, ran = transaction.Transaction.commit, []

    def interposed(self, *args, **kwargs):
        if not ran:
            ran.append(True)
            for i in range(6):  # commits on other partitions, folded, then cleaned
                other.upsert(rows(f"o{i}", f"y{i}"))
                if i in (2, 5):
                    other.compact_metadata()
            other.clean()
            basefile.FOOTERS.clear()  # as the writer's own process never read those files
        return real(self, *args, **kwargs)

    monkeypatch.setattr(transaction.Transaction, "commit", interposed)
    with pytest.raises((WriteConflictError, VanishedFileError), match="retry it") as raised:
        c.upsert(rows("a", "x"))
    assert "record_index" in str(raised.value)
    monkeypatch.undo()
    again = WriteClient.open(c.path)
    again.upsert(rows("a", "x"))
    assert sorted(r["id"] for r in again.read_arrow().to_pylist()) == ["a"] + [
        f"o{i}" for i in range(6)
    ]
    assert again.validate() == []
