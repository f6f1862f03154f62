"""Metadata base files: Parquet, sorted by ``key``, one per (file group, compaction instant).

Format version 1. A base file is a Parquet file whose first column ``key`` (string, unique,
ascending) is the record key of its metadata partition; the other columns are the partition's
record fields (``metadata.arrow_records`` owns their layout). Written with zstd compression, column
statistics and page indexes, and row groups of at most ``row_group_rows`` rows so a lookup of a
few keys reads few row groups. The Parquet key-value metadata holds::

    lakebraid.base.version   "1"
    lakebraid.partition      metadata partition name (files / column_stats / record_index)
    lakebraid.file_group     file group id
    lakebraid.instant        the compaction (or initialisation) instant that wrote it
    lakebraid.folded         JSON list of the instant times whose log blocks it folds in

Lookups of M keys choose by themselves: **seek** (read only the row groups whose key range
holds a wanted key, found with the row-group min/max statistics) when those row groups are at
most ``scan_fraction`` of the file, else **scan** (read the file once and hash-join).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from metadata.errors import MetadataError, MetadataFormatError

BASE_VERSION = 1
KEY = "key"


class BaseInfo(msgspec.Struct, frozen=True):
    path: str
    version: int
    partition: str
    file_group: str
    instant: str
    folded: tuple[str, ...]
    num_rows: int
    row_group_min: tuple[str, ...]
    row_group_max: tuple[str, ...]


class _FooterCache:
    """Parsed footers of base files (immutable once written), bounded LRU."""

    def __init__(self, capacity: int = 512):
        self._items: OrderedDict[str, tuple[pq.FileMetaData, BaseInfo]] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, path: str) -> tuple[pq.FileMetaData, BaseInfo] | None:
        with self._lock:
            item = self._items.get(path)
            if item is not None:
                self._items.move_to_end(path)
            return item

    def put(self, path: str, item: tuple[pq.FileMetaData, BaseInfo]) -> None:
        with self._lock:
            self._items[path] = item
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


FOOTERS = _FooterCache()


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
    table = table.sort_by(KEY)
    keys = table.column(KEY)
    if len(keys) > 1 and pc.any(pc.equal(keys[1:], keys[:-1])).as_py():
        raise MetadataError(f"base file {path}: duplicate keys")
    meta = {
        b"lakebraid.base.version": str(BASE_VERSION).encode(),
        b"lakebraid.partition": partition.encode(),
        b"lakebraid.file_group": file_group.encode(),
        b"lakebraid.instant": instant.encode(),
        b"lakebraid.folded": msgspec.json.encode(sorted(folded)),
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    tmp = f"{path}.inprogress"
    with fs.open(tmp, "wb") as handle:
        pq.write_table(
            table,
            handle,
            row_group_size=max(1, row_group_rows),
            compression="zstd",
            compression_level=3,
            use_dictionary=[c for c in table.schema.names if c != KEY],
            column_encoding={KEY: "DELTA_BYTE_ARRAY"},
            write_statistics=True,
            write_page_index=True,
        )
    fs.mv(tmp, path)
    return int(fs.size(path))


def _open(fs: AbstractFileSystem, path: str) -> tuple[pq.FileMetaData, BaseInfo]:
    cached = FOOTERS.get(path)
    if cached is not None:
        return cached
    try:
        with fs.open(path, "rb") as handle:
            meta = pq.ParquetFile(handle).metadata
    except (OSError, pa.ArrowInvalid) as exc:
        raise MetadataError(f"cannot read metadata base file {path}: {exc}") from None
    kv = meta.metadata or {}
    version = int(kv.get(b"lakebraid.base.version", b"0"))
    if version != BASE_VERSION:
        raise MetadataFormatError(
            f"{path}: base file version {version} is not supported (expected {BASE_VERSION})"
        )
    key_index = meta.schema.names.index(KEY)
    mins, maxs = [], []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(key_index).statistics
        if stats is None or not stats.has_min_max:
            mins.append("")
            maxs.append("\U0010ffff")
        else:
            mins.append(stats.min)
            maxs.append(stats.max)
    info = BaseInfo(
        path=path,
        version=version,
        partition=kv[b"lakebraid.partition"].decode(),
        file_group=kv[b"lakebraid.file_group"].decode(),
        instant=kv[b"lakebraid.instant"].decode(),
        folded=tuple(msgspec.json.decode(kv[b"lakebraid.folded"])),
        num_rows=meta.num_rows,
        row_group_min=tuple(mins),
        row_group_max=tuple(maxs),
    )
    FOOTERS.put(path, (meta, info))
    return meta, info


def base_info(fs: AbstractFileSystem, path: str) -> BaseInfo:
    return _open(fs, path)[1]


def read_base(fs: AbstractFileSystem, path: str, columns: list[str] | None = None) -> pa.Table:
    meta, _ = _open(fs, path)
    with fs.open(path, "rb") as handle:
        return pq.ParquetFile(handle, metadata=meta).read(columns=columns)


def row_groups_for(info: BaseInfo, sorted_keys: np.ndarray) -> list[int]:
    """Row groups whose [min, max] key range holds at least one of ``sorted_keys``."""
    if len(sorted_keys) == 0:
        return []
    lo = np.searchsorted(sorted_keys, np.array(info.row_group_min, dtype=object), side="left")
    hi = np.searchsorted(sorted_keys, np.array(info.row_group_max, dtype=object), side="right")
    return [i for i in range(len(lo)) if hi[i] > lo[i]]


def lookup_base(
    fs: AbstractFileSystem, path: str, keys: pa.Array, *, scan_fraction: float
) -> tuple[pa.Table, str]:
    """Rows of the base file whose key is in ``keys`` (unique strings); also returns "seek"
    or "scan", the way it read them."""
    meta, info = _open(fs, path)
    if len(keys) == 0 or info.num_rows == 0:
        return meta.schema.to_arrow_schema().empty_table(), "seek"
    total = len(info.row_group_min)
    groups: list[int] = []
    if len(keys) <= scan_fraction * info.num_rows:  # else most row groups are hit anyway
        sorted_keys = np.sort(np.asarray(keys.to_pylist(), dtype=object))
        groups = row_groups_for(info, sorted_keys)
    seek = total > 0 and len(keys) <= scan_fraction * info.num_rows
    seek = seek and len(groups) <= scan_fraction * total
    with fs.open(path, "rb") as handle:
        parquet = pq.ParquetFile(handle, metadata=meta)
        if not seek:
            table = parquet.read()
        elif groups:
            table = parquet.read_row_groups(groups)
        else:
            table = parquet.schema_arrow.empty_table()
    mask = pc.is_in(table.column(KEY), value_set=keys)
    return table.filter(mask), "seek" if seek else "scan"
