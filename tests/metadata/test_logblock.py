"""Log blocks: round trips, backward walks, appends, and corruption that is never silent."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import fsspec
import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stat_fixtures import STAT_VALUES

from lakebraid.metadata.errors import (
    CorruptLogBlockError,
    MetadataError,
    MetadataFormatError,
    MetadataValueError,
)
from lakebraid.metadata.logblock import (
    OVERHEAD,
    BlockType,
    Command,
    block_records,
    decode_block,
    iter_blocks,
    iter_blocks_backward,
    read_log_file,
)
from lakebraid.metadata.logwrite import (
    COLUMNAR_MIN_ENTRIES,
    SMALL_BODY,
    append_blocks,
    encode_block,
)
from lakebraid.metadata.records import (
    ColumnStatsRecord,
    FilesRecord,
    Partition,
    RecordIndexRecord,
    SecondaryIndexRecord,
)

FAST = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
INSTANT = "20240101120000000"
INT64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=12)
no_nul = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=8)

sizes = st.integers(0, 2**40)


def _sorted_unique(records: list[Any]) -> list[Any]:
    by_key = {r.key: r for r in records}
    return [by_key[k] for k in sorted(by_key)]


files_records = st.builds(
    FilesRecord, text, st.dictionaries(text, sizes, max_size=4), st.lists(text, max_size=3)
)
stats_records = st.builds(
    ColumnStatsRecord,
    no_nul,
    no_nul,
    no_nul,
    STAT_VALUES,
    STAT_VALUES,
    sizes,
    sizes,
    sizes,
    st.booleans(),
)
index_records = st.builds(
    RecordIndexRecord, text, text, INT64, INT64, st.integers(0, 10**17 - 1), st.booleans()
)
secondary_records = st.builds(SecondaryIndexRecord, text, st.booleans())
STRATEGIES = {
    Partition.FILES: files_records,
    Partition.COLUMN_STATS: stats_records,
    Partition.RECORD_INDEX: index_records,
    Partition.SECONDARY_INDEX: secondary_records,
}


@st.composite
def data_blocks(draw: st.DrawFn, max_size: int = 30) -> tuple[Partition, list[Any]]:
    partition = draw(st.sampled_from(list(Partition)))
    records = draw(st.lists(STRATEGIES[partition], max_size=max_size))
    return partition, _sorted_unique(records)


@st.composite
def any_blocks(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(list(BlockType)))
    partition, records = draw(data_blocks(max_size=6))
    common = dict(
        instant=INSTANT,
        partition=partition,
        file_group=f"{partition}-0003",
        codec=draw(st.sampled_from(["zstd", "uncompressed"])),
    )
    if kind is BlockType.DATA and partition is Partition.RECORD_INDEX and draw(st.booleans()):
        return encode_block(kind, columns=index_columns(records), min_columnar=0, **common)
    if kind is BlockType.DATA:
        return encode_block(kind, records=records, **common)
    if kind is BlockType.DELETE:
        keys = sorted(set(draw(st.lists(text, max_size=6))))
        return encode_block(kind, keys=keys, **common)
    return encode_block(kind, command=Command("rollback", "20231231000000000"), **common)


def index_columns(records: list[RecordIndexRecord]) -> pa.Table:
    """The record-index entries as columns (the model: each field of each record)."""
    names = ["key", "partition", "file_id_hi", "file_id_lo", "instant", "deleted"]
    types = [pa.string(), pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.bool_()]
    columns = [[getattr(r, name) for r in records] for name in names]
    return pa.table([pa.array(c, t) for c, t in zip(columns, types, strict=True)], names=names)


def _encode(partition: Partition, records: list[Any], **extra: Any) -> bytes:
    return encode_block(
        BlockType.DATA,
        instant=INSTANT,
        partition=partition,
        file_group=f"{partition}-0000",
        records=records,
        **extra,
    )


# -- round trips --------------------------------------------------------------------------


@FAST
@given(data_blocks())
def test_data_blocks_round_trip(block: tuple[Partition, list[Any]]) -> None:
    partition, records = block
    blob = _encode(partition, records, extra={"writer": "test"})
    decoded, after = decode_block(blob, 0, "mem.log")
    assert after == len(blob) == decoded.size
    assert decoded.records == records and decoded.block_type is BlockType.DATA
    header = decoded.header
    assert (header.instant, header.partition, header.file_group) == (
        INSTANT,
        partition,
        f"{partition}-0000",
    )
    assert header.record_count == len(records) and header.extra == {"writer": "test"}
    assert header.min_key == (records[0].key if records else None)
    assert header.max_key == (records[-1].key if records else None)
    assert list(iter_blocks_backward(blob, "mem.log")) == [decoded]


@FAST
@given(st.lists(any_blocks(), min_size=1, max_size=5))
def test_forward_and_backward_walks_agree(blocks: list[bytes]) -> None:
    data = b"".join(blocks)
    forward = list(iter_blocks(data, "f.log"))
    assert [b.offset for b in forward] == [sum(map(len, blocks[:i])) for i in range(len(blocks))]
    assert list(iter_blocks_backward(data, "f.log")) == forward[::-1]


@FAST
@given(st.lists(index_records, max_size=40), st.booleans())
def test_columnar_index_blocks_round_trip(records: list[Any], dictionary: bool) -> None:
    records = _sorted_unique(records)
    columns = index_columns(records)
    if dictionary:  # as the writer hands them: partitions dictionary encoded
        columns = columns.set_column(1, "partition", pc.dictionary_encode(columns.column(1)))
    blob = encode_block(
        BlockType.DATA,
        instant=INSTANT,
        partition="record_index",
        file_group="record_index-0001",
        columns=columns,
        min_columnar=0,
    )
    assert struct.unpack_from(">H", blob, 4) == (2,)  # format version 2
    decoded, after = decode_block(blob, 0, "mem.log")
    assert after == len(blob) and decoded.version == 2 and decoded.records == []
    assert decoded.table is not None and decoded.table.equals(index_columns(records))
    assert block_records(decoded) == records
    header = decoded.header
    assert header.record_count == len(records)
    assert (header.min_key, header.max_key) == (
        (records[0].key, records[-1].key) if records else (None, None)
    )
    assert list(iter_blocks_backward(blob, "mem.log")) == [decoded]


def test_few_entries_make_a_version_1_block_of_the_same_records() -> None:
    records = [RecordIndexRecord(f"k{i:04d}", "p", 1, 2, 3, i % 7 == 0) for i in range(600)]
    common = dict(instant=INSTANT, partition="record_index", file_group="record_index-0002")
    for n, version in ((1, 1), (COLUMNAR_MIN_ENTRIES - 1, 1), (COLUMNAR_MIN_ENTRIES, 2)):
        blob = encode_block(BlockType.DATA, columns=index_columns(records[:n]), **common)
        decoded = decode_block(blob)[0]
        assert decoded.version == version and block_records(decoded) == records[:n]
        assert (decoded.table is None) == (version == 1)


def test_small_bodies_are_left_uncompressed_large_ones_take_the_codec() -> None:
    common = dict(instant=INSTANT, partition="record_index", file_group="record_index-0002")
    for n, codec in ((1, "uncompressed"), (40, "uncompressed"), (2000, "zstd")):
        records = [RecordIndexRecord(f"k{i:05d}", "p", 1, 2, 3) for i in range(n)]
        blob = encode_block(BlockType.DATA, columns=index_columns(records), **common)
        decoded = decode_block(blob)[0]
        assert decoded.header.codec == codec
        header = decoded.header
        assert (header.raw_length < SMALL_BODY) == (codec == "uncompressed")
        assert (header.body_length == header.raw_length) == (codec == "uncompressed")
        assert block_records(decoded) == records


def test_columns_are_for_record_index_data_blocks_only() -> None:
    columns = index_columns([RecordIndexRecord("k", "p", 1, 2, 3)])
    with pytest.raises(MetadataValueError, match="record_index blocks, not files"):
        encode_block(
            BlockType.DATA, instant=INSTANT, partition="files", file_group="f", columns=columns
        )
    blob = bytearray(_encode(Partition.FILES, [FilesRecord("p", {"a": 1}, [])]))
    struct.pack_into(">H", blob, 4, 2)  # a files block claiming version 2
    crc_at = len(blob) - 12
    header_length = struct.unpack_from(">I", blob, 7)[0]
    body = bytes(blob[19 + header_length : crc_at])
    struct.pack_into(
        ">I", blob, crc_at, zlib.crc32(body, zlib.crc32(blob[11 : 11 + header_length]))
    )
    with pytest.raises(CorruptLogBlockError, match="version 2 is for record-index data blocks"):
        decode_block(blob)


@FAST
@given(st.lists(st.lists(any_blocks(), min_size=1, max_size=3), min_size=1, max_size=3))
def test_appends_to_a_local_file_round_trip(tmp_path_factory, batches: list[list[bytes]]) -> None:
    fs = fsspec.filesystem("file")
    path = str(tmp_path_factory.mktemp("logs") / "sub" / "record_index-0000_1.log")
    for batch in batches:
        append_blocks(fs, path, batch)
    blocks = [b for batch in batches for b in batch]
    expected = list(iter_blocks(b"".join(blocks), path))
    assert read_log_file(fs, path) == expected
    assert fs.size(path) == sum(map(len, blocks))


def test_delete_and_command_blocks() -> None:
    common = dict(instant=INSTANT, partition="record_index", file_group="record_index-0001")
    delete = encode_block(BlockType.DELETE, keys=["a", "b", "c"], **common)
    command = encode_block(
        BlockType.COMMAND, command=Command("rollback", "20231231000000000"), **common
    )
    first, second = iter_blocks(delete + command)
    assert first.keys == ["a", "b", "c"] and first.header.record_count == 3
    assert second.command == Command("rollback", "20231231000000000")
    assert second.header.min_key is None


def test_header_only_reads_check_the_crc_but_skip_the_body() -> None:
    blob = _encode(Partition.FILES, [FilesRecord("p", {"a": 1}, [])])
    block, _ = decode_block(blob, with_records=False)
    assert not block.decoded and block.records == [] and block.header.record_count == 1
    damaged = bytearray(blob)
    damaged[-20] ^= 1  # inside the body
    with pytest.raises(CorruptLogBlockError):
        decode_block(damaged, with_records=False)


# -- encoder checks -----------------------------------------------------------------------


def test_encoder_refuses_unsorted_duplicate_or_foreign_records() -> None:
    a, b = RecordIndexRecord("a", "p", 1, 2, 3), RecordIndexRecord("b", "p", 1, 2, 3)
    with pytest.raises(ValueError, match="out of order"):
        _encode(Partition.RECORD_INDEX, [b, a])
    with pytest.raises(ValueError, match="duplicate"):
        _encode(Partition.RECORD_INDEX, [a, a])
    with pytest.raises(TypeError):
        _encode(Partition.FILES, [a])
    with pytest.raises(ValueError):
        encode_block(
            BlockType.DELETE, instant=INSTANT, partition="files", file_group="f", keys=["b", "a"]
        )
    with pytest.raises(ValueError):
        encode_block(BlockType.DATA, instant=INSTANT, partition="files", file_group="f", keys=["a"])
    with pytest.raises(ValueError):
        encode_block(BlockType.DATA, instant="2024", partition="files", file_group="f")
    with pytest.raises(ValueError):
        encode_block(9, instant=INSTANT, partition="files", file_group="f")
    with pytest.raises(ValueError):
        encode_block(1, instant=INSTANT, partition="files", file_group="f", codec="lz5")


# -- corruption ---------------------------------------------------------------------------


@FAST
@given(any_blocks(), st.data())
def test_any_single_byte_flip_is_detected(blob: bytes, data: st.DataObject) -> None:
    position = data.draw(st.integers(0, len(blob) - 1), label="position")
    xor = data.draw(st.integers(1, 255), label="xor")
    prefix = data.draw(st.sampled_from([b"", _encode(Partition.FILES, [])]), label="prefix")
    damaged = bytearray(prefix + blob)
    damaged[len(prefix) + position] ^= xor
    with pytest.raises(CorruptLogBlockError) as caught:
        decode_block(damaged, len(prefix), "x.log")
    assert caught.value.offset == len(prefix) and caught.value.path == "x.log"
    with pytest.raises(CorruptLogBlockError) as caught:
        list(iter_blocks(damaged, "x.log"))
    assert caught.value.offset == len(prefix)
    with pytest.raises(CorruptLogBlockError) as caught:
        list(iter_blocks_backward(damaged, "x.log"))
    assert caught.value.offset == len(prefix)


def test_every_byte_flip_of_small_blocks_is_detected() -> None:
    common = dict(instant=INSTANT, partition="record_index", file_group="record_index-0000")
    blocks = [
        _encode(Partition.RECORD_INDEX, [RecordIndexRecord("k", "p", 1, 2, 3)]),
        encode_block(
            BlockType.DATA,
            columns=index_columns([RecordIndexRecord("k", "p", 1, 2, 3, True)]),
            min_columnar=0,
            codec="uncompressed",
            **common,
        ),
        encode_block(BlockType.DELETE, keys=["k"], codec="uncompressed", **common),
        encode_block(BlockType.COMMAND, command=Command("rollback", INSTANT), **common),
    ]
    for blob in blocks:
        for position in range(len(blob)):
            for xor in (0x01, 0x02, 0x10, 0x80, 0xFF):
                damaged = bytearray(blob)
                damaged[position] ^= xor
                with pytest.raises(CorruptLogBlockError):
                    decode_block(damaged)


@FAST
@given(any_blocks(), st.data())
def test_truncation_anywhere_names_the_block_start(blob: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(blob) - 1), label="cut")
    with pytest.raises(CorruptLogBlockError) as caught:
        decode_block(blob[:cut], 0, "t.log")
    assert caught.value.offset == 0
    good = _encode(Partition.FILES, [FilesRecord("p", {"a": 1}, [])])
    if cut == 0:
        assert len(list(iter_blocks(good + blob[:cut]))) == 1  # a whole-block boundary
        return
    for walk in (iter_blocks, iter_blocks_backward):
        with pytest.raises(CorruptLogBlockError) as caught:
            list(walk(good + blob[:cut], "t.log"))
        assert caught.value.offset == len(good)


def test_a_good_block_then_a_damaged_one(tmp_path) -> None:
    fs = fsspec.filesystem("file")
    path = str(tmp_path / "files-0000_1.log")
    good = _encode(Partition.FILES, [FilesRecord("p", {"a": 1}, [])])
    bad = bytearray(_encode(Partition.FILES, [FilesRecord("q", {"b": 2}, [])]))
    bad[len(bad) // 2] ^= 0x40
    with open(path, "wb") as handle:
        handle.write(good + bytes(bad))
    with pytest.raises(CorruptLogBlockError) as caught:
        read_log_file(fs, path)
    error = caught.value
    assert error.offset == len(good) and error.path == path
    assert path in str(error) and f"offset {len(good)}" in str(error)
    assert "restore it from a backup or roll back" in str(error)
    with open(path, "rb") as handle:
        data = handle.read()
    first, after = decode_block(data, 0, path)
    assert first.records == [FilesRecord("p", {"a": 1}, [])] and after == len(good)


def test_error_names_the_instant_once_the_header_is_known() -> None:
    blob = reframe(_encode(Partition.FILES, []), block_type=2)
    with pytest.raises(CorruptLogBlockError) as caught:
        decode_block(blob, 0, "h.log")
    assert caught.value.instant == INSTANT and f"roll back instant {INSTANT}" in str(caught.value)


def reframe(blob: bytes, **changes: Any) -> bytes:
    """Re-frame a block with header fields changed and a valid CRC (a well-formed block)."""
    header_length = struct.unpack_from(">I", blob, 7)[0]
    header = msgspec.msgpack.decode(blob[11 : 11 + header_length])
    body_length = struct.unpack_from(">Q", blob, 11 + header_length)[0]
    body = blob[19 + header_length : 19 + header_length + body_length]
    new_header = msgspec.msgpack.encode({**header, **changes})
    crc = zlib.crc32(body, zlib.crc32(new_header))
    return b"".join(
        [
            blob[:7],
            struct.pack(">I", len(new_header)),
            new_header,
            struct.pack(">Q", len(body)),
            body,
            struct.pack(">IQ", crc, OVERHEAD + len(new_header) + len(body)),
        ]
    )


@pytest.mark.parametrize(
    "changes", [{"schema_version": 2}, {"codec": "lz5"}, {"partition": "vector_index"}]
)
def test_well_formed_blocks_of_unsupported_formats(changes: dict[str, Any]) -> None:
    blob = _encode(Partition.FILES, [FilesRecord("p", {"a": 1}, [])])
    assert decode_block(reframe(blob))[0].records  # reframing alone changes nothing
    with pytest.raises(MetadataFormatError) as caught:
        decode_block(reframe(blob, **changes), 0, "u.log")
    assert "u.log" in str(caught.value)


@pytest.mark.parametrize(
    "changes", [{"record_count": 5}, {"max_key": "zz"}, {"raw_length": 1}, {"instant": 7}]
)
def test_well_framed_but_inconsistent_blocks_are_corrupt(changes: dict[str, Any]) -> None:
    blob = _encode(Partition.FILES, [FilesRecord("p", {"a": 1}, [])])
    with pytest.raises(CorruptLogBlockError):
        decode_block(reframe(blob, **changes))


# -- appends ------------------------------------------------------------------------------


def test_non_local_filesystems_create_once() -> None:
    fs = fsspec.filesystem("memory")
    path = "/lakebraid-test/record_index-0000_1.log"
    blob = _encode(Partition.FILES, [])
    try:
        assert append_blocks(fs, path, [blob, blob]) is True  # created: holds just these
        assert len(read_log_file(fs, path)) == 2
        with pytest.raises(MetadataError):
            append_blocks(fs, path, [blob])
    finally:
        fs.rm("/lakebraid-test", recursive=True)


def test_appending_refuses_garbage_and_torn_tails(tmp_path) -> None:
    fs = fsspec.filesystem("file")
    path = str(tmp_path / "files-0000_1.log")
    blob = _encode(Partition.FILES, [FilesRecord("p", {"a": 1}, [])])
    with pytest.raises(ValueError):
        append_blocks(fs, path, [blob[:-1]])
    with pytest.raises(ValueError):
        append_blocks(fs, path, [blob + b"x"])
    assert append_blocks(fs, path, []) is False
    assert not fs.exists(path)
    assert append_blocks(fs, path, [blob]) is True  # created
    assert append_blocks(fs, path, [blob]) is False  # appended to
    assert fs.size(path) == 2 * len(blob)
    with open(path, "ab") as handle:
        handle.write(blob[: len(blob) // 2])  # a torn append
    with pytest.raises(CorruptLogBlockError):
        append_blocks(fs, path, [blob])
    assert fs.size(path) == 2 * len(blob) + len(blob) // 2


@FAST
@given(st.lists(text, max_size=12))
def test_arrow_keys_are_checked_like_a_list(keys: list[str]) -> None:
    """A columnar block's keys: refused exactly when a list of the same keys is (a delete
    block checks its list), else the same header fields (count, min, max)."""

    def header(block_type, **given):
        blob = encode_block(
            block_type,
            instant=INSTANT,
            partition="record_index",
            file_group="g",
            min_columnar=0,
            **given,
        )
        return decode_block(blob, with_records=False)[0].header

    columns = index_columns([RecordIndexRecord(k, "p", 1, 2, 3) for k in keys])
    try:
        expected = header(BlockType.DELETE, keys=keys)
    except ValueError:
        with pytest.raises(ValueError, match="keys not strictly ascending"):
            header(BlockType.DATA, columns=columns)
    else:
        got = header(BlockType.DATA, columns=columns)
        assert (got.record_count, got.min_key, got.max_key) == (
            expected.record_count,
            expected.min_key,
            expected.max_key,
        )
