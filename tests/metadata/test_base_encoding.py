"""The key column's encoding in metadata base files: random fixed-width keys (UUIDs) PLAIN and
uncompressed, keys that compress BYTE_STREAM_SPLIT + zstd, strings PLAIN + zstd, lz4 instead of
zstd in a base of fewer than 4,096 rows; every choice reads back to the keys written."""

from __future__ import annotations

import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakebraid.metadata.arrow_records import index_table
from lakebraid.metadata.base_encoding import encoding_options
from lakebraid.metadata.basefile import read_base
from lakebraid.metadata.basewrite import write_base


@pytest.mark.parametrize(
    ("keys", "encoding", "codec"),
    [
        (
            [str(uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % (1 << 128))) for i in range(5000)],
            "PLAIN",
            "UNCOMPRESSED",
        ),
        ([f"{i:012d}" for i in range(5000)], "BYTE_STREAM_SPLIT", "ZSTD"),
        ([f"user-{i}" for i in range(5000)], "PLAIN", "ZSTD"),  # mixed widths: strings
        ([f"{i:012d}" for i in range(4095)], "BYTE_STREAM_SPLIT", "LZ4"),  # small
        ([f"user-{i}" for i in range(300)], "PLAIN", "LZ4"),
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
    group = pq.ParquetFile(path).metadata.row_group(0)
    chunk = group.column(0)
    assert chunk.compression == codec
    assert encoding in chunk.encodings
    others = {group.column(i).compression for i in range(1, group.num_columns)}
    assert others == {"UNCOMPRESSED"}  # the record index's locations, whatever the size
    back = read_base(fs, path)
    assert back.column("key").to_pylist() == sorted(keys)


@pytest.mark.parametrize(("rows", "codec"), [(1, "lz4"), (4095, "lz4"), (4096, "zstd")])
def test_small_bases_take_lz4(rows, codec) -> None:
    columns = ["key", "partition", "file"]
    options = encoding_options("files", columns, None, rows)
    assert options["compression"] == dict.fromkeys(columns, codec)
    assert options.get("compression_level", {}) == (
        {} if codec == "lz4" else dict.fromkeys(columns, 1)
    )
