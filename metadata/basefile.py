"""Metadata base files: Parquet, sorted by ``key``, one per (file group, compaction instant).

Format version 1. A base file is a Parquet file whose first column ``key`` (string, unique,
ascending by UTF-8 bytes) is the record key of its metadata partition; the other columns are the
partition's record fields (``metadata.arrow_records`` owns their layout). Written with zstd
compression, column statistics and page indexes, and row groups of at most ``row_group_rows``
rows so a lookup of a few keys reads few row groups. The Parquet key-value metadata holds::

    lakebraid.base.version   "1"
    lakebraid.partition      metadata partition name (files / column_stats / record_index)
    lakebraid.file_group     file group id
    lakebraid.instant        the compaction (or initialisation) instant that wrote it
    lakebraid.folded         JSON list of the instant times whose log blocks it folds in

Encodings (any Parquet reader reads them): ``key`` PLAIN, every other column dictionary
encoded, all zstd level 1. Measured on a record index of 1M random UUID4 keys (16,384-row
groups, pyarrow 26): 21.3 bytes per entry on disk (key 18.3) and about 62 ms to decode the key
column; DELTA_BYTE_ARRAY keys give 20.4-20.7 bytes but decode in about 100 ms, zstd level 3
compresses these hex strings no better than level 1 and writes slower, uncompressed keys cost
43 bytes. Lookups are bound by decoding keys, so the faster decode wins the byte.

Lookups of M keys choose by themselves: **seek** (read only the row groups whose key range
holds a wanted key, found with the row-group min/max statistics) when those row groups are at
most ``scan_fraction`` of the file, else **scan** (read the file once). Either way the rows are
decoded ``BATCH_ROWS`` at a time (the working set stays in the CPU caches and the allocator
reuses its memory) and matched by binary search when the batch's keys have one width (UUIDs,
hashes), else by a hash join; only the matching rows are kept. Textual dictionary columns are
read as Arrow dictionaries and decoded after the rows are taken.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import BinaryIO

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from metadata.errors import MetadataError, MetadataFormatError
from timeline.store import make_durable

BASE_VERSION = 1
KEY = "key"
KEY_ENCODING = "PLAIN"  # see the module docstring for the measured trade-off
ZSTD_LEVEL = 1
BATCH_ROWS = 65_536  # rows a lookup decodes at a time: they stay in the CPU caches


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
    keys = table.column(KEY)
    if len(keys) > 1 and not pc.all(pc.less(keys[:-1], keys[1:])).as_py():
        table = table.take(sort_order(keys))  # not already sorted and unique (logs are)
        keys = table.column(KEY)
        if pc.any(pc.equal(keys[1:], keys[:-1])).as_py():
            raise MetadataError(f"base file {path}: duplicate keys")
    meta = {
        b"lakebraid.base.version": str(BASE_VERSION).encode(),
        b"lakebraid.partition": partition.encode(),
        b"lakebraid.file_group": file_group.encode(),
        b"lakebraid.instant": instant.encode(),
        b"lakebraid.folded": msgspec.json.encode(sorted(folded)),
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    folder = path.rsplit("/", 1)[0] if "/" in path else ""
    if folder:
        fs.makedirs(folder, exist_ok=True)  # a reindex may write the partition's first file
    tmp = f"{path}.inprogress"
    with _output(fs, tmp) as handle:
        pq.write_table(
            table,
            handle,
            row_group_size=max(1, row_group_rows),
            compression="zstd",
            compression_level=ZSTD_LEVEL,
            use_dictionary=[c for c in table.schema.names if c != KEY],
            column_encoding={KEY: KEY_ENCODING},
            write_statistics=True,
            write_page_index=True,
        )
    make_durable(fs, tmp)
    fs.mv(tmp, path)
    make_durable(fs, path)  # the rename: the folder entry
    return int(fs.size(path))


def sort_order(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Indices that sort ``keys`` (strings) ascending by their UTF-8 bytes, as Arrow sorts.

    A numpy sort of 8 bytes as big-endian integers -- the 8 after the prefix every key shares
    (that of the least and the greatest key), short keys padded with zero bytes -- orders all
    keys whose such bytes differ; the runs of equal prefixes are then
    sorted by Arrow. Random keys (UUIDs, hashes) have few such ties, which makes this about
    three times faster than Arrow's string sort; when more than a quarter of the keys tie
    (long shared prefixes) Arrow sorts them all."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks else pa.array([], pa.string())
    n = len(keys)
    offsets = _offsets(keys)
    if n < 2 or offsets is None:
        return pc.sort_indices(keys)
    bounds = pc.min_max(keys)
    low, high = (str(bounds[end].as_py()).encode() for end in ("min", "max"))
    skip = _shared_prefix(low, high)  # every key starts with these bytes
    fixed = _fixed(keys)
    if fixed is not None and fixed.itemsize >= skip + 8:  # one width: a strided copy
        prefix = np.ascontiguousarray(
            fixed.view(np.uint8).reshape(n, fixed.itemsize)[:, skip : skip + 8]
        )
    else:
        data, starts = _data(keys), offsets[:-1].astype(np.int64) + skip
        lengths = np.diff(offsets) - skip
        prefix = np.zeros((n, 8), dtype=np.uint8)
        for j in range(8):
            has = lengths > j
            prefix[has, j] = data[starts[has] + j]
    values = prefix.view(">u8").ravel().astype(np.uint64)  # native byte order
    order = np.argsort(values)
    ordered = values[order]
    tied = np.zeros(n, dtype=bool)
    equal = ordered[1:] == ordered[:-1]
    tied[1:] |= equal
    tied[:-1] |= equal
    count = int(np.count_nonzero(tied))
    if count > n // 4:
        return pc.sort_indices(keys)
    if count:
        rows = order[tied]  # runs of equal prefixes, the runs in ascending prefix order
        sub = pa.table({"p": pa.array(values[rows]), KEY: keys.take(pa.array(rows))})
        again = pc.sort_indices(sub, sort_keys=[("p", "ascending"), (KEY, "ascending")])
        order[tied] = rows[again.to_numpy()]
    return pa.array(order)


def _shared_prefix(a: bytes, b: bytes) -> int:
    """The number of leading bytes ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.frombuffer(a[:n], np.uint8) != np.frombuffer(b[:n], np.uint8))
    return int(differ[0]) if len(differ) else n


