"""``metadata.writer``: record-index groups are written on threads only when they are large
(``THREADED_GROUP_ROWS``); small ones on the calling thread. Either way the index holds every
key at its file."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.metadata import writer
from lakebraid.writers.client import WriteClient


@pytest.mark.parametrize("threshold, pooled", [(writer.THREADED_GROUP_ROWS, False), (1, True)])
def test_index_groups_take_threads_only_when_large(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threshold: int, pooled: bool
) -> None:
    pools: list[int] = []

    class Recorded(ThreadPoolExecutor):
        def __init__(self, workers: int) -> None:
            pools.append(workers)
            super().__init__(workers)

    monkeypatch.setattr(writer, "ThreadPoolExecutor", Recorded)
    monkeypatch.setattr(writer, "THREADED_GROUP_ROWS", threshold)
    options = {
        "metadata.record_index.min.groups": 4,
        "metadata.record_index.commit.bases": False,
        "metadata.write.threads": 2,
    }
    c = WriteClient.create(str(tmp_path / "t"), "id", [], None, **options)
    keys = [f"k{i:04d}" for i in range(400)]
    c.insert(pa.table({"id": keys, "n": list(range(400))}))
    assert bool(pools) is pooled
    found = c.lookup([*keys, "absent"])
    assert all(found[k] is not None for k in keys) and found["absent"] is None
    assert c.validate() == []


def test_index_logs_are_written_without_asking_their_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new record-index log holds just its block: the write knows so from the append
    (``logwrite.append_blocks``), with no size request per group (a HEAD on an object store),
    and still caches the block it wrote for the next lookup."""
    options = {"metadata.record_index.min.groups": 4, "metadata.record_index.commit.bases": False}
    c = WriteClient.create(str(tmp_path / "t"), "id", [], None, **options)
    asked: list[str] = []
    size = type(c.table.fs).size

    def counted(fs, path, *args, **kwargs):
        asked.append(str(path))
        return size(fs, path, *args, **kwargs)

    monkeypatch.setattr(type(c.table.fs), "size", counted)
    remembered: list[str] = []
    keep = writer.LOGS.remember_index_table
    monkeypatch.setattr(
        writer.LOGS, "remember_index_table", lambda p, *a: (remembered.append(p), keep(p, *a))
    )
    keys = [f"k{i:04d}" for i in range(400)]
    c.insert(pa.table({"id": keys, "n": list(range(400))}))
    assert [p for p in asked if "record_index" in p] == []
    assert len(remembered) == 4 and all(p.endswith(".log") for p in remembered)
    found = c.lookup(keys)
    assert all(found[k] is not None for k in keys)
