"""``metadata.writer.write_changes(..., whole=True)``: a task that holds every entry of its
groups writes each group's record-index log file whole; a second attempt of the same task (a
retried Spark task) replaces the file rather than adding a block, and the entries read back
are the ones given, tombstones included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from lakebraid.metadata.hashing import file_groups_of
from lakebraid.metadata.logblock import read_log_file
from lakebraid.metadata.logcache import index_log_table
from lakebraid.metadata.writer import InstantChanges, write_changes
from lakebraid.writers.client import WriteClient

TIME = "20261207100000001"
FILE_ID = "00000000-0000-0000-0000-000000000007"


def changes(n: int, gone: list[str]) -> InstantChanges:
    keys = [f"k{i:05d}" for i in range(n)]
    upserts = pa.table({"key": keys, "partition": ["p1"] * n, "file_id": [FILE_ID] * n})
    return InstantChanges(index_upserts=upserts, index_deletes=pa.array(gone, pa.string()))


def test_a_second_attempt_replaces_each_group_file(tmp_path: Path) -> None:
    options = {"metadata.record_index.min.groups": 3, "metadata.record_index.commit.bases": False}
    client = WriteClient.create(str(tmp_path / "t"), "id", [], None, **options)
    point = client.metadata.read_point()
    n = point.group_counts["record_index"]
    given = changes(200, ["gone-1", "gone-2"])
    layout, fs = client.table.layout, client.table.fs
    counts, groups = point.group_counts, point.index_groups
    first = write_changes(fs, layout, TIME, given, counts, 1, groups, whole=True)
    again = write_changes(fs, layout, TIME, given, counts, 1, groups, whole=True)
    assert again == first
    folder = Path(layout.metadata_partition_dir("record_index"))
    assert not list(folder.glob(".*"))  # each attempt's temporary renamed over its file
    everything = sorted([f"k{i:05d}" for i in range(200)] + ["gone-1", "gone-2"])
    groups = file_groups_of(everything, n)
    numbers, counts = np.unique(groups, return_counts=True)
    expected = dict(zip(numbers.tolist(), counts.tolist(), strict=True))
    assert {int(log.file_group.rsplit("-", 1)[1]): log.records for log in first} == expected
    seen: dict[str, tuple[str, bool]] = {}
    for log in first:
        path = folder / log.name
        assert path.stat().st_size == log.size  # one block: nothing appended by the retry
        blocks = read_log_file(fs, str(path))
        assert len(blocks) == 1
        table = index_log_table(blocks).to_pylist()
        seen.update({row["key"]: (row["partition"], row["deleted"]) for row in table})
    assert sorted(seen) == everything
    assert seen["gone-1"][1] and seen["gone-2"][1]
    assert {seen[f"k{i:05d}"] for i in range(200)} == {("p1", False)}
