"""The key column's encoding in metadata base files: random fixed-width keys (UUIDs) PLAIN and
uncompressed, keys that compress BYTE_STREAM_SPLIT + zstd, strings PLAIN + zstd; every choice
reads back to the keys written."""

from __future__ import annotations

import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakebraid.metadata.arrow_records import index_table
from lakebraid.metadata.basefile import read_base
from lakebraid.metadata.basewrite import write_base


@pytest.mark.parametrize(
    ("keys", "encoding", "codec"),
    [
        (
            [str(uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % (1 << 128))) for i in range(3000)],
            "PLAIN",
            "UNCOMPRESSED",
        ),
        ([f"{i:012d}" for i in range(3000)], "BYTE_STREAM_SPLIT", "ZSTD"),
        ([f"user-{i}" for i in range(3000)], "PLAIN", "ZSTD"),  # mixed widths: strings
    ],
)
def test_key_encoding_follows_the_keys(tmp_path, keys, encoding, codec) -> None:
    fs = fsspec.filesystem("file")
    n = len(keys)
    file_ids = pa.array([str(uuid.UUID(int=7))] * n)
    rows = index_table(pa.array(keys), pa.array(["day=1"] * n), file_ids, "1" * 17)
    path = str(tmp_path / "record_index-0000_1.parquet")
    write_base(
        fs,
        path,
        rows,
        partition="record_index",
        file_group="record_index-0000",
        instant="1" * 17,
        folded=[],
        row_group_rows=1024,
    )
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert chunk.compression == codec
    assert encoding in chunk.encodings
    back = read_base(fs, path)
    assert back.column("key").to_pylist() == sorted(keys)