def _offsets(array: pa.Array) -> np.ndarray | None:
    """The offsets of a string/binary array, int32 or int64 (None: another type, or nulls)."""
    kind = array.type
    large = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
    if array.null_count or not (large or pa.types.is_string(kind) or pa.types.is_binary(kind)):
        return None
    raw = np.frombuffer(array.buffers()[1], dtype=np.int64 if large else np.int32)
    return raw[array.offset : array.offset + len(array) + 1]


def _data(array: pa.Array) -> np.ndarray:
    buffer = array.buffers()[2]
    return np.empty(0, np.uint8) if buffer is None else np.frombuffer(buffer, dtype=np.uint8)


def _fixed(array: pa.Array) -> np.ndarray | None:
    """The strings of ``array`` as a numpy ``S<width>`` array (no copy) when they all have one
    width, else None. numpy orders such arrays bytewise, unsigned, as Arrow does (equal widths:
    the trailing zero bytes numpy ignores cannot change an order or an equality)."""
    offsets = _offsets(array)
    if offsets is None or len(array) == 0:
        return None
    first, last = int(offsets[0]), int(offsets[-1])
    width = int(offsets[1]) - first
    if width == 0 or last - first != width * len(array):
        return None
    if len(array) > 1 and not bool(np.all(np.diff(offsets) == width)):
        return None
    return _data(array)[first:last].view(f"S{width}")


def _remote(fs: AbstractFileSystem) -> bool:
    """Whether reads should be pre-buffered: coalesced ranges fetched up front suit object
    stores; on a local disk they only copy the file once more."""
    return not isinstance(fs, LocalFileSystem)


@contextmanager
def _input(fs: AbstractFileSystem, path: str) -> Iterator[pa.NativeFile | BinaryIO]:
    """A file to read: a native Arrow file on the local file system (reads release the GIL),
    else the fsspec file."""
    if isinstance(fs, LocalFileSystem):
        with pa.OSFile(fs._strip_protocol(path), "rb") as native:
            yield native
    else:
        with fs.open(path, "rb") as handle:
            yield handle


@contextmanager
def _output(fs: AbstractFileSystem, path: str) -> Iterator[pa.NativeFile | BinaryIO]:
    if isinstance(fs, LocalFileSystem):
        with pa.OSFile(fs._strip_protocol(path), "wb") as native:
            yield native
    else:
        with fs.open(path, "wb") as handle:
            yield handle


def _open(fs: AbstractFileSystem, path: str) -> tuple[pq.FileMetaData, BaseInfo]:
    cached = FOOTERS.get(path)
    if cached is not None:
        return cached
    try:
        with _input(fs, path) as handle:
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
    with _input(fs, path) as handle:
        parquet = pq.ParquetFile(handle, metadata=meta, pre_buffer=_remote(fs))
        return parquet.read(columns=columns)


