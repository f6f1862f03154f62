"""Merge-on-read data log blocks: rows and keys round-trip, footers rule blocks and slices in
and out exactly as their keys say, every damaged byte is an error naming file and offset,
and the hex sample of docs/format.md decodes to what the text says."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.datalog import (
    BODY_LENGTH,
    OVERHEAD,
    PREFIX,
    BlockType,
    _encode,
    decode_block,
    encode_data_block,
    encode_delete_block,
    iter_blocks,
    read_last_footer,
)
from lakebraid.index.keys import RECORD_KEY
from lakebraid.writers.errors import CorruptDataLogError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "format.md"
key_lists = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=40, unique=True)


def rows_of(keys: list[str], salt: int) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "id": keys,
            "amount": pa.array([None if i % 5 == salt % 5 else i * 1.5 for i in range(n)]),
            "_braid_commit_time": ["20261126000000000"] * n,
            RECORD_KEY: keys,
        }
    )


@settings(max_examples=40, deadline=None)
@given(blocks=st.lists(st.tuples(key_lists, st.booleans(), st.booleans()), min_size=1, max_size=4))
def test_blocks_round_trip_and_footers_cover_their_keys(
    tmp_path_factory, blocks: list[tuple[list[str], bool, bool]]
) -> None:
    """Blocks of either body codec (compressed or not), mixed in one file."""
    path = str(tmp_path_factory.mktemp("log") / "f.log")
    data, previous, seen = b"", None, []
    for n, (keys, delete, compressed) in enumerate(blocks):
        where = dict(
            instant=f"2026112600000{n:04d}",
            partition="day=1",
            file_id="fg-1",
            compressed=compressed,
        )
        if delete:
            block, previous = encode_delete_block(pa.array(keys), previous=previous, **where)
        else:
            block, previous = encode_data_block(rows_of(keys, n), previous=previous, **where)
        data += block
        seen.append((keys, delete, n))
    fs = fsspec.filesystem("file")
    fs.pipe_file(path, data)
    decoded = list(iter_blocks(fs, path))
    assert [b.offset for b in decoded] == [
        sum(x.size for x in decoded[:i]) for i in range(len(decoded))
    ]
    everything: set[str] = set()
    for block, (keys, delete, n) in zip(decoded, seen, strict=True):
        assert block.block_type is (BlockType.DELETE if delete else BlockType.DATA)
        assert block.keys.to_pylist() == sorted(keys)
        if not delete:
            expected = rows_of(keys, n).sort_by(RECORD_KEY)
            assert block.rows.equals(expected)
        assert all(block.footer.may_hold(k) for k in keys)
        assert (block.footer.min_key, block.footer.max_key) == (min(keys), max(keys))
        everything |= set(keys)
        assert all(block.footer.slice_may_hold(k) for k in everything)
        assert block.footer.slice.blocks == n + 1
    last = read_last_footer(fs, path, len(data))
    assert last == decoded[-1].footer
    assert (last.slice.min_key, last.slice.max_key) == (min(everything), max(everything))
    wanted = [*sorted(everything)[::3], "\x00", "~absent~"]  # a key read: no holder skipped
    kept = list(iter_blocks(fs, path, pa.array(wanted)))
    holders = [b.offset for b in decoded if set(b.keys.to_pylist()) & set(wanted)]
    assert holders == [b.offset for b in kept if set(b.keys.to_pylist()) & set(wanted)]
    assert {b.offset for b in kept} <= {b.offset for b in decoded}
    beyond = max(everything) + "~"  # after every block's key range: every block skipped
    assert list(iter_blocks(fs, path, pa.array([beyond]))) == []


def test_a_key_outside_every_block_is_ruled_out_by_the_last_footer() -> None:
    block, _ = encode_data_block(
        rows_of([f"k{i:04d}" for i in range(0, 2000, 2)], 0),
        instant="20261126000000001",
        partition="",
        file_id="fg",
    )
    footer = decode_block(block, 0, "f.log").footer
    strangers = [f"k{i:04d}" for i in range(1, 2000, 2)] + ["a", "z"]
    ruled_in = sum(footer.slice_may_hold(k) for k in strangers)
    assert not footer.slice_may_hold("a") and not footer.slice_may_hold("z")
    assert ruled_in < 0.03 * len(strangers)  # only the bloom's false positives


def test_every_damaged_byte_is_an_error_naming_file_and_offset(tmp_path) -> None:
    first, prev = encode_delete_block(
        pa.array(["a"]), instant="20261126000000001", partition="", file_id="g"
    )
    second, _ = encode_data_block(
        rows_of(["b", "c"], 1),
        instant="20261126000000002",
        partition="",
        file_id="g",
        previous=prev,
        compressed=False,  # the first block's body is compressed, this one's is not
    )
    data = first + second
    path = str(tmp_path / "g.log")
    fs = fsspec.filesystem("file")
    for at in range(len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0x01
        fs.pipe_file(path, bytes(damaged))
        with pytest.raises(CorruptDataLogError) as caught:
            list(iter_blocks(fs, path))
        assert caught.value.path == path
        assert caught.value.offset == (0 if at < len(first) else len(first)), at
        assert path in str(caught.value) and f"byte {caught.value.offset}" in str(caught.value)
    for cut in (len(data) - 1, len(first) + OVERHEAD - 1, 5):
        fs.pipe_file(path, data[:cut])
        with pytest.raises(CorruptDataLogError):
            list(iter_blocks(fs, path))


@pytest.mark.parametrize(
    ("keys", "why"),
    [([], "needs keys"), (["a", "a"], "each key once"), (["a", None], "none of them null")],
)
def test_blocks_refuse_keys_they_cannot_index(keys: list[str | None], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        encode_delete_block(
            pa.array(keys, pa.string()), instant="20261126000000001", partition="", file_id="g"
        )


def test_the_hex_sample_of_the_format_doc_decodes_as_documented() -> None:
    text = DOCS.read_text()
    section = text[text.index("Merge-on-read data log blocks") :]
    sample = re.search(r"```text\n(.*?)```", section, re.S)
    assert sample is not None
    data = bytes.fromhex("".join(line.split("  ")[1] for line in sample.group(1).splitlines()))
    block = decode_block(data, 0, "sample.log")
    assert block.block_type is BlockType.DELETE
    assert block.header.instant == "20261126101500000" and block.header.file_id == "fg-0001"
    assert block.keys.to_pylist() == ["trip-1", "trip-2"]
    assert block.footer.slice.blocks == 1 and block.size == len(data)


@pytest.mark.parametrize("reread", [False, True])
def test_the_slice_filter_grows_from_earlier_keys_or_is_dropped(reread: bool) -> None:
    """A 64-bit slice filter holds 6 keys at 10 bits each: the seventh key either rebuilds it
    from the earlier blocks' keys (when the writer read them) or leaves no slice filter."""
    previous, keys = None, []
    for n in range(7):
        key = f"key-{n}"
        earlier = pa.array(keys, pa.string()) if reread else None
        _, previous = encode_delete_block(
            pa.array([key]),
            instant=f"2026112600000{n:04d}",
            partition="",
            file_id="g",
            previous=previous,
            earlier_keys=earlier,
        )
        keys.append(key)
    assert previous is not None and previous.keys == 7 and previous.blocks == 7
    if reread:
        assert previous.bloom is not None and len(previous.bloom) == 1 + 128 // 8
    else:
        assert previous.bloom is None


