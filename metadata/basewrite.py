"""Writing metadata base files (the format: ``metadata.basefile``): :func:`write_base` from a
partition's rows, :func:`write_stored` from rows already in the stored form (the record
index's stored fold, ``metadata.indexfold``). Either way the footer is checked before the
file is renamed into place, and the file is made durable."""

from __future__ import annotations

from typing import NamedTuple

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.metadata.arrow_records import flat
from lakebraid.metadata.base_encoding import encoding_options
from lakebraid.metadata.basefile import (
    BASE_VERSION,
    CRC_KEY,
    KEY,
    KEY_HEX,
    ROW_GROUPS,
    check_written,
    kv_crc,
    remember_base,
)
from lakebraid.metadata.errors import MetadataError
from lakebraid.metadata.files import open_file
from lakebraid.metadata.hexkeys import HexKeys, key_strings, stored_keys
from lakebraid.metadata.integrity import WRITE_OPTIONS
from lakebraid.metadata.keyorder import sort_order
from lakebraid.metadata.locations import LOCATIONS_KEY, encode, plain_locations
from lakebraid.timeline.durable import make_durable, make_folder


def write_base(
    fs: AbstractFileSystem,
    path: str,
    table: pa.Table,
    *,
    partition: str,
    file_group: str,
    instant: str,
    folded: list[str],
    row_group_rows: int,
) -> int:
    """Write a base file (sorting by key); returns its size in bytes."""
    if table.schema.names[0] != KEY:
        raise MetadataError(f"base file {path}: the first column must be {KEY!r}")
    keys = table.column(KEY)
    if len(keys) > 1 and not pc.all(pc.less(keys[:-1], keys[1:])).as_py():
        table = table.take(sort_order(keys))  # not already sorted and unique (logs are)
        keys = table.column(KEY)
        if pc.any(pc.equal(keys[1:], keys[:-1])).as_py():
            raise MetadataError(f"base file {path}: duplicate keys")
    located = encode(table) if partition == "record_index" else None
    fixed, codec = stored_keys(keys)
    if located is not None:
        table, note = located
    else:
        note = None
        if partition == "record_index":
            table = plain_locations(table)  # the four columns as they are: text partitions
    if fixed is not None:
        table = table.set_column(0, table.schema.field(KEY).with_type(fixed.type), fixed)
    header = Header(partition, file_group, instant, folded, row_group_rows)
    return write_stored(fs, path, table, header, codec, note)


class Header(NamedTuple):
    """What a base file's footer says of it beside its rows (see the module doc)."""

    partition: str
    file_group: str
    instant: str
    folded: list[str]
    row_group_rows: int


def write_stored(
    fs: AbstractFileSystem,
    path: str,
    table: pa.Table,
    header: Header,
    codec: HexKeys | None,
    locations: bytes | None,
) -> int:
    """Write ``table``, already in its stored form (keys sorted, unique, fixed-width when
    ``codec`` packs them; ``locations``: the entry its ``location`` column indexes), with
    ``header`` and its row groups' key bounds in its footer; the footer is checked before
    the rename, the file made durable. Returns its size in bytes."""
    keys = flat(table.column(KEY))
    fixed = keys if pa.types.is_fixed_size_binary(keys.type) else None
    bounds = _row_groups_note(keys, max(1, header.row_group_rows), codec)
    meta = {
        b"lakebraid.base.version": str(BASE_VERSION).encode(),
        b"lakebraid.partition": header.partition.encode(),
        b"lakebraid.file_group": header.file_group.encode(),
        b"lakebraid.instant": header.instant.encode(),
        b"lakebraid.folded": msgspec.json.encode(sorted(header.folded)),
        ROW_GROUPS: bounds,
    }
    if codec is not None:
        meta[KEY_HEX] = msgspec.json.encode(codec)
    if locations is not None:
        meta[LOCATIONS_KEY] = locations
    meta[CRC_KEY] = str(kv_crc(meta)).encode()
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    folder = path.rsplit("/", 1)[0] if "/" in path else ""
    if folder:
        make_folder(fs, folder)  # a reindex may write the partition's first file
    tmp = f"{path}.inprogress"
    with open_file(fs, tmp, "wb") as handle:
        pq.write_table(
            table,
            handle,
            row_group_size=max(1, header.row_group_rows),
            write_statistics=[name for name in table.schema.names if name != KEY],
            write_page_index=True,
            **encoding_options(header.partition, table.schema.names, fixed, table.num_rows),
            **WRITE_OPTIONS,
        )
    # the note matches the row groups pyarrow wrote (else no reader could)
    footer = check_written(fs, tmp)
    make_durable(fs, tmp)
    fs.mv(tmp, path)
    make_durable(fs, path)  # the rename: the folder entry
    remember_base(path, footer)
    return int(fs.size(path))


def _row_groups_note(keys: pa.Array, size: int, codec: HexKeys | None) -> bytes:
    """The row groups of a base file of sorted stored ``keys`` written ``size`` rows a group,
    their bounds as text (only those keys unpacked, when stored fixed-width)."""
    n = len(keys)
    starts = list(range(0, n, size))
    ends = [min(n, start + size) - 1 for start in starts]
    rows = [end - start + 1 for start, end in zip(starts, ends, strict=True)]
    bounding = keys.take(pa.array([*starts, *ends], pa.int64()))
    if pa.types.is_fixed_size_binary(bounding.type):
        bounding = key_strings(bounding, codec, validate=False)
    text = bounding.to_pylist()
    return msgspec.json.encode((rows, text[: len(starts)], text[len(starts) :]))
