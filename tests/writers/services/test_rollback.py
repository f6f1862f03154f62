"""Rollback, recovery from a writer killed with SIGKILL, and optimistic concurrency."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.as_of import AsOfError
from lakebraid.timeline.instant import Action
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteError

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
FAST_HEARTBEAT = {"heartbeat.interval.ms": 100, "heartbeat.expiry.ms": 1500}


def rows(keys: list[str], day: str, ts: int, amount: float) -> pa.Table:
    n = len(keys)
    return pa.table({"id": keys, "day": [day] * n, "ts": [ts] * n, "amount": [amount] * n})


def state(c: WriteClient, as_of: str | None = None) -> tuple:
    table = c.read_arrow(as_of=as_of).sort_by("id").select(["id", "day", "ts", "amount"])
    keys = table.column("id").to_pylist()
    return table.to_pylist(), c.lookup([*keys, "nope"], as_of=as_of), c.files(as_of=as_of)


def data_files(c: WriteClient) -> set[str]:
    root = Path(c.path)
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if ".braid" not in p.parts}


def metadata_files(c: WriteClient) -> set[Path]:
    folders = [
        Path(c.path, ".braid", "metadata", p) for p in ("files", "column_stats", "record_index")
    ]
    return {p for folder in folders if folder.exists() for p in folder.iterdir()}


@pytest.fixture
def client(tmp_path) -> WriteClient:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **FAST_HEARTBEAT)
    c.insert(rows([f"a{i}" for i in range(5)], DAYS[0], 1, 1.0))
    c.insert(rows([f"b{i}" for i in range(5)], DAYS[1], 1, 2.0))
    return c


def test_rollback_of_a_completed_commit_restores_data_index_and_listing(client) -> None:
    before = state(client)
    files_before = data_files(client)
    t = client.upsert(rows(["a1", "a2", "new"], DAYS[0], 2, 9.0))
    assert state(client) != before
    undo = client.rollback(t)
    assert state(client) == before
    assert client.validate() == []
    assert data_files(client) == files_before, "the rolled-back commit's files are deleted"
    assert t not in {i.time for i in client.table.visibility().visible}
    assert undo in {i.time for i in client.timeline() if i.action.value == "rollback"}
    with pytest.raises(WriteError, match="already rolled back"):
        client.rollback(t)


def test_rollback_refuses_while_a_later_commit_rewrote_the_same_groups(client) -> None:
    first = client.upsert(rows(["a1"], DAYS[0], 2, 5.0))
    second = client.upsert(rows(["a2"], DAYS[0], 3, 6.0))
    with pytest.raises(WriteError, match=f"later commits \\['{second}'\\]"):
        client.rollback(first)
    client.rollback(second)
    client.rollback(first)
    assert {r["id"]: r["amount"] for r in state(client)[0]}["a1"] == 1.0


@pytest.mark.parametrize("kind", ["copy_on_write", "merge_on_read"])
def test_rollback_refuses_while_a_later_commit_moved_its_keys_elsewhere(tmp_path, kind) -> None:
    """A delete, then the key written to another partition (another file group): rolling the
    delete back alone would hold the key twice. Refused until the later commit is undone."""
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=kind)
    c.insert(rows(["k", "a"], DAYS[0], 1, 1.0))
    c.insert(rows(["b"], DAYS[1], 1, 1.0))
    deleted = c.delete(["k"])
    moved = c.upsert(rows(["k"], DAYS[1], 2, 2.0))
    before = state(c)
    with pytest.raises(WriteError, match=f"later commits \\['{moved}'\\] moved, wrote or deleted"):
        c.rollback(deleted)
    assert state(c) == before and c.validate() == []
    c.rollback(moved)
    c.rollback(deleted)
    assert [(r["id"], r["day"]) for r in state(c)[0]] == [
        ("a", DAYS[0]),
        ("b", DAYS[1]),
        ("k", DAYS[0]),
    ]
    assert c.validate() == []


def test_rollback_after_metadata_compaction(client) -> None:
    before = state(client)
    t = client.upsert(rows(["a3", "c1"], DAYS[2], 2, 7.0))
    assert MetadataTable(client.table).compact() is not None
    client.rollback(t)
    assert state(client) == before
    assert client.validate() == []
    client.upsert(rows(["c2"], DAYS[2], 3, 8.0))  # and the table goes on
    assert client.validate() == []
    assert state(client)[1]["c2"] is not None


KILLER = """
import os, signal, sys
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.as_of import AsOfError
from lakebraid.writers.client import WriteClient
import pyarrow as pa
def die(self, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)   # after the data files, before the metadata
MetadataTable.write = die
c = WriteClient.open(sys.argv[1])
c.upsert(pa.table({"id": ["a1", "zz"], "day": ["2024-01-01"] * 2, "ts": [9, 9],
                   "amount": [99.0, 99.0]}))
