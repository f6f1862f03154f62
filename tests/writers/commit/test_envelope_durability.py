"""The order in which a write's files become durable on a local disk
(``writers.commit.envelope``, ``timeline.owed``): the global requested instant, recovery's key
to the write, is fsynced before anything else of the write reaches storage; the data and
metadata requested instants, like the data files and the inflight files, are owed and paid
together before the commit point, which is fsynced last."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pytest

import lakebraid.timeline.durable as durable
import lakebraid.timeline.owed as owed
from lakebraid.writers.client import WriteClient


def rows(keys: list[str]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(keys, pa.string()),
            "day": pa.array(["d1"] * len(keys), pa.string()),
            "ts": pa.array([1] * len(keys), pa.int64()),
        }
    )


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """("fsync", path) of every fsync (calling threads and the payers'), ("owe", path) of
    every path owed instead of fsynced, and ("files", names) of the files under the table
    at the moment a global requested instant is fsynced, in order."""
    seen: list[tuple[str, str]] = []
    real_fsync, real_owe = os.fsync, durable.owe

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        seen.append(("fsync", path))
        if re.search(r"/global/.*commit\.requested", path):
            root = path[: path.index("/.braid/")]
            names = sorted(n for _, _, files in os.walk(root) for n in files)
            seen.append(("files", " ".join(names)))
        real_fsync(fd)

    def owe(path: str) -> bool:
        done = real_owe(path)
        if done:
            seen.append(("owe", path))
        return done

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(durable, "owe", owe)
    monkeypatch.setattr(owed, "syncfs", lambda folder: False)  # an fsync per path, seen
    return seen


def _first(events: list[tuple[str, str]], kind: str, pattern: str) -> int:
    for at, (what, path) in enumerate(events):
        if what == kind and re.search(pattern, path):
            return at
    raise AssertionError(f"no {kind} of a path matching {pattern!r} in {events}")


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_the_global_request_is_durable_first_and_the_rest_before_the_commit_point(
    tmp_path, events, table_type
) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type)
    client.bulk_insert(rows(["a", "b"]))
    events.clear()
    time = client.upsert(rows(["b", "c"]))
    global_request = _first(events, "fsync", rf"/global/\.{time}\.commit\.requested")
    # when it is fsynced, nothing else of the write is on storage
    on_storage = events[global_request + 1][1].split()
    mine = [n for n in on_storage if time in n]  # its heartbeat (named by it), and itself
    assert any(n.startswith(f".{time}.commit.requested.") for n in mine)
    assert all(n == time or n.startswith(f".{time}.commit.requested.") for n in mine)
    # the data and metadata requests are owed with the data file, paid before the commit point
    commit_point = _first(events, "fsync", rf"/global/\.{time}_\d+\.commit\.")
    for owed_path in (
        rf"/timeline/{time}\.commit\.requested$",
        rf"/metadata/.*/{time}\.deltacommit\.requested$",
        rf"day=d1/[^/]*{time}[^/]*$",
    ):
        assert global_request < _first(events, "owe", owed_path)
        assert _first(events, "fsync", owed_path) < commit_point
        paid = _first(events, "fsync", owed_path)  # at the settle, not before the data file
        assert _first(events, "owe", rf"day=d1/[^/]*{time}[^/]*$") < paid
    assert not any(
        what == "owe" and "/global/" in path and "requested" in path for what, path in events
    )
    assert client.read_arrow().num_rows == 3
