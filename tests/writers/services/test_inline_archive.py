"""Inline timeline archival on real tables: the active timeline stays bounded while every
as-of read, rollback, savepoint and restore reaching into the archive answers as before.
Expected reads are the states recorded as each write returned."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.timeline import archive as archive_format
from lakebraid.timeline.errors import ConfigError
from lakebraid.timeline.layout import TimelineKind
from lakebraid.writers.cli.main import main
from lakebraid.writers.client import WriteClient

OPTIONS = {
    "archive.max.instants": 6,
    "archive.min.instants": 3,
    "archive.merge.files": 2,
    "clean.inline": False,  # reads as of every instant below
}
KEYS = [f"k{i}" for i in range(6)]


def rows(keys: list[str], value: int) -> pa.Table:
    n = len(keys)
    return pa.table({"id": keys, "day": ["d0"] * n, "ts": [value] * n, "v": [value] * n})


def state(client: WriteClient, as_of: object = None) -> dict[str, int]:
    table = client.read_arrow(as_of)
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def active(path: Path) -> int:
    """Instant files in the global folder (not the archive's dot-file mark)."""
    return sum(not p.name.startswith(".") for p in (path / ".braid" / "global").iterdir())


def write_history(client: WriteClient, writes: int) -> dict[str, dict[str, int]]:
    """``writes`` upserts and deletes; the state each one returned with, by instant."""
    seen: dict[str, dict[str, int]] = {}
    for value in range(writes):
        if value % 5 == 4:
            instant = client.delete([KEYS[value % len(KEYS)]])
        else:
            instant = client.upsert(rows(KEYS[value % 3 : value % 3 + 3], value))
        seen[instant] = state(client)
    return seen


def test_archival_bounds_the_active_timeline_and_keeps_every_read(tmp_path) -> None:
    path = tmp_path / "t"
    client = WriteClient.create(str(path), "id", ["day"], "ts", **OPTIONS)
    seen = write_history(client, 30)
    archive_dir = path / ".braid" / "archive"
    assert any(p.name.startswith("manifest.") for p in archive_dir.iterdir())
    assert active(path) <= 3 * (OPTIONS["archive.max.instants"] + 1)  # three files per instant
    assert len(client.timeline()) >= 30  # the history is all still there
    reopened = WriteClient.open(str(path))
    for instant, expected in seen.items():
        assert state(reopened, instant) == expected, instant
    assert reopened.validate() == []
    manifests = [p for p in archive_dir.iterdir() if p.name.startswith("manifest.")]
    assert len(manifests) == 1  # superseded manifests are gone
    snap = reopened.table.store.archive.snapshot()
    assert snap.manifest is not None and len(snap.manifest.files) <= 3  # merged by level
    assert {f.name for f in snap.manifest.files} == {
        p.name for p in archive_dir.iterdir() if p.suffix == ".parquet"
    }


def test_restore_and_rollback_reach_into_the_archive(tmp_path) -> None:
    path = tmp_path / "t"
    client = WriteClient.create(str(path), "id", ["day"], "ts", **OPTIONS)
    first = client.upsert(rows(KEYS, 100))
    client.savepoint(first)
    seen = write_history(client, 20)
    assert client.table.store.archive.snapshot().holds(first)  # the savepoint is archived
    restore = client.restore(first)
    assert state(client) == {k: 100 for k in KEYS}
    last = list(seen)[-1]
    assert state(client, restore) == {k: 100 for k in KEYS}
    after = client.upsert(rows(["k0"], 500))
    client.rollback(after)
    assert state(client) == {k: 100 for k in KEYS}
    assert last in {i.time for i in client.timeline()}
    assert client.validate() == []


def test_archival_can_be_turned_off_and_run_from_the_cli(tmp_path, capsys) -> None:
    path = tmp_path / "t"
    client = WriteClient.create(
        str(path), "id", ["day"], "ts", **{**OPTIONS, "archive.inline": False}
    )
    write_history(client, 12)
    assert not (path / ".braid" / "archive").exists()
    assert active(path) >= 3 * 12
    assert main(["archive", str(path), "--keep", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["archive"]
    assert out["instants"] == 10 and out["files"] >= 30
    assert active(path) == 3 * 2
    assert main(["archive", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "nothing to archive"
    assert main(["archive", str(path), "--keep", "0"]) == 1
    assert "--keep 0" in capsys.readouterr().err
    assert main(["timeline", str(path), "--which", "global", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["global"]) == 12


@pytest.mark.parametrize(
    "bad",
    [
        {"archive.min.instants": 0},
        {"archive.min.instants": "x"},
        {"archive.min.instants": 40},  # not below the default maximum
        {"archive.min.instants": 5, "archive.max.instants": 4},
    ],
)
def test_bad_archive_options_are_refused(tmp_path, bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=r"archive\.min\.instants"):
        WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **bad)


def test_a_failing_archival_never_fails_the_write(tmp_path, monkeypatch, caplog) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(archive_format.Archive, "write_file", broken)
    with caplog.at_level(logging.WARNING, logger="lakebraid"):
        seen = write_history(client, 10)
    assert "inline archival failed" in caplog.text
    assert state(client) == seen[list(seen)[-1]]
    monkeypatch.undo()
    client.upsert(rows(["k9"], 99))  # the next write archives
    assert client.table.store.archive.snapshot().manifest is not None
    assert len(client.table.timeline(TimelineKind.GLOBAL)) == 11


def test_a_table_created_again_at_the_path_of_an_archived_one_reads_its_own_archive(
    tmp_path,
) -> None:
    """A manifest's name is its version alone: the second table's first manifest has the
    first table's name; the process must not take the first table's archive for it."""
    path = str(tmp_path / "t")
    times = {}
    for tag in ("a", "b"):
        shutil.rmtree(path, ignore_errors=True)
        client = WriteClient.create(path, "id", [], "ts", **{"archive.inline": False})
        times[tag] = [client.upsert(pa.table({"id": [f"{tag}{j}"], "ts": [j]})) for j in range(8)]
        assert client.archive(keep=3) is not None
        assert WriteClient.open(path).read_arrow(as_of=times[tag][0]).column("id").to_pylist() == [
            f"{tag}0"
        ]
    seen = {i.time for i in WriteClient.open(path).timeline("global")}
    assert seen.isdisjoint(times["a"]) and set(times["b"]) <= seen
    assert len(WriteClient.open(path).history()) >= 8
