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
