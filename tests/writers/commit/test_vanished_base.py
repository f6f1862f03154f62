"""A write whose stored file is replaced by a concurrent commit and cleaned before the write
reads it fails as a conflict (rolled back, safe to retry), never with a bare missing file;
a file the table still lists that is missing stays an error naming it."""

from __future__ import annotations

import os

import pytest
from table_fixtures import RETAIN_ONE, four_keys

from lakebraid.timeline.errors import RetryableError
from lakebraid.timeline.visibility import undone_times
from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine import inprocess
from lakebraid.writers.errors import MissingDataFileError, WriteConflictError

OPTIONS = RETAIN_ONE
rows = four_keys


@pytest.fixture
def table(tmp_path) -> WriteClient:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)
    client.upsert(rows(1))
    return client


def _before_rewrite(monkeypatch: pytest.MonkeyPatch, act) -> None:
    """Run ``act(work)`` once, when the next write's tasks are planned and before any runs."""
    rewrite, done = inprocess.InProcessEngine.rewrite, []

    def interfered(self, work):
        if not done:
            done.append(True)
            act(work)
        return rewrite(self, work)

    monkeypatch.setattr(inprocess.InProcessEngine, "rewrite", interfered)


def test_a_base_replaced_and_cleaned_under_a_write_is_a_conflict(table, monkeypatch) -> None:
    other = WriteClient.open(table.path)

    def replace_and_clean(work) -> None:
        other.upsert(rows(8))
        other.upsert(rows(9))
        other.clean()  # retains one commit: the file the write planned from goes

    _before_rewrite(monkeypatch, replace_and_clean)
    with pytest.raises(WriteConflictError) as err:
        table.upsert(rows(5))
    assert isinstance(err.value, RetryableError) and table.path in str(err.value)
    assert "replaced by a concurrent commit" in str(err.value)
    assert set(WriteClient.open(table.path).read_arrow().column("v").to_pylist()) == {9}
    timelines = WriteClient.open(table.path).table
    now = timelines.timeline()
    assert err.value.instant in undone_times(now, timelines.undo_bodies(now))  # rolled back
    monkeypatch.undo()
    table.upsert(rows(10))  # the retry goes through (ts 10: newer than the other's 9)
    assert set(WriteClient.open(table.path).read_arrow().column("v").to_pylist()) == {10}


def test_a_missing_file_the_table_still_lists_is_not_a_conflict(table, monkeypatch) -> None:
    root = table.path
    gone: list[str] = []

    def remove_current(work) -> None:
        task = work[0].task
        gone.append(f"{root}/{task.partition}/{task.old_file}")
        os.remove(gone[0])  # a damaged disk: the table still lists it

    _before_rewrite(monkeypatch, remove_current)
    with pytest.raises(MissingDataFileError, match="which the table lists, is missing") as err:
        table.upsert(rows(5))
    assert not isinstance(err.value, RetryableError)
    assert os.path.basename(gone[0]) in str(err.value)
