"""Record-index blocks written ahead, beside an insert-only write's data files
(``writers.commit.ahead``), on both table types: the index stays exact, a disagreement or a
failure on either side rolls the write back with nothing left of it, the blocks' fsyncs are
owed to the write, and a reindex meanwhile refuses the write. Expected locations are read from
the data files (base files by Parquet, merge-on-read logs by the log decoder)."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakebraid.index.datalog import data_rows
from lakebraid.metadata.table import MetadataTable
from lakebraid.metadata.writer import InstantChanges
from lakebraid.timeline import durable, owed
from lakebraid.writers.client import WriteClient
from lakebraid.writers.commit import ahead
from lakebraid.writers.engine import inprocess
from lakebraid.writers.engine.rewrites import InProcessEngine
from lakebraid.writers.errors import WriteConflictError, WriteError

DAYS = ("2024-01-01", "2024-01-02", "2024-01-03")


def rows(keys: list[str], value: int = 1) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "id": keys,
            "day": [DAYS[i % len(DAYS)] for i in range(n)],
            "ts": [value] * n,
            "v": [value] * n,
        }
    )


def keys_of(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:05d}" for i in range(n)]


@pytest.fixture
def started(monkeypatch) -> list[str]:
    """The instants whose index blocks were written ahead."""
    seen: list[str] = []
    real = ahead.start

    def spy(metadata, instant, entries):  # type: ignore[no-untyped-def]
        seen.append(instant)
        return real(metadata, instant, entries)

    monkeypatch.setattr(ahead, "start", spy)
    return seen


@pytest.fixture(params=["copy_on_write", "merge_on_read"])
def table_type(request) -> str:
    return request.param


def keys_in(path: str) -> list[str]:
    """The keys a data file holds: a base file's, or the rows of a log's data blocks."""
    if path.endswith(".parquet"):
        return pq.read_table(path, columns=["id"]).column("id").to_pylist()
    found = data_rows(Path(path).read_bytes(), path)
    return [] if found is None else found.column("id").to_pylist()


def locations_from_files(client: WriteClient) -> dict[str, tuple[str, str]]:
    """Each key's (partition, file name) as the data files hold them (inserts only: a key is
    in one file)."""
    where: dict[str, tuple[str, str]] = {}
    for partition, names in client.files().items():
        for name in names:
            for key in keys_in(f"{client.path}/{partition}/{name}"):
                assert key not in where, f"{key} in two files"
                where[key] = (partition, name)
    return where


def assert_index_exact(client: WriteClient) -> None:
    held = locations_from_files(client)
    found = client.lookup(list(held))
    for key, (partition, name) in held.items():
        location = found[key]
        assert location is not None, key
        assert location.partition == partition and name.startswith(location.file_id), key
    assert client.validate() == []


def metadata_files_of(path: Path, instant: str) -> list[str]:
    folder = path / ".braid" / "metadata"
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob(f"*{instant}*")
        if p.is_file() and p.parent.name in ("record_index", "files", "column_stats")
    )


def test_a_bulk_insert_writes_its_index_beside_its_files(tmp_path, started, table_type) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type)
    first = client.bulk_insert(rows(keys_of("a", 3000)))
    second = client.insert(rows(keys_of("b", 500)))  # groups hold files now: logs
    assert started == [first, second]
    assert_index_exact(client)
    assert client.read_arrow().num_rows == 3500


def test_an_upsert_of_held_keys_takes_its_entries_from_its_statuses(
    tmp_path, started, table_type
) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type)
    client.bulk_insert(rows(keys_of("a", 300)))
    started.clear()
    client.upsert(rows(keys_of("a", 100) + keys_of("n", 50), 2))  # updates and inserts
    assert started == []
    if table_type == "copy_on_write":
        assert_index_exact(client)
    else:  # a key updated in a log is in two files of its group: its base and the log
        found = client.lookup(keys_of("a", 300) + keys_of("n", 50))
        assert all(location is not None for location in found.values())
        assert client.validate() == []


def file_ids(client: WriteClient) -> dict[str, set[str]]:
    return {p: {name.split("_")[0] for name in names} for p, names in client.files().items()}


def test_new_keys_joining_small_groups_are_indexed_where_they_went(
    tmp_path, started, table_type
) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type)
    client.bulk_insert(rows(keys_of("a", 30)))
    before = file_ids(client)
    joined = client.insert(rows(keys_of("b", 30)))  # the small groups take them
    assert started[-1] == joined
    assert file_ids(client) == before  # copy-on-write: rewritten bases; merge-on-read: logs
    if table_type == "merge_on_read":
        logs = [n for names in client.files().values() for n in names if n.endswith(".log")]
        assert len(logs) == len(before) and all(joined in n for n in logs)
    assert_index_exact(client)


def test_a_disagreement_fails_the_write_and_leaves_nothing(
    tmp_path, monkeypatch, table_type
) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type)
    client.bulk_insert(rows(keys_of("a", 300)))
    real = inprocess.inserted_changes

    def one_short(routed, scoped=False):  # type: ignore[no-untyped-def]
        changes = real(routed, scoped)
        entries = changes.index_upserts
        return InstantChanges(index_upserts=entries.slice(0, entries.num_rows - 1))

    monkeypatch.setattr(inprocess, "inserted_changes", one_short)
    with pytest.raises(WriteError, match="do not match the data files") as failed:
        client.insert(rows(keys_of("b", 90)))
    refused = failed.value.instant
    assert refused is not None
    monkeypatch.undo()
    assert client.read_arrow().num_rows == 300
    assert client.lookup(keys_of("b", 3)) == {k: None for k in keys_of("b", 3)}
    assert metadata_files_of(tmp_path / "t", refused) == []
    client.insert(rows(keys_of("b", 90)))  # the retry
    assert_index_exact(client)


def slow_index_writes(monkeypatch, seconds: float, fail: bool = False) -> None:
    """The blocks written ahead (a write of index entries only) take ``seconds``, then are
    written, or (``fail``) raise."""
    real = MetadataTable.write

    def write(self, instant, changes, point=None):  # type: ignore[no-untyped-def]
        if changes.index_upserts is not None and not changes.files_added:
            time.sleep(seconds)
            if fail:
                raise OSError(28, "No space left on device (injected)")
        return real(self, instant, changes, point)

    monkeypatch.setattr(MetadataTable, "write", write)


def test_a_failed_data_write_rolls_back_after_the_index_thread(
    tmp_path, monkeypatch, table_type
) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type)
    client.bulk_insert(rows(keys_of("a", 300)))
    slow_index_writes(monkeypatch, 0.5)  # still writing when the data write fails

    def broken(self, work):  # type: ignore[no-untyped-def]
        raise OSError(5, "Input/output error (injected)")

    monkeypatch.setattr(InProcessEngine, "rewrite", broken)
    before = {i.time for i in client.timeline()}
    with pytest.raises(OSError, match="injected"):
        client.insert(rows(keys_of("b", 90)))
    monkeypatch.undo()
    failed = [i.time for i in client.timeline() if i.time not in before]
    assert failed  # the write's instant (rolled back) and its rollback
    time.sleep(0.6)  # a thread still running would have written its blocks by now
    for instant in failed:
        assert metadata_files_of(tmp_path / "t", instant) == []
    assert client.read_arrow().num_rows == 300
    assert client.validate() == []


def test_a_failed_index_thread_fails_the_write(tmp_path, monkeypatch, table_type) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type)
    client.bulk_insert(rows(keys_of("a", 300)))
    slow_index_writes(monkeypatch, 0.0, fail=True)
    with pytest.raises(OSError, match="injected"):
        client.insert(rows(keys_of("b", 90)))
    monkeypatch.undo()
    assert client.read_arrow().num_rows == 300
    assert client.lookup(["b00001"]) == {"b00001": None}
    client.insert(rows(keys_of("b", 90)))
    assert_index_exact(client)


def test_the_blocks_fsyncs_are_owed_to_the_write(tmp_path, monkeypatch, table_type) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type)
    client.bulk_insert(rows(keys_of("a", 300)))  # groups hold files: the next writes logs
    owed_paths: list[tuple[str, bool]] = []
    real = owed.owe

    def owe(path: str) -> bool:
        done = real(path)
        owed_paths.append((path, done))
        return done

    monkeypatch.setattr(durable, "owe", owe)
    written = client.insert(rows(keys_of("b", 90)))
    logs = [p for p, done in owed_paths if "record_index" in p and written in p]
    assert logs and all(done for p, done in owed_paths if p in logs)


def test_a_reindex_meanwhile_refuses_the_write(tmp_path, monkeypatch, table_type) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type)
    client.bulk_insert(rows(keys_of("a", 300)))
    other = WriteClient.open(str(tmp_path / "t"))
    real = InProcessEngine.rewrite

    def with_reindex(self, work):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(InProcessEngine, "rewrite", real)  # the reindex's own writes
        other.reindex(groups=4)
        return real(self, work)

    monkeypatch.setattr(InProcessEngine, "rewrite", with_reindex)
    with pytest.raises(WriteConflictError):
        client.insert(rows(keys_of("b", 90)))
    monkeypatch.undo()
    assert client.lookup(["b00001"]) == {"b00001": None}
    assert client.validate() == []
    client.insert(rows(keys_of("b", 90)))  # the retry, in the new layout
    assert_index_exact(client)


def test_a_commit_meanwhile_beside_a_commit_base_turns_it_into_a_log(
    tmp_path, monkeypatch, table_type
) -> None:
    """The first insert into an empty table writes its index as commit bases, ahead; another
    writer's commit puts a file into those groups meanwhile (readers take one base per group,
    rule 7 would refuse the write): the commit takes its bases back, writes their entries as
    logs beside the other's file, and completes."""
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type)
    other = WriteClient.open(str(tmp_path / "t"))
    real = InProcessEngine.rewrite
    theirs: list[str] = []

    def with_commit(self, work):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(InProcessEngine, "rewrite", real)  # the other's own write
        theirs.append(other.insert(rows(keys_of("o", 30))))
        return real(self, work)

    monkeypatch.setattr(InProcessEngine, "rewrite", with_commit)
    mine = client.bulk_insert(rows(keys_of("a", 300)))
    monkeypatch.undo()
    folder = tmp_path / "t" / ".braid" / "metadata" / "record_index"
    # theirs is a base or a log (whether our base was there when it listed the group: the
    # blocks are written on their own thread); ours is a log either way
    assert len(list(folder.glob(f"*_{theirs[0]}.*"))) == 1
    assert sorted(p.suffix for p in folder.glob(f"*_{mine}.*")) == [".log"]
    assert client.read_arrow().num_rows == 330
    assert_index_exact(client)


def test_commits_compactions_and_a_clean_meanwhile_leave_the_index_exact(
    tmp_path, monkeypatch, table_type
):
    options = {"clean.retain.commits": 1, "clean.inline": False}
    client = WriteClient.create(
        str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type, **options
    )
    other = WriteClient.open(str(tmp_path / "t"))
    real = InProcessEngine.rewrite

    def busy(self, work):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(InProcessEngine, "rewrite", real)  # the others' own writes
        for i in range(6):
            other.upsert(rows([f"o{i}"], i))
            if i in (2, 5):
                other.compact_metadata()
        other.clean()
        return real(self, work)

    monkeypatch.setattr(InProcessEngine, "rewrite", busy)
    client.bulk_insert(rows(keys_of("a", 300)))
    monkeypatch.undo()
    assert client.read_arrow().num_rows == 306
    assert_index_exact(WriteClient.open(str(tmp_path / "t")))
