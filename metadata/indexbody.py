"""The columnar body of a record-index data block (log block format version 2,
``metadata.logblock``): this module alone encodes and decodes it.

Before the block's codec compresses it, the body is an Arrow IPC stream (the IPC streaming
format: a schema message, dictionary and record batches, the end-of-stream marker) with the
columns, in this order::

    key          string, or fixed_size_binary(w)   record key (UTF-8); strictly ascending
                 when every key has w bytes        by bytes, so unique
    partition    string or dictionary<int32, string>   the key's data partition
                                                       ("" for a tombstone)
    file_id_hi   int64 or dictionary<int32, int64>     the file id's UUID, high 64 bits
    file_id_lo   int64 or dictionary<int32, int64>     low 64 bits (both 0: tombstone)
    instant      int64 or dictionary<int32, int64>     the instant's 17 digits as a number
    deleted      bool                                  True: a tombstone

No column may hold a null; no other column may be present. The writer stores the key as
``fixed_size_binary`` when it can (no offsets: about half the compressed size of generated
keys) and the other columns but ``deleted`` as dictionaries (few distinct values per block):
a block is then smaller than the msgpack records of version 1. Readers get
:data:`INDEX_BLOCK_SCHEMA` (plain columns) whichever was stored, and refuse any other schema,
a null, keys that are not UTF-8 or out of order with :class:`MetadataValueError`, which the
block reader reports as a corrupt block naming the file and offset.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.arrow_records import INDEX_LOG_SCHEMA
from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.records import MetadataRecord, RecordIndexRecord

# key, partition, file_id_hi, file_id_lo, instant (a base file's), then deleted
INDEX_BLOCK_SCHEMA = INDEX_LOG_SCHEMA
_DICTIONARY = ("partition", "file_id_hi", "file_id_lo", "instant")  # stored as dictionaries


def encode_index_body(table: pa.Table) -> bytes:
    """The body of ``table`` (the columns of :data:`INDEX_BLOCK_SCHEMA`, any of them possibly
    dictionaries; keys sorted and unique, checked), before compression."""
    table = _plain(table.select(INDEX_BLOCK_SCHEMA.names)).cast(INDEX_BLOCK_SCHEMA)
    _check(table)
    columns = [_packed(table.column("key"))]
    for name in INDEX_BLOCK_SCHEMA.names[1:]:
        column = table.column(name)
        columns.append(pc.dictionary_encode(column) if name in _DICTIONARY else column)
    stored = pa.table(columns, names=INDEX_BLOCK_SCHEMA.names)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, stored.schema) as writer:
        writer.write_table(stored)
    return sink.getvalue().to_pybytes()


def decode_index_body(raw: bytes | memoryview) -> pa.Table:
    """The columns of a body (:data:`INDEX_BLOCK_SCHEMA`), checked as the module says."""
    stored = pa.ipc.open_stream(pa.py_buffer(raw)).read_all()
    if not _allowed(stored.schema):
        raise MetadataValueError(
            f"columnar body of schema ({_describe(stored.schema)}), expected "
            f"({_describe(INDEX_BLOCK_SCHEMA)}), the key possibly fixed-size binary and "
            f"{', '.join(_DICTIONARY)} possibly int32-indexed dictionaries"
        )
    table = _plain(stored.combine_chunks())
    table = table.set_column(0, "key", _unpacked(table.column("key")))
    _check(table)
    return table


def index_key_range(table: pa.Table) -> tuple[int, str | None, str | None]:
    """The key count, first and last key of a body's columns (the block header's fields)."""
    if table.num_rows == 0:
        return 0, None, None
    keys = table.column("key")
    return table.num_rows, keys[0].as_py(), keys[-1].as_py()


def index_records(table: pa.Table) -> list[MetadataRecord]:
    """A body's entries as records (tombstones with ``deleted`` set)."""
    columns = [table.column(name).to_pylist() for name in INDEX_BLOCK_SCHEMA.names]
    return [RecordIndexRecord(*row) for row in zip(*columns, strict=True)]


def _check(table: pa.Table) -> None:
    """No nulls; keys strictly ascending."""
    for name, column in zip(table.column_names, table.columns, strict=True):
        if column.null_count:
            raise MetadataValueError(f"columnar body: {column.null_count} nulls in column {name}")
    keys = table.column("key")
    if len(keys) > 1 and not pc.all(pc.greater(keys[1:], keys[:-1])).as_py():
        raise MetadataValueError("columnar body: keys not strictly ascending (sorted, unique)")


def _allowed(schema: pa.Schema) -> bool:
    if schema.names != INDEX_BLOCK_SCHEMA.names:
        return False
    for field, wanted in zip(schema, INDEX_BLOCK_SCHEMA, strict=True):
        kind = field.type
        if field.name == "key" and pa.types.is_fixed_size_binary(kind):
            continue
        if field.name in _DICTIONARY and pa.types.is_dictionary(kind):
            if kind.index_type != pa.int32() or kind.value_type != wanted.type:
                return False
            continue
        if kind != wanted.type:
            return False
    return True


def _plain(table: pa.Table) -> pa.Table:
    """``table`` with every dictionary column decoded (one chunk each)."""
    for at, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            values = table.column(at).cast(field.type.value_type)
            table = table.set_column(at, field.name, values)
    return table.combine_chunks()


def _packed(keys: pa.ChunkedArray) -> pa.Array:
    """The keys as ``fixed_size_binary(w)`` when all have ``w`` bytes, else as they are."""
    keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if len(keys) == 0:
        return keys
    bounds = pc.min_max(pc.binary_length(keys)).as_py()
    width = bounds["min"]
    if width != bounds["max"] or width == 0:
        return keys
    offsets = np.frombuffer(keys.buffers()[1], np.int32, len(keys) + 1, keys.offset * 4)
    data = keys.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(keys), [None, data])


def _unpacked(keys: pa.ChunkedArray) -> pa.Array:
    """Stored keys as a string array (fixed-size ones re-framed, their UTF-8 checked)."""
    keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if not pa.types.is_fixed_size_binary(keys.type):
        return keys
    if keys.null_count:
        raise MetadataValueError(f"columnar body: {keys.null_count} nulls in column key")
    width, n = keys.type.byte_width, len(keys)
    data = keys.buffers()[1].slice(keys.offset * width, n * width)
    offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * width).tobytes())
    strings = pa.Array.from_buffers(pa.string(), n, [None, offsets, data])
    try:
        strings.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise MetadataValueError(f"columnar body: a key is not UTF-8 ({exc})") from None
    return strings


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name} {field.type}" for field in schema)
