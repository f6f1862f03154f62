"""Log blocks of the metadata table: this module alone owns their byte format, and reads
it (:func:`decode_block`; log files: :func:`iter_blocks`, :func:`iter_blocks_backward`,
:func:`read_log_file`). ``metadata.logwrite`` writes blocks and log files from the layout
constants defined here.

Format version 2 (version 1 is still read). A log file is a plain concatenation of blocks; a
block is::

    offset         size  field
    0              4     magic b"LBLK"
    4              2     format version (u16): 1 or 2 (below)
    6              1     block type (u8): 1 data, 2 delete, 3 command
    7              4     header length H (u32)
    11             H     header: msgpack map of BlockHeader (below)
    11+H           8     body length B (u64)
    19+H           B     body, compressed with the header's codec
    19+H+B         4     CRC32 (zlib.crc32, IEEE) of the H header bytes then the B body bytes
    23+H+B         8     total block length (u64) = 31 + H + B, so readers can walk backwards

All integers are big-endian and fixed width. The header is a msgpack map with the keys
``block_type`` (copy of byte 6), ``instant`` (17-digit instant time that wrote the block),
``partition`` (files / column_stats / record_index), ``file_group`` (e.g.
``record_index-0007``), ``record_count``, ``min_key`` / ``max_key`` (str, nil when the block has
no keys), ``schema_version`` (of the records, ``metadata.records.SCHEMA_VERSION``), ``codec``
(``"zstd"`` or ``"uncompressed"``), ``body_length`` (copy of B), ``raw_length`` (body length
before compression) and ``extra`` (map str -> str); readers ignore keys they do not know.
The body before compression is

* data block: a msgpack array of records of the header's partition, sorted by key with unique
  keys (record wire format: ``metadata.records``); in a **version 2** block of the
  ``record_index`` partition instead an Arrow IPC stream (one schema, its record batches) of
  the record-index columns (``metadata.indexbody``: ``key``, ``partition``, ``file_id_hi``,
  ``file_id_lo``, ``instant``, ``deleted``), no nulls, keys strictly ascending. Readers
  get it as columns (:attr:`LogBlock.table`), no Python object per entry; a cold reader of a
  50,000-entry block decodes it in milliseconds instead of building 50,000 records;
* delete block: a msgpack array of the keys to delete (str, sorted, unique); each key is
  removed like a tombstone would remove it;
* command block: a msgpack map ``{"kind": str, "target_instant": str, "extra": map}``, e.g.
  ``kind="rollback"`` marks the blocks of ``target_instant`` as rolled back.

Version 2 differs from version 1 in that body alone; writers put version 2 on record-index
data blocks of at least ``metadata.logwrite.COLUMNAR_MIN_ENTRIES`` (512) entries written from
columns (``metadata.logwrite.encode_block(columns=)``) and version 1 on every other block.

Corruption is never silent: every single-byte change is detected, the CRC covering header and
body and structural checks the rest -- magic compared, version must be 1 or 2 (2 only on a
record-index data block), block type must equal
the header's copy, the body length the header's ``body_length``, the trailer 31 + H + B; a
changed header length makes the header a strict prefix of a msgpack value or one followed by
trailing bytes, which does not decode. Any failure raises :class:`CorruptLogBlockError` naming
the file and the byte offset where the block starts; so does a version 2 body that is not a
stream of that schema, holds a null or keys out of order. A well-formed block of an unsupported
partition, codec or record schema version raises :class:`MetadataFormatError`.

A file cut exactly at a block boundary is a valid shorter file: the commit that wrote the log
must record what it wrote if that matters.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterator

import msgspec
import pyarrow as pa
from fsspec import AbstractFileSystem

from lakebraid.metadata.checksum import crc32
from lakebraid.metadata.errors import (
    CorruptLogBlockError,
    MetadataFormatError,
    MetadataValueError,
)
from lakebraid.metadata.indexbody import decode_index_body, index_key_range, index_records
from lakebraid.metadata.records import (
    MetadataRecord,
    Partition,
    check_schema_version,
    decode_records,
)
from lakebraid.timeline.durable import read_bytes

MAGIC = b"LBLK"
FORMAT_VERSION = 1  # of every block but a columnar record-index data block
COLUMNAR_VERSION = 2  # a record-index data block whose body is an Arrow IPC stream
READ_VERSIONS = (FORMAT_VERSION, COLUMNAR_VERSION)
CODECS = ("zstd", "uncompressed")
PREFIX = struct.Struct(">4sHBI")  # magic, version, block type, header length
BODY_LENGTH = struct.Struct(">Q")
SUFFIX = struct.Struct(">IQ")  # crc32, total length
TOTAL = struct.Struct(">Q")  # the trailer's last field, read to walk backwards
OVERHEAD = PREFIX.size + BODY_LENGTH.size + SUFFIX.size  # 31 bytes besides header and body
Corrupt = Callable[..., CorruptLogBlockError]  # builds the error of one block's damage


class BlockType(enum.IntEnum):
    DATA = 1
    DELETE = 2
    COMMAND = 3


_BLOCK_TYPES = frozenset(t.value for t in BlockType)


class BlockHeader(msgspec.Struct, frozen=True):
    block_type: int
    instant: str
    partition: str
    file_group: str
    record_count: int
    min_key: str | None
    max_key: str | None
    schema_version: int
    codec: str
    body_length: int
    raw_length: int
    extra: dict[str, str] = {}


class Command(msgspec.Struct, frozen=True):
    """The body of a command block."""

    kind: str  # e.g. "rollback"
    target_instant: str
    extra: dict[str, str] = {}


class LogBlock(msgspec.Struct, frozen=True):
    """A decoded block. ``records`` (data), ``keys`` (delete) or ``command`` (command) hold the
    payload, or ``table`` (``metadata.indexbody``'s columns) for a version 2 record-index data
    block (:func:`block_records` gives records of either); ``decoded`` is False when the
    block was read with ``with_records=False``."""

    path: str
    offset: int
    size: int
    block_type: BlockType
    header: BlockHeader
    records: list[MetadataRecord] = []
    keys: list[str] = []
    command: Command | None = None
    decoded: bool = True
    version: int = FORMAT_VERSION
    table: pa.Table | None = None

    @property
    def instant(self) -> str:
        return self.header.instant

    @property
    def partition(self) -> Partition:
        return Partition(self.header.partition)

    @property
    def file_group(self) -> str:
        return self.header.file_group


_HEADER_DECODER = msgspec.msgpack.Decoder(BlockHeader)
_KEYS_DECODER = msgspec.msgpack.Decoder(list[str])
_COMMAND_DECODER = msgspec.msgpack.Decoder(Command)
_CODEC_CACHE: dict[tuple[str, int | None], pa.Codec] = {}


def block_codec(name: str, level: int | None = None) -> pa.Codec | None:
    """The compressor of a block codec (None: uncompressed), one per (name, level)."""
    if name == "uncompressed":
        return None
    if name != "zstd":
        raise MetadataFormatError(f"log block codec {name!r} is not supported ({CODECS})")
    codec = _CODEC_CACHE.get((name, level))
    if codec is None:
        codec = _CODEC_CACHE[(name, level)] = pa.Codec(name, compression_level=level)
    return codec


# -- decoding ------------------------------------------------------------------------------


def decode_block(
    buf: bytes | bytearray | memoryview,
    offset: int = 0,
    path: str = "<memory>",
    *,
    with_records: bool = True,
) -> tuple[LogBlock, int]:
    """Decode the block starting at ``buf[offset]``; returns it and the offset after it.

    ``with_records=False`` checks structure and CRC but leaves the body compressed (the
    payload fields stay empty, ``decoded`` is False)."""
    view = memoryview(buf).cast("B")
    if not 0 <= offset <= len(view):
        raise MetadataValueError(f"offset {offset} is outside the {len(view)} bytes given")

    def corrupt(reason: str, instant: str | None = None) -> CorruptLogBlockError:
        return CorruptLogBlockError(reason, path=path, offset=offset, instant=instant)

    version, type_byte, header_bytes, body = _frame_at(view, offset, corrupt)
    header = _header(header_bytes, type_byte, len(body), corrupt)
    try:
        Partition(header.partition)
    except ValueError:
        raise MetadataFormatError(
            f"{path} at byte offset {offset}: unknown metadata partition {header.partition!r}",
            instant=header.instant,
        ) from None
    columnar = type_byte == BlockType.DATA and header.partition == Partition.RECORD_INDEX
    if version == COLUMNAR_VERSION and not columnar:
        raise corrupt(
            f"a {header.partition} block of type {type_byte} in format version 2 (version 2 is "
            "for record-index data blocks only)",
            header.instant,
        )
    total = OVERHEAD + len(header_bytes) + len(body)
    block = LogBlock(
        path, offset, total, BlockType(type_byte), header, decoded=with_records, version=version
    )
    if with_records:
        block = _decode_body(block, body, corrupt)
    return block, offset + total


def _frame_at(
    view: memoryview, offset: int, corrupt: Corrupt
) -> tuple[int, int, memoryview, memoryview]:
    """The format version, block type byte, header bytes and body of the block at
    ``offset``, its framing (magic, version, type, lengths, trailer) and CRC checked."""
    remaining = len(view) - offset
    if remaining < PREFIX.size:
        raise corrupt(f"truncated: {remaining} bytes left, a block takes at least {OVERHEAD}")
    magic, version, type_byte, header_length = PREFIX.unpack_from(view, offset)
    if magic != MAGIC:
        raise corrupt(f"bad magic {bytes(magic)!r} (expected {MAGIC!r})")
    if version not in READ_VERSIONS:
        raise corrupt(f"unsupported format version {version} (this lakebraid reads 1 and 2)")
    if type_byte not in _BLOCK_TYPES:
        raise corrupt(f"unknown block type {type_byte}")
    body_at = offset + PREFIX.size + header_length + BODY_LENGTH.size
    if body_at > len(view):
        raise corrupt(f"truncated or bad header length {header_length}: {remaining} bytes left")
    (body_length,) = BODY_LENGTH.unpack_from(view, body_at - BODY_LENGTH.size)
    total = OVERHEAD + header_length + body_length
    if total > remaining:
        raise corrupt(
            f"truncated or bad length: the block needs {total} bytes, {remaining} are left"
        )
    crc, stored_total = SUFFIX.unpack_from(view, offset + total - SUFFIX.size)
    if stored_total != total:
        raise corrupt(f"length mismatch: trailer says {stored_total} bytes, fields say {total}")
    header_bytes = view[offset + PREFIX.size : offset + PREFIX.size + header_length]
    body = view[body_at : body_at + body_length]
    computed = crc32(body, crc32(header_bytes))
    if computed != crc:
        raise corrupt(f"CRC mismatch: stored {crc:#010x}, computed {computed:#010x}")
    return version, type_byte, header_bytes, body


def _header(
    header_bytes: memoryview, type_byte: int, body_length: int, corrupt: Corrupt
) -> BlockHeader:
    """The decoded header, checked against the framing's copies of its fields."""
    try:
        header = _HEADER_DECODER.decode(header_bytes)
    except msgspec.DecodeError as exc:
        raise corrupt(f"undecodable header: {exc}") from None
    if header.block_type != type_byte:
        raise corrupt(
            f"block type byte {type_byte} does not match the header's {header.block_type}",
            header.instant,
        )
    if header.body_length != body_length:
        raise corrupt(
            f"length mismatch: body length {body_length}, header says {header.body_length}",
            header.instant,
        )
    return header


def _decode_body(block: LogBlock, body: memoryview, corrupt: Corrupt) -> LogBlock:
    """``block`` with its payload: the body decompressed, decoded and checked against the
    header's count and key range."""
    header = block.header
    try:
        decompressor = block_codec(header.codec)
        check_schema_version(header.schema_version)
    except MetadataFormatError as exc:
        raise MetadataFormatError(
            f"{block.path} at byte offset {block.offset}: {exc.message}", instant=header.instant
        ) from None
    try:
        if decompressor is None:
            raw: bytes | memoryview = body
        else:
            raw = decompressor.decompress(body, decompressed_size=header.raw_length, asbytes=True)
        if len(raw) != header.raw_length:
            raise MetadataValueError(
                f"{len(raw)} bytes after decompression, expected {header.raw_length}"
            )
        if block.version == COLUMNAR_VERSION:
            table = decode_index_body(raw)
            found = index_key_range(table)
            block = msgspec.structs.replace(block, table=table)
        elif block.block_type is BlockType.DATA:
            records = decode_records(header.partition, raw, header.schema_version)
            found = (len(records), records[0].key, records[-1].key) if records else (0, None, None)
            block = msgspec.structs.replace(block, records=records)
        elif block.block_type is BlockType.DELETE:
            keys = _KEYS_DECODER.decode(raw)
            found = (len(keys), keys[0], keys[-1]) if keys else (0, None, None)
            block = msgspec.structs.replace(block, keys=keys)
        else:
            command = _COMMAND_DECODER.decode(raw)
            found = 0, None, None
            block = msgspec.structs.replace(block, command=command)
    except (OSError, ValueError, msgspec.DecodeError, pa.ArrowException) as exc:
        raise corrupt(f"undecodable body: {exc}", header.instant) from None
    expected = header.record_count, header.min_key, header.max_key
    if found != expected:
        raise corrupt(
            f"body holds (count, min key, max key) {found}, header says {expected}",
            header.instant,
        )
    return block


def block_records(block: LogBlock) -> list[MetadataRecord]:
    """A data block's records, from ``records`` or a version 2 block's columns."""
    return block.records if block.table is None else index_records(block.table)


# -- log files -----------------------------------------------------------------------------


def iter_blocks(
    data: bytes | bytearray | memoryview, path: str = "<memory>", *, with_records: bool = True
) -> Iterator[LogBlock]:
    """The blocks of a log file's bytes, first to last."""
    offset, end = 0, len(memoryview(data).cast("B"))
    while offset < end:
        block, offset = decode_block(data, offset, path, with_records=with_records)
        yield block


def iter_blocks_backward(
    data: bytes | bytearray | memoryview, path: str = "<memory>", *, with_records: bool = True
) -> Iterator[LogBlock]:
    """The blocks of a log file's bytes, last to first, found through the trailing lengths.

    When the walk meets damage, the file is also checked forwards so the error names the start
    of the first damaged block; only when the start cannot be found at all does it name the
    offset of the trailer it could not follow."""
    view = memoryview(data).cast("B")
    end = len(view)
    while end > 0:
        try:
            if end < OVERHEAD:
                raise CorruptLogBlockError(
                    f"truncated: {end} bytes before this point cannot hold a block",
                    path=path,
                    offset=0,
                )
            (total,) = TOTAL.unpack_from(view, end - TOTAL.size)
            if not OVERHEAD <= total <= end:
                raise CorruptLogBlockError(
                    f"trailer at byte {end - TOTAL.size} gives a block length of {total}, "
                    f"impossible with {end} bytes before it; the block's start is unknown",
                    path=path,
                    offset=end - TOTAL.size,
                )
            block, after = decode_block(view, end - total, path, with_records=with_records)
            if after != end:
                raise CorruptLogBlockError(
                    f"the block ends at byte {after}, its trailer at byte {end}",
                    path=path,
                    offset=end - total,
                )
        except CorruptLogBlockError as backward_error:
            for _ in iter_blocks(view, path, with_records=False):  # raises the precise error
                pass
            raise backward_error
        yield block
        end -= total


def read_log_file(
    fs: AbstractFileSystem, path: str, *, with_records: bool = True
) -> list[LogBlock]:
    """Every block of a log file, first to last (the whole file is read at once: one GET on
    an object store)."""
    data = read_bytes(fs, path)
    return list(iter_blocks(data, path, with_records=with_records))