def crafted(rows: pa.Table) -> bytes:
    """A block of ``rows`` as given (not sorted, not checked), with valid CRC32s: what only a
    faulty or hostile writer produces."""
    block, _ = _encode(BlockType.DATA, rows, "20261126000000001", "", "g", None, None, None)
    return block


def test_a_body_unsafe_to_read_is_refused_despite_its_crc() -> None:
    note = pa.Array.from_buffers(
        pa.string(),
        3,
        [None, pa.py_buffer(np.array([0, 2, 1, 3], np.int32).tobytes()), pa.py_buffer(b"abc")],
    )
    rows = pa.table({"note": note, RECORD_KEY: ["a", "b", "c"]})
    for thorough in (False, True):
        with pytest.raises(CorruptDataLogError, match="not an Arrow stream"):
            decode_block(crafted(rows), 0, "f.log", thorough=thorough)


def test_unsorted_keys_are_read_and_refused_by_a_thorough_check() -> None:
    rows = pa.table({"id": ["b", "a"], RECORD_KEY: ["b", "a"]})
    block = decode_block(crafted(rows), 0, "f.log")  # a read: the merge sorts what it compares
    assert block.rows.column(RECORD_KEY).to_pylist() == ["b", "a"]
    with pytest.raises(CorruptDataLogError, match="not sorted and unique"):
        decode_block(crafted(rows), 0, "f.log", thorough=True)
    offsets = pa.py_buffer(np.array([0, 1], np.int32).tobytes())
    text = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff")])
    bad_text = pa.table({"note": text, RECORD_KEY: ["a"]})
    decode_block(crafted(bad_text), 0, "f.log")
    with pytest.raises(CorruptDataLogError, match="not an Arrow stream"):
        decode_block(crafted(bad_text), 0, "f.log", thorough=True)
    block = crafted(pa.table({RECORD_KEY: ["QQQQ"]})).replace(b"QQQQ", b"\xff\xfe\xfd\xfc", 1)
    with pytest.raises(CorruptDataLogError, match="not UTF-8"):
        decode_block(recrc(block), 0, "f.log")  # the footer's copy of the key left as it was


