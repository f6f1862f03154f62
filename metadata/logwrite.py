"""Writing the metadata table's log blocks: :func:`encode_block` builds one block's bytes and
:func:`append_blocks` adds blocks to a log file. The byte format, its version and the reading
of blocks and log files are ``metadata.logblock``'s.

On a local file system a log file is appended to (mode ``"ab"``) and fsync-ed, after checking
that it ends with a whole, intact block; other fsspec file systems cannot append, so a log file
on them is written once, with all its blocks.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping, Sequence

import msgspec
import pyarrow as pa
from fsspec import AbstractFileSystem

from lakebraid.metadata.checksum import crc32
from lakebraid.metadata.errors import (
    CorruptLogBlockError,
    MetadataError,
    MetadataFormatError,
    MetadataTypeError,
    MetadataValueError,
)
from lakebraid.metadata.files import local_path
from lakebraid.metadata.indexbody import encode_index_body, index_key_range, index_records
from lakebraid.metadata.keyorder import check_block_keys
from lakebraid.metadata.logblock import (
    BODY_LENGTH,
    CODECS,
    COLUMNAR_VERSION,
    FORMAT_VERSION,
    MAGIC,
    OVERHEAD,
    PREFIX,
    SUFFIX,
    TOTAL,
    BlockHeader,
    BlockType,
    Command,
    block_codec,
    decode_block,
)
from lakebraid.metadata.records import (
    SCHEMA_VERSION,
    MetadataRecord,
    Partition,
    encode_records,
    instant_to_int,
)
from lakebraid.timeline.durable import create_settled, fsync_dir
from lakebraid.timeline.owed import owe

_ENCODER = msgspec.msgpack.Encoder()
# below this many entries a version 1 block is the smaller: an IPC stream's schema and
# dictionaries take about 1.7 KB whatever the rows
COLUMNAR_MIN_ENTRIES = 512
# a body of fewer bytes is written uncompressed whatever the codec asked: decompressing a
# zstd frame costs some 30 us before its first byte (most of a small block's read)
SMALL_BODY = 4096
_KEY = operator.attrgetter("key")
_U32_MAX = (1 << 32) - 1


def encode_block(
    block_type: BlockType | int,
    *,
    instant: str,
    partition: Partition | str,
    file_group: str,
    records: Sequence[MetadataRecord] = (),
    keys: Sequence[str] = (),
    command: Command | None = None,
    columns: pa.Table | None = None,
    min_columnar: int = COLUMNAR_MIN_ENTRIES,
    extra: Mapping[str, str] | None = None,
    codec: str = "zstd",
    compression_level: int | None = None,
) -> bytes:
    """One encoded block: ``records`` for a data block (sorted by key, keys unique), ``keys``
    for a delete block (sorted, unique), ``command`` for a command block. A record-index data
    block may instead take ``columns``: its entries as the columns of
    ``metadata.indexbody.INDEX_BLOCK_SCHEMA`` (sorted, unique keys, checked with Arrow
    kernels), written as a format version 2 block with a columnar body when they number
    ``min_columnar`` or more, else as the records of a version 1 block. ``codec``: of a
    body of :data:`SMALL_BODY` bytes or more (a smaller one is left uncompressed).

    Raises ``ValueError`` / ``TypeError`` for arguments the format cannot hold (unsorted or
    duplicate keys, records of another partition, a malformed instant, ...)."""
    block_type = BlockType(block_type)
    partition = Partition(partition)
    if columns is not None and partition is not Partition.RECORD_INDEX:
        raise MetadataValueError(f"columns are for record_index blocks, not {partition}")
    if columns is not None and columns.num_rows < min_columnar:
        records, columns = index_records(columns), None
    given = {
        "records": bool(records) or columns is not None,
        "keys": bool(keys),
        "command": command is not None,
    }
    extra = _checked_arguments(block_type, instant, file_group, codec, extra, given)
    raw, (count, first, last) = _payload(block_type, partition, records, keys, command, columns)
    if len(raw) < SMALL_BODY:
        codec = "uncompressed"  # a zstd frame's set-up costs more than its bytes save
    compressor = block_codec(codec, compression_level)
    body = raw if compressor is None else compressor.compress(raw, asbytes=True)
    header = BlockHeader(
        block_type=int(block_type),
        instant=instant,
        partition=str(partition),
        file_group=file_group,
        record_count=count,
        min_key=first,
        max_key=last,
        schema_version=SCHEMA_VERSION,
        codec=codec,
        body_length=len(body),
        raw_length=len(raw),
        extra=extra,
    )
    version = FORMAT_VERSION if columns is None else COLUMNAR_VERSION
    return _frame(block_type, _ENCODER.encode(header), body, version)


def _checked_arguments(
    block_type: BlockType,
    instant: str,
    file_group: str,
    codec: str,
    extra: Mapping[str, str] | None,
    given: dict[str, bool],
) -> dict[str, str]:
    """Refuse block arguments the format cannot hold (``given``: which payloads were given);
    returns ``extra`` as a dict."""
    instant_to_int(instant)
    if not file_group:
        raise MetadataValueError("file_group must not be empty")
    if codec not in CODECS:
        raise MetadataValueError(f"codec must be one of {CODECS}, not {codec!r}")
    checked = dict(extra or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in checked.items()):
        raise MetadataTypeError("extra must map str to str")
    allowed = {BlockType.DATA: "records", BlockType.DELETE: "keys", BlockType.COMMAND: "command"}
    wrong = [name for name, present in given.items() if present and name != allowed[block_type]]
    if wrong:
        raise MetadataValueError(
            f"a {block_type.name.lower()} block cannot carry {', '.join(wrong)}"
        )
    return checked


def _payload(
    block_type: BlockType,
    partition: Partition,
    records: Sequence[MetadataRecord],
    keys: Sequence[str],
    command: Command | None,
    columns: pa.Table | None,
) -> tuple[bytes, tuple[int, str | None, str | None]]:
    """The body before compression, and the block's key count, first and last key."""
    if block_type is BlockType.DATA and columns is not None:
        return encode_index_body(columns), index_key_range(columns)
    if block_type is BlockType.COMMAND:
        if not isinstance(command, Command):
            raise MetadataValueError("a command block needs a Command")
        return _ENCODER.encode(command), (0, None, None)
    if block_type is BlockType.DATA:
        block_keys = list(map(_KEY, records))
        check_block_keys(block_keys)
        raw = encode_records(partition, records)
    else:
        block_keys = list(keys)
        if not all(isinstance(k, str) for k in block_keys):
            raise MetadataTypeError("delete blocks carry str keys")
        check_block_keys(block_keys)
        raw = _ENCODER.encode(block_keys)
    first, last = (block_keys[0], block_keys[-1]) if block_keys else (None, None)
    return raw, (len(block_keys), first, last)


