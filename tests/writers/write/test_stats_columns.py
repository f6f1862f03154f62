"""Wide tables: column statistics are recorded for the first
``metadata.column_stats.max.columns`` columns only; reads stay exact (a file without
statistics for a column is kept) and validate agrees."""

from __future__ import annotations

import pyarrow as pa

from lakebraid.writers.client import WriteClient


def wide(n_rows: int, n_cols: int, offset: int = 0) -> pa.Table:
    columns = {
        "id": [f"k{offset + i:04d}" for i in range(n_rows)],
        "day": ["d0"] * n_rows,
        "ts": [1] * n_rows,
    }
    for c in range(n_cols):
        columns[f"c{c:02d}"] = [offset + i + c for i in range(n_rows)]
    return pa.table(columns)


def test_statistics_are_bounded_and_reads_stay_exact(tmp_path) -> None:
    options = {"metadata.column_stats.max.columns": 5, "write.target.file.rows": 10}
    client = WriteClient.create(str(tmp_path / "w"), "id", ["day"], "ts", **options)
    client.upsert(wide(40, 12))
    client.upsert(wide(20, 12, offset=30))  # replaces files: their statistics go
    asked = ("id", "day", "ts", "c00", "c01", "c02", "c05", "c11")
    recorded = {s.column for c in asked for s in client.column_stats(c)}
    assert recorded == {"id", "day", "ts", "c00", "c01"}  # the first 5 columns of the schema
    files = len(client.file_paths())
    assert len(client.file_paths(where="c00 = 3")) < files  # pruned by statistics
    assert len(client.file_paths(where="c11 = 14")) == files  # no statistics: every file
    rows = client.read(where="c11 = 14").select("id").collect()
    assert [r.id for r in rows] == ["k0003"]
    assert client.validate() == []
