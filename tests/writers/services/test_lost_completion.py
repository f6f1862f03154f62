"""A completed commit whose completion file under ``.braid/global`` is lost (deleted by hand, a
partial copy, a lifecycle rule): found by a hostile trial, where the next read returned both
versions of every row of the file group, and the next write's recovery rolled the commit back
as if its writer had crashed, losing the keys it wrote and their index entries.

Now a commit that later commits built on (``WriteStatus.built_on``) is never rolled back by
recovery (``LostCompletionError``), reads refuse what the loss leaves (``DamagedListingError``:
a copy-on-write listing with two bases of one group, a merge-on-read slice whose newest log
counts more blocks than are listed), and putting the file back makes the table whole again.
A commit nothing was built on still reads as a crash and is rolled back."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.index.errors import DamagedListingError
from lakebraid.timeline.errors import StateUnknownError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import LostCompletionError


def _rows(ids: range | list[int], ts: int) -> pa.Table:
    return pa.table({"id": [f"k{i:02d}" for i in ids], "ts": [ts] * len(ids), "v": [ts] * len(ids)})


def _remove_completion(path: str, instant: str) -> tuple[Path, bytes]:
    (found,) = glob.glob(f"{path}/.braid/global/{instant}_*.commit")
    saved = Path(found).read_bytes()
    os.remove(found)
    return Path(found), saved


def _global_names(path: str) -> list[str]:
    return sorted(os.listdir(f"{path}/.braid/global"))


def _expected() -> dict[str, int]:
    """k00-k19 after the three writes of :func:`_three_writes`, newest ts winning."""
    want = {f"k{i:02d}": 1 for i in range(10)}
    want.update({f"k{i:02d}": 2 for i in range(5, 15)})
    want.update({f"k{i:02d}": 3 for i in range(12, 20)})
    return want


def _three_writes(path: str, table_type: str) -> str:
    """Three upserts into one file group; the middle one's instant."""
    client = WriteClient.create(path, "id", [], "ts", table_type=table_type)
    client.upsert(_rows(range(10), 1))
    middle = client.upsert(_rows(range(5, 15), 2))
    client.upsert(_rows(range(12, 20), 3))
    return middle


def _read(path: str) -> dict[str, int]:
    table = WriteClient.open(path).read_arrow()
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_a_commit_later_commits_built_on_is_not_rolled_back(tmp_path, table_type) -> None:
    path = str(tmp_path / "t")
    middle = _three_writes(path, table_type)
    data_before = sorted(p.name for p in Path(path).iterdir() if p.is_file())
    lost, saved = _remove_completion(path, middle)
    timeline = _global_names(path)

    with pytest.raises(LostCompletionError) as caught:
        WriteClient.open(path).upsert(_rows([99], 4))
    assert isinstance(caught.value, StateUnknownError)
    assert caught.value.instant == middle and caught.value.table == path
    assert f"commit {middle} looks unfinished" in str(caught.value)
    assert "restore the file" in str(caught.value)
    assert _global_names(path) == timeline, "nothing was rolled back or written"
    assert sorted(p.name for p in Path(path).iterdir() if p.is_file()) == data_before

    lost.write_bytes(saved)  # the completion file put back: the table is whole
    assert _read(path) == _expected()
    WriteClient.open(path).upsert(_rows([99], 4))
    assert _read(path) == {**_expected(), "k99": 4}
    assert WriteClient.open(path).validate() == []


@pytest.mark.parametrize(
    ("table_type", "found", "reported"),
    [
        # the first base (the middle commit's log removed it) listed beside the last: a read
        # would return 10 rows twice; validate() finds the keys only the middle commit indexed
        ("copy_on_write", "two base files of file group", "key 'k10' is in"),
        # the middle commit's log unlisted: a read would return its rows as before it
        ("merge_on_read", "holds 1 log blocks, but its newest block's footer counts 2", None),
    ],
)
def test_a_read_refuses_a_listing_the_lost_completion_left(
    tmp_path, table_type, found, reported
) -> None:
    path = str(tmp_path / "t")
    middle = _three_writes(path, table_type)
    _remove_completion(path, middle)
    with pytest.raises(DamagedListingError) as caught:
        WriteClient.open(path).read_arrow()
    message = str(caught.value)
    assert found in message and path in message
    assert ".braid/global" in message and "Nothing was read or written" in message
    problems = WriteClient.open(path).validate()  # reported, not raised
    assert any((reported or found) in p for p in problems), problems


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_a_commit_nothing_was_built_on_still_reads_as_a_crash(tmp_path, table_type) -> None:
    """The newest commit's completion removed: what a writer that died just before its commit
    point leaves. Recovery rolls it back and the table reads as before it."""
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["p"], "ts", table_type=table_type)
    client.upsert(pa.table({"id": ["a", "b"], "p": ["x", "y"], "ts": [1, 1]}))
    client.upsert(pa.table({"id": ["c"], "p": ["y"], "ts": [1]}))
    last = client.upsert(pa.table({"id": ["a", "d"], "p": ["x", "x"], "ts": [2, 2]}))
    _remove_completion(path, last)
    WriteClient.open(path).upsert(pa.table({"id": ["e"], "p": ["y"], "ts": [1]}))
    assert any(n.endswith(".rollback") for n in _global_names(path))
    table = WriteClient.open(path).read_arrow()
    got = dict(zip(table.column("id").to_pylist(), table.column("ts").to_pylist(), strict=True))
    assert got == {"a": 1, "b": 1, "c": 1, "e": 1}
    assert WriteClient.open(path).validate() == []
