"""Metadata base files: Parquet, sorted by ``key``, one per (file group, compaction instant).

Format version 3 (versions 1 and 2 are still read). The first column ``key`` (unique, ascending
by UTF-8 bytes) is the record key: a string column, or (version 3) when every key of the file
has one UTF-8 length ``w``, a ``fixed_size_binary`` column: the keys' hex digits packed two to a
byte when they fit a ``lakebraid.key_hex`` template (``metadata.hexkeys.HexKeys``: UUIDs,
hashes, zero-padded numbers), else their ``w`` bytes. Readers hand back strings. The other
columns are the partition's record fields (``metadata.arrow_records``).
Zstd, column statistics, page indexes and page checksums, row groups of at most
``row_group_rows`` rows. The Parquet key-value metadata holds::

    lakebraid.base.version   "3"
    lakebraid.partition      metadata partition name (files / column_stats / record_index)
    lakebraid.file_group     file group id
    lakebraid.instant        the compaction (or initialisation) instant that wrote it
    lakebraid.folded         JSON list of the instant times whose log blocks it folds in
    lakebraid.row_groups     JSON [[rows...], [least key...], [greatest key...]], one entry per
                             non-empty row group (new in version 2)
    lakebraid.key_hex        JSON [template key, [byte positions of hex digits]] (version 3,
                             packed keys only)
    lakebraid.crc32          decimal CRC-32 (zlib) of every other lakebraid.* entry in key
                             order, each as b"<len>:<key><len>:<value>" (new in version 2)

Integrity (version 2 on): readers check ``lakebraid.crc32``, that the recorded row counts are
the footer's, the footer schema (``metadata.integrity``), the key column type against the
packing, page checksums, and that every row group read decodes to its row count; seeks use
the recorded key bounds, never Parquet statistics (unchecked, dropped by pyarrow over 4 KiB).
Any failure raises ``CorruptBaseFileError`` naming the file. The writer checks the footer
before the rename. Version 1 files take their bounds from the key statistics, unchecked.

Encodings: ``metadata.base_encoding`` (any Parquet reader reads them).

Lookups **seek** (the row groups whose key bounds hold a wanted key) when those are at most
``scan_fraction`` of the file, else **scan** all: the key column of about ``BATCH_ROWS`` rows
at once, matched (``KeyMatcher``: a merge of sorted keys, wanted ones packed like the file's),
then the other columns of just the row groups with matches, and the matching rows kept.
"""

from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.metadata.base_encoding import encoding_options
from lakebraid.metadata.errors import (
    CorruptBaseFileError,
    MetadataError,
    MetadataFormatError,
    MetadataValueError,
    MissingMetadataFileError,
)
from lakebraid.metadata.files import open_file
from lakebraid.metadata.hexkeys import (
    HexKeys,
    check_key_type,
    stored_keys,
    string_key_schema,
    with_string_keys,
)
from lakebraid.metadata.integrity import (
    READ_OPTIONS,
    WRITE_OPTIONS,
    Lru,
    check_decoded,
    check_footer,
    guarded,
)
from lakebraid.metadata.keyorder import KeyMatcher, sort_order, wanted_keys
from lakebraid.timeline.durable import is_local, make_durable, make_folder

BASE_VERSION = 3
# version 1: no row-group note (bounds from Parquet statistics); 2: string keys only
READABLE_VERSIONS = (1, 2, 3)
ROW_GROUPS = b"lakebraid.row_groups"
KEY_HEX = b"lakebraid.key_hex"
CRC_KEY = b"lakebraid.crc32"
Groups = tuple[list[int], list[str], list[str]]  # per row group: rows, least key, greatest key
KEY = "key"
BATCH_ROWS = 1 << 17  # rows a lookup decodes at a time: a read of the key column


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
    key_hex: HexKeys | None = None  # how the keys are packed (None: not packed)


FOOTERS: Lru[str, tuple[pq.FileMetaData, BaseInfo]] = Lru(512)  # footers of base files
SIZES: Lru[str, int] = Lru(512)  # sizes of base files on object stores (names never reused)


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
        ROW_GROUPS: _row_groups_note(keys, max(1, row_group_rows)),
    }
    fixed, codec = stored_keys(keys)
    if codec is not None:
        meta[KEY_HEX] = msgspec.json.encode(codec)
    meta[CRC_KEY] = str(_kv_crc(meta)).encode()
    if fixed is not None:
        table = table.set_column(0, table.schema.field(KEY).with_type(fixed.type), fixed)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    folder = path.rsplit("/", 1)[0] if "/" in path else ""
    if folder:
        make_folder(fs, folder)  # a reindex may write the partition's first file
    tmp = f"{path}.inprogress"
    with open_file(fs, tmp, "wb") as handle:
        pq.write_table(
            table,
            handle,
            row_group_size=max(1, row_group_rows),
            write_statistics=True,
            write_page_index=True,
            **encoding_options(partition, table.schema.names, fixed),
            **WRITE_OPTIONS,
        )
    _footer(fs, tmp)  # the note matches the row groups pyarrow wrote (else no reader could)
    make_durable(fs, tmp)
    fs.mv(tmp, path)
    make_durable(fs, path)  # the rename: the folder entry
    return int(fs.size(path))


