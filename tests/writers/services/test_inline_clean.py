"""The inline cleaner: after every ``clean.inline.every.commits`` commits a write runs the
cleaner, which keeps what the last ``clean.retain.commits`` commits can read and deletes the
rest; a failing clean never fails the write. Expected states come from plain models."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.timeline.errors import ConfigError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.services import clean as clean_module

OPTIONS = {
    "write.merge.mode": "commit_time",
    "clean.retain.commits": 2,
    "clean.inline.every.commits": 3,
}


def rows(value: int) -> pa.Table:
    ids = [f"k{i}" for i in range(5)]
    return pa.table({"id": ids, "day": ["d0"] * 5, "ts": [value] * 5, "v": [value] * 5})


def data_files(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "day=d0").glob("*.parquet"))


def cleans(client: WriteClient) -> list[str]:
    return [i.time for i in client.timeline() if i.action == "clean" and i.is_completed]


def values(client: WriteClient, as_of: object = None) -> set[int]:
    return set(client.read_arrow(as_of).column("v").to_pylist())


def test_the_cleaner_runs_itself_every_n_commits(tmp_path) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)
    commits = []
    for value in range(7):  # every commit rewrites the one file group
        commits.append(client.upsert(rows(value)))
        assert len(cleans(client)) == (value + 1) // 3, f"after commit {value + 1}"
    # each clean kept the slices of the last 2 commits at its time: at most those files stay
    # (2 retained at the last clean, plus the one commit since)
    assert len(data_files(tmp_path / "t")) == 3
    assert values(client) == {6}
    assert values(client, commits[-2]) == {5}  # retained reads still work
    assert client.validate() == []


def test_the_inline_cleaner_can_be_turned_off(tmp_path) -> None:
    client = WriteClient.create(
        str(tmp_path / "t"), "id", ["day"], "ts", **{**OPTIONS, "clean.inline": False}
    )
    first = client.upsert(rows(0))
    for value in range(1, 7):
        client.upsert(rows(value))
    assert cleans(client) == []
    assert len(data_files(tmp_path / "t")) == 7  # every version is still there
    assert values(client, first) == {0}
    assert client.clean() is not None  # by hand, as before


def test_a_failing_clean_never_fails_the_write(tmp_path, monkeypatch, caplog) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)

    def broken(table: object) -> str:
        raise OSError("disk full")

    monkeypatch.setattr(clean_module, "clean", broken)
    with caplog.at_level(logging.WARNING, logger="lakebraid"):
        for value in range(3):
            client.upsert(rows(value))
    assert "inline clean failed (the write stands): disk full" in caplog.text
    assert values(client) == {2} and cleans(client) == []
    monkeypatch.undo()
    for value in range(3, 6):  # due again 3 commits later: it runs then
        client.upsert(rows(value))
    assert len(cleans(client)) == 1
    assert values(client) == {5}
    assert client.validate() == []


@pytest.mark.parametrize("bad", ["0", "-1", "often"])
def test_a_bad_inline_setting_is_a_clear_error(tmp_path, bad) -> None:
    with pytest.raises(ConfigError, match=r"clean\.inline\.every\.commits"):
        WriteClient.create(
            str(tmp_path / "t"), "id", ["day"], "ts", **{"clean.inline.every.commits": bad}
        )


def test_a_clean_keeps_what_a_running_index_build_reads(tmp_path, monkeypatch) -> None:
    import threading
    import time

    from lakebraid.index import secondary_build

    options = {**OPTIONS, "clean.retain.commits": 1, "clean.inline": False}
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **options)
    client.upsert(rows(0))
    original, started = secondary_build._entries_as_of, threading.Event()

    def slow(*args):  # the build's snapshot is taken; it reads the files only later
        started.set()
        time.sleep(1.5)
        return original(*args)

    monkeypatch.setattr(secondary_build, "_entries_as_of", slow)
    failure: list[BaseException] = []

    def build() -> None:
        try:
            WriteClient.open(client.path).create_index("v")
        except BaseException as exc:  # reported below
            failure.append(exc)

    builder = threading.Thread(target=build)
    builder.start()
    assert started.wait(30)
    for value in range(1, 4):  # rewrite the group the snapshot holds, then clean hard
        client.upsert(rows(value))
    assert client.clean() is not None
    builder.join(60)
    assert not failure, failure
    assert values(client) == {3}
    assert len(client.file_paths(where="v = 3")) == 1  # pruned by the built index
    assert client.validate() == []  # the index holds every current row's value


def test_each_multiple_is_one_commits_whatever_completes_before_its_check(tmp_path) -> None:
    """Two writers: the third commit's writer checks after the fourth completed. Its own
    place (3) is due and the fourth's is not; counting every commit at the check (4) would
    skip the clean until the sixth."""
    path = str(tmp_path / "t")
    WriteClient.create(path, "id", ["day"], "ts", **{**OPTIONS, "clean.inline": False})
    times = [WriteClient.open(path).upsert(rows(v)) for v in range(4)]
    table = WriteClient.open(path, **{"clean.inline": True}).table
    due = {t: clean_module.clean_due(table, t) for t in times}
    assert due == {times[0]: False, times[1]: False, times[2]: True, times[3]: False}
    assert not clean_module.clean_due(table)  # the latest commit's place: the fourth
    assert not clean_module.clean_due(table, "20000101000000000")  # unknown: the latest's
