"""A commit's metadata log files are durable before the commit point names them: written
unsynced, then owed (``timeline.owed``) and fsynced, each file and each of their folders, after
the metadata timeline's completion and before the global one; outside a write,
``timeline.durable.sync_new_files`` fsyncs each file and each folder once."""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import pyarrow as pa

import lakebraid.timeline.durable as durable
import lakebraid.timeline.owed as owed
import lakebraid.timeline.store as store
from lakebraid.writers.client import WriteClient


def recorded(monkeypatch) -> list[tuple[str, str]]:
    """Events in order: ("fsync", path of the fd), ("syncfs", folder) and ("put", instant
    file created)."""
    events: list[tuple[str, str]] = []
    real_fsync, real_put, real_syncfs = os.fsync, store.put_if_absent, owed.syncfs

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def put(fs, path: str, data: bytes) -> None:
        events.append(("put", path))
        real_put(fs, path, data)

    def syncfs(folder: str) -> bool:
        done = real_syncfs(folder)
        if done:
            events.append(("syncfs", folder))
        return done

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(store, "put_if_absent", put)
    monkeypatch.setattr(owed, "syncfs", syncfs)
    return events


def _completion(events: list[tuple[str, str]], folder: str, time: str) -> int:
    """Where the completed instant file of ``time`` in timeline folder ``folder`` was put."""
    return next(
        i
        for i, (kind, path) in enumerate(events)
        if kind == "put"
        and os.path.dirname(path) == folder
        and os.path.basename(path).startswith(f"{time}_")
    )


def test_every_log_and_its_folder_is_durable_before_the_commit_point(
    tmp_path: Path, monkeypatch
) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["p"], None)
    client.upsert(pa.table({"id": ["a", "b"], "p": ["x", "y"], "v": [1, 2]}))
    events = recorded(monkeypatch)
    time = WriteClient.open(client.path).upsert(
        pa.table({"id": ["a", "c"], "p": ["x", "z"], "v": [3, 4]})
    )
    braid = Path(client.path) / ".braid"
    logs = sorted(str(p) for p in (braid / "metadata").rglob(f"*_{time}.log"))
    assert len(logs) >= 3  # files, column_stats, record_index
    logged = _completion(events, str(braid / "metadata" / ".braid" / "timeline"), time)
    point = _completion(events, str(braid / "global"), time)
    assert logged < point
    assert not [e for e in events if e[0] == "syncfs"]  # owed fsyncs, paid together
    synced = {path for kind, path in events[logged:point] if kind == "fsync"}
    for log in logs:
        assert log in synced, f"{log} was not fsynced before its commit point"
        assert os.path.dirname(log) in synced, f"the folder of {log} was not fsynced"


def test_sync_new_files_fsyncs_each_file_and_each_folder_once(tmp_path: Path, monkeypatch) -> None:
    paths = []
    for folder, name in [("a", "1"), ("a", "2"), ("b", "3"), ("c", "4")]:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_bytes(b"x")
        paths.append(str(tmp_path / folder / name))
    events = recorded(monkeypatch)
    durable.sync_new_files(fsspec.filesystem("file"), paths)
    synced = sorted(path for _, path in events)
    folders = [str(tmp_path / f) for f in "abc"]
    assert synced == sorted(paths + folders)
