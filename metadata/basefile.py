"""Metadata base files: Parquet, sorted by ``key``, one per (file group, compaction instant).

Format version 4 (versions 1 to 3 are still read). The first column ``key`` (unique, ascending
by UTF-8 bytes) is the record key: a string column, or (version 3) when every key of the file
has one UTF-8 length ``w``, a ``fixed_size_binary`` column: the keys' hex digits packed two to a
byte when they fit a ``lakebraid.key_hex`` template (``metadata.hexkeys.HexKeys``: UUIDs,
hashes, zero-padded numbers), else their ``w`` bytes. Readers hand back strings. The other
columns are the partition's record fields (``metadata.arrow_records``).
Zstd, column statistics (not of ``key``: a comparison per key, 30% of a record-index base's
Parquet write, for bounds no reader uses), page indexes and page checksums, row groups of at
most ``row_group_rows`` rows. The Parquet key-value metadata holds::

    lakebraid.base.version   "4"
    lakebraid.partition      metadata partition name (files / column_stats / record_index)
    lakebraid.file_group     file group id
    lakebraid.instant        the compaction (or initialisation) instant that wrote it
    lakebraid.folded         JSON list of the instant times whose log blocks it folds in
    lakebraid.row_groups     JSON [[rows...], [least key...], [greatest key...]], one entry per
                             non-empty row group (new in version 2)
    lakebraid.key_hex        JSON [template key, [byte positions of hex digits]] (version 3,
                             packed keys only)
    lakebraid.locations      JSON location table (version 4, record_index files only)
    lakebraid.crc32          decimal CRC-32 (zlib) of every other lakebraid.* entry in key
                             order, each as b"<len>:<key><len>:<value>" (new in version 2)

Integrity (version 2 on): readers check ``lakebraid.crc32``, that the recorded row counts are
the footer's, the footer schema (``metadata.integrity``), the key column type against the
packing, page checksums, and that every row group read decodes to its row count; seeks use
the recorded key bounds, never Parquet statistics (unchecked, dropped by pyarrow over 4 KiB).
Any failure raises ``CorruptBaseFileError`` naming the file. The writer checks the footer
before the rename. Version 1 files take their bounds from the key statistics, unchecked.

Encodings: ``metadata.base_encoding`` (any Parquet reader reads them).

Version 4 (``record_index`` files only differ): the four location columns of an entry
(partition, file id halves, instant) are one ``location`` column indexing the footer's
``lakebraid.locations`` table (``metadata.locations``, which says when a file keeps the four
columns); readers hand back the four columns either way.

Writing: ``metadata.basewrite``. Lookups: ``metadata.baselookup``.
"""

from __future__ import annotations

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.metadata.checksum import crc32
from lakebraid.metadata.errors import (
    CorruptBaseFileError,
    MetadataFormatError,
    MetadataValueError,
    MissingMetadataFileError,
)
from lakebraid.metadata.files import decode_threaded, open_file
from lakebraid.metadata.hexkeys import (
    HexKeys,
    check_key_type,
    string_key_schema,
    with_string_keys,
)
from lakebraid.metadata.integrity import (
    READ_OPTIONS,
    Lru,
    check_decoded,
    check_footer,
    guarded,
)
from lakebraid.metadata.locations import (
    LOCATION,
    LOCATIONS_KEY,
    check_codes,
    expand,
    logical_schema,
    table_of,
)
from lakebraid.timeline.durable import is_local

BASE_VERSION = 4
# version 1: no row-group note (bounds from Parquet statistics); 2: string keys only;
# 3: record-index locations as four columns
READABLE_VERSIONS = (1, 2, 3, 4)
ROW_GROUPS = b"lakebraid.row_groups"
KEY_HEX = b"lakebraid.key_hex"
CRC_KEY = b"lakebraid.crc32"
Groups = tuple[list[int], list[str], list[str]]  # per row group: rows, least key, greatest key
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
    key_hex: HexKeys | None = None  # how the keys are packed (None: not packed)
    ascending: bool = False  # the bounds ascend (:func:`bounds_ascend`): keys meet a run


def bounds_ascend(mins: tuple[str, ...], maxs: tuple[str, ...]) -> bool:
    """Whether row groups' key bounds ascend without overlap, as a sorted file's do (a group
    without statistics spans "" to U+10FFFF: not so), so a key range meets one run of them."""
    inside = all(a <= b for a, b in zip(mins, maxs, strict=True))
    return inside and all(b < a for a, b in zip(mins[1:], maxs, strict=False))


class Footer(msgspec.Struct, frozen=True):
    """A base file's checked footer: Parquet's, the lakebraid entries, (version 4
    record-index files) the location table its ``location`` column indexes; and what each
    lookup would derive from them: the stored schema with a string key, the schema readers
    hand back (``metadata.locations.logical_schema``) and each row group's row count."""

    meta: pq.FileMetaData
    info: BaseInfo
    locations: pa.Table | None
    stored_schema: pa.Schema
    schema: pa.Schema
    row_counts: tuple[int, ...]


FOOTERS: Lru[str, Footer] = Lru(512)  # footers of base files
SIZES: Lru[str, int] = Lru(512)  # sizes of base files on object stores (names never reused)


def remote(fs: AbstractFileSystem) -> bool:
    """Whether reads should be pre-buffered: coalesced ranges fetched up front suit object
    stores; on a local disk they only copy the file once more."""
    return not is_local(fs)