"""


def test_a_writer_killed_mid_commit_is_rolled_back_by_the_next_write(client, run_python) -> None:
    before = state(client)
    files_before = data_files(client)
    proc = run_python(KILLER, client.path)
    proc.communicate(timeout=120)
    assert proc.returncode == -9
    assert data_files(client) > files_before, "the killed writer left data files behind"
    assert state(client) == before, "nothing of the killed write is visible"
    dead = client.timeline()[-1]
    assert dead.is_pending
    time.sleep(1.6)  # its heartbeat expires
    client.upsert(rows(["b1"], DAYS[1], 5, 3.0))
    assert dead.time in client.table.visibility().undone
    assert not [f for f in data_files(client) if dead.time in f], "its files are deleted"
    assert not os.path.exists(client.table.layout.heartbeat(dead.time)), "and its heartbeat"
    assert files_before <= data_files(client)
    assert client.lookup(["zz"])["zz"] is None
    assert client.validate() == []
    assert {r["id"]: r["amount"] for r in state(client)[0]}["a1"] == 1.0


SLOW_WRITER = """
import json, sys, time
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.as_of import AsOfError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteConflictError
import pyarrow as pa
original = MetadataTable.write
def slow(self, *args, **kwargs):
    open(sys.argv[2], "w").close()
    while not __import__("os").path.exists(sys.argv[3]):
        time.sleep(0.05)
    return original(self, *args, **kwargs)
MetadataTable.write = slow
c = WriteClient.open(sys.argv[1])
try:
    c.upsert(pa.table({"id": ["a1"], "day": [sys.argv[4]], "ts": [7], "amount": [70.0]}))
    print(json.dumps("committed"))
except WriteConflictError as exc:
    print(json.dumps(str(exc)))
