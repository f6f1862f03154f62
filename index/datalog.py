"""Log blocks of merge-on-read data file groups (the seeds' RFC-06): this module alone owns
their byte format, writes blocks (:func:`encode_data_block`, :func:`encode_delete_block`) and
reads them (:func:`decode_block`, :func:`iter_blocks`, :func:`read_last_footer`, and
:func:`data_rows`: the rows a log's column statistics describe).

Format version 1. A data log file is a concatenation of blocks; a block is::

    offset       size  field
    0            4     magic b"DLOG"
    4            2     format version (u16) = 1
    6            1     block type (u8): 1 data, 2 delete
    7            4     header length H (u32)
    11           H     header: msgpack map (:class:`DataLogHeader`)
    11+H         8     body length B (u64)
    19+H         B     body: an Arrow IPC stream of one record batch (see below)
    19+H+B       F     footer: msgpack map (:class:`KeyFooter`)
    19+H+B+F     4     footer length F (u32, a copy of the header's)
    23+H+B+F     4     CRC32 of the F footer bytes
    27+H+B+F     4     CRC32 of the H header bytes then the B body bytes
    31+H+B+F     8     total block length (u64) = 39 + H + B + F

Integers are big-endian; CRC32 is zlib's (IEEE). The header holds ``block_type`` (copy of
byte 6), ``instant`` (the commit that wrote the block), ``partition`` (the data partition
path), ``file_id`` (the file group), ``record_count``, ``body_length`` (copy of B) and
``footer_length`` (copy of F); readers ignore keys they do not know. The body's buffers are
zstd-compressed (writers to object stores) or not (local disks: five times faster to decode),
as the stream itself says. The body of a data
block holds rows of the table (its columns as written, then ``_braid_commit_time`` and
``_braid_record_key``), one per key, sorted by ``_braid_record_key``; a delete block's body
holds the one column ``_braid_record_key``, the keys deleted, sorted and unique.

The footer (RFC-06's key index) describes the block's keys: ``min_key``, ``max_key`` and
``bloom`` (``index.bloom``'s encoding), and, cumulatively, those of every block of the file
slice's logs up to and including this one (``slice``: ``blocks``, ``keys``, ``min_key``,
``max_key``, ``bloom``; ``bloom`` nil when the writer did not keep a slice filter). So the
footer of a slice's last block alone rules the slice's logs out for a key outside
``min_key``..``max_key`` or absent from ``bloom`` (:func:`read_last_footer` reads just it:
the file's last 64 KiB, its trailer, the block's header (its owner checked) and the footer,
checked by its own CRC).

Corruption is never silent: an empty file refused, each block's header naming the file group
and instant of its file's name, magic, version, the copies of type and lengths and the trailer
compared, both CRCs, the body's buffers safe to read, its keys matching the footer's range and
the header's count (``validate()``: also UTF-8 text, keys sorted and unique). Any failure
raises :class:`~lakebraid.index.errors.CorruptDataLogError` naming file and block offset.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NamedTuple, TypeVar

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from lakebraid.index.errors import CorruptDataLogError
from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.logfooter import KeyFooter, SliceKeys
from lakebraid.metadata.arrow_records import flat, pool_buffer
from lakebraid.metadata.checksum import crc32
from lakebraid.metadata.files import whole_file
from lakebraid.metadata.integrity import check_structure
from lakebraid.metadata.keyorder import sort_order
from lakebraid.timeline.layout import data_file_name_of

MAGIC = b"DLOG"
FORMAT_VERSION = 1
PREFIX = struct.Struct(">4sHBI")  # magic, version, block type, header length
BODY_LENGTH = struct.Struct(">Q")
TRAILER = struct.Struct(">IIIQ")  # footer length, footer crc, block crc, total length
OVERHEAD = PREFIX.size + BODY_LENGTH.size + TRAILER.size  # 39 bytes
Bad = Callable[[str], CorruptDataLogError]  # the error of one block's damage
Bytes = bytes | memoryview | pa.Buffer  # a log file's bytes (``pa.Buffer``: Arrow's pool)
T = TypeVar("T")
TAIL_READ = 1 << 16  # bytes read from a log file's end for its last footer
HEAD_READ = 1 << 10  # bytes read from its last block's start for its header (when not in those)
_IPC = {codec: pa.ipc.IpcWriteOptions(compression=codec) for codec in ("zstd", None)}


class BlockType(enum.IntEnum):
    DATA = 1
    DELETE = 2


class DataLogHeader(msgspec.Struct, frozen=True):
    block_type: int
    instant: str
    partition: str
    file_id: str
    record_count: int
    body_length: int
    footer_length: int


class DataLogBlock(msgspec.Struct, frozen=True):
    path: str
    offset: int
    size: int
    header: DataLogHeader
    footer: KeyFooter
    rows: pa.Table  # data: the rows; delete: the one key column

    @property
    def block_type(self) -> BlockType:
        return BlockType(self.header.block_type)

    @property
    def keys(self) -> pa.Array:
        column = self.rows.column(RECORD_KEY)
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


_HEADER = msgspec.msgpack.Decoder(DataLogHeader)
_FOOTER = msgspec.msgpack.Decoder(KeyFooter)


# -- writing -------------------------------------------------------------------------------
def encode_block(
    kind: BlockType,
    rows: pa.Table,
    *,
    instant: str,
    partition: str,
    file_id: str,
    previous: SliceKeys | None = None,
    earlier_keys: pa.Array | None = None,
    compressed: bool = True,
) -> tuple[bytes, SliceKeys]:
    """A block of ``rows`` (one per key, sorted here; a delete block: the key column alone)
    and the slice's keys after it. ``previous``: the slice's keys before it (the footer of
    its last block), None for the first block; ``earlier_keys``: every key of the slice's
    earlier blocks, when the writer read them (lets the slice filter grow:
    ``logfooter.slice_after``);
    ``compressed``: zstd-compress the body's buffers (else none)."""
    ordered = rows.take(sort_order(rows.column(RECORD_KEY)))
    codec = "zstd" if compressed else None
    return _encode(kind, ordered, instant, partition, file_id, previous, earlier_keys, codec)