def kv_crc(kv: dict[bytes, bytes]) -> int:
    """CRC-32 of every ``lakebraid.*`` entry but the checksum itself, in key order, each as
    ``<len>:<key><len>:<value>``."""
    crc = 0
    for key in sorted(k for k in kv if k.startswith(b"lakebraid.") and k != CRC_KEY):
        crc = crc32(b"%d:%s%d:%s" % (len(key), key, len(kv[key]), kv[key]), crc)
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


def _footer(fs: AbstractFileSystem, path: str) -> Footer:
    """The footer of a base file, checked (see the module doc)."""
    with guarded(path, CorruptBaseFileError):
        with open_file(fs, path, size=SIZES.get(path)) as handle:
            meta = pq.ParquetFile(handle).metadata
            if isinstance(getattr(handle, "size", None), int):  # an fsspec file
                SIZES.put(path, handle.size)  # type: ignore[union-attr]
        check_footer(meta)
        kv = meta.metadata or {}
        if CRC_KEY in kv and int(kv[CRC_KEY]) != kv_crc(kv):
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
        arrow_schema = meta.schema.to_arrow_schema()
        check_key_type(arrow_schema.field(KEY).type, codec, version)
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
            ascending=bounds_ascend(tuple(mins), tuple(maxs)),
        )
        stored = string_key_schema(arrow_schema, KEY)
        counts = tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
        locations = _locations(meta, kv, version)
        return Footer(meta, info, locations, stored, logical_schema(stored), counts)


def _locations(meta: pq.FileMetaData, kv: dict[bytes, bytes], version: int) -> pa.Table | None:
    """The location table of a version 4 record-index file that has one (else None)."""
    stored = LOCATION in meta.schema.names
    if stored != (LOCATIONS_KEY in kv) or (stored and version < 4):
        raise MetadataValueError(
            f"a version {version} base file with{'' if stored else 'out'} a {LOCATION} "
            f"column and with{'' if LOCATIONS_KEY in kv else 'out'} {LOCATIONS_KEY.decode()}"
        )
    return table_of(kv[LOCATIONS_KEY]) if stored else None


def check_written(fs: AbstractFileSystem, path: str) -> Footer:
    """Check the footer of a base file just written (not yet renamed into place) as readers
    will (``metadata.basewrite``); returns it (:func:`remember_base` once renamed)."""
    return _footer(fs, path)


def remember_base(path: str, footer: Footer) -> None:
    """Cache the checked footer of a temporary just renamed to ``path`` (its bytes unchanged),
    so the first reader in this process (the inline compaction's plan after a compaction or
    a write's commit bases) need not read it back."""
    FOOTERS.put(
        path, msgspec.structs.replace(footer, info=msgspec.structs.replace(footer.info, path=path))
    )


def open_base(fs: AbstractFileSystem, path: str) -> Footer:
    """The checked footer of base file ``path`` (cached by path: names are never reused)."""
    cached = FOOTERS.get(path)
    if cached is not None:
        return cached
    try:
        item = _footer(fs, path)
    except FileNotFoundError as exc:
        message = f"cannot read metadata base file {path}: {exc}"
        raise MissingMetadataFileError(message, path=path) from None
    FOOTERS.put(path, item)
    return item


def base_info(fs: AbstractFileSystem, path: str) -> BaseInfo:
    return open_base(fs, path).info


def read_base(fs: AbstractFileSystem, path: str, columns: list[str] | None = None) -> pa.Table:
    """``columns`` (None: all) of every row of base file ``path``, keys as strings and
    locations as their four columns."""
    footer = open_base(fs, path)
    locations = footer.locations
    stored = columns
    if locations is not None and columns is not None:
        wanted = set(columns) & set(locations.column_names)
        stored = [c for c in columns if c not in wanted] + ([LOCATION] if wanted else [])
    with guarded(path, CorruptBaseFileError):
        table = _read(fs, path, footer, stored)
        if locations is not None and LOCATION in table.column_names:
            table = expand(table, locations)
        table = table if columns is None else table.select(columns)
        return with_string_keys(table, KEY, footer.info.key_hex, validate=True)


def read_stored(fs: AbstractFileSystem, path: str) -> tuple[pa.Table, Footer]:
    """Every row of base file ``path`` as stored (a fixed-width key column stays so, a
    ``location`` column stays codes, checked to be within the footer's table), and its
    footer."""
    footer = open_base(fs, path)
    with guarded(path, CorruptBaseFileError):
        table = _read(fs, path, footer, None)
        if footer.locations is not None:
            check_codes(table.column(LOCATION), footer.locations.num_rows)
    return table, footer


def _read(fs: AbstractFileSystem, path: str, footer: Footer, columns: list[str] | None) -> pa.Table:
    meta, info = footer.meta, footer.info
    with open_file(fs, path, size=SIZES.get(path)) as handle:
        parquet = pq.ParquetFile(handle, metadata=meta, pre_buffer=remote(fs), **READ_OPTIONS)
        table = parquet.read(columns=columns, use_threads=decode_threaded(meta))
    if table.num_rows != info.num_rows:
        raise MetadataValueError(f"read {table.num_rows} rows, the footer says {info.num_rows}")
    check_decoded(table)
    return table
