"""A metadata file of one of the newest commits is gone (a hostile trial deleted it by hand):
the table must not read as if that commit never happened, and no write may build on that state.

Before the reader checked the latest commit (``metadata.slices.lost_latest``), a lost
``files`` log made ``read_arrow()`` return the previous version with no error, and the next
upsert then wrote over it, losing the commit's rows for good; a lost ``record_index`` log let
reads pass and refused nothing. Each test here failed on 961ca36. The same for a commit before
the latest (``metadata.slices.lost_logs``: the 8 newest visible commits) failed on 4b2d788: a
lost ``files`` log of the second of three commits read as a table without that commit's rows,
and the next upsert succeeded on it."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.metadata.errors import MissingMetadataFileError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteError

TYPES = ["copy_on_write", "merge_on_read"]


def two_commits(root: Path, table_type: str) -> tuple[WriteClient, str, pa.Table]:
    """A table after two upserts; the rows it held after the first."""
    c = WriteClient.create(str(root), "id", ["day"], table_type=table_type)
    c.upsert(pa.table({"id": [1, 2, 3], "day": ["a", "a", "b"], "v": [1, 1, 1]}))
    before = view(c)
    latest = c.upsert(pa.table({"id": [3, 4], "day": ["b", "c"], "v": [2, 2]}))
    return c, latest, before


def view(c: WriteClient) -> pa.Table:
    return WriteClient.open(c.path).read_arrow().select(["id", "day", "v"]).sort_by("id")


def remove(c: WriteClient, partition: str, time: str) -> str:
    """Delete the metadata files of ``partition`` written at ``time``; the one removed."""
    found = glob.glob(f"{c.path}/.braid/metadata/{partition}/*_{time}.log")
    assert len(found) == 1, found
    os.remove(found[0])
    return f"{partition}/{os.path.basename(found[0])}"


@pytest.mark.parametrize("table_type", TYPES)
def test_a_lost_files_log_of_the_latest_commit_fails_reads_and_writes(tmp_path, table_type):
    c, latest, before = two_commits(tmp_path / "t", table_type)
    name = remove(c, "files", latest)
    again = WriteClient.open(c.path)
    for act in (
        again.read_arrow,
        lambda: again.files(),
        lambda: again.upsert(pa.table({"id": [4], "day": ["c"], "v": [3]})),
    ):
        with pytest.raises(MissingMetadataFileError, match=f"{name}, written by commit {latest}"):
            act()
    first = again.timeline()[0].completion_time
    assert again.read_arrow(as_of=first).select(["id", "day", "v"]).sort_by("id").equals(before)
    found = again.validate()
    assert len([p for p in found if name in p]) == 1  # one finding, however many parts meet it
    assert any(f"{name}, written by commit {latest}" in p for p in found)
    again.rollback(latest)  # the way on the error names
    assert WriteClient.open(c.path).validate() == []
    assert view(c).equals(before)


@pytest.mark.parametrize("table_type", TYPES)
def test_a_lost_record_index_log_refuses_the_next_write(tmp_path, table_type):
    """The data read needs no record index, but a write tagged by it would insert a second
    row for a key it no longer finds."""
    c, latest, _ = two_commits(tmp_path / "t", table_type)
    name = remove(c, "record_index", latest)
    again = WriteClient.open(c.path)
    with pytest.raises(MissingMetadataFileError, match=f"{name}, written by commit {latest}"):
        again.upsert(pa.table({"id": [4], "day": ["c"], "v": [3]}))
    with pytest.raises(MissingMetadataFileError, match=name):
        again.lookup([4])
    again.rollback(latest)
    again.upsert(pa.table({"id": [4], "day": ["c"], "v": [3]}))
    assert view(c).to_pydict() == {"id": [1, 2, 3, 4], "day": list("aabc"), "v": [1, 1, 1, 3]}
    assert WriteClient.open(c.path).validate() == []


def test_a_log_shorter_than_its_commit_recorded_is_lost(tmp_path):
    """A log cut at a block boundary decodes as fewer blocks: its recorded size tells."""
    c, latest, _ = two_commits(tmp_path / "t", "copy_on_write")
    (path,) = glob.glob(f"{c.path}/.braid/metadata/files/*_{latest}.log")
    with open(path, "r+b") as f:
        f.truncate(0)  # the listing still names it
    with pytest.raises(MissingMetadataFileError, match="shorter than the"):
        WriteClient.open(c.path).read_arrow()


def test_a_log_folded_into_a_later_base_is_no_loss(tmp_path):
    """A metadata compaction folded the latest commit's log: the log may go."""
    c, latest, _ = two_commits(tmp_path / "t", "copy_on_write")
    c.compact_metadata()
    for path in glob.glob(f"{c.path}/.braid/metadata/files/*_{latest}.log"):
        os.remove(path)  # folded into the compaction's base: no loss
    assert view(c).num_rows == 4
    assert WriteClient.open(c.path).validate() == []