def encode_data_block(rows: pa.Table, **where: Any) -> tuple[bytes, SliceKeys]:
    """A data block of ``rows`` (:func:`encode_block`'s keywords)."""
    return encode_block(BlockType.DATA, rows, **where)


def encode_delete_block(keys: pa.Array, **where: Any) -> tuple[bytes, SliceKeys]:
    """A delete block of ``keys`` (unique; :func:`encode_block`'s keywords)."""
    return encode_block(
        BlockType.DELETE, pa.table({RECORD_KEY: pc.cast(keys, pa.string())}), **where
    )


def _encode(
    kind: BlockType,
    rows: pa.Table,
    instant: str,
    partition: str,
    file_id: str,
    previous: SliceKeys | None,
    earlier_keys: pa.Array | None,
    codec: str | None,
) -> tuple[bytes, SliceKeys]:
    keys = rows.column(RECORD_KEY).combine_chunks()
    if len(keys) == 0 or keys.null_count:
        raise ValueError(f"a {kind.name.lower()} log block needs keys, none of them null")
    if len(pc.unique(keys)) != len(keys):
        raise ValueError(f"a {kind.name.lower()} log block holds each key once")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema, options=_IPC[codec]) as writer:
        writer.write_table(rows.combine_chunks(), max_chunksize=max(1, rows.num_rows))
    body = sink.getvalue().to_pybytes()
    key_footer = KeyFooter.of(keys, previous, earlier_keys)
    footer = msgspec.msgpack.encode(key_footer)
    header = msgspec.msgpack.encode(
        DataLogHeader(
            kind.value, instant, partition, file_id, rows.num_rows, len(body), len(footer)
        )
    )
    total = OVERHEAD + len(header) + len(body) + len(footer)
    block = b"".join(
        [
            PREFIX.pack(MAGIC, FORMAT_VERSION, kind.value, len(header)),
            header,
            BODY_LENGTH.pack(len(body)),
            body,
            footer,
            TRAILER.pack(
                len(footer),
                crc32(footer),
                crc32(body, crc32(header)),
                total,
            ),
        ]
    )
    return block, key_footer.slice


# -- reading -------------------------------------------------------------------------------
def decode_block(data: Bytes, offset: int, path: str, *, thorough: bool = False) -> DataLogBlock:
    """The block starting at ``offset`` of ``data`` (a whole log file), checked as the
    module doc says (``thorough``: as ``validate()`` checks it). Its rows view ``data`` when
    that is a buffer of Arrow's pool (``metadata.files.whole_file``'s), else a copy in one."""
    owned = pool_buffer(data)
    frame = _frame(memoryview(owned), offset, path)
    body = owned.slice(frame.body_at, frame.header.body_length)
    if crc32(body, crc32(frame.header_bytes)) != frame.crc:
        raise frame.bad("a CRC32 does not match")
    rows = _rows(body, frame.bad, thorough)
    _check_keys(rows, frame.header, frame.footer, frame.bad, thorough)
    return DataLogBlock(path, offset, frame.size, frame.header, frame.footer, rows)


