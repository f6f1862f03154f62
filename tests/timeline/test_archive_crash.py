"""Archival killed with SIGKILL at each of its steps: readers see the same history (every
timeline, every as-of read), ``validate()`` is clean, and the next archival finishes the work
and removes what the dead one left."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient

pytestmark = pytest.mark.slow
OPTIONS = {"archive.inline": False, "archive.merge.files": 2, "clean.inline": False}
POINTS = ["after-file", "after-manifest", "mid-delete", "after-merge-file", "after-merge-manifest"]

KILLER = """
import os, signal, sys
from lakebraid.timeline import archive, archiver
from lakebraid.writers.client import WriteClient

path, point = sys.argv[1], sys.argv[2]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
write_file, commit = archive.Archive.write_file, archive.Archive.commit
delete = archiver._delete_active

def patched_write(self, version, level, rows):
    entry = write_file(self, version, level, rows)
    if (point == "after-file" and level == 0) or (point == "after-merge-file" and level > 0):
        die()
    return entry

def patched_commit(self, manifest):
    commit(self, manifest)
    merge = any(f.level > 0 for f in manifest.files)
    if (point == "after-manifest" and not merge) or (point == "after-merge-manifest" and merge):
        die()

def patched_delete(table, files, version):
    if point == "mid-delete" and files:
        delete(table, files[: len(files) // 2], version)
        die()
    delete(table, files, version)

archive.Archive.write_file = patched_write
archive.Archive.commit = patched_commit
archiver._delete_active = patched_delete
WriteClient.open(path).archive(keep=2)
print("survived")
"""


def rows(keys: list[str], value: int) -> pa.Table:
    n = len(keys)
    return pa.table({"id": keys, "day": ["d0"] * n, "ts": [value] * n, "v": [value] * n})


def history(client: WriteClient) -> dict[str, object]:
    """Every instant and every read as of each one, plus the current state."""
    instants = [(i.time, i.action, i.state, i.completion_time) for i in client.timeline()]
    reads = {
        i.time: sorted(client.read_arrow(i.time).to_pylist(), key=lambda r: r["id"])
        for i in client.timeline()
        if i.is_completed
    }
    other = {w: len(client.timeline(w)) for w in ("data", "metadata")}
    return {"instants": instants, "reads": reads, "other": other}


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("archive") / "t"
    client = WriteClient.create(str(path), "id", ["day"], "ts", **OPTIONS)
    for value in range(6):
        client.upsert(rows([f"k{value % 3}", f"n{value}"], value))
    client.archive(keep=4)  # one level-0 file already: the next archival merges
    for value in range(6, 12):
        client.delete([f"n{value - 6}"]) if value % 3 == 0 else client.upsert(
            rows([f"k{value % 3}"], value)
        )
    return path


@pytest.mark.parametrize("point", POINTS)
def test_archival_killed_at_each_step(template: Path, tmp_path: Path, point: str) -> None:
    path = tmp_path / "t"
    shutil.copytree(template, path)
    before = history(WriteClient.open(str(path)))
    done = subprocess.run(
        [sys.executable, "-c", KILLER, str(path), point], capture_output=True, text=True
    )
    assert done.returncode == -9 and "survived" not in done.stdout, done.stderr
    client = WriteClient.open(str(path))
    assert history(client) == before
    assert client.validate() == []
    finished = client.archive(keep=2)
    assert history(WriteClient.open(str(path))) == before
    archive_dir = path / ".braid" / "archive"
    snap = client.table.store.archive.snapshot()
    assert snap.manifest is not None
    named = {f.name for f in snap.manifest.files}
    on_disk = {p.name for p in archive_dir.iterdir() if p.suffix == ".parquet"}
    if finished is None:  # the dead run had committed: the next write or run tidies up
        client.upsert(rows(["k0"], 99))
        client.archive(keep=2)
        snap = client.table.store.archive.snapshot()
        named = {f.name for f in snap.manifest.files}
        on_disk = {p.name for p in archive_dir.iterdir() if p.suffix == ".parquet"}
    assert on_disk == named  # orphans and merged files are gone
    for folder in (".braid/global", ".braid/timeline", ".braid/metadata/.braid/timeline"):
        names = [p.name for p in (path / folder).iterdir()]
        assert all(name[:17] > snap.horizon for name in names if not name.startswith("."))
        assert len([n for n in names if n.startswith(".archived.")]) <= 1  # the newest mark
    assert client.validate() == []