def test_the_deltacommit_names_the_commits_logs_and_old_empty_ones_still_check(tmp_path):
    """The completed deltacommit carries the commit body's ``logs`` (the small body a read
    point reads); a table written before that (empty deltacommit bodies) is checked from the
    commit body."""
    import msgspec

    from lakebraid.timeline.instant import Action
    from lakebraid.timeline.layout import TimelineKind

    c, latest, _ = two_commits(tmp_path / "t", "copy_on_write")
    store = c.table.store
    delta = c.table.timeline(TimelineKind.METADATA).get(latest, Action.DELTACOMMIT)
    commit = c.table.timeline(TimelineKind.GLOBAL).get(latest, Action.COMMIT)
    small = msgspec.json.decode(store.read_body(TimelineKind.METADATA, delta))
    whole = msgspec.json.decode(store.read_body(TimelineKind.GLOBAL, commit))
    assert small["logs"] == whole["logs"] and len(small["logs"]) >= 3
    path = store.path_of(TimelineKind.METADATA, delta)
    os.chmod(path, 0o644)
    with open(path, "wb"):
        pass  # as a lakebraid before this wrote it
    name = remove(c, "files", latest)
    with pytest.raises(MissingMetadataFileError, match=name):
        WriteClient.open(c.path).read_arrow()


def three_commits(root: Path, table_type: str) -> tuple[WriteClient, str, str]:
    """A table after three upserts, each to its own day, the first savepointed; the first
    and the middle commit."""
    c = WriteClient.create(str(root), "id", ["day"], table_type=table_type)
    first = c.upsert(pa.table({"id": [1, 2, 3], "day": ["a", "a", "b"], "v": [1, 1, 1]}))
    c.savepoint(first)
    middle = c.upsert(pa.table({"id": [4], "day": ["c"], "v": [2]}))
    c.upsert(pa.table({"id": [5], "day": ["d"], "v": [3]}))
    return c, first, middle


@pytest.mark.parametrize("partition", ["files", "record_index"])
@pytest.mark.parametrize("table_type", TYPES)
def test_a_lost_log_of_an_earlier_commit_fails_reads_and_writes(tmp_path, table_type, partition):
    """Before: the read gave ids 1, 2, 3, 5 (4 silently gone) and the next upsert succeeded."""
    c, first, middle = three_commits(tmp_path / "t", table_type)
    ids = view(c).column("id").to_pylist()
    name = remove(c, partition, middle)
    again = WriteClient.open(c.path)
    acts = [lambda: again.upsert(pa.table({"id": [6], "day": ["e"], "v": [4]}))]
    if partition == "files":
        acts += [again.read_arrow, lambda: again.files()]
    else:
        acts += [lambda: again.lookup([4])]
    for act in acts:
        with pytest.raises(MissingMetadataFileError, match=f"{name}, written by commit {middle}"):
            act()
    assert any(f"{name}, written by commit {middle}" in p for p in again.validate())
    if partition == "files":  # the ways on the error names: a rollback (the later commit
        again.rollback(middle)  # wrote other days) ...
        assert view(c).column("id").to_pylist() == [i for i in ids if i != 4]
    else:  # ... which cannot check the lost keys against later commits: a savepoint
        with pytest.raises(WriteError, match=f"record-index file .*{name.split('/')[1]}"):
            again.rollback(middle)
        again.restore(first)
        assert view(c).column("id").to_pylist() == [1, 2, 3]
    assert WriteClient.open(c.path).validate() == []


def test_a_lost_log_of_a_commit_older_than_the_newest_eight_is_left_to_validate(tmp_path):
    """The documented reach of the read's check: older commits' files are validate()'s (most
    are folded into a base by then; here compaction is off, so the loss stays)."""
    c = WriteClient.create(
        str(tmp_path / "t"), "id", ["day"], **{"metadata.compact.max.log.files": 0}
    )
    old = c.upsert(pa.table({"id": [0], "day": ["z"], "v": [0]}))
    for i in range(1, 9):
        c.upsert(pa.table({"id": [i], "day": ["a"], "v": [i]}))
    name = remove(c, "files", old)
    assert 0 not in view(c).column("id").to_pylist()  # not detected by a read
    assert any(f"{name}, written by commit {old}" in p for p in c.validate())


def test_a_read_point_reads_at_most_the_newest_commits_bodies(tmp_path):
    """An old table's deltacommit bodies name no files (written before they did): the check
    reads the 7 before the latest and no more, however long the history."""
    from lakebraid.metadata.commits import RECENT_COMMITS
    from lakebraid.metadata.table import MetadataTable
    from lakebraid.timeline.instant import Action
    from lakebraid.timeline.layout import TimelineKind

    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"])
    for i in range(RECENT_COMMITS + 4):
        c.upsert(pa.table({"id": [i], "day": ["a"], "v": [i]}))
    for inst in c.table.timeline(TimelineKind.METADATA):
        if inst.action is Action.DELTACOMMIT and inst.is_completed:
            path = c.table.store.path_of(TimelineKind.METADATA, inst)
            os.chmod(path, 0o644)
            with open(path, "wb"):
                pass  # as a lakebraid before deltacommits carried logs wrote it
    again = WriteClient.open(c.path)
    reads: list[str] = []
    typed = again.table.store.read_typed

    def counted(kind, instant, body_type):
        reads.append(f"{kind}:{instant.time}")
        return typed(kind, instant, body_type)

    again.table.store.read_typed = counted  # type: ignore[method-assign]
    MetadataTable(again.table).read_point()
    deltas = [r for r in reads if r.startswith(f"{TimelineKind.METADATA}:")]
    assert len(deltas) == RECENT_COMMITS  # the latest's and the 7 before it
    assert again.read_arrow().num_rows == RECENT_COMMITS + 4
