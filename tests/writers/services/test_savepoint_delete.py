"""Deleting a savepoint (``writers.services.restore.delete_savepoint``): the commit is no
longer kept from the cleaner nor restorable, reads never change, a restore and a deletion
exclude each other, and a deletion whose writer died is finished by recovery."""

from __future__ import annotations

import json
import time

import pytest

from lakebraid.timeline.as_of import AsOfError
from lakebraid.timeline.bodies import RollbackPlan, encode_body
from lakebraid.timeline.instant import Action
from lakebraid.writers.cli.main import main
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteError
from lakebraid.writers.services.lifecycle import open_instant
from lakebraid.writers.services.restore import plan_restore
from lakebraid.writers.services.rollback import execute_undo
from tests.writers.services.test_rollback import DAYS, FAST_HEARTBEAT, data_files, rows, state

OPTIONS = {"clean.inline": False, "clean.retain.commits": 1, **FAST_HEARTBEAT}


@pytest.fixture
def saved(tmp_path) -> tuple[WriteClient, str]:
    """A table whose first upsert is savepointed, then rewritten by three more."""
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)
    first = c.upsert(rows(["a", "b"], DAYS[0], 1, 1.0))
    c.savepoint(first)
    for ts in (2, 3, 4):
        c.upsert(rows(["a", "b"], DAYS[0], ts, float(ts)))
    return c, first


def test_the_cleaner_removes_what_only_the_deleted_savepoint_kept(saved) -> None:
    c, first = saved
    at_first = state(c, first)
    c.clean()
    kept = data_files(c)
    assert state(c, first) == at_first  # the savepoint kept its files through the clean
    now, mark = state(c), c.table.savepointed()[first]
    undo = c.delete_savepoint(first)
    assert c.table.savepointed() == {} and state(c) == now
    assert c.table.timeline().get(undo, Action.ROLLBACK).is_completed
    listed = {row["time"]: row for row in c.history()}
    assert listed[undo]["details"]["target"] == mark
    assert listed[undo]["details"]["target_action"] == "savepoint"
    assert listed[mark]["state"] == "undone"
    assert c.clean() is not None
    gone = kept - data_files(c)
    assert gone, "the files only the savepoint kept are deleted"
    assert all(f.endswith(f"_{first}.parquet") for f in gone)
    assert state(c) == now and c.validate() == []
    with pytest.raises(AsOfError, match="older than the clean retention"):
        c.read_arrow(as_of=first)
    with pytest.raises(WriteError, match=f"cannot restore to {first}: it has no savepoint"):
        c.restore(first)
    assert c.show()["services"]["savepoints"] == []


def test_a_deleted_savepoint_can_be_made_again_and_restores(saved) -> None:
    c, first = saved
    at_first = state(c, first)
    c.delete_savepoint(first)
    again = c.savepoint(first)  # not cleaned yet: still restorable
    assert c.table.savepointed() == {first: again}
    c.restore(first)
    assert state(c) == at_first and c.validate() == []


def test_a_commit_whose_savepoint_is_deleted_can_be_rolled_back(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **FAST_HEARTBEAT)
    c.insert(rows(["a"], DAYS[0], 1, 1.0))
    before = state(c)
    last = c.upsert(rows(["a", "b"], DAYS[1], 2, 2.0))
    mark = c.savepoint(last)
    with pytest.raises(WriteError, match=f"savepoint {mark} keeps it"):
        c.rollback(last)
    with pytest.raises(WriteError, match=r"is a savepoint, not a commit.*--delete"):
        c.rollback(mark)  # the savepoint instant itself: named, with the way to delete it
    c.delete_savepoint(last)
    c.rollback(last)
    assert state(c) == before and c.validate() == []