def recrc(block: bytes) -> bytes:
    """``block`` with its header-and-body CRC32 computed afresh."""
    h = PREFIX.unpack_from(block, 0)[3]
    (b,) = BODY_LENGTH.unpack_from(block, PREFIX.size + h)
    start = PREFIX.size + h + BODY_LENGTH.size
    crc = zlib.crc32(block[start : start + b], zlib.crc32(block[PREFIX.size : PREFIX.size + h]))
    return block[:-12] + crc.to_bytes(4, "big") + block[-8:]


def test_an_empty_log_and_a_block_of_another_file_are_refused(tmp_path) -> None:
    """A log copied or renamed over another passes every checksum: each block's header must
    name the file group and instant of its file's name. An empty file holds no block."""
    from lakebraid.timeline.layout import data_file_name

    G1, G2 = "00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"
    fs = fsspec.filesystem("file")
    block, _ = encode_data_block(
        rows_of(["a", "b"], 0), instant="20261126000000002", partition="", file_id=G1
    )
    own = tmp_path / data_file_name(G1, "0-0", "20261126000000002", "log")
    fs.pipe_file(str(own), block)
    assert [b.rows.num_rows for b in iter_blocks(fs, str(own))] == [2]
    for fid, time, named in (
        (G2, "20261126000000002", f"file group {G1}"),
        (G1, "20261126000000003", "commit 20261126000000002"),
    ):
        other = tmp_path / data_file_name(fid, "0-0", time, "log")
        fs.pipe_file(str(other), block)
        for keys in (None, pa.array(["a"])):  # a read of all keys, and of some
            with pytest.raises(CorruptDataLogError) as caught:
                list(iter_blocks(fs, str(other), keys))
            assert named in str(caught.value) and "copied or renamed" in str(caught.value)
            assert caught.value.path == str(other) and caught.value.offset == 0
    fs.pipe_file(str(own), b"")
    with pytest.raises(CorruptDataLogError, match="the file is empty"):
        list(iter_blocks(fs, str(own)))


def test_the_last_footer_of_a_file_of_another_size_than_listed_is_refused(tmp_path) -> None:
    fs = fsspec.filesystem("file")
    block, _ = encode_data_block(
        rows_of(["a", "b"], 0), instant="20261126000000002", partition="", file_id="g"
    )
    path = str(tmp_path / "g.log")
    fs.pipe_file(path, block)
    assert read_last_footer(fs, path, len(block)).max_key == "b"
    for listed, says in ((len(block) + 7, "ends before"), (len(block) - 7, "runs past")):
        with pytest.raises(CorruptDataLogError, match=f"the file {says} the {listed} bytes"):
            read_last_footer(fs, path, listed)


def test_the_last_footer_of_a_log_of_another_file_is_refused(tmp_path) -> None:
    """A log copied over another of the same size: the last block's header names another file
    group. A small block's header is in the tail read; a large one's is read apart."""
    from lakebraid.timeline.layout import data_file_name

    fs = fsspec.filesystem("file")
    mine = "00000000-0000-0000-0000-000000000001"
    for n in (3, 3000):  # one block under TAIL_READ, one over
        keys = [f"{i:060d}" for i in range(n)]
        block, _ = encode_data_block(
            rows_of(keys, 0), instant="20261126000000002", partition="", file_id=mine
        )
        own = str(tmp_path / data_file_name(mine, "0-0", "20261126000000002", "log"))
        fs.pipe_file(own, block)
        assert read_last_footer(fs, own, len(block)).max_key == keys[-1]
        other = str(
            tmp_path / data_file_name(mine.replace("1", "2"), "0-0", "20261126000000002", "log")
        )
        fs.pipe_file(other, block)
        with pytest.raises(CorruptDataLogError, match=f"for file group {mine}, not for the file"):
            read_last_footer(fs, other, len(block))
