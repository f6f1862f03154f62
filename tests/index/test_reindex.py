"""Online resharding of the record index: ``WriteClient.reindex(groups=N)`` while writers keep
committing. Expected states come from plain models of what each writer committed, never from
the code under test."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pytest

from lakebraid.index import reindex as reindex_module
from lakebraid.index.errors import ReindexConflictError
from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.bodies import ReindexPlan, encode_body
from lakebraid.timeline.heartbeat import write_beat
from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.cli.main import main as cli
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteConflictError

OPTIONS = {
    "write.merge.mode": "commit_time",
    "metadata.compact.max.log.files": 3,
    "metadata.compact.log.ratio": 0,
}


def rows(keys: list[str], value: int) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "id": keys,
            "day": [f"d{int(k.split('-')[1]) % 3}" for k in keys],
            "ts": [value] * n,
            "v": [value] * n,
        }
    )


def keys(lo: int, hi: int) -> list[str]:
    return [f"k-{i:05d}" for i in range(lo, hi)]


def groups(client: WriteClient) -> int:
    return client.metadata.read_point().group_counts["record_index"]


def check(client: WriteClient, model: dict[str, int]) -> None:
    """Every key of the model is found where its day says, with the model's value."""
    found = client.lookup(sorted(model))
    assert all(found[k] is not None for k in model), [k for k in model if found[k] is None]
    assert {k: loc.partition for k, loc in found.items()} == {  # type: ignore[union-attr]
        k: f"day=d{int(k.split('-')[1]) % 3}" for k in model
    }
    table = client.read_arrow()
    ids, values = table.column("id").to_pylist(), table.column("v").to_pylist()
    assert dict(zip(ids, values, strict=True)) == model
    assert client.validate() == []


@pytest.fixture
def client(tmp_path) -> WriteClient:
    return WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)


def test_reindex_to_more_and_fewer_groups_keeps_every_entry(client) -> None:
    model: dict[str, int] = {}
    for i in range(4):
        client.upsert(rows(keys(i * 300, i * 300 + 500), i))
        model.update(dict.fromkeys(keys(i * 300, i * 300 + 500), i))
    assert groups(client) == 1
    for n in (7, 2, 16):
        client.reindex(groups=n)
        assert groups(client) == n
        check(client, model)
        client.upsert(rows(keys(100, 160), 10 + n))  # writes after it use the new layout
        client.delete(keys(1000, 1010))
        model.update(dict.fromkeys(keys(100, 160), 10 + n))
        for k in keys(1000, 1010):
            model.pop(k, None)
        check(client, model)
    assert [i.action for i in client.timeline("metadata")].count("reindex") == 3


@pytest.mark.parametrize("bad", [0, -3, 10_001, "4", 2.0, True])
def test_a_bad_group_count_is_refused_and_changes_nothing(client, bad) -> None:
    client.upsert(rows(keys(0, 10), 1))
    before = list(client.timeline("metadata"))
    with pytest.raises(MetadataValueError, match="groups"):
        client.reindex(groups=bad)
    assert list(client.timeline("metadata")) == before


def test_a_write_whose_logs_a_reindex_missed_conflicts_and_loses_nothing(
    client, monkeypatch
) -> None:
    client.upsert(rows(keys(0, 200), 1))
    model = dict.fromkeys(keys(0, 200), 1)
    original = MetadataTable.write

    def write_then_reindex(self, instant, changes, point=None):
        logs = original(self, instant, changes, point)  # old layout chosen
        monkeypatch.setattr(MetadataTable, "write", original)
        reindex_module.reshard(MetadataTable(self.table), 5)
        return logs

    monkeypatch.setattr(MetadataTable, "write", write_then_reindex)
    with pytest.raises(WriteConflictError, match="reindex") as err:
        client.upsert(rows(keys(150, 260), 2))
    assert err.value.instant in client.table.visibility().undone
    assert groups(client) == 5
    check(client, model)
    client.upsert(rows(keys(150, 260), 2))  # the retry goes through
    model.update(dict.fromkeys(keys(150, 260), 2))
    check(client, model)


def test_a_running_reindex_blocks_writes_until_its_heartbeat_dies(client) -> None:
    client.upsert(rows(keys(0, 20), 1))
    table = client.table
    with table.lock:
        t = table.next_time()
        plan = encode_body(ReindexPlan(group_counts={"record_index": 3}))
        table.store.request(TimelineKind.METADATA, t, Action.REINDEX, plan)
    write_beat(table.fs, table.layout, t)  # a live reindex writer
    with pytest.raises(WriteConflictError, match="reindex"):
        client.upsert(rows(keys(0, 20), 2))
    short = {"heartbeat.expiry.ms": 200, "heartbeat.interval.ms": 50}
    expired = WriteClient.open(client.path, **short)
    time.sleep(0.3)  # its heartbeat stops: a dead reindex never completes, writes go on
    expired.upsert(rows(keys(0, 20), 3))
    assert groups(expired) == 1
    check(expired, dict.fromkeys(keys(0, 20), 3))


