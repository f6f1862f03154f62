"""Log blocks of the metadata table: this module alone owns their byte format.

Format version 1. A log file is a plain concatenation of blocks; a block is::

    offset         size  field
    0              4     magic b"LBLK"
    4              2     format version (u16) = 1
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
  keys (record wire format: ``metadata.records``);
* delete block: a msgpack array of the keys to delete (str, sorted, unique); each key is
  removed like a tombstone would remove it;
* command block: a msgpack map ``{"kind": str, "target_instant": str, "extra": map}``, e.g.
  ``kind="rollback"`` marks the blocks of ``target_instant`` as rolled back.

Corruption is never silent: every single-byte change is detected, the CRC covering header and
body and structural checks the rest -- magic compared, version must be 1, block type must equal
the header's copy, the body length the header's ``body_length``, the trailer 31 + H + B; a
changed header length makes the header a strict prefix of a msgpack value or one followed by
trailing bytes, which does not decode. Any failure raises :class:`CorruptLogBlockError` naming
the file and the byte offset where the block starts. A well-formed block of an unsupported
partition, codec or record schema version raises :class:`MetadataFormatError`.

A file cut exactly at a block boundary is a valid shorter file: the commit that wrote the log
must record what it wrote if that matters.
"""

from __future__ import annotations

import enum
import operator
import os
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from lakebraid.metadata.errors import (
    CorruptLogBlockError,
    MetadataError,
    MetadataFormatError,
    MetadataTypeError,
    MetadataValueError,
)
from lakebraid.metadata.files import local_path
from lakebraid.metadata.records import (
    SCHEMA_VERSION,
    MetadataRecord,
    Partition,
    check_schema_version,
    decode_records,
    encode_records,
    instant_to_int,
)
from lakebraid.timeline.store import fsync_dir

