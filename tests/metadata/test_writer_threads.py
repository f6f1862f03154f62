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
