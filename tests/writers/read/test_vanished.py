"""A read whose files vanish while it runs fails with a clear error, never a partial answer:
:class:`AsOfError` once the cleaner has passed its read point, else a retryable
:class:`VanishedFileError` naming the file."""

from __future__ import annotations

import os

import pytest
from table_fixtures import RETAIN_ONE, four_keys

from lakebraid.timeline.as_of import AsOfError
from lakebraid.timeline.bodies import CleanPlan, encode_body
from lakebraid.timeline.errors import RetryableError
from lakebraid.timeline.instant import Action
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import MissingDataFileError, VanishedFileError
from lakebraid.writers.read import plan as plan_module
from lakebraid.writers.services.lifecycle import open_instant

OPTIONS = RETAIN_ONE
rows = four_keys


@pytest.fixture
def table(tmp_path) -> WriteClient:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)
    return client


def test_a_clean_during_an_as_of_read_is_an_as_of_error(table, monkeypatch) -> None:
    old = table.upsert(rows(1))
    table.upsert(rows(2))
    table.upsert(rows(3))
    planned = plan_module.plan_units

    def plan_then_clean(*args, **kwargs):
        units = planned(*args, **kwargs)
        table.clean()  # a concurrent cleaner passes the read point after it was checked
        return units

    monkeypatch.setattr(plan_module, "plan_units", plan_then_clean)
    with pytest.raises(AsOfError, match="older than the clean retention"):
        table.read_arrow(old)


def test_a_file_removed_under_a_read_of_now_is_retryable(table, monkeypatch) -> None:
    latest = table.upsert(rows(1))
    planned = plan_module.plan_units
    gone: list[str] = []

    def plan_then_undo(*args, **kwargs):
        units = planned(*args, **kwargs)
        WriteClient.open(table.path).rollback(latest)  # another process undoes the commit
        gone.append(units[0].base)
        return units

    monkeypatch.setattr(plan_module, "plan_units", plan_then_undo)
    with pytest.raises(VanishedFileError) as err:
        table.read_arrow()
    assert isinstance(err.value, RetryableError)
    assert gone[0] in str(err.value) and table.path in str(err.value)
    monkeypatch.undo()
    assert table.read_arrow().num_rows == 0  # the retry reads the table as the undo left it


def test_a_listed_file_missing_from_storage_is_damage_not_retryable(table) -> None:
    """No commit removed it: reading or writing again would meet the same gap."""
    latest = table.upsert(rows(1))
    lost = table.file_paths()[0]
    os.remove(lost)
    for call in (table.read_arrow, lambda: table.upsert(rows(2))):
        with pytest.raises(MissingDataFileError, match="which the table lists, is missing") as err:
            call()
        assert not isinstance(err.value, RetryableError)
        assert lost in str(err.value) and f"roll back the commit {latest}" in str(err.value)
    visible = table.table.visibility().visible
    assert [i.time for i in visible if i.action is Action.COMMIT][-1] == latest  # none added


def test_a_running_clean_already_bounds_as_of_reads(table) -> None:
    old = table.upsert(rows(1))
    table.upsert(rows(2))
    last = table.upsert(rows(3))
    # a cleaner that requested its plan and is deleting: not completed yet
    open_instant(table.table, Action.CLEAN, encode_body(CleanPlan(earliest_retained=last)))
    with pytest.raises(AsOfError, match="older than the clean retention"):
        table.read_arrow(old)
    assert set(table.read_arrow(last).column("v").to_pylist()) == {3}