MAGIC = b"LBLK"
FORMAT_VERSION = 1
CODECS = ("zstd", "uncompressed")
_PREFIX = struct.Struct(">4sHBI")  # magic, version, block type, header length
_BODY_LENGTH = struct.Struct(">Q")
_SUFFIX = struct.Struct(">IQ")  # crc32, total length
_TOTAL = struct.Struct(">Q")
OVERHEAD = _PREFIX.size + _BODY_LENGTH.size + _SUFFIX.size  # 31 bytes besides header and body
_U32_MAX = (1 << 32) - 1
_KEY = operator.attrgetter("key")


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
    payload; ``decoded`` is False when the block was read with ``with_records=False``."""

    path: str
    offset: int
    size: int
    block_type: BlockType
    header: BlockHeader
    records: list[MetadataRecord] = []
    keys: list[str] = []
    command: Command | None = None
    decoded: bool = True

    @property
    def instant(self) -> str:
        return self.header.instant

    @property
    def partition(self) -> Partition:
        return Partition(self.header.partition)

    @property
    def file_group(self) -> str:
        return self.header.file_group


_ENCODER = msgspec.msgpack.Encoder()
_HEADER_DECODER = msgspec.msgpack.Decoder(BlockHeader)
_KEYS_DECODER = msgspec.msgpack.Decoder(list[str])
_COMMAND_DECODER = msgspec.msgpack.Decoder(Command)
_CODEC_CACHE: dict[tuple[str, int | None], pa.Codec] = {}


def _codec(name: str, level: int | None = None) -> pa.Codec | None:
    if name == "uncompressed":
        return None
    if name != "zstd":
        raise MetadataFormatError(f"log block codec {name!r} is not supported ({CODECS})")
    codec = _CODEC_CACHE.get((name, level))
    if codec is None:
        codec = _CODEC_CACHE[(name, level)] = pa.Codec(name, compression_level=level)
    return codec


# -- encoding ------------------------------------------------------------------------------


def encode_block(
    block_type: BlockType | int,
    *,
    instant: str,
    partition: Partition | str,
    file_group: str,
    records: Sequence[MetadataRecord] = (),
    keys: Sequence[str] = (),
    command: Command | None = None,
    encoded: tuple[pa.Array, bytes] | None = None,
    extra: Mapping[str, str] | None = None,
    codec: str = "zstd",
    compression_level: int | None = None,
) -> bytes:
    """One encoded block: ``records`` for a data block (sorted by key, keys unique), ``keys``
    for a delete block (sorted, unique), ``command`` for a command block. A data block may
    instead take ``encoded=(keys, body)``: records already encoded in the record wire format
    (``metadata.arrow_records.encode_index_columns``), with their sorted, unique keys as an
    Arrow string array (checked with Arrow kernels).

    Raises ``ValueError`` / ``TypeError`` for arguments the format cannot hold (unsorted or
    duplicate keys, records of another partition, a malformed instant, ...)."""
    block_type = BlockType(block_type)
    partition = Partition(partition)
    instant_to_int(instant)
    if not file_group:
        raise MetadataValueError("file_group must not be empty")
    if codec not in CODECS:
        raise MetadataValueError(f"codec must be one of {CODECS}, not {codec!r}")
    extra = dict(extra or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in extra.items()):
        raise MetadataTypeError("extra must map str to str")
    given = {
        "records": bool(records) or encoded is not None,
        "keys": bool(keys),
        "command": command is not None,
    }
    allowed = {BlockType.DATA: "records", BlockType.DELETE: "keys", BlockType.COMMAND: "command"}
    wrong = [name for name, present in given.items() if present and name != allowed[block_type]]
    if wrong:
        raise MetadataValueError(
            f"a {block_type.name.lower()} block cannot carry {', '.join(wrong)}"
        )
    block_keys: list[str] = []
    ends: tuple[int, str | None, str | None] | None = None  # record count, min and max key
    if block_type is BlockType.DATA and encoded is not None:
        ends = _arrow_bounds(encoded[0])
        raw = encoded[1]
    elif block_type is BlockType.DATA:
        block_keys = list(map(_KEY, records))
        _check_sorted(block_keys)
        raw = encode_records(partition, records)
    elif block_type is BlockType.DELETE:
        block_keys = list(keys)
        if not all(isinstance(k, str) for k in block_keys):
            raise MetadataTypeError("delete blocks carry str keys")
        _check_sorted(block_keys)
        raw = _ENCODER.encode(block_keys)
    else:
        if not isinstance(command, Command):
            raise MetadataValueError("a command block needs a Command")
        raw = _ENCODER.encode(command)
    if ends is None:
        first, last = (block_keys[0], block_keys[-1]) if block_keys else (None, None)
        ends = (len(block_keys), first, last)
    compressor = _codec(codec, compression_level)
    body = raw if compressor is None else compressor.compress(raw, asbytes=True)
    header = _ENCODER.encode(
        BlockHeader(
            block_type=int(block_type),
            instant=instant,
            partition=str(partition),
            file_group=file_group,
            record_count=ends[0],
            min_key=ends[1],
            max_key=ends[2],
            schema_version=SCHEMA_VERSION,
            codec=codec,
            body_length=len(body),
            raw_length=len(raw),
            extra=extra,
        )
    )
    if len(header) > _U32_MAX:
        raise MetadataValueError("block header too large")
    crc = zlib.crc32(body, zlib.crc32(header))
    total = OVERHEAD + len(header) + len(body)
    return b"".join(
        (
            _PREFIX.pack(MAGIC, FORMAT_VERSION, int(block_type), len(header)),
            header,
            _BODY_LENGTH.pack(len(body)),
            body,
            _SUFFIX.pack(crc, total),
        )
    )


def _arrow_bounds(keys: pa.Array) -> tuple[int, str | None, str | None]:
    """Check an Arrow string column is sorted and unique (UTF-8 byte order, which is code
    point order, as :func:`_check_sorted`); returns its length, first and last key."""
    if keys.null_count:
        raise MetadataTypeError("block keys must not be null")
    if len(keys) > 1:
        ordered = pc.less(keys.slice(0, len(keys) - 1), keys.slice(1))
        if not pc.all(ordered).as_py():
            i = int(pc.index(ordered, False).as_py()) + 1
            before, key = keys[i - 1].as_py(), keys[i].as_py()
            problem = "duplicate" if before == key else "out of order"
            raise MetadataValueError(
                f"block keys must be sorted and unique: key {i} {key!r} is {problem}"
            )
    if len(keys) == 0:
        return 0, None, None
    return len(keys), keys[0].as_py(), keys[-1].as_py()


def _check_sorted(keys: list[str]) -> None:
    if all(map(operator.lt, keys, keys[1:])):
        return
    i = next(i for i in range(1, len(keys)) if not keys[i - 1] < keys[i])
    problem = "duplicate" if keys[i - 1] == keys[i] else "out of order"
    raise MetadataValueError(
        f"block keys must be sorted and unique: key {i} {keys[i]!r} is {problem}"
    )


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

    remaining = len(view) - offset
    if remaining < _PREFIX.size:
        raise corrupt(f"truncated: {remaining} bytes left, a block takes at least {OVERHEAD}")
    magic, version, type_byte, header_length = _PREFIX.unpack_from(view, offset)
    if magic != MAGIC:
        raise corrupt(f"bad magic {bytes(magic)!r} (expected {MAGIC!r})")
    if version != FORMAT_VERSION:
        raise corrupt(f"unsupported format version {version} (this lakebraid reads 1)")
    if type_byte not in _BLOCK_TYPES:
        raise corrupt(f"unknown block type {type_byte}")
    body_at = offset + _PREFIX.size + header_length + _BODY_LENGTH.size
    if body_at > len(view):
        raise corrupt(f"truncated or bad header length {header_length}: {remaining} bytes left")
    (body_length,) = _BODY_LENGTH.unpack_from(view, body_at - _BODY_LENGTH.size)
    total = OVERHEAD + header_length + body_length
    if total > remaining:
        raise corrupt(
            f"truncated or bad length: the block needs {total} bytes, {remaining} are left"
        )
    crc, stored_total = _SUFFIX.unpack_from(view, offset + total - _SUFFIX.size)
    if stored_total != total:
        raise corrupt(f"length mismatch: trailer says {stored_total} bytes, fields say {total}")
    header_bytes = view[offset + _PREFIX.size : offset + _PREFIX.size + header_length]
    body = view[body_at : body_at + body_length]
    computed = zlib.crc32(body, zlib.crc32(header_bytes))
    if computed != crc:
        raise corrupt(f"CRC mismatch: stored {crc:#010x}, computed {computed:#010x}")
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
    try:
        Partition(header.partition)
    except ValueError:
        raise MetadataFormatError(
            f"{path} at byte offset {offset}: unknown metadata partition {header.partition!r}",
            instant=header.instant,
        ) from None
    block = LogBlock(path, offset, total, BlockType(type_byte), header, decoded=with_records)
    if with_records:
        block = _decode_body(block, body, corrupt)
    return block, offset + total


def _decode_body(
    block: LogBlock, body: memoryview, corrupt: Callable[[str, str], CorruptLogBlockError]
) -> LogBlock:
    header = block.header
    try:
        decompressor = _codec(header.codec)
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
        if block.block_type is BlockType.DATA:
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
            (total,) = _TOTAL.unpack_from(view, end - _TOTAL.size)
            if not OVERHEAD <= total <= end:
                raise CorruptLogBlockError(
                    f"trailer at byte {end - _TOTAL.size} gives a block length of {total}, "
                    f"impossible with {end} bytes before it; the block's start is unknown",
                    path=path,
                    offset=end - _TOTAL.size,
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
    """Every block of a log file, first to last (the whole file is read at once)."""
    with fs.open(path, "rb") as handle:
        data = handle.read()
    return list(iter_blocks(data, path, with_records=with_records))


def append_blocks(fs: AbstractFileSystem, path: str, blocks: Sequence[bytes]) -> None:
    """Append encoded blocks to a log file, creating it if needed.

    On a local filesystem the blocks are appended (mode ``"ab"``) and fsync-ed; an existing
    file must end with a whole, intact block (a torn tail is never built upon). Other fsspec
    filesystems cannot append: the file is created with all the blocks at once, and
    ``MetadataError`` is raised if it already exists. Nothing happens for an empty list."""
    for i, blob in enumerate(blocks):
        try:
            _, after = decode_block(blob, 0, path, with_records=False)
        except (CorruptLogBlockError, MetadataFormatError) as exc:
            raise MetadataValueError(f"blocks[{i}] is not a valid encoded block: {exc}") from None
        if after != len(blob):
            raise MetadataValueError(f"blocks[{i}] holds {len(blob) - after} bytes after its block")
    if not blocks:
        return
    local = local_path(fs, path)
    if local is None:
        if fs.exists(path):
            raise MetadataError(
                f"cannot append to {path}: {type(fs).__name__} does not support appends, "
                "so log files on it are written once"
            )
        with fs.open(path, "wb") as handle:
            handle.write(b"".join(blocks))
        return
    folder = os.path.dirname(local) or "."
    os.makedirs(folder, exist_ok=True)
    existed = os.path.exists(local)
    if existed:
        with open(local, "rb") as reader:
            _check_tail(reader.fileno(), path)
    with open(local, "ab") as handle:
        for blob in blocks:
            handle.write(blob)
        handle.flush()
        os.fsync(handle.fileno())
    if not existed:
        fsync_dir(folder)


def _check_tail(fd: int, path: str) -> None:
    size = os.fstat(fd).st_size
    if size == 0:
        return
    trailer = os.pread(fd, _TOTAL.size, size - _TOTAL.size) if size >= _TOTAL.size else b""
    total = _TOTAL.unpack(trailer)[0] if len(trailer) == _TOTAL.size else 0
    start = size - total
    problem: str | None = None
    if not OVERHEAD <= total <= size:
        problem = f"its trailer gives an impossible block length {total}"
    else:
        try:
            decode_block(os.pread(fd, total, start), 0, path, with_records=False)
        except (CorruptLogBlockError, MetadataFormatError) as exc:
            problem = f"its last block does not decode ({exc})"
    if problem is not None:
        raise CorruptLogBlockError(
            f"the file does not end with a whole block ({problem}); refusing to append after it",
            path=path,
            offset=start if OVERHEAD <= total <= size else max(0, size - _TOTAL.size),
        )
