"""``metadata.slices.lost_latest``: which files of the latest commit a group's listing lacks,
and ``lost_logs``: the same for the commits before it a read point checks, one rule per case,
from hand-built listings and read points (no table)."""

from __future__ import annotations

import msgspec
import pytest

from lakebraid.metadata.slices import (
    MetadataFile,
    ReadPoint,
    build_slice,
    lost_error,
    lost_latest,
    lost_logs,
    parse_name,
)

T1, T2, T3 = "20261201000000001", "20261201000000002", "20261201000000003"
GROUP = "files-0000"
LOG = f"{GROUP}_{T2}.log"


def point(
    latest: dict[str, dict[str, int]],
    commit: str | None = T2,
    bases: tuple[str, ...] = (),
    earlier: dict[str, dict[str, dict[str, int]]] | None = None,
) -> ReadPoint:
    return ReadPoint(
        as_of=None,
        visible=(T1, T2),
        undone=frozenset(),
        bases=bases,
        group_counts={"files": 1},
        latest_commit=commit,
        latest_logs=latest,
        earlier_logs=earlier or {},
    )


def listing(*entries: tuple[str, int]) -> list[MetadataFile]:
    found = [parse_name(name, size) for name, size in entries]
    assert all(found)
    return found  # type: ignore[return-value]


def lost(files: list[MetadataFile], at: ReadPoint, folded: frozenset[str] = frozenset()):
    piece = build_slice(GROUP, files, at, lambda _: folded)
    return lost_latest(piece, files, at)


def test_every_file_listed_at_its_size_is_no_loss():
    at = point({GROUP: {LOG: 300}})
    assert lost(listing((f"{GROUP}_{T1}.log", 200), (LOG, 300)), at) == {}


def test_a_file_not_listed_is_lost():
    at = point({GROUP: {LOG: 300}})
    assert lost(listing((f"{GROUP}_{T1}.log", 200)), at) == {LOG: -1}


def test_a_file_listed_shorter_is_lost_with_its_listed_size():
    at = point({GROUP: {LOG: 300}})
    assert lost(listing((LOG, 299)), at) == {LOG: 299}
    assert lost(listing((LOG, 0)), at) == {LOG: 0}  # the reader asks the file itself


def test_a_longer_file_is_no_loss():
    assert lost(listing((LOG, 301)), point({GROUP: {LOG: 300}})) == {}


def test_a_base_that_folds_the_commit_holds_what_it_recorded():
    """A compaction at T3 folded the log (then a cleaner may remove it); one that did not
    fold T2 leaves it lost."""
    at = point({GROUP: {LOG: 300}}, bases=(T3,))
    files = listing((f"{GROUP}_{T3}.parquet", 5000))
    assert lost(files, at, folded=frozenset({T1, T2})) == {}
    assert lost(files, at, folded=frozenset({T1})) == {LOG: -1}


def test_files_of_other_groups_and_partitions_are_not_this_groups():
    at = point(
        {
            "files-0001": {f"files-0001_{T2}.log": 300},
            "record_index-0000": {f"record_index-0000_{T2}.log": 9},
        }
    )
    assert lost(listing((f"{GROUP}_{T1}.log", 200)), at) == {}


def test_no_latest_commit_checks_nothing():
    assert lost(listing(), point({}, commit=None)) == {}


@pytest.mark.parametrize("partition", ["files", "record_index"])
def test_the_error_names_the_file_the_commit_and_the_way_on(partition):
    name = f"{partition}-0000_{T2}.log"
    path = f"/t/.braid/metadata/{partition}/{name}"
    err = lost_error(point({f"{partition}-0000": {name: 300}}), path, "/t")
    text = str(err)
    assert f"metadata file {partition}/{name}, written by commit {T2}" in text
    assert "300 bytes" in text and f"lakebraid rollback PATH {T2}" in text and "[table /t]" in text
    assert isinstance(err, FileNotFoundError) and err.filename.endswith(name)


OLD = f"{GROUP}_{T1}.log"  # the earlier commit's file


def lost_all(files: list[MetadataFile], at: ReadPoint, folded: frozenset[str] = frozenset()):
    piece = build_slice(GROUP, files, at, lambda _: folded)
    return lost_logs(piece, files, at)


def test_an_earlier_commits_file_not_listed_is_lost_and_names_its_commit():
    at = point({GROUP: {LOG: 300}}, earlier={T1: {GROUP: {OLD: 200}}})
    assert lost_all(listing((LOG, 300)), at) == {OLD: (T1, -1)}
    assert lost_all(listing((OLD, 199), (LOG, 300)), at) == {OLD: (T1, 199)}
    assert lost_all(listing((OLD, 200), (LOG, 300)), at) == {}


def test_the_latest_and_an_earlier_commit_lost_together_are_both_named():
    at = point({GROUP: {LOG: 300}}, earlier={T1: {GROUP: {OLD: 200}}})
    assert lost_all(listing(), at) == {LOG: (T2, -1), OLD: (T1, -1)}


def test_an_earlier_commit_a_base_folds_is_no_loss():
    """A compaction at T3 folded T1 (then a cleaner may remove its log); the latest commit's
    log after it is still checked."""
    at = point({GROUP: {LOG: 300}}, bases=(T3,), earlier={T1: {GROUP: {OLD: 200}}})
    files = listing((f"{GROUP}_{T3}.parquet", 5000), (LOG, 300))
    assert lost_all(files, at, folded=frozenset({T1})) == {}
    assert lost_all(files, at, folded=frozenset()) == {OLD: (T1, -1)}


def test_an_earlier_commits_files_of_other_groups_are_not_this_groups():
    at = point({}, commit=None, earlier={T1: {"files-0001": {f"files-0001_{T1}.log": 9}}})
    assert lost_all(listing(), at) == {}


def test_the_error_for_an_earlier_commit_names_it_and_its_recorded_size():
    at = point({GROUP: {LOG: 300}}, earlier={T1: {GROUP: {OLD: 200}}})
    err = lost_error(at, f"/t/.braid/metadata/files/{OLD}", "/t", T1)
    text = str(err)
    assert f"metadata file files/{OLD}, written by commit {T1} (one of the newest" in text
    assert "200 bytes" in text and f"lakebraid rollback PATH {T1}" in text
    assert "savepoint" in text


def test_a_commit_the_point_no_longer_shows_is_not_checked():
    """A point as it will read once an undo of T1 completes (``with_undone``): T1's files
    may be gone (a clean removed them), and the point does not read them."""
    at = point({GROUP: {LOG: 300}}, earlier={T1: {GROUP: {OLD: 200}}})
    undone = msgspec.structs.replace(at, visible=(T2,), undone=frozenset({T1}))
    assert lost_all(listing((LOG, 300)), undone) == {}
    gone = msgspec.structs.replace(at, visible=(T1,), undone=frozenset({T2}))
    assert lost_all(listing((OLD, 200)), gone) == {}