class _Frame(NamedTuple):
    """A block's parts, its lengths and footer checked (its body not yet)."""

    bad: Bad
    header_bytes: memoryview
    header: DataLogHeader
    body_at: int  # where the body starts (its length: the header's, checked)
    footer: KeyFooter
    crc: int
    size: int


def _frame(view: memoryview, offset: int, path: str) -> _Frame:
    bad: Bad = partial(CorruptDataLogError, path, offset)
    if len(view) - offset < OVERHEAD:
        raise bad(f"{len(view) - offset} bytes left, a block takes at least {OVERHEAD}")
    magic, version, kind, h = PREFIX.unpack_from(view, offset)
    if magic != MAGIC:
        raise bad(f"magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise bad(f"format version {version}; this lakebraid reads {FORMAT_VERSION}")
    at = offset + PREFIX.size
    if at + h + BODY_LENGTH.size > len(view):
        raise bad(f"header length {h} runs past the end of the file")
    header_bytes = view[at : at + h]
    header = _decoded(_HEADER, header_bytes, bad, "header")
    (b,) = BODY_LENGTH.unpack_from(view, at + h)
    body_at = at + h + BODY_LENGTH.size
    end = body_at + b + header.footer_length
    if end + TRAILER.size > len(view) or b != header.body_length or header.block_type != kind:
        raise bad("the header's lengths or block type disagree with the block")
    footer_bytes = view[body_at + b : end]
    f, footer_crc, crc, total = TRAILER.unpack_from(view, end)
    size = end + TRAILER.size - offset
    if f != header.footer_length or total != size:
        raise bad(f"trailer lengths {f}/{total}, the fields take {len(footer_bytes)}/{size}")
    if crc32(footer_bytes) != footer_crc:
        raise bad("a CRC32 does not match")
    footer = _decoded(_FOOTER, footer_bytes, bad, "footer")
    return _Frame(bad, header_bytes, header, body_at, footer, crc, size)


def iter_blocks(
    fs: AbstractFileSystem, path: str, keys: pa.Array | None = None
) -> Iterator[DataLogBlock]:
    """Every block of the log file ``path``, in order (the whole file at once: one read on
    local disk, one GET elsewhere; ``metadata.files.whole_file``).
    ``keys``: only the blocks whose footer may hold one of them (the others' bodies are
    neither checked nor decoded: a read of those keys needs nothing of them)."""
    return blocks_in(whole_file(fs, path), path, keys)


def blocks_in(
    data: Bytes, path: str, keys: pa.Array | None = None, *, thorough: bool = False
) -> Iterator[DataLogBlock]:
    """:func:`iter_blocks` of a log file's bytes already in hand (``path`` names it in
    errors; ``thorough``: as :func:`decode_block` says)."""
    if not len(data):
        raise CorruptDataLogError(path, 0, "the file is empty (a log holds at least one block)")
    data = pool_buffer(data)  # copied once, not per block
    owner = _owner(path)
    offset = 0
    while offset < len(data):
        if keys is not None:
            frame = _frame(memoryview(data), offset, path)
            if not frame.footer.may_hold_any(keys):  # skipped: its header checked alone
                _check_owner(frame.header, owner, frame.bad)
                offset += frame.size
                continue
        block = decode_block(data, offset, path, thorough=thorough)
        _check_owner(block.header, owner, partial(CorruptDataLogError, path, offset))
        yield block
        offset += block.size


def data_rows(data: Bytes, path: str, *, thorough: bool = False) -> pa.Table | None:
    """The rows of every data block of a log file's bytes, in block order: what the file's
    column statistics describe (None: a log of delete blocks only, which has none). Every
    block is checked as :func:`blocks_in` checks it."""
    blocks = [b for b in blocks_in(data, path, thorough=thorough) if b.block_type is BlockType.DATA]
    return pa.concat_tables([b.rows for b in blocks]) if blocks else None


def _owner(path: str) -> tuple[str, str] | None:
    """(file id, instant) of the log file ``path`` by its name; None for a name of another
    form (a test's bytes)."""
    parsed = data_file_name_of(path)
    return None if parsed is None else (parsed.file_id, parsed.instant)


def _check_owner(header: DataLogHeader, owner: tuple[str, str] | None, bad: Bad) -> None:
    """A block belongs to the file group and commit its file is named after: a log copied or
    renamed over another would pass every checksum and merge another group's rows."""
    if owner is not None and (header.file_id, header.instant) != owner:
        raise bad(
            f"the block was written by commit {header.instant} for file group "
            f"{header.file_id}, not for the file it is in (copied or renamed over it)"
        )


def read_last_footer(fs: AbstractFileSystem, path: str, size: int) -> KeyFooter:
    """The footer of the last block of the log file ``path`` of ``size`` bytes (its slice
    keys cover every block of the file slice's logs up to it), checked by its CRC; a file
    shorter or longer than ``size`` (the listing's), or whose last block's header names
    another file group or commit than the file's name, is refused (the header is in the
    tail read for a block under ``TAIL_READ`` bytes, else one more read of its first bytes)."""
    first = max(0, size - TAIL_READ)
    tail = fs.cat_file(path, start=first)
    if len(tail) != size - first:  # shorter or longer than listed
        ends = "ends before" if len(tail) < size - first else "runs past"
        raise CorruptDataLogError(path, 0, f"the file {ends} the {size} bytes the table lists")
    if len(tail) < TRAILER.size:
        raise CorruptDataLogError(path, 0, f"{size} bytes hold no block")
    f, footer_crc, _, total = TRAILER.unpack_from(tail, len(tail) - TRAILER.size)
    start = size - total
    if total > size or f + TRAILER.size + OVERHEAD > total:
        raise CorruptDataLogError(path, max(start, 0), f"trailer total length {total}")
    bad = partial(CorruptDataLogError, path, start)
    head = tail[start - first :] if start >= first else fs.cat_file(path, start, start + HEAD_READ)
    _check_owner(_last_header(fs, path, start, head, bad), _owner(path), bad)
    if f + TRAILER.size > len(tail):
        tail = fs.cat_file(path, start=size - TRAILER.size - f)
    footer_bytes = tail[len(tail) - TRAILER.size - f : len(tail) - TRAILER.size]
    if crc32(footer_bytes) != footer_crc:
        raise bad("CRC32 of the footer does not match")
    return _decoded(_FOOTER, footer_bytes, bad, "footer")


def _last_header(
    fs: AbstractFileSystem, path: str, start: int, head: bytes, bad: Bad
) -> DataLogHeader:
    """The header of the block at ``start``, from ``head`` (bytes from there on; read further
    when its header is longer)."""
    if len(head) < PREFIX.size:
        raise bad("the block ends inside its prefix")
    magic, version, _, h = PREFIX.unpack_from(head, 0)
    if magic != MAGIC or version != FORMAT_VERSION:
        raise bad(f"magic {bytes(magic)!r} version {version}, expected {MAGIC!r} version 1")
    if PREFIX.size + h > len(head):
        head = fs.cat_file(path, start, start + PREFIX.size + h)
    return _decoded(_HEADER, head[PREFIX.size : PREFIX.size + h], bad, "header")


def _decoded(
    decoder: msgspec.msgpack.Decoder[T], data: bytes | memoryview, bad: Bad, what: str
) -> T:
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, ValueError) as exc:  # ValueError: bad UTF-8 text
        raise bad(f"the {what} does not decode: {exc}") from None


