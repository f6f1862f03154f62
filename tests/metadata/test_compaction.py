"""Two metadata compactions of one file group that overlap in time (``metadata.compaction``):
the one that planned first and completes last would fold less than the base before it, rank
newest, and need logs the cleaner deletes. It is abandoned instead, and reads stay exact."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from lakebraid.index.file_groups import checked_files
from lakebraid.metadata.compaction import abandoned_by
from lakebraid.metadata.table import MetadataTable
from lakebraid.writers.client import WriteClient

OPTIONS = {
    "metadata.compact.max.log.files": 0,  # compactions run only when the test says
    "clean.inline": False,
    "clean.retain.commits": 1,
}


def rows(value: int) -> pa.Table:
    return pa.table({"id": ["a", "b"], "day": ["d0", "d0"], "ts": [value] * 2, "v": [value] * 2})


def test_a_compaction_overtaken_by_a_newer_one_of_its_groups_is_abandoned(
    tmp_path, monkeypatch
) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)
    for value in range(3):  # each upsert writes a new base of the one data file group
        client.upsert(rows(value))
    original = MetadataTable._fold
    once = threading.Lock()  # groups fold on several threads: one intervening write only
    newer: list[str | None] = []

    def fold_then_overtake(self, *args):
        original(self, *args)
        if once.acquire(blocking=False):  # while this compaction folds the first 3 commits:
            client.upsert(rows(3))  # a commit it did not see,
            newer.append(MetadataTable(self.table).compact())  # a compaction that folds it,
            client.upsert(rows(4))  # the commit a clean retains (its point sees that base),
            newer.append(client.clean())  # the clean (of the logs that base folded),
            for value in range(5, 10):  # and commits enough that the lost log is not a newest's
                client.upsert(rows(value))

    monkeypatch.setattr(MetadataTable, "_fold", fold_then_overtake)
    done = client.compact_metadata()
    monkeypatch.setattr(MetadataTable, "_fold", original)
    assert len(newer) == 2 and None not in newer, "the newer compaction and the clean ran"
    pending = [i for i in client.timeline("metadata") if i.is_pending]
    assert [i.action for i in pending] == ["compaction"], "the overtaken attempt never completes"
    folder = tmp_path / "t" / ".braid" / "metadata"
    assert not list(folder.glob(f"*/*_{pending[0].time}.parquet")), "its bases were deleted"
    # an explicit compaction plans again from the newer base: it folds the commits after it
    assert done is not None and pending[0].time < newer[0] < done
    listing = checked_files(client.metadata.reader())  # raises on two bases of one group
    assert len(listing["day=d0"]) == 1
    table = client.read_arrow()
    got = sorted(zip(table["id"].to_pylist(), table["v"].to_pylist(), strict=True))
    assert got == [("a", 9), ("b", 9)]
    assert client.validate() == []


def test_an_inline_compaction_overtaken_is_abandoned_and_the_write_stands(
    tmp_path, monkeypatch
) -> None:
    """Inline compactions of two writes of one process: the second write (made while the
    first one's compaction folds) compacts the same groups and completes first. The first
    compaction is abandoned, once (the next write's due check plans again); both writes
    stand."""
    options = {**OPTIONS, "metadata.compact.max.log.files": 2}
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **options)
    original = MetadataTable._fold
    once = threading.Lock()
    inner: list[str] = []

    def fold_then_overtake(self, *args):
        original(self, *args)
        if once.acquire(blocking=False):
            inner.append(client.upsert(rows(100)))  # its own inline compaction completes

    monkeypatch.setattr(MetadataTable, "_fold", fold_then_overtake)
    written = [client.upsert(rows(value)) for value in range(4)]
    monkeypatch.setattr(MetadataTable, "_fold", original)
    assert inner, "an inline compaction ran"
    meta = client.timeline("metadata")
    pending = [i for i in meta if i.is_pending]
    assert [i.action for i in pending] == ["compaction"]
    done = [i for i in meta if i.action == "compaction" and i.is_completed]
    after = [i.time for i in done if (i.completion_time or "") > pending[0].time]
    assert after, "the one that overtook it completed"
    shown = client.show()["services"]["pending"]
    assert shown == [
        {
            "time": pending[0].time,
            "action": "compaction",
            "state": "inflight",
            "abandoned_by": min(after),
        }
    ]
    # its plan is read from the file listed (the inflight one): a requested file lost by
    # hand does not make ``show`` fail
    timeline = tmp_path / "t" / ".braid" / "metadata" / ".braid" / "timeline"
    (timeline / f"{pending[0].time}.compaction.requested").unlink()
    assert WriteClient.open(client.path).show()["services"]["pending"] == shown
    completed = {i.time for i in client.timeline() if i.is_completed}
    assert set(written) | set(inner) <= completed
    last = client.upsert(rows(200))  # and a later write's due check plans again
    assert sorted(client.read_arrow()["v"].to_pylist()) == [200, 200]
    assert [i.time for i in client.timeline("metadata") if i.is_pending] == [pending[0].time]
    assert last in {i.time for i in client.timeline() if i.is_completed}
    assert len(checked_files(client.metadata.reader())["day=d0"]) == 1
    assert client.validate() == []


def test_a_compaction_that_fails_to_fold_deletes_the_bases_it_wrote(tmp_path, monkeypatch) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)
    for value in range(3):
        client.upsert(rows(value))
    original = MetadataTable._fold
    folded: list[str] = []

    def fold_then_fail(self, folder, partition, piece, time, instants):
        original(self, folder, partition, piece, time, instants)
        folded.append(time)
        raise OSError(f"disk full after folding {piece.file_group}")

    monkeypatch.setattr(MetadataTable, "_fold", fold_then_fail)
    with pytest.raises(OSError, match="disk full"):
        client.compact_metadata()
    monkeypatch.setattr(MetadataTable, "_fold", original)
    assert folded, "a base was written before the failure"
    folder = tmp_path / "t" / ".braid" / "metadata"
    assert not list(folder.glob(f"*/*_{folded[0]}.parquet")), "the bases it wrote are gone"
    pending = [i for i in client.timeline("metadata") if i.is_pending]
    assert [i.time for i in pending] == [folded[0]]
    why = lambda: abandoned_by(client.table.store, client.table.timeline("metadata"), pending[0])  # noqa: E731
    assert why() is None  # as if it still ran
    table = client.read_arrow()
    assert sorted(table["v"].to_pylist()) == [2, 2]
    again = client.compact_metadata()
    assert again is not None
    assert why() == again  # now it can never complete
    assert client.validate() == []
