"""Data skipping on merge-on-read tables after deletes: a log of deletes only holds no row, so
its statistics (no values, no nulls) match no condition, and a filtered read keeps its file
slice only when the slice's base or a log with rows may match. Tables whose delete logs an
earlier writer left without statistics validate clean and keep those slices (nothing known).
Expected files come from the files' own values; expected rows from a plain model."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakebraid.writers.client import WriteClient
from lakebraid.writers.write import logappend

N = 1000  # keys k00000..k00999, day d0..d4 by blocks of 200 (ts and v: the key's number)


def table(tmp_path, **options: object) -> WriteClient:
    client = WriteClient.create(
        str(tmp_path / "t"), "id", ["day"], "ts", table_type="merge_on_read", **options
    )
    ids = [f"k{i:05d}" for i in range(N)]
    days = [f"d{i // 200}" for i in range(N)]
    numbers = list(range(N))
    client.bulk_insert(pa.table({"id": ids, "day": days, "ts": numbers, "v": numbers}))
    return client


def base_holding(client: WriteClient, ts: int) -> set[str]:
    """The base files whose rows hold ``ts`` (read from the files), and their slices' logs."""
    bases = [p for p in client.file_paths() if p.endswith(".parquet")]
    hit = [p for p in bases if pc.any(pc.equal(pq.read_table(p)["ts"], ts)).as_py()]
    ids = {(os.path.dirname(p), os.path.basename(p).split("_")[0]) for p in hit}
    return {
        p
        for p in client.file_paths()
        if (os.path.dirname(p), os.path.basename(p).split("_")[0]) in ids
    }


def log_records(client: WriteClient, column: str) -> list:
    return [s for s in client.column_stats(column) if s.file.endswith(".log")]


def test_a_log_of_deletes_only_prunes_from_every_filtered_read(tmp_path) -> None:
    client = table(tmp_path)
    doomed = [f"k{i:05d}" for i in range(0, N, 50)]  # in every day: a delete log in each slice
    client.delete(doomed)
    logs = [p for p in client.file_paths() if p.endswith(".log")]
    assert len(logs) == 5
    for log in logs:
        name = os.path.basename(log)
        records = [s for s in client.column_stats("ts") if s.file == name]
        assert [(s.min_value, s.max_value, s.null_count, s.value_count) for s in records] == [
            (None, None, 0, 0)
        ]
    kept = set(range(N)) - {int(k[1:]) for k in doomed}
    for ts in (7, 250, 999, 50):
        paths = set(client.file_paths(where=f"ts = {ts}"))
        assert paths == base_holding(client, ts) and len(paths) == 2, ts  # the base, its log
        read = client.read(where=f"ts = {ts}").select("ts").collect()
        assert [r.ts for r in read] == ([ts] if ts in kept else []), ts
    assert client.file_paths(where="ts IS NULL") == []
    assert client.validate() == []


@pytest.mark.parametrize("build", [False, True])
def test_delete_logs_an_earlier_writer_left_without_statistics(tmp_path, monkeypatch, build):
    """Writers before this recorded no statistics for a log of deletes only: such a table
    validates clean and keeps those slices in filtered reads; a build of more columns records
    them for every log, old ones too; later deletes record them."""
    client = table(tmp_path, **{"metadata.column_stats.max.columns": 3})  # v needs a build
    stats = logappend.column_stats

    def earlier(rows: pa.Table, meta: object, columns: list[str]) -> list:
        return stats(rows, meta, columns) if rows.num_rows else []

    monkeypatch.setattr(logappend, "column_stats", earlier)
    client.delete(["k00010", "k00410"])  # the old way: logs in d0 and d2 without statistics
    monkeypatch.setattr(logappend, "column_stats", stats)
    assert log_records(client, "ts") == []
    assert client.validate() == []
    assert len(client.file_paths(where="ts = 250")) == 1 + 2 + 2  # d1's base; d0, d2 whole
    if build:  # a build reads every log: the old ones get statistics of v too
        client.create_index("v", kind="column_stats")
        assert len(log_records(client, "v")) == 2
        assert len(client.file_paths(where="v = 250")) == 1
    client.delete(["k00611"])  # the new way: d3's log records every column
    assert len(log_records(client, "ts")) == 1
    assert len(client.file_paths(where="ts = 650")) == 2 + 2 + 2  # d3's base and log; d0, d2
    if build:
        assert len(client.file_paths(where="v = 650")) == 2
    assert client.validate() == []
    read = client.read(where="ts = 650 or ts = 10").select("ts").collect()
    assert sorted(r.ts for r in read) == [650]