def _rows(body: pa.Buffer, bad: Bad, thorough: bool) -> pa.Table:
    try:
        with pa.ipc.open_stream(body) as reader:
            table = reader.read_all()
        if thorough:
            table.validate(full=True)
        else:
            check_structure(table)
    except (pa.ArrowException, ValueError) as exc:
        raise bad(f"the body is not an Arrow stream: {exc}") from None
    return table


def _check_keys(
    rows: pa.Table, header: DataLogHeader, footer: KeyFooter, bad: Bad, thorough: bool
) -> None:
    if RECORD_KEY not in rows.column_names or rows.num_rows != header.record_count:
        raise bad(f"the body has no {RECORD_KEY} column or not {header.record_count} rows")
    keys = flat(rows.column(RECORD_KEY))
    if not pa.types.is_string(keys.type) or keys.null_count or not len(keys):
        raise bad(f"the body's {RECORD_KEY} column is not non-null text")
    ordered = not thorough or len(keys) == 1 or pc.all(pc.less(keys[:-1], keys[1:])).as_py()
    if not ordered:
        raise bad("the body's keys are not sorted and unique")
    try:
        ends = (keys[0].as_py(), keys[-1].as_py())
    except UnicodeDecodeError:
        raise bad(f"the body's {RECORD_KEY} column is not UTF-8 text") from None
    if ends != (footer.min_key, footer.max_key):
        raise bad("the footer's key range differs from the body's keys")
