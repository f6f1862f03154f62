"""The in-process engine's file writes (``writers.engine.rewrites``): a write of one file runs
on the calling thread and its file is durable before the commit names it, alone (an fsync
of the file) or under a batch marker (one syncfs); writes of several files keep their
thread pools. Both table types, the rows right either way."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

import lakebraid.writers.engine.rewrites as rewrites
import lakebraid.writers.write.filegroup as filegroup
import lakebraid.writers.write.logappend as logappend
from lakebraid.writers.client import WriteClient


def _rows(keys: range, day: str, ts: int) -> pa.Table:
    return pa.table(
        {"id": [f"k{i}" for i in keys], "day": [day] * len(keys), "ts": [ts] * len(keys)}
    )


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(thread name, path) of every data file made durable one by one."""
    calls: list[tuple[str, str]] = []
    for module in (filegroup, logappend, rewrites):
        real = module.make_durable

        def spy(fs, path, _real=real):
            calls.append((threading.current_thread().name, path))
            return _real(fs, path)

        monkeypatch.setattr(module, "make_durable", spy)
    return calls


@pytest.mark.parametrize("kind", ["copy_on_write", "merge_on_read"])
def test_one_file_is_written_and_synced_on_the_calling_thread(
    tmp_path: Path, synced: list[tuple[str, str]], kind: str
) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=kind)
    client.insert(_rows(range(10), "d1", 1))
    client.upsert(_rows(range(5, 15), "d1", 2))  # one group: a rewrite, or one log appended
    main = threading.current_thread().name
    assert [name for name, _ in synced] == [main, main]
    assert all(Path(path).exists() for _, path in synced)
    rows = WriteClient.open(client.path).read_arrow()
    assert sorted(rows.column("id").to_pylist()) == sorted(f"k{i}" for i in range(15))
    assert WriteClient.open(client.path).validate() == []


def test_one_file_under_a_batch_marker_is_made_durable_by_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synced: list[tuple[str, str]]
) -> None:
    batched: list[list[str]] = []
    real = rewrites.make_all_durable

    def spy(fs, root, paths):
        batched.append(list(paths))
        return real(fs, root, paths)

    monkeypatch.setattr(rewrites, "make_all_durable", spy)
    options = {"write.sync.batch.files": 1}
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **options)
    client.insert(_rows(range(10), "d1", 1))
    assert synced == [] and len(batched) == 1 and len(batched[0]) == 1
    assert Path(batched[0][0]).exists()
    assert WriteClient.open(client.path).read_arrow().num_rows == 10


def test_several_files_keep_the_pools(tmp_path: Path, synced: list[tuple[str, str]]) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    client.insert(
        pa.concat_tables([_rows(range(i * 10, i * 10 + 10), f"d{i}", 1) for i in range(3)])
    )
    main = threading.current_thread().name
    assert len(synced) == 3 and all(name != main for name, _ in synced)
    assert WriteClient.open(client.path).read_arrow().num_rows == 30
