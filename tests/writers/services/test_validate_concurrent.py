"""``validate()`` while another process writes reports nothing on a healthy table: it reads one
snapshot of the timelines, taken before it lists storage, so a commit completing meanwhile is
no part of what it compares (before, such a commit's files were reported missing or as
needing a restore from a backup)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient

WRITER = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from lakebraid.writers.client import WriteClient
    c = WriteClient.open(sys.argv[1])
    for i in range(30):
        keys = [f"k{j}" for j in range(i, i + 20)]
        c.upsert(pa.table({"id": keys, "p": ["a", "b"] * 10, "ts": [i] * 20}))
    """
)


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_validate_beside_a_writer_reports_nothing(tmp_path, table_type) -> None:
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["p"], "ts", table_type=table_type)
    client.upsert(pa.table({"id": ["k0"], "p": ["a"], "ts": [0]}))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, path])
    runs, reports = 0, []
    try:
        while writer.poll() is None:
            problems = WriteClient.open(path).validate()
            runs += 1
            if problems:
                reports.append(problems)
    finally:
        writer.wait(timeout=300)
    assert writer.returncode == 0
    assert runs >= 3  # validate ran while the writer committed
    assert reports == []
    assert WriteClient.open(path).validate() == []
    assert WriteClient.open(path).read_arrow().num_rows == 49