def test_deleting_a_savepoint_that_is_not_there_is_refused_by_name(saved) -> None:
    c, first = saved
    before = state(c)
    for instant in ("20200101000000000", "nonsense", None):
        with pytest.raises(WriteError):
            c.delete_savepoint(instant)  # type: ignore[arg-type]
    commits = [i.time for i in c.timeline() if i.action is Action.COMMIT]
    with pytest.raises(WriteError, match=f"{commits[-1]}: it has no savepoint.*{first}"):
        c.delete_savepoint(commits[-1])  # a commit without one: the savepointed are listed
    mark = c.table.savepointed()[first]
    with pytest.raises(
        WriteError, match=f"{mark}: it has no savepoint; give the commit it keeps, {first}"
    ):
        c.delete_savepoint(mark)  # the savepoint's own time, not its commit's
    c.delete_savepoint(first)
    with pytest.raises(WriteError, match=f"savepoint of {first}: it has no savepoint"):
        c.delete_savepoint(first)  # deleted twice
    assert state(c) == before
    rollbacks = [i for i in c.timeline() if i.action is Action.ROLLBACK]
    assert len(rollbacks) == 1


def test_a_running_restore_and_a_deletion_of_its_savepoint_exclude_each_other(saved) -> None:
    """Each checks the other's pending instant (a live heartbeat) under the table lock."""
    c, first = saved
    at_first, mark = state(c, first), c.table.savepointed()[first]
    plan = plan_restore(c.table, first)
    restore, beat = open_instant(c.table, Action.RESTORE, encode_body(plan))
    with pytest.raises(WriteError, match=f"restore {restore} to it is running"):
        c.delete_savepoint(first)
    execute_undo(c.table, restore, Action.RESTORE, plan, plan.undone)  # the restore ends
    beat.stop()
    assert state(c) == at_first and c.table.savepointed() == {first: mark}
    deleting = RollbackPlan(target=mark, target_action=Action.SAVEPOINT)
    undo, beat = open_instant(c.table, Action.ROLLBACK, encode_body(deleting))
    with pytest.raises(WriteError, match=f"its savepoint {mark} is being deleted"):
        c.restore(first)
    with pytest.raises(WriteError, match="is being deleted"):
        c.delete_savepoint(first)
    execute_undo(c.table, undo, Action.ROLLBACK, deleting, [mark])  # the deletion ends
    beat.stop()
    assert c.table.savepointed() == {} and state(c) == at_first and c.validate() == []


def test_a_write_while_a_savepoint_is_deleted_commits(saved) -> None:
    """The deletion undoes no commit: a write meanwhile meets no conflict (rules 1 and 8 of
    ``writers.commit.conflicts`` see a rollback whose target is no commit)."""
    c, first = saved
    mark = c.table.savepointed()[first]
    deleting = RollbackPlan(target=mark, target_action=Action.SAVEPOINT)
    undo, beat = open_instant(c.table, Action.ROLLBACK, encode_body(deleting))
    written = WriteClient.open(c.path).upsert(rows(["a", "z"], DAYS[1], 9, 9.0))
    execute_undo(c.table, undo, Action.ROLLBACK, deleting, [mark])
    beat.stop()
    assert c.table.visibility().is_visible(written) and c.table.savepointed() == {}
    assert {r["id"] for r in c.read_arrow().to_pylist()} == {"a", "b", "z"}
    assert c.validate() == []


def test_a_deletion_whose_writer_died_is_finished_by_recovery(saved) -> None:
    c, first = saved
    mark = c.table.savepointed()[first]
    deleting = RollbackPlan(target=mark, target_action=Action.SAVEPOINT)
    undo, beat = open_instant(c.table, Action.ROLLBACK, encode_body(deleting))
    beat.stop(remove=False)  # the writer dies: its heartbeat expires
    assert c.table.savepointed() == {first: mark}  # pending: the savepoint still holds
    time.sleep(FAST_HEARTBEAT["heartbeat.expiry.ms"] / 1000 + 0.3)
    WriteClient.open(c.path).recover()
    assert c.table.timeline().get(undo, Action.ROLLBACK).is_completed
    assert c.table.savepointed() == {}
    assert c.validate() == []


def test_the_cli_deletes_a_savepoint(saved, capsys) -> None:
    c, first = saved
    assert main(["savepoint", c.path, first, "--delete", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["deleted_savepoint_of"] == first and out["rollback"]
    assert c.table.savepointed() == {}
    assert main(["savepoint", c.path, first, "--delete"]) == 1
    assert "has no savepoint" in capsys.readouterr().err
