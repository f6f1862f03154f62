"""Data files damaged whole rather than byte by byte: found by a hostile trial, where a log of
another file group copied over a log (every checksum intact) and an emptied log file both made
reads silently return 15 of 20 rows, and another base file copied over a base read as its
rows. Now every read and write refuses them naming the file, nothing is committed, and
``validate()`` reports them."""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import CorruptDataLogError


def _rows(ids: range | list[int], ts: int, p: str) -> pa.Table:
    n = len(ids)
    return pa.table({"id": [f"k{i:02d}" for i in ids], "p": [p] * n, "ts": [ts] * n})


def _table(path: str) -> tuple[str, str]:
    """Two partitions with logs; the newest log of ``p=a`` and one of ``p=b``."""
    client = WriteClient.create(path, "id", ["p"], "ts", table_type="merge_on_read")
    client.upsert(_rows(range(10), 1, "a"))
    client.upsert(_rows(range(10, 20), 1, "b"))
    client.upsert(_rows(range(5, 10), 2, "a"))
    client.upsert(_rows(range(15, 20), 2, "b"))
    (a_log,) = glob.glob(f"{path}/p=a/*.log")
    (b_log,) = glob.glob(f"{path}/p=b/*.log")
    return a_log, b_log


@pytest.mark.parametrize("damage", ["another group's log copied over it", "emptied"])
def test_a_log_replaced_whole_is_refused_not_merged(tmp_path, damage) -> None:
    path = str(tmp_path / "t")
    a_log, b_log = _table(path)
    if damage == "emptied":
        Path(a_log).write_bytes(b"")
    else:
        shutil.copyfile(b_log, a_log)
    timeline = sorted(Path(path, ".braid", "global").iterdir())
    for attempt in (
        lambda: WriteClient.open(path).read_arrow(),
        lambda: WriteClient.open(path).upsert(_rows([7, 30], 3, "a")),
    ):
        with pytest.raises(CorruptDataLogError) as caught:
            attempt()
        assert caught.value.path.endswith(Path(a_log).name)
        assert "restore the file from a backup" in str(caught.value)
    completed = [p for p in sorted(Path(path, ".braid", "global").iterdir()) if p not in timeline]
    assert not [p for p in completed if p.name.endswith(".commit") and "_" in p.name]
    problems = WriteClient.open(path).validate()
    assert any(Path(a_log).name in p for p in problems), problems


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_a_base_file_replaced_by_another_is_refused(tmp_path, table_type) -> None:
    """Another valid Parquet file of the table copied over a base: every page checksum holds,
    so only its size (the ``files`` listing's) tells it apart."""
    from lakebraid.writers.errors import CorruptDataFileError

    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["p"], "ts", table_type=table_type)
    client.upsert(_rows(range(10), 1, "a"))
    client.upsert(_rows(range(10, 30), 1, "b"))
    client.upsert(_rows(range(5, 8), 2, "a"))  # a log in p=a (merge-on-read)
    (a_base,) = sorted(glob.glob(f"{path}/p=a/*.parquet"))[-1:]
    (b_base,) = sorted(glob.glob(f"{path}/p=b/*.parquet"))[-1:]
    shutil.copyfile(b_base, a_base)
    with pytest.raises(CorruptDataFileError) as caught:
        WriteClient.open(path).read_arrow()
    assert caught.value.path.endswith(Path(a_base).name)
    assert "where the table lists" in str(caught.value)
    problems = WriteClient.open(path).validate()
    assert any(Path(a_base).name in p for p in problems), problems
