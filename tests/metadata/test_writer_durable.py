"""A commit's metadata log files are durable before any instant names them: written unsynced,
then each file and each of their folders fsynced (``metadata.writer._make_durable``, on
threads by ``timeline.durable.sync_new_files``), all before the first completed instant file
of that commit is created."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

import lakebraid.timeline.durable as durable
import lakebraid.timeline.store as store
from lakebraid.writers.client import WriteClient


def recorded(monkeypatch) -> list[tuple[str, str]]:
    """Events in order: ("fsync", path of the fd) and ("put", instant file created)."""
    events: list[tuple[str, str]] = []
    real_fsync, real_put = os.fsync, store.put_if_absent

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def put(fs, path: str, data: bytes) -> None:
        events.append(("put", path))
        real_put(fs, path, data)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(store, "put_if_absent", put)
    return events


def test_every_log_and_its_folder_is_fsynced_before_the_commit_completes(
    tmp_path: Path, monkeypatch
) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["p"], None)
    client.upsert(pa.table({"id": ["a", "b"], "p": ["x", "y"], "v": [1, 2]}))
    events = recorded(monkeypatch)
    time = WriteClient.open(client.path).upsert(
        pa.table({"id": ["a", "c"], "p": ["x", "z"], "v": [3, 4]})
    )
    metadata = Path(client.path) / ".braid" / "metadata"
    logs = sorted(str(p) for p in metadata.rglob(f"*_{time}.log"))
    assert len(logs) >= 3  # files, column_stats, record_index
    first_done = next(
        i
        for i, (kind, path) in enumerate(events)
        if kind == "put" and os.path.basename(path).startswith(f"{time}_")
    )
    synced = {path for kind, path in events[:first_done] if kind == "fsync"}
    for log in logs:
        assert log in synced, f"{log} was not fsynced before its commit completed"
        assert os.path.dirname(log) in synced, f"the folder of {log} was not fsynced"


def test_sync_new_files_fsyncs_each_file_and_each_folder_once(tmp_path: Path, monkeypatch) -> None:
    paths = []
    for folder, name in [("a", "1"), ("a", "2"), ("b", "3"), ("c", "4")]:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_bytes(b"x")
        paths.append(str(tmp_path / folder / name))
    events = recorded(monkeypatch)
    durable.sync_new_files(paths)
    synced = sorted(path for _, path in events)
    folders = [str(tmp_path / f) for f in "abc"]
    assert synced == sorted(paths + folders)