"""


@pytest.mark.parametrize(
    ("slow_day", "fast_key", "conflict"),
    [
        (DAYS[0], "a2", True),  # same file group
        (DAYS[0], "b2", False),  # another partition: disjoint groups both commit
    ],
)
def test_optimistic_concurrency(client, run_python, tmp_path, slow_day, fast_key, conflict) -> None:
    started, go = str(tmp_path / "started"), str(tmp_path / "go")
    proc = run_python(SLOW_WRITER, client.path, started, go, slow_day)
    while not Path(started).exists():
        assert proc.poll() is None, proc.stderr.read()
    fast_day = DAYS[0] if fast_key.startswith("a") else DAYS[1]
    client.upsert(rows([fast_key], fast_day, 8, 80.0))
    Path(go).touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    outcome = json.loads(out)
    amounts = {r["id"]: r["amount"] for r in state(client)[0]}
    assert amounts[fast_key] == 80.0, "the winner is untouched"
    assert client.validate() == []
    if conflict:
        assert "retry" in outcome and "rolled back" in outcome
        assert amounts["a1"] == 1.0, "nothing of the loser is visible"
    else:
        assert outcome == "committed"
        assert amounts["a1"] == 70.0


def test_validate_reports_what_storage_and_metadata_disagree_on(client) -> None:
    assert client.validate() == []
    listing = client.files()
    partition = sorted(listing)[0]
    name = sorted(listing[partition])[0]
    (Path(client.path) / partition / name).unlink()
    problems = client.validate()
    assert any(f"files: {partition}/{name}" in p for p in problems)
    assert any(p.startswith("record_index: key") for p in problems)


def test_restore_to_a_savepoint_equals_the_table_as_of_it(client) -> None:
    t2 = client.upsert(rows(["a1", "c1"], DAYS[2], 2, 3.0))
    t2_done = next(i.completion_time for i in client.timeline() if i.time == t2)
    client.savepoint(t2)
    expected = state(client, as_of=t2_done)
    client.upsert(rows(["a2", "b2"], DAYS[0], 3, 4.0))
    client.delete(["b3", "c1"])
    client.upsert(rows(["d1", "a1"], DAYS[1], 4, 5.0))
    assert MetadataTable(client.table).compact() is not None
    client.insert(rows(["e1"], DAYS[2], 5, 6.0))
    cleaner = WriteClient.open(client.path, **{"clean.retain.commits": 1})
    assert cleaner.clean() is not None, "the cleaner runs between the savepoint and restore"
    client.upsert(rows(["e1", "b4"], DAYS[0], 6, 7.0))
    assert state(client) != expected
    with pytest.raises(WriteError, match="has no savepoint"):
        client.restore(client.timeline()[-1].time)
    client.restore(t2)
    assert state(client) == expected
    assert client.validate() == []
    after = client.upsert(rows(["f1"], DAYS[0], 9, 9.0))  # the table goes on
    assert state(client)[1]["f1"] is not None and after > t2
    assert client.validate() == []


def test_clean_keeps_what_retained_reads_and_savepoints_need(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **{"clean.retain.commits": 3})
    saved = c.insert(rows(["a1", "a2"], DAYS[0], 1, 1.0))
    c.savepoint(saved)
    for step in range(2, 10):
        c.upsert(rows(["a1", f"n{step}"], DAYS[step % 2], step, float(step)))
        if step == 6:
            assert MetadataTable(c.table).compact() is not None
    commits = [i for i in c.timeline() if i.action.value == "commit"]
    points = [i.completion_time for i in commits[-3:]] + [commits[0].completion_time, None]
    before = {p: state(c, as_of=p) for p in points}
    files_before = data_files(c)
    meta_before = metadata_files(c)
    assert c.clean() is not None
    assert data_files(c) < files_before, "superseded data files are deleted"
    meta_after = metadata_files(c)
    assert meta_after < meta_before, "metadata slices beyond the retention are deleted"
    for point, expected in before.items():
        assert state(c, as_of=point) == expected, point
    assert c.validate() == []
    assert c.clean() is None  # nothing more to do
    c.upsert(rows(["z"], DAYS[0], 20, 2.0))
    assert c.validate() == []


def test_rollback_within_retention_after_compaction_and_clean(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **{"clean.retain.commits": 2})
    old = c.insert(rows(["a1", "a2"], DAYS[0], 1, 1.0))
    c.insert(rows(["b1"], DAYS[1], 2, 2.0))
    c.upsert(rows(["a1"], DAYS[0], 3, 3.0))
    before_last = state(c)
    last = c.upsert(rows(["b1", "c1"], DAYS[1], 4, 4.0))
    assert MetadataTable(c.table).compact() is not None  # folds `last` into new bases
    assert c.clean() is not None  # and the slices before the retention go
    with pytest.raises(WriteError, match="older than the retention"):
        c.rollback(old)
    c.rollback(last)
    assert state(c) == before_last
    assert c.validate() == []


def test_clean_sweeps_idle_staging_folders_only(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    c.insert(rows(["a"], DAYS[0], 1, 1.0))
    staging = Path(c.path, ".braid", "staging")
    idle, busy = staging / "job-idle", staging / "job-busy"
    for folder in (idle, busy):
        (folder / "part-0").mkdir(parents=True)
        (folder / "part-0" / "rows.arrow").write_bytes(b"x")
    two_days_ago = time.time() - 48 * 3600
    for path in (idle / "part-0" / "rows.arrow", idle / "part-0", idle):
        os.utime(path, (two_days_ago, two_days_ago))
    os.utime(busy / "part-0", (two_days_ago, two_days_ago))  # a file in it is new
    assert c.clean() is None  # no commit beyond the retention: no clean instant
    assert not idle.exists() and (busy / "part-0" / "rows.arrow").exists()
    assert c.read_arrow().num_rows == 1 and c.validate() == []


def test_recovery_that_saw_a_live_service_pending_leaves_it_alone_once_it_completed(
    client,
) -> None:
    """Recovery lists the timeline, then reads heartbeats: a service that completes in
    between has removed its heartbeat, so it looks pending and dead (found by the soak run:
    the recovering writer then failed with InstantExistsError). The judgement is made again
    under the table lock, where the service is seen completed: nothing is redone."""
    from lakebraid.timeline.bodies import encode_body
    from lakebraid.timeline.table import TableTimelines
    from lakebraid.writers.services.lifecycle import open_instant
    from lakebraid.writers.services.recovery import recover
    from lakebraid.writers.services.rollback import execute_rollback_plan, plan_rollback

    target = client.insert(rows(["c0"], DAYS[2], 1, 3.0))
    service = TableTimelines.open(client.path, FAST_HEARTBEAT)
    plan = plan_rollback(service, service.timeline().get(target))
    undo, heartbeat = open_instant(service, Action.ROLLBACK, encode_body(plan))
    recovering = TableTimelines.open(client.path, FAST_HEARTBEAT)
    with recovering.store.load_scope():
        seen = recovering.timeline()  # the listing a write starts from: the undo pending
        assert seen.get(undo).is_pending
        execute_rollback_plan(service, undo, plan)  # the service completes...
        heartbeat.stop()  # ...and removes its heartbeat
        assert recover(recovering) == []  # judged again under the lock: nothing to do
    assert recovering.timeline().get(undo).is_completed
    assert client.read_arrow().column("id").to_pylist().count("c0") == 0
    assert client.validate() == []


def test_a_restore_keeps_the_retention_of_a_clean_it_passes(tmp_path) -> None:
    """A clean after the savepoint deleted files for good: the restore leaves it visible, so
    as-of reads it cut off stay refused by name (not a missing-file error) and the savepointed
    commit, whose previous files it removed, cannot be rolled back."""
    options = {"clean.inline": False, "clean.retain.commits": 1}
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **options)
    first = c.insert(rows(["a", "b"], DAYS[0], 0, 0.0))
    c.upsert(rows(["a", "b"], DAYS[0], 1, 1.0))
    saved = c.upsert(rows(["a", "b"], DAYS[0], 2, 2.0))
    c.savepoint(saved)
    c.upsert(rows(["a", "b"], DAYS[0], 3, 3.0))
    c.upsert(rows(["a", "b"], DAYS[0], 4, 4.0))
    cleaned = c.clean()
    assert cleaned is not None
    at_saved = state(c, saved)
    c.restore(saved)
    assert state(c) == at_saved
    assert cleaned not in c.table.visibility().undone
    with pytest.raises(AsOfError, match="older than the clean retention"):
        c.read_arrow(as_of=first)
    with pytest.raises(WriteError, match=f"cannot roll back {saved}"):
        c.rollback(saved)
    assert state(c) == at_saved and c.validate() == []


def test_a_rollback_of_a_restore_or_of_no_instant_says_which(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    first = c.upsert(rows(["a"], "d1", 1, 1.0))
    c.upsert(rows(["b"], "d1", 2, 2.0))
    c.savepoint(first)
    restored = c.restore(first)
    before = state(c)
    with pytest.raises(WriteError, match=f"{restored} is a restore, not a commit, on the global"):
        c.rollback(restored)
    with pytest.raises(WriteError, match="20200101000000000 is no commit on the global timeline"):
        c.rollback("20200101000000000")
    assert state(c) == before


def test_savepointing_a_commit_twice_gives_its_one_savepoint(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    first = c.upsert(rows(["a"], "d1", 1, 1.0))
    held = c.savepoint(first)
    assert WriteClient.open(c.path).savepoint(first) == held
    savepoints = [i for i in c.timeline() if i.action.value == "savepoint"]
    assert [i.time for i in savepoints] == [held]


def test_a_savepointed_commit_is_not_rolled_back(client) -> None:
    t2 = client.upsert(rows(["a1", "c1"], DAYS[2], 2, 3.0))
    mark = client.savepoint(t2)
    before = state(client)
    with pytest.raises(WriteError, match=f"cannot roll back {t2}: savepoint {mark}"):
        client.rollback(t2)
    assert state(client) == before
    client.upsert(rows(["a1"], DAYS[2], 3, 4.0))
    client.restore(t2)  # the savepoint still restores
    assert state(client) == before


def test_a_savepoint_whose_commit_a_restore_undid_is_gone(client) -> None:
    t2 = client.upsert(rows(["a1", "c1"], DAYS[2], 2, 3.0))
    client.savepoint(t2)
    t3 = client.upsert(rows(["a2"], DAYS[0], 3, 4.0))
    client.savepoint(t3)
    client.restore(t2)  # undoes t3
    assert sorted(client.table.savepointed()) == [t2]
    with pytest.raises(WriteError, match=f"cannot restore to {t3}: it has no savepoint"):
        client.restore(t3)
    with pytest.raises(WriteError, match=f"cannot savepoint {t3}: it is not a visible commit"):
        client.savepoint(t3)
    assert client.validate() == []
