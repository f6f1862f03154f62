"""Rollback and restore across a reindex (``index.rebase``): the undo writes corrected bases for
every reindex that folded what it undoes, so lookups and reads stay exact now and as of every
commit. Expected states come from a plain model of what each commit wrote."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

from lakebraid.index import reindex as reindex_module
from lakebraid.index.errors import ReindexConflictError, ReindexRunningError
from lakebraid.timeline.bodies import ReindexPlan, RollbackPlan, encode_body
from lakebraid.timeline.errors import StateUnknownError
from lakebraid.timeline.heartbeat import write_beat
from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.client import WriteClient
from lakebraid.writers.commit.transaction import Transaction
from lakebraid.writers.services import lifecycle
from lakebraid.writers.services.rollback import rollback

OPTIONS = {
    "write.merge.mode": "commit_time",
    "metadata.compact.max.log.files": 3,
    "metadata.compact.log.ratio": 0,
}


def keys(lo: int, hi: int) -> list[str]:
    return [f"k-{i:05d}" for i in range(lo, hi)]


def day(key: str) -> str:
    return f"d{int(key.split('-')[1]) % 3}"


class History:
    """What each commit wrote ({key: value, or None for a delete}), in commit order, and which
    commits are undone; the state as of any commit replays the others."""

    def __init__(self) -> None:
        self.commits: list[tuple[str, dict[str, int | None]]] = []
        self.undone: set[str] = set()

    def upsert(self, client: WriteClient, ks: list[str], value: int) -> str:
        n = len(ks)
        data = pa.table(
            {"id": ks, "day": [day(k) for k in ks], "ts": [value] * n, "v": [value] * n}
        )
        t = client.upsert(data)
        self.commits.append((t, dict.fromkeys(ks, value)))
        return t

    def delete(self, client: WriteClient, ks: list[str]) -> str:
        t = client.delete(ks)
        self.commits.append((t, dict.fromkeys(ks)))
        return t

    def state(self, as_of: str | None = None) -> dict[str, int]:
        state: dict[str, int] = {}
        for t, changes in self.commits:
            if t not in self.undone:
                for k, v in changes.items():
                    if v is None:
                        state.pop(k, None)
                    else:
                        state[k] = v
            if t == as_of:
                break
        return state

    def everything(self) -> list[str]:
        return sorted({k for _, changes in self.commits for k in changes})


def check(client: WriteClient, history: History, since: str = "") -> None:
    """Lookups and reads equal the model now and as of every visible commit (from ``since``
    on); validate is clean."""
    points = [None, *(t for t, _ in history.commits if t not in history.undone and t >= since)]
    asked = history.everything()
    for point in points:
        model = history.state(point)
        found = client.lookup(asked, as_of=point)
        located = {k: loc.partition for k, loc in found.items() if loc is not None}
        assert located == {k: f"day={day(k)}" for k in model}, f"lookup as of {point}"
        table = client.read_arrow(as_of=point)
        values = dict(
            zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True)
        )
        assert values == model, f"read as of {point}"
    assert client.validate() == []


@pytest.fixture
def client(tmp_path) -> WriteClient:
    return WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)


def test_rollback_of_commits_before_and_after_a_reindex(client) -> None:
    h = History()
    h.upsert(client, keys(0, 30), 1)
    t2 = h.upsert(client, keys(20, 40), 2)  # updates 10 keys, inserts 10
    t3 = h.delete(client, keys(0, 5))
    client.reindex(groups=3)
    t4 = h.upsert(client, keys(35, 50), 4)
    check(client, h)
    client.rollback(t4)  # after the reindex: its logs are in the new layout
    h.undone.add(t4)
    check(client, h)
    client.rollback(t3)  # before: the reindex folded it, the deleted keys come back
    h.undone.add(t3)
    check(client, h)
    client.rollback(t2)
    h.undone.add(t2)
    check(client, h)
    h.upsert(client, keys(25, 45), 5)  # writes and a compaction go on from the corrected bases
    client.compact_metadata()
    client.reindex(groups=2)
    check(client, h)


def test_restore_across_two_reindexes(client) -> None:
    h = History()
    t1 = h.upsert(client, keys(0, 40), 1)
    client.savepoint(t1)
    h.upsert(client, keys(30, 60), 2)
    client.reindex(groups=3)
    h.delete(client, keys(0, 10))
    client.reindex(groups=5)
    h.upsert(client, keys(55, 70), 3)
    check(client, h)
    client.restore(t1)
    h.undone.update(t for t, _ in h.commits[1:])
    check(client, h)
    h.upsert(client, keys(5, 15), 4)
    check(client, h)


def test_an_undo_waits_for_a_running_reindex(client) -> None:
    h = History()
    h.upsert(client, keys(0, 20), 1)
    t2 = h.upsert(client, keys(10, 30), 2)
    table = client.table
    with table.lock:
        t = table.next_time()
        plan = encode_body(ReindexPlan(group_counts={"record_index": 3}))
        table.store.request(TimelineKind.METADATA, t, Action.REINDEX, plan)
    write_beat(table.fs, table.layout, t)  # a live reindex: it folds t2
    before = list(client.timeline())
    with pytest.raises(
        ReindexRunningError,
        match=f"cannot roll back {t2} while {t} \\(a reindex or index build\\) is running",
    ):
        client.rollback(t2)
    assert list(client.timeline()) == before
    check(client, h)
    short = {"heartbeat.expiry.ms": 200, "heartbeat.interval.ms": 50}
    expired = WriteClient.open(client.path, **short)
    time.sleep(0.3)  # the reindex died: it never completes, the undo goes on
    expired.rollback(t2)
    h.undone.add(t2)
    check(expired, h)


def test_a_reindex_does_not_complete_once_an_undo_began(client, monkeypatch) -> None:
    h = History()
    h.upsert(client, keys(0, 40), 1)
    t2 = h.upsert(client, keys(30, 50), 2)
    original = reindex_module._write_bases

    def paused(metadata_table, *args):
        original(metadata_table, *args)
        # its heartbeat expired meanwhile: an undo of a commit it folded goes ahead
        monkeypatch.setattr(TableTimelines, "is_alive", lambda self, instant: False)
        client.rollback(t2)

    monkeypatch.setattr(reindex_module, "_write_bases", paused)
    with pytest.raises(ReindexConflictError, match=f"a rollback\\) undoes {t2}"):
        client.reindex(groups=4)
    monkeypatch.undo()
    h.undone.add(t2)
    check(client, h)
    client.reindex(groups=4)
    check(client, h)


def test_a_crashed_undo_across_a_reindex_is_finished_by_recovery(tmp_path, monkeypatch) -> None:
    short = {**OPTIONS, "heartbeat.expiry.ms": 200, "heartbeat.interval.ms": 50}
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **short)
    h = History()
    h.upsert(client, keys(0, 30), 1)
    t2 = h.upsert(client, keys(20, 40), 2)
    client.reindex(groups=3)
    original = lifecycle.complete_all

    def crash(table, undo, action, body):
        raise OSError("power cut after the corrected bases")

    monkeypatch.setattr("lakebraid.writers.services.rollback.complete_all", crash)
    with pytest.raises(StateUnknownError, match=r"power cut.*recovery finishes it"):
        client.rollback(t2)
    monkeypatch.setattr("lakebraid.writers.services.rollback.complete_all", original)
    check(client, h)  # the pending undo changes nothing yet
    time.sleep(0.3)
    assert client.recover()  # finishes it from its plan
    h.undone.add(t2)
    check(client, h)


def test_the_cleaner_drops_corrected_bases_once_no_retained_point_reads_them(tmp_path) -> None:
    options = {**OPTIONS, "clean.retain.commits": 2}
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **options)
    h = History()
    h.upsert(client, keys(0, 30), 1)
    t2 = h.upsert(client, keys(20, 40), 2)
    client.reindex(groups=3)
    client.rollback(t2)
    h.undone.add(t2)
    folder = f"{client.path}/.braid/metadata/record_index"
    body = client.table.store.read_typed(TimelineKind.GLOBAL, client.timeline()[-1], RollbackPlan)
    (base,) = body.rebased.values()
    corrected = [n for n in os.listdir(folder) if n.endswith(f"_{base}.parquet")]
    assert len(corrected) == 3
    client.clean()  # the corrected bases are what every retained point reads
    assert all(os.path.exists(f"{folder}/{n}") for n in corrected)
    check(client, h)
    for i in range(3):
        h.upsert(client, keys(40 + i * 10, 50 + i * 10), 3 + i)
        client.compact_metadata()
    client.clean()
    assert not any(os.path.exists(f"{folder}/{n}") for n in corrected)
    check(client, h, since=h.commits[-2][0])  # what the retention keeps readable


def test_a_writer_undoing_its_own_pending_write_does_not_stop_a_reindex(
    client, monkeypatch
) -> None:
    h = History()
    h.upsert(client, keys(0, 40), 1)
    original = reindex_module._write_bases

    def paused(metadata_table, *args):
        original(metadata_table, *args)
        # meanwhile a writer lost a conflict and rolls back its own pending write
        tx = Transaction(client.table, client.metadata, "upsert")
        pending = tx.begin()
        rollback(client.table, pending, own=True)
        tx.close()

    monkeypatch.setattr(reindex_module, "_write_bases", paused)
    done = client.reindex(groups=4)
    monkeypatch.undo()
    assert client.metadata.read_point().reindexed["record_index"] == done
    check(client, h)
