"""``validate()`` names a file that reads of a retained older point need when storage lacks it
or holds it truncated; such reads fail while reads of now succeed, so the rest of the
validation (which reads the current files) does not see it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from table_fixtures import versioned_rows

from lakebraid.metadata import reader as reader_module
from lakebraid.timeline.errors import LakebraidError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.services import validate as validate_module

OPTS = {
    "clean.retain.commits": 3,
    "clean.inline": False,
    "compaction.inline": False,
    "archive.inline": False,
}


def _table(root: Path, table_type: str) -> tuple[WriteClient, list[str]]:
    client = WriteClient.create(str(root), "id", ["p"], "ts", table_type=table_type, **OPTS)
    times = [client.upsert(versioned_rows([f"k{i}" for i in range(8)], 1))]
    for v in range(2, 7):
        times.append(client.upsert(versioned_rows([f"k{v}"], v)))
        if v == 5 and table_type == "merge_on_read":
            times.append(client.compact())  # a new slice: the older one is kept for as_of
    cleaned = client.clean()  # keeps the last three commits' points
    assert cleaned is not None or table_type == "merge_on_read"  # (nothing older to delete)
    return client, times


def _older_files(root: Path, client: WriteClient) -> list[Path]:
    """Data files in storage that the current listing does not name."""
    current = {name for files in client.files().values() for name in files}
    found = [p for p in (root / "p=a").iterdir() if p.suffix in (".parquet", ".log")]
    return sorted(p for p in found if p.name not in current)


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_a_healthy_table_with_older_slices_has_no_problem(tmp_path, table_type) -> None:
    client, times = _table(tmp_path / "t", table_type)
    assert _older_files(tmp_path / "t", client)  # older slices are kept for as_of reads
    assert client.validate() == []
    client.savepoint(times[-2])
    client.upsert(versioned_rows(["k1"], 9))
    client.rollback(client.upsert(versioned_rows(["k2"], 10)))
    assert client.validate() == []


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_a_damaged_older_file_is_named(tmp_path, damage, table_type) -> None:
    root = tmp_path / "t"
    client, times = _table(root, table_type)
    older = _older_files(root, client)
    victim = older[-1]  # written by a retained commit: an as_of read of it needs it
    if damage == "truncate":
        with open(victim, "r+b") as f:
            f.truncate(os.path.getsize(victim) // 2)
    else:
        victim.unlink()
    assert client.read_arrow().num_rows == 8  # reads of now do not need it
    with pytest.raises(LakebraidError):
        for t in times[-3:]:
            client.read_arrow(as_of=t)
    problems = client.validate()
    assert len(problems) == 1, problems
    assert victim.name in problems[0]
    assert ("missing" if damage == "delete" else "bytes") in problems[0]


def test_a_file_only_a_savepoint_needs_is_checked(tmp_path) -> None:
    root = tmp_path / "t"
    client = WriteClient.create(str(root), "id", ["p"], "ts", **OPTS)
    first = client.upsert(versioned_rows(["k0", "k1"], 1))
    client.savepoint(first)
    for v in range(2, 7):
        client.upsert(versioned_rows(["k0"], v))
    assert client.clean() is not None
    (kept,) = [p for p in (root / "p=a").iterdir() if first in p.name]
    assert client.validate() == []
    kept.unlink()
    problems = client.validate()
    assert len(problems) == 1 and kept.name in problems[0], problems


def _older_point_table(root: str) -> WriteClient:
    """Six commits, the metadata table compacted every two: the oldest retained point reads
    a metadata base file the current point does not."""
    opts = {**OPTS, "metadata.compact.max.log.files": 2}
    client = WriteClient.create(root, "id", ["p"], "ts", **opts)
    for v in range(1, 7):
        client.upsert(versioned_rows([f"k{i}" for i in range(8)], v))
    assert client.clean() is not None
    assert client.validate() == []
    return client


def _before_the_retained_check_reads_a_base(monkeypatch, act) -> list[str]:
    """Run ``act(path)`` once, when validate()'s check of retained points (on the timelines it
    loaded first) is about to open a metadata base file, as another process may; the
    paths acted on."""
    original_check, original_read = (
        validate_module._Validator.check_retained,
        reader_module.read_base,
    )
    acted: list[str] = []

    def check(self) -> None:
        acted.append("")  # armed
        original_check(self)

    def read_base(fs, path, *args, **kwargs):
        if acted == [""]:
            acted[0] = path
            act(path)
        return original_read(fs, path, *args, **kwargs)

    monkeypatch.setattr(validate_module._Validator, "check_retained", check)
    monkeypatch.setattr(reader_module, "read_base", read_base)
    return acted


def test_a_clean_between_the_load_and_the_check_is_no_finding(tmp_path, monkeypatch) -> None:
    """A writer's commits and clean that complete after validate() loaded its timelines
    delete the metadata files of the points it stops retaining, one validate() is about to
    read: a fresh load retains no such point, so no finding and no error (seen beside a
    writer: ``test_validate_concurrent``)."""
    root = str(tmp_path / "t")
    client = _older_point_table(root)

    def writer_commits_and_cleans(path: str) -> None:
        writer = WriteClient.open(root)
        for v in range(7, 12):
            writer.upsert(versioned_rows([f"k{i}" for i in range(8)], v))
        assert writer.clean() is not None
        assert not Path(path).exists()  # the clean deleted what validate() is about to read

    acted = _before_the_retained_check_reads_a_base(monkeypatch, writer_commits_and_cleans)
    assert client.validate() == []
    assert acted and acted[0]
    monkeypatch.undo()
    assert WriteClient.open(root).validate() == []