def _frame(block_type: BlockType, header: bytes, body: bytes, version: int) -> bytes:
    """One block's bytes: prefix, header, body length, body, CRC and total length."""
    if len(header) > _U32_MAX:
        raise MetadataValueError("block header too large")
    crc = crc32(body, crc32(header))
    total = OVERHEAD + len(header) + len(body)
    return b"".join(
        (
            PREFIX.pack(MAGIC, version, int(block_type), len(header)),
            header,
            BODY_LENGTH.pack(len(body)),
            body,
            SUFFIX.pack(crc, total),
        )
    )


def append_blocks(
    fs: AbstractFileSystem, path: str, blocks: Sequence[bytes], *, sync: bool = True
) -> bool:
    """Append encoded blocks to a log file, creating it if needed; whether this call created
    it (the file then holds just these blocks, with no request for its size).

    On a local filesystem the blocks are appended (mode ``"ab"``) and fsync-ed (file, and
    folder when it is new; ``sync=False``: not, the caller makes it durable, as
    ``timeline.durable.sync_new_files`` does, before any instant names it); an existing
    file must end with a whole, intact block (a torn tail is never built upon). Other fsspec
    filesystems cannot append: the file is created with all the blocks at once by a
    conditional create, and ``MetadataError`` is raised if it already exists. Nothing
    happens for an empty list (False)."""
    for i, blob in enumerate(blocks):
        try:
            _, after = decode_block(blob, 0, path, with_records=False)
        except (CorruptLogBlockError, MetadataFormatError) as exc:
            raise MetadataValueError(f"blocks[{i}] is not a valid encoded block: {exc}") from None
        if after != len(blob):
            raise MetadataValueError(f"blocks[{i}] holds {len(blob) - after} bytes after its block")
    if not blocks:
        return False
    local = local_path(fs, path)
    if local is None:  # one conditional create (a lost reply settled by reading back)
        if not create_settled(fs, path, b"".join(blocks)):
            raise MetadataError(
                f"cannot append to {path}: {type(fs).__name__} does not support appends, "
                "so log files on it are written once"
            )
        return True
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
        if sync and not owe(local):  # owed: a write's scope pays before its commit point
            os.fsync(handle.fileno())
    if sync and not existed:
        fsync_dir(folder)
    return not existed


def _check_tail(fd: int, path: str) -> None:
    size = os.fstat(fd).st_size
    if size == 0:
        return
    trailer = os.pread(fd, TOTAL.size, size - TOTAL.size) if size >= TOTAL.size else b""
    total = TOTAL.unpack(trailer)[0] if len(trailer) == TOTAL.size else 0
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
            offset=start if OVERHEAD <= total <= size else max(0, size - TOTAL.size),
        )