def _remote(fs: AbstractFileSystem) -> bool:
    """Whether reads should be pre-buffered: coalesced ranges fetched up front suit object
    stores; on a local disk they only copy the file once more."""
    return not is_local(fs)


def _row_groups_note(keys: pa.Array | pa.ChunkedArray, size: int) -> bytes:
    """The row groups of a base file of sorted ``keys`` written ``size`` rows a group."""
    n = len(keys)
    starts = list(range(0, n, size))
    ends = [min(n, start + size) - 1 for start in starts]
    rows = [end - start + 1 for start, end in zip(starts, ends, strict=True)]
    lo = keys.take(pa.array(starts, pa.int64())).to_pylist()
    hi = keys.take(pa.array(ends, pa.int64())).to_pylist()
    return msgspec.json.encode((rows, lo, hi))


def _kv_crc(kv: dict[bytes, bytes]) -> int:
    """CRC-32 of every ``lakebraid.*`` entry but the checksum itself, in key order, each as
    ``<len>:<key><len>:<value>``."""
    crc = 0
    for key in sorted(k for k in kv if k.startswith(b"lakebraid.") and k != CRC_KEY):
        crc = zlib.crc32(b"%d:%s%d:%s" % (len(key), key, len(kv[key]), kv[key]), crc)
    return crc


def _bounds(meta: pq.FileMetaData, kv: dict[bytes, bytes]) -> Groups:
    """The row groups' rows and key bounds: from the (checked) ``lakebraid.row_groups``
    entry, or for a version 1 file without it, from the key statistics."""
    counts = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    if CRC_KEY not in kv:  # version 1
        key_index = meta.schema.names.index(KEY)
        mins, maxs = [], []
        for i in range(meta.num_row_groups):
            stats = meta.row_group(i).column(key_index).statistics
            ok = stats is not None and stats.has_min_max
            mins.append(stats.min if ok else "")
            maxs.append(stats.max if ok else "\U0010ffff")
        return counts, mins, maxs
    rows, lo, hi = msgspec.json.decode(kv[ROW_GROUPS], type=Groups)
    if not len(rows) == len(lo) == len(hi):
        raise MetadataValueError("the row-group entry is inconsistent")
    if [c for c in counts if c] != rows or sum(rows) != meta.num_rows:
        raise MetadataValueError(
            f"the footer's row counts {counts} differ from the recorded {rows}"
        )
    return rows, lo, hi


def _footer(fs: AbstractFileSystem, path: str) -> tuple[pq.FileMetaData, BaseInfo]:
    """The footer of a base file, checked (see the module doc)."""
    with guarded(path, CorruptBaseFileError):
        with open_file(fs, path, size=SIZES.get(path)) as handle:
            meta = pq.ParquetFile(handle).metadata
            if isinstance(getattr(handle, "size", None), int):  # an fsspec file
                SIZES.put(path, handle.size)  # type: ignore[union-attr]
        check_footer(meta)
        kv = meta.metadata or {}
        if CRC_KEY in kv and int(kv[CRC_KEY]) != _kv_crc(kv):
            raise MetadataValueError("the lakebraid.* footer entries do not match their CRC-32")
        version = int(kv.get(b"lakebraid.base.version", b"0"))
        if version not in READABLE_VERSIONS:
            raise MetadataFormatError(
                f"{path}: base file version {version} is not supported "
                f"(this lakebraid reads {READABLE_VERSIONS})"
            )
        if version > 1 and CRC_KEY not in kv:
            raise MetadataValueError(f"a version {version} base file without {CRC_KEY.decode()}")
        codec = msgspec.json.decode(kv[KEY_HEX], type=HexKeys) if KEY_HEX in kv else None
        check_key_type(meta.schema.to_arrow_schema().field(KEY).type, codec, version)
        _, mins, maxs = _bounds(meta, kv)
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
            key_hex=codec,
        )
    return meta, info


def _open(fs: AbstractFileSystem, path: str) -> tuple[pq.FileMetaData, BaseInfo]:
    cached = FOOTERS.get(path)
    if cached is not None:
        return cached
    try:
        item = _footer(fs, path)
    except FileNotFoundError as exc:
        raise MissingMetadataFileError(f"cannot read metadata base file {path}: {exc}") from None
    FOOTERS.put(path, item)
    return item


def base_info(fs: AbstractFileSystem, path: str) -> BaseInfo:
    return _open(fs, path)[1]


def read_base(fs: AbstractFileSystem, path: str, columns: list[str] | None = None) -> pa.Table:
    meta, info = _open(fs, path)
    with guarded(path, CorruptBaseFileError), open_file(fs, path, size=SIZES.get(path)) as handle:
        parquet = pq.ParquetFile(handle, metadata=meta, pre_buffer=_remote(fs), **READ_OPTIONS)
        table = parquet.read(columns=columns)
        if table.num_rows != info.num_rows:
            raise MetadataValueError(f"read {table.num_rows} rows, the footer says {info.num_rows}")
        check_decoded(table)
        return with_string_keys(table, KEY, info.key_hex, validate=True)


