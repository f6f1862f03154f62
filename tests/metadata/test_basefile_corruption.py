"""Metadata base files (format version 3) under damage: a lookup that seeks through many row
groups never reports a present key absent; every damaged byte gives the right rows or a
``CorruptBaseFileError`` naming the file, whether the keys are stored fixed-width or as strings.
Version 1 files (no checksummed entries) and version 2 files (string keys) still read."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import fsspec
import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakebraid.metadata import basefile
from lakebraid.metadata.basefile import base_info, read_base
from lakebraid.metadata.baselookup import lookup_base
from lakebraid.metadata.basewrite import write_base
from lakebraid.metadata.errors import CorruptBaseFileError, MetadataFormatError

FS = fsspec.filesystem("file")
KEYS = [f"key-{i:03d}" for i in range(16)]  # one width, hex digits: packed keys
TEXT = [f"key-{'ghijklmnopqrstuv'[i]}{i:02d}" for i in range(16)]  # one width: their bytes
RAGGED = [*KEYS[:8], *(f"key-{i:03d}{'x' * (i % 3)}" for i in range(8, 16))]  # strings
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


def reads(path: Path, keys: list[str] = KEYS) -> tuple[list, list, list, str]:
    basefile.FOOTERS.clear()
    seek, how = lookup_base(FS, str(path), pa.array([keys[9]]), scan_fraction=0.3)
    scan, _ = lookup_base(FS, str(path), pa.array([*keys, "absent"]), scan_fraction=0.3)
    return seek.to_pylist(), scan.to_pylist(), read_base(FS, str(path)).to_pylist(), how


@pytest.mark.parametrize("keys", [KEYS, TEXT, RAGGED], ids=["packed", "fixed", "ragged"])
def test_a_seek_reads_only_the_row_groups_of_its_keys(tmp_path: Path, keys: list[str]) -> None:
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", keys)
    info = base_info(FS, str(path))
    assert info.version == 4 and len(info.row_group_min) == 4
    assert info.row_group_min[2] == keys[8] and info.row_group_max[2] == keys[11]
    stored = pq.ParquetFile(path).schema_arrow.field("key").type
    assert (
        stored
        == {0: pa.binary(1), 1: pa.binary(7), 2: pa.string()}[[KEYS, TEXT, RAGGED].index(keys)]
    )
    seek, scan, whole, how = reads(path, keys)
    assert how == "seek" and [r["key"] for r in seek] == [keys[9]]
    assert [r["key"] for r in scan] == keys and whole == index_rows(keys).to_pylist()
    assert read_base(FS, str(path)).schema == index_rows(keys).schema
    some = pa.array([keys[3], "key-0", keys[12], "key-0000", keys[14]])
    assert lookup_base(FS, str(path), some, scan_fraction=1.0)[0].column("key").to_pylist() == [
        keys[3],
        keys[12],
        keys[14],
    ]


@pytest.mark.parametrize("keys", [KEYS, TEXT, RAGGED], ids=["packed", "fixed", "ragged"])
def test_every_flipped_byte_gives_the_right_rows_or_names_the_file(
    tmp_path: Path, keys: list[str]
) -> None:
    """Every byte of the footer (where page checksums do not reach), every third byte of the
    pages and page headers before it."""
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet", keys)
    want = reads(path, keys)
    good = path.read_bytes()
    footer = len(good) - 8 - pq.ParquetFile(path).metadata.serialized_size
    counts: Counter[str] = Counter()
    wrong = []
    for offset in [*range(0, footer, 3), *range(footer, len(good))]:
        damaged = bytearray(good)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            got = reads(path, keys)
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


def version_2_meta() -> dict[bytes, bytes]:
    """The key-value entries of a version 2 file of ``KEYS``, less its row groups and CRC."""
    return {
        b"lakebraid.base.version": b"2",
        b"lakebraid.partition": b"record_index",
        b"lakebraid.file_group": b"record_index-0000",
        b"lakebraid.instant": b"20260101000000001",
        b"lakebraid.folded": b"[]",
    }


def test_version_2_files_are_still_read(tmp_path: Path) -> None:
    path = tmp_path / "record_index-0000_20260101000000001.parquet"
    meta = version_2_meta()  # rows, least and greatest key per row group:
    meta[b"lakebraid.row_groups"] = msgspec.json.encode([[4] * 4, KEYS[::4], KEYS[3::4]])
    meta[b"lakebraid.crc32"] = str(basefile.kv_crc(meta)).encode()
    pq.write_table(index_rows(KEYS).replace_schema_metadata(meta), path, row_group_size=4)
    basefile.FOOTERS.clear()
    assert base_info(FS, str(path)).version == 2
    seek, scan, whole, how = reads(path)
    assert how == "seek" and [r["key"] for r in seek] == SEEK
    assert [r["key"] for r in scan] == KEYS and whole == index_rows(KEYS).to_pylist()


def test_fixed_width_keys_in_a_version_2_file_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "record_index-0000_20260101000000001.parquet")
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[b"lakebraid.base.version"] = b"2"
    meta[b"lakebraid.crc32"] = str(basefile.kv_crc(meta)).encode()
    pq.write_table(table.replace_schema_metadata(meta), path, row_group_size=4)
    basefile.FOOTERS.clear()
    with pytest.raises(CorruptBaseFileError, match="version 2 base file with fixed_size_binary"):
        base_info(FS, str(path))


def test_a_version_2_file_without_its_checksum_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "record_index-0000_20260101000000001.parquet"
    meta = version_2_meta()
    pq.write_table(index_rows(KEYS).replace_schema_metadata(meta), path, row_group_size=4)
    basefile.FOOTERS.clear()
    with pytest.raises(CorruptBaseFileError, match=r"without lakebraid\.crc32"):
        base_info(FS, str(path))


def test_a_written_base_is_remembered_as_a_reader_would_read_it(tmp_path) -> None:
    """``basewrite`` caches the footer it checked under the renamed file's path; a reader
    from a cold cache reads the same footer from the file (nothing of the temporary's name)."""
    from lakebraid.metadata.basefile import FOOTERS, open_base
    from lakebraid.metadata.table import MetadataTable
    from lakebraid.writers.client import WriteClient

    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", [], None)
    for n in range(3):
        client.upsert(pa.table({"id": [f"k{n}{i}" for i in range(50)], "v": list(range(50))}))
    FOOTERS.clear()
    time = MetadataTable(client.table).compact()
    assert time is not None
    written = sorted(Path(path, ".braid", "metadata").glob(f"*/*_{time}.parquet"))
    assert written, "the compaction wrote bases"
    remembered = {base: FOOTERS.get(base) for base in map(str, written)}
    FOOTERS.clear()
    for base, footer in remembered.items():
        assert footer is not None and footer.info.path == base
        read = open_base(fsspec.filesystem("file"), base)
        assert read.info == footer.info
        assert read.meta.equals(footer.meta)
