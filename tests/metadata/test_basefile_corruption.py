"""Metadata base files (format version 2) under damage: a lookup that seeks through many row
groups never reports a present key absent; every damaged byte gives the right rows or a
``CorruptBaseFileError`` naming the file. Version 1 files (no checksummed entries) still read."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import fsspec
import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakebraid.metadata import basefile
from lakebraid.metadata.basefile import base_info, lookup_base, read_base, write_base
from lakebraid.metadata.errors import CorruptBaseFileError, MetadataFormatError

FS = fsspec.filesystem("file")
KEYS = [f"key-{i:03d}" for i in range(16)]
SEEK = ["key-009"]  # one of four row groups: a seek


def index_rows(keys: list[str]) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "key": keys,
            "partition": ["p=x"] * n,
            "file_id_hi": list(range(n)),
            "file_id_lo": [7] * n,
            "instant": [20260101000000000] * n,
        }
    )


def write(path: Path, keys: list[str] = KEYS) -> Path:
    write_base(
        FS,
        str(path),
        index_rows(keys),
        partition="record_index",
        file_group="record_index-0000",
        instant="20260101000000001",
        folded=["20260101000000000"],
        row_group_rows=4,
    )
    return path


def reads(path: Path) -> tuple[list, list, list, str]:
    basefile.FOOTERS.clear()
    seek, how = lookup_base(FS, str(path), pa.array(SEEK), scan_fraction=0.3)
    scan, _ = lookup_base(FS, str(path), pa.array([*KEYS, "absent"]), scan_fraction=0.3)
    return seek.to_pylist(), scan.to_pylist(), read_base(FS, str(path)).to_pylist(), how


def test_a_seek_reads_only_the_row_groups_of_its_keys(tmp_path: Path) -> None:
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet")
    info = base_info(FS, str(path))
    assert info.version == 2 and len(info.row_group_min) == 4
    assert info.row_group_min[2] == "key-008" and info.row_group_max[2] == "key-011"
    seek, scan, whole, how = reads(path)
    assert how == "seek" and [r["key"] for r in seek] == SEEK
    assert [r["key"] for r in scan] == KEYS and whole == index_rows(KEYS).to_pylist()


def test_every_flipped_byte_gives_the_right_rows_or_names_the_file(tmp_path: Path) -> None:
    """Every byte of the footer (where page checksums do not reach), every third byte of the
    pages and page headers before it."""
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet")
    want = reads(path)
    good = path.read_bytes()
    footer = len(good) - 8 - pq.ParquetFile(path).metadata.serialized_size
    counts: Counter[str] = Counter()
    wrong = []
    for offset in [*range(0, footer, 3), *range(footer, len(good))]:
        damaged = bytearray(good)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            got = reads(path)
        except CorruptBaseFileError as exc:
            assert str(path) in str(exc) and exc.path == str(path)
            counts["raised"] += 1
        except MetadataFormatError as exc:  # the version byte: "refuse, never guess"
            assert str(path) in str(exc)
            counts["raised"] += 1
        else:
            counts["right" if got == want else "wrong"] += 1
            if got != want:
                wrong.append(offset)
    path.write_bytes(good)
    assert not wrong, f"silently wrong at offsets {wrong}"
    assert counts["raised"] > counts["right"] > 0
    print(f"{len(good)} bytes: {dict(counts)}")


def test_a_damaged_key_bound_is_an_error_not_an_absent_key(tmp_path: Path) -> None:
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet")
    good = path.read_bytes()
    entry = b'"key-011"'  # the greatest key of row group 2, as the row-groups entry holds it
    at = good.rindex(entry)
    path.write_bytes(good[:at] + b'"key-010"' + good[at + len(entry) :])
    basefile.FOOTERS.clear()
    with pytest.raises(CorruptBaseFileError, match="do not match their CRC-32"):
        lookup_base(FS, str(path), pa.array(["key-011"]), scan_fraction=0.3)


def test_version_1_files_are_still_read(tmp_path: Path) -> None:
    path = tmp_path / "record_index-0000_20260101000000001.parquet"
    meta = {
        b"lakebraid.base.version": b"1",
        b"lakebraid.partition": b"record_index",
        b"lakebraid.file_group": b"record_index-0000",
        b"lakebraid.instant": b"20260101000000001",
        b"lakebraid.folded": msgspec.json.encode(["20260101000000000"]),
    }
    pq.write_table(index_rows(KEYS).replace_schema_metadata(meta), path, row_group_size=4)
    basefile.FOOTERS.clear()
    info = base_info(FS, str(path))
    assert info.version == 1 and info.row_group_max[2] == "key-011"
    seek, scan, whole, how = reads(path)
    assert how == "seek" and [r["key"] for r in seek] == SEEK
    assert [r["key"] for r in scan] == KEYS and len(whole) == len(KEYS)


def test_a_version_2_file_without_its_checksum_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "record_index-0000_20260101000000001.parquet"
    meta = {
        b"lakebraid.base.version": b"2",
        b"lakebraid.partition": b"record_index",
        b"lakebraid.file_group": b"record_index-0000",
        b"lakebraid.instant": b"20260101000000001",
        b"lakebraid.folded": b"[]",
    }
    pq.write_table(index_rows(KEYS).replace_schema_metadata(meta), path, row_group_size=4)
    basefile.FOOTERS.clear()
    with pytest.raises(CorruptBaseFileError, match=r"without lakebraid\.crc32"):
        base_info(FS, str(path))