def row_groups_for(info: BaseInfo, sorted_keys: np.ndarray) -> list[int]:
    """Row groups whose [min, max] key range holds at least one of ``sorted_keys``."""
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
    """Rows of the base file whose key is in ``keys`` (strings; ``unique``: none repeats), in
    key order, and "seek" or "scan", the way it read them. ``threads`` > 1: that many runs
    of row groups are read at once (one file handle each)."""
    meta, info = _open(fs, path)
    with guarded(path, CorruptBaseFileError):
        schema = string_key_schema(meta.schema.to_arrow_schema(), KEY)
    if len(keys) == 0 or info.num_rows == 0:
        return schema.empty_table(), "seek"
    keys = wanted_keys(keys, schema.field(KEY).type, unique=unique)
    chosen, total = list(range(meta.num_row_groups)), len(info.row_group_min)
    seek = total > 0 and len(keys) <= scan_fraction * info.num_rows
    if seek:  # else most row groups are hit anyway
        groups = row_groups_for(info, keys.to_numpy(zero_copy_only=False))
        seek = len(groups) <= scan_fraction * total
        chosen = groups if seek else chosen
    if not chosen:
        return schema.empty_table(), "seek"
    dictionary = _dictionary_columns(meta, schema)
    runs = [r.tolist() for r in np.array_split(chosen, max(1, min(threads, len(chosen))))]
    # wanted keys as the file stores them; back: their indices in keys (packed: those that fit)
    stored, back = (keys, None) if info.key_hex is None else info.key_hex.pack(keys)
    matcher = KeyMatcher(stored)

    def scan(run: list[int]) -> list[tuple[np.ndarray, pa.Table]]:
        with guarded(path, CorruptBaseFileError):
            return _scan(fs, path, meta, dictionary, matcher, run, schema.names[1:])

    if len(runs) <= 1:
        parts = scan(chosen)
    else:
        with ThreadPoolExecutor(len(runs)) as pool:
            parts = [part for found in pool.map(scan, runs) for part in found]
    if not parts:
        return schema.empty_table(), "seek" if seek else "scan"
    wanted = np.concatenate([hit for hit, _ in parts])
    found = pa.concat_tables([rows for _, rows in parts])  # the keys: those wanted that matched
    found = found.add_column(0, KEY, keys.take(pa.array(wanted if back is None else back[wanted])))
    return found.cast(schema), "seek" if seek else "scan"


def _scan(
    fs: AbstractFileSystem,
    path: str,
    meta: pq.FileMetaData,
    dictionary: list[str],
    matcher: KeyMatcher,
    run: list[int],
    columns: list[str],
) -> list[tuple[np.ndarray, pa.Table]]:
    """For row groups ``run``, about ``BATCH_ROWS`` rows at a time: the key column decoded
    and matched, then ``columns`` of just the groups with matches, the matching rows kept;
    each part with the indices of the wanted keys it holds."""
    counts = np.array([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    window = (np.cumsum(counts[run]) - counts[run]) // BATCH_ROWS
    found, options = [], {"pre_buffer": _remote(fs), "read_dictionary": dictionary}
    with open_file(fs, path, size=SIZES.get(path)) as handle:
        parquet = pq.ParquetFile(handle, metadata=meta, **options, **READ_OPTIONS)
        for block in np.split(np.array(run, np.int64), np.flatnonzero(np.diff(window)) + 1):
            rows, wanted = matcher.match(_read(parquet, block, [KEY], counts).column(0))
            if not len(rows):
                continue
            first = np.cumsum(counts[block]) - counts[block]  # row of each group in the block
            group = np.searchsorted(first, rows, side="right") - 1
            hit = np.unique(group)  # groups with matches, ascending
            kept = np.cumsum(counts[block[hit]]) - counts[block[hit]]  # their rows once read
            at = rows - first[group] + kept[np.searchsorted(hit, group)]
            part = _read(parquet, block[hit], columns, counts).take(pa.array(at))
            check_decoded(part)
            found.append((wanted, part))
    return found


def _read(
    parquet: pq.ParquetFile, groups: np.ndarray, columns: list[str], counts: np.ndarray
) -> pa.Table:
    """``columns`` of row ``groups``, which must decode to the footer's row counts."""
    table = parquet.read_row_groups(groups.tolist(), columns=columns, use_threads=False)
    if table.num_rows != (expected := int(counts[groups].sum())):
        raise MetadataValueError(
            f"row groups {groups.tolist()} gave {table.num_rows} rows, not {expected}"
        )
    return table


def _dictionary_columns(meta: pq.FileMetaData, schema: pa.Schema) -> list[str]:
    """String/binary columns (not the key) stored dictionary encoded: read as Arrow
    dictionaries, they cost an index per row instead of a string, until the rows are taken."""
    first = meta.row_group(0) if meta.num_row_groups else None
    textual = [pa.types.is_string(f.type) or pa.types.is_binary(f.type) for f in schema]
    return [
        field.name
        for i, field in enumerate(schema)
        if first and field.name != KEY and textual[i] and first.column(i).has_dictionary_page
    ]