def row_groups_for(info: BaseInfo, sorted_keys: np.ndarray) -> list[int]:
    """Row groups whose [min, max] key range holds at least one of ``sorted_keys``."""
    if len(sorted_keys) == 0:
        return []
    lo = np.searchsorted(sorted_keys, np.array(info.row_group_min, dtype=object), side="left")
    hi = np.searchsorted(sorted_keys, np.array(info.row_group_max, dtype=object), side="right")
    return [i for i in range(len(lo)) if hi[i] > lo[i]]


def lookup_base(
    fs: AbstractFileSystem,
    path: str,
    keys: pa.Array,
    *,
    scan_fraction: float,
    threads: int = 1,
    unique: bool = False,
) -> tuple[pa.Table, str]:
    """Rows of the base file whose key is in ``keys`` (strings; ``unique=True``: the caller
    guarantees none repeats); also returns "seek" or "scan", the way it read them. Rows come
    in key order. ``threads`` > 1: a scan reads that many contiguous runs of row groups at
    once (one file handle each)."""
    meta, info = _open(fs, path)
    schema = meta.schema.to_arrow_schema()
    if len(keys) == 0 or info.num_rows == 0:
        return schema.empty_table(), "seek"
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if keys.type != schema.field(KEY).type:
        keys = keys.cast(schema.field(KEY).type)
    if not unique:
        keys = pc.unique(keys)  # a key asked twice is still one row
    keys = keys.take(sort_order(keys))
    total = len(info.row_group_min)
    groups: list[int] = []
    seek = total > 0 and len(keys) <= scan_fraction * info.num_rows
    if seek:  # else most row groups are hit anyway
        groups = row_groups_for(info, keys.to_numpy(zero_copy_only=False))
        seek = len(groups) <= scan_fraction * total
    if seek and not groups:
        return schema.empty_table(), "seek"
    dictionary = _dictionary_columns(meta, schema)
    chosen = groups if seek else list(range(meta.num_row_groups))
    runs = [r.tolist() for r in np.array_split(chosen, max(1, min(threads, len(chosen))))]

    def scan(run: list[int]) -> list[pa.RecordBatch]:
        matcher, found = _Matcher(keys), []
        with _input(fs, path) as handle:
            parquet = pq.ParquetFile(
                handle, metadata=meta, pre_buffer=_remote(fs), read_dictionary=dictionary
            )
            batches = parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=run, use_threads=False)
            for batch in batches:
                hits = matcher.positions(batch.column(0))
                if len(hits):
                    found.append(batch.take(pa.array(hits)))
        return found

    if len(runs) <= 1:
        parts = scan(chosen)
    else:
        with ThreadPoolExecutor(len(runs)) as pool:
            parts = [batch for found in pool.map(scan, runs) for batch in found]
    if not parts:
        return schema.empty_table(), "seek" if seek else "scan"
    return pa.Table.from_batches(parts).cast(schema), "seek" if seek else "scan"


def _dictionary_columns(meta: pq.FileMetaData, schema: pa.Schema) -> list[str]:
    """String/binary columns (not the key) stored dictionary encoded: read as Arrow
    dictionaries, they cost an index per row instead of a string, until the rows are taken."""
    if meta.num_row_groups == 0:
        return []
    first = meta.row_group(0)
    names = []
    for i, field in enumerate(schema):
        textual = pa.types.is_string(field.type) or pa.types.is_binary(field.type)
        if field.name != KEY and textual and first.column(i).has_dictionary_page:
            names.append(field.name)
    return names


class _Matcher:
    """Positions of wanted keys (unique, sorted) in sorted batches of a base file's keys.

    When a batch's keys all have one width (UUIDs, hashes, zero-padded ids), the wanted keys of
    that width within the batch's key range are found by numpy's binary search over
    fixed-width byte views; else by an Arrow hash join (``is_in``)."""

    def __init__(self, keys: pa.Array):
        self.keys = keys
        self._probes: dict[int, np.ndarray | None] = {}

    def _probe(self, width: int) -> np.ndarray | None:
        if width not in self._probes:
            same = self.keys.filter(pc.equal(pc.binary_length(self.keys), width))
            self._probes[width] = _fixed(same)  # None: no wanted key has that width
        return self._probes[width]

    def positions(self, column: pa.Array) -> np.ndarray:
        view = _fixed(column)
        if view is None:
            mask = pc.is_in(column, value_set=self.keys).to_numpy(zero_copy_only=False)
            return np.flatnonzero(mask)
        probe = self._probe(view.itemsize)
        if probe is None:
            return np.empty(0, dtype=np.int64)
        lo = int(np.searchsorted(probe, view[0], side="left"))
        hi = int(np.searchsorted(probe, view[-1], side="right"))
        if hi <= lo:
            return np.empty(0, dtype=np.int64)
        wanted = probe[lo:hi]
        index = np.searchsorted(view, wanted)
        return index[view[index] == wanted]