def test_a_reindex_that_slept_through_a_commit_does_not_complete(client, monkeypatch) -> None:
    client.upsert(rows(keys(0, 100), 1))
    original = reindex_module._write_bases

    def paused(metadata_table, *args):
        original(metadata_table, *args)
        # meanwhile its heartbeat expired: another writer ignores it and commits
        monkeypatch.setattr(TableTimelines, "is_alive", lambda self, instant: False)
        client.upsert(rows(keys(50, 120), 2))

    monkeypatch.setattr(reindex_module, "_write_bases", paused)
    with pytest.raises(ReindexConflictError, match="run it again"):
        client.reindex(groups=6)
    monkeypatch.undo()
    assert groups(client) == 1
    model = {**dict.fromkeys(keys(0, 100), 1), **dict.fromkeys(keys(50, 120), 2)}
    check(client, model)
    client.reindex(groups=6)
    assert groups(client) == 6
    check(client, model)


def test_the_cli_reindexes(client, capsys) -> None:
    client.upsert(rows(keys(0, 50), 1))
    assert cli(["reindex", client.path, "--groups", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["groups"] == 3
    assert cli(["reindex", client.path, "--groups", "0"]) == 1
    assert "groups=0" in capsys.readouterr().err
    check(WriteClient.open(client.path), dict.fromkeys(keys(0, 50), 1))


WRITER = """
import json, sys
import pyarrow as pa
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteConflictError, WriteError
path, me = sys.argv[1], int(sys.argv[2])
c = WriteClient.open(path)
keys = [f"k-{me * 1000 + i:05d}" for i in range(40)]
day = [f"d{(me * 1000 + i) % 3}" for i in range(40)]
done, conflicts = [], 0
for value in range(1, 31):
    data = pa.table({"id": keys[value % 4::4] + keys[:2], "day": day[value % 4::4] + day[:2],
                     "ts": [value] * 12, "v": [value] * 12})
    try:
        c.upsert(data)
        done.append(value)
    except WriteConflictError:
        conflicts += 1
print(json.dumps({"done": done, "conflicts": conflicts}))
"""


def commits(client: WriteClient) -> int:
    return sum(1 for i in client.timeline() if i.action == "commit" and i.is_completed)


@pytest.mark.slow
def test_reindex_while_two_writer_processes_upsert(client, run_python) -> None:
    procs = [run_python(WRITER, client.path, str(me)) for me in (1, 2)]
    reindexes = []
    for step, n in enumerate((4, 9, 2, 5), start=1):
        deadline = time.monotonic() + 120
        busy = lambda: any(p.poll() is None for p in procs)  # noqa: E731
        while commits(client) < 8 * step and busy() and time.monotonic() < deadline:
            time.sleep(0.05)  # each reindex runs while the writers are busy (conflicts can
            # leave fewer commits than awaited: no waiting once both writers are done)
        try:
            reindexes.append(client.reindex(groups=n))
        except ReindexConflictError:
            pass
    model: dict[str, int] = {}
    conflicts = 0
    for me, proc in zip((1, 2), procs, strict=True):
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        result = json.loads(out)
        done, conflicts = result["done"], conflicts + result["conflicts"]
        assert done, f"writer {me} committed nothing"
        ids = [f"k-{me * 1000 + i:05d}" for i in range(40)]
        for value in done:  # each writer's commits complete in its own order
            for k in ids[value % 4 :: 4] + ids[:2]:
                model[k] = value
    assert reindexes, "no reindex completed"
    print(f"{len(reindexes)} of 4 reindexes completed; {conflicts} of 60 upserts conflicted")
    check(WriteClient.open(client.path), model)


def test_a_metadata_compaction_overlapping_a_reindex_is_left_pending(tmp_path, monkeypatch) -> None:
    options = {**OPTIONS, "metadata.compact.max.log.files": 0}  # no inline compaction
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **options)
    for i in range(3):
        client.upsert(rows(keys(i * 10, i * 10 + 40), i))
    model = {}
    for i in range(3):
        model.update(dict.fromkeys(keys(i * 10, i * 10 + 40), i))
    original = MetadataTable._fold
    once = threading.Lock()  # groups are folded on several threads: one reindex only

    def fold_then_reindex(self, *args):
        original(self, *args)
        if once.acquire(blocking=False):
            reindex_module.reshard(MetadataTable(self.table), 4)  # lands while compacting

    monkeypatch.setattr(MetadataTable, "_fold", fold_then_reindex)
    done = client.compact_metadata()
    monkeypatch.setattr(MetadataTable, "_fold", original)
    pending = [i for i in client.timeline("metadata") if i.is_pending]
    assert [i.action for i in pending] == ["compaction"], "left pending, never read"
    # planned again, in the new layout: the files and statistics logs the first one left
    assert done is not None and done > pending[0].time
    reindexes = [i.time for i in client.timeline("metadata") if i.action == "reindex"]
    assert client.show()["services"]["pending"][0]["abandoned_by"] == reindexes[0]
    assert groups(client) == 4
    check(client, model)
    client.upsert(rows(keys(0, 5), 9))
    model.update(dict.fromkeys(keys(0, 5), 9))
    assert client.compact_metadata() is not None  # a later compaction completes
    check(client, model)
