"""Data files are written with the codec ``datafile.DATA_CODEC`` names for where they live:
LZ4 on a local disk, zstd on an object store (every column chunk of every data file, by the
writes that make new file groups and the copy-on-write rewrites alike)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakebraid.writers.client import WriteClient

ROWS = pa.table({"id": ["a", "b", "c"], "day": ["d1", "d1", "d2"], "ts": [1, 1, 1], "v": [1, 2, 3]})
CHANGE = pa.table({"id": ["b"], "day": ["d1"], "ts": [2], "v": [20]})


def codecs(client: WriteClient) -> set[str]:
    """The codecs of every column chunk of every data file under the table."""
    fs, root = client.table.fs, client.table.layout.root
    found = set()
    for path in fs.find(root):
        if path.endswith(".parquet") and "/.braid" not in path:
            with fs.open(path, "rb") as handle:
                meta = pq.ParquetFile(handle).metadata
            found |= {
                meta.row_group(g).column(c).compression
                for g in range(meta.num_row_groups)
                for c in range(meta.num_columns)
            }
    return found


def write_twice(url: str, **options: object) -> WriteClient:
    client = WriteClient.create(url, "id", ["day"], "ts", **options)
    client.bulk_insert(ROWS)
    client.upsert(CHANGE)  # a copy-on-write rewrite of d1's group
    return client


def test_local_data_files_are_lz4(tmp_path) -> None:
    client = write_twice(str(tmp_path / "t"))
    assert codecs(client) == {"LZ4"}  # pyarrow's name for Parquet's LZ4_RAW
    assert client.read_arrow().sort_by("id").column("v").to_pylist() == [1, 20, 3]


@pytest.mark.slow
def test_object_store_data_files_are_zstd(loopback_s3, s3_url) -> None:
    client = write_twice(s3_url(), storage_options=loopback_s3.storage_options())
    assert codecs(client) == {"ZSTD"}
    assert client.read_arrow().sort_by("id").column("v").to_pylist() == [1, 20, 3]
