"""``metadata.slices.lost_latest``: which files of the latest commit a group's listing lacks,
one rule per case, from hand-built listings and read points (no table)."""

from __future__ import annotations

import pytest

from lakebraid.metadata.slices import (
    MetadataFile,
    ReadPoint,
    build_slice,
    lost_error,
    lost_latest,
    parse_name,
)

T1, T2, T3 = "20261201000000001", "20261201000000002", "20261201000000003"
GROUP = "files-0000"
LOG = f"{GROUP}_{T2}.log"


def point(
    latest: dict[str, dict[str, int]], commit: str | None = T2, bases: tuple[str, ...] = ()
) -> ReadPoint:
    return ReadPoint(
        as_of=None,
        visible=(T1, T2),
        undone=frozenset(),
        bases=bases,
        group_counts={"files": 1},
        latest_commit=commit,
        latest_logs=latest,
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
