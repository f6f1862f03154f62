"""``validate()`` (``writers.services.validate``) on a table folder holding files that are no
part of the table. Found by a hostile trial: one copied Spark part file in a partition folder
made ``validate()`` raise ``InvalidPathError`` naming neither table nor folder, and report
nothing else."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakebraid.writers.client import WriteClient


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_a_foreign_file_in_a_partition_folder_is_reported_and_nothing_else(tmp_path, table_type):
    path = tmp_path / "t"
    client = WriteClient.create(str(path), "id", ["p"], None, table_type=table_type)
    client.upsert(pa.table({"id": [1, 2], "p": ["a", "b"]}))
    client.upsert(pa.table({"id": [2, 3], "p": ["b", "b"]}))
    before = client.read_arrow().sort_by("id")
    stray = path / "p=a" / "part-00000-abc.snappy.parquet"
    pq.write_table(pa.table({"id": [7]}), stray)
    (path / "p=b" / "notes.log").write_text("not a log block")
    problems = WriteClient.open(str(path)).validate()
    assert sorted(problems) == [
        f"{name}: not a lakebraid data file name, so no part of the table (never read, never "
        "cleaned): move it out of the table's folder"
        for name in ("p=a/part-00000-abc.snappy.parquet", "p=b/notes.log")
    ]
    assert WriteClient.open(str(path)).read_arrow().sort_by("id").equals(before)
    stray.unlink()
    (path / "p=b" / "notes.log").unlink()
    assert WriteClient.open(str(path)).validate() == []


def test_a_lost_commit_point_is_named(tmp_path) -> None:
    """The global instant file of a middle commit is gone: the commit reads as never written
    (later commits build on it). ``validate()`` names the commit and its missing file; the
    latest commit in that state (what a writer dying between the timelines leaves, which
    recovery rolls back) is not reported."""
    import glob
    import os

    def lost_after_removing(which: int, name: str) -> tuple[list[str], str]:
        c = WriteClient.create(str(tmp_path / name), "id", ["p"], "ts")
        c.bulk_insert(pa.table({"id": ["a", "b"], "p": ["x", "x"], "ts": [1, 1]}))
        times = [c.delete(["b"]), c.upsert(pa.table({"id": ["a"], "p": ["x"], "ts": [3]}))]
        assert c.validate() == []
        os.remove(glob.glob(f"{c.path}/.braid/global/{times[which]}_*.commit")[0])
        found = WriteClient.open(c.path).validate()
        return [p for p in found if p.startswith("timelines:")], times[which]

    lost, middle = lost_after_removing(0, "middle")
    assert len(lost) == 1 and f"commit {middle} completed on the data and metadata" in lost[0]
    assert lost_after_removing(1, "latest")[0] == []


def test_a_lost_metadata_log_is_named(tmp_path) -> None:
    """A commit's ``files`` log is gone and no later base folded it: ``validate()`` names it,
    once."""
    import glob
    import os

    c = WriteClient.create(str(tmp_path / "t"), "id", ["p"], "ts")
    c.bulk_insert(pa.table({"id": ["a", "b"], "p": ["x", "x"], "ts": [1, 1]}))
    deleted = c.delete(["b"])
    c.compact_metadata()  # a base at a later time: the logs before it may go
    folded = glob.glob(f"{c.path}/.braid/metadata/files/*_{deleted}.log")
    for path in folded:
        os.remove(path)
    assert c.validate() == [], "a log a later base folded is no loss"
    later = c.delete(["a"])
    os.remove(glob.glob(f"{c.path}/.braid/metadata/files/*_{later}.log")[0])
    lost = [p for p in WriteClient.open(c.path).validate() if f"commit {later}" in p]
    assert len(lost) == 1 and f"written by commit {later} (the latest visible one)" in lost[0]


def test_a_lost_metadata_log_of_an_older_commit_is_named_once(tmp_path) -> None:
    """The log of a commit before the latest is gone: ``validate()`` names it, once (from the
    read's own check of the newest commits' files, ``metadata.slices.lost_logs``)."""
    import glob
    import os

    c = WriteClient.create(str(tmp_path / "t"), "id", ["p"], "ts")
    c.bulk_insert(pa.table({"id": ["a", "b"], "p": ["x", "x"], "ts": [1, 1]}))
    older = c.upsert(pa.table({"id": ["c"], "p": ["y"], "ts": [1]}))
    c.upsert(pa.table({"id": ["d"], "p": ["z"], "ts": [1]}))
    os.remove(glob.glob(f"{c.path}/.braid/metadata/files/*_{older}.log")[0])
    lost = [p for p in WriteClient.open(c.path).validate() if f"commit {older}" in p]
    assert len(lost) == 1 and "files/files-0000_" in lost[0]
    assert f"written by commit {older} (one of the newest visible commits), is missing" in lost[0]


def test_a_damaged_commit_body_is_reported_not_raised(tmp_path) -> None:
    """A completed commit's body truncated (or overwritten): ``validate()`` reports it as a
    problem naming the file (its rebuild reads every body, so it stops there) instead of
    raising; a read that needs the body says which file and what to do."""
    import glob
    from pathlib import Path

    from lakebraid.timeline.errors import InstantFileError

    c = WriteClient.create(str(tmp_path / "t"), "id", ["p"], "ts")
    times = [c.upsert(pa.table({"id": [k], "p": ["x"], "ts": [1]})) for k in "abc"]
    for which, damage in ((0, b""), (2, b"\x00not json")):
        (name,) = glob.glob(f"{c.path}/.braid/global/{times[which]}_*.commit")
        saved = Path(name).read_bytes()
        Path(name).write_bytes(damage)
        problems = WriteClient.open(c.path).validate()
        assert len(problems) == 1 and problems[0].startswith(f"timelines: {name}: damaged")
        assert "restore the file from a backup" in problems[0]
        if which == 2:  # the newest body: reads need it (its schema)
            with pytest.raises(InstantFileError, match="restore the file from a backup"):
                WriteClient.open(c.path).read_arrow()
        Path(name).write_bytes(saved)
    assert WriteClient.open(c.path).validate() == []
    assert WriteClient.open(c.path).read_arrow().num_rows == 3


def test_decimal_bounds_left_out_by_an_earlier_writer_are_not_problems(
    tmp_path, monkeypatch
) -> None:
    """Writers before decimal statistics recorded None bounds for decimal columns: such a
    table validates clean (and prunes nothing by them); a file whose decimal counts are
    wrong is still reported, and new writes record the bounds."""
    from decimal import Decimal

    from lakebraid.index import file_stats

    c = WriteClient.create(str(tmp_path / "t"), "id", [], "ts")
    rows = pa.table({"id": ["a", "b"], "ts": [1, 1], "d": pa.array([1, 2], pa.decimal128(6, 2))})
    plain = file_stats._plain
    monkeypatch.setattr(
        file_stats, "_plain", lambda v: None if isinstance(v, Decimal) else plain(v)
    )
    c.bulk_insert(rows)
    monkeypatch.setattr(file_stats, "_plain", plain)
    (old,) = c.column_stats("d")
    assert (old.min_value, old.max_value, old.value_count) == (None, None, 2)
    assert c.validate() == []
    assert len(c.file_paths(where="d > 5")) == 1  # no bounds: kept
    c.bulk_insert(rows.set_column(0, "id", pa.array(["c", "e"])))
    assert sorted(s.max_value for s in c.column_stats("d") if s.max_value) == [Decimal("2.00")]
    assert len(c.file_paths(where="d > 5")) == 1 and c.validate() == []
    assert not file_stats.same_stats((None, None, 0, 2), (Decimal("1.00"), Decimal("2.00"), 0, 3))
