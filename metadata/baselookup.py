"""Lookups in metadata base files (``metadata.basefile``): the rows of given keys.

A lookup **seeks** (the row groups whose key bounds hold a wanted key) when those are at most
``scan_fraction`` of the file, else **scans** all. About :data:`BATCH_ROWS` rows at a time, the
key column is matched (``KeyMatcher``: a merge of sorted keys, wanted ones packed like the
file's) and the matching rows of the other columns (of a version 4 record-index file, its one
``location`` column) kept: a seek reads the key and other columns of its row groups at once
(nearly every one holds a match), a scan the other columns of just the row groups with matches.
"""

from __future__ import annotations

import bisect
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.metadata.basefile import KEY, SIZES, BaseInfo, Footer, open_base, remote
from lakebraid.metadata.errors import CorruptBaseFileError, MetadataValueError
from lakebraid.metadata.files import open_file
from lakebraid.metadata.integrity import READ_OPTIONS, check_decoded, guarded
from lakebraid.metadata.keymatch import KeyMatcher
from lakebraid.metadata.keyorder import wanted_keys
from lakebraid.metadata.locations import expand

BATCH_ROWS = 1 << 17  # rows a lookup decodes at a time: a read of the key column
FEW_GROUPS = 2  # row groups meeting the keys' range that a seek reads without narrowing


def row_groups_for(info: BaseInfo, sorted_keys: pa.Array) -> list[int]:
    """Row groups whose [min, max] key range holds at least one of ``sorted_keys`` (strings,
    ascending). The groups that meet the keys' own range are found first
    (:func:`_meeting`); at most :data:`FEW_GROUPS` of them are returned as they are (a
    superset: reading a group with no wanted key costs a read, never a wrong row), more are
    narrowed key by key."""
    if not len(sorted_keys):
        return []
    met = _meeting(info, sorted_keys[0].as_py(), sorted_keys[-1].as_py())
    if len(met) <= FEW_GROUPS:
        return list(met)
    keys = sorted_keys.to_numpy(zero_copy_only=False)
    bounds = [info.row_group_min[i] for i in met], [info.row_group_max[i] for i in met]
    lo = np.searchsorted(keys, np.array(bounds[0], dtype=object), side="left")
    hi = np.searchsorted(keys, np.array(bounds[1], dtype=object), side="right")
    return [i for i, a, b in zip(met, lo, hi, strict=True) if b > a]


def _meeting(info: BaseInfo, low: str, high: str) -> range:
    """The row groups whose key bounds meet [``low``, ``high``]: one run, found by bisection,
    when the bounds ascend (``BaseInfo.ascending``); else every group."""
    if not info.ascending:
        return range(len(info.row_group_min))
    first = bisect.bisect_left(info.row_group_max, low)
    return range(first, max(first, bisect.bisect_right(info.row_group_min, high)))


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
    footer = open_base(fs, path)
    meta, info, locations, schema = footer.meta, footer.info, footer.locations, footer.schema
    if len(keys) == 0 or info.num_rows == 0:
        return schema.empty_table(), "seek"
    keys = wanted_keys(keys, schema.field(KEY).type, unique=unique)
    chosen, total = list(range(meta.num_row_groups)), len(info.row_group_min)
    seek = total > 0 and len(keys) <= scan_fraction * info.num_rows
    if seek:  # else most row groups are hit anyway
        groups = row_groups_for(info, keys)
        seek = len(groups) <= scan_fraction * total
        chosen = groups if seek else chosen
    if not chosen:
        return schema.empty_table(), "seek"
    stored_schema = footer.stored_schema
    dictionary = _dictionary_columns(meta, stored_schema)
    parallel = min(threads, len(chosen))
    runs = [r.tolist() for r in np.array_split(chosen, parallel)] if parallel > 1 else [chosen]
    # wanted keys as the file stores them; back: their indices in keys (packed: those that fit)
    stored, back = (keys, None) if info.key_hex is None else info.key_hex.pack(keys)
    matcher = KeyMatcher(stored)

    def scan(run: list[int]) -> list[tuple[np.ndarray, pa.Table]]:
        with guarded(path, CorruptBaseFileError):
            columns = stored_schema.names[1:]
            return _scan(fs, path, footer, dictionary, matcher, run, columns, together=seek)

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
    if locations is not None:
        with guarded(path, CorruptBaseFileError):
            found = expand(found, locations)
    return found.cast(schema), "seek" if seek else "scan"


def spanned_row_groups(fs: AbstractFileSystem, path: str, low: str, high: str) -> int:
    """How many row groups of the base file have key bounds that meet [``low``, ``high``]: at
    most what :func:`lookup_base` of keys in that range reads (a read of its footer, which
    the lookup then finds cached; no data)."""
    return len(_meeting(open_base(fs, path).info, low, high))


def _scan(
    fs: AbstractFileSystem,
    path: str,
    footer: Footer,
    dictionary: list[str],
    matcher: KeyMatcher,
    run: list[int],
    columns: list[str],
    *,
    together: bool = False,
) -> list[tuple[np.ndarray, pa.Table]]:
    """For row groups ``run``, about ``BATCH_ROWS`` rows at a time: the key column decoded
    and matched, then ``columns`` of just the groups with matches, the matching rows kept;
    each part with the indices of the wanted keys it holds. ``together`` (a seek: the
    groups were chosen for holding wanted keys in their range): the key and ``columns`` in
    one read."""
    meta, counts = footer.meta, np.array(footer.row_counts, np.int64)
    window = (np.cumsum(counts[run]) - counts[run]) // BATCH_ROWS
    found, options = [], {"pre_buffer": remote(fs), "read_dictionary": dictionary}
    with open_file(fs, path, size=SIZES.get(path)) as handle:
        parquet = pq.ParquetFile(handle, metadata=meta, **options, **READ_OPTIONS)
        for block in np.split(np.array(run, np.int64), np.flatnonzero(np.diff(window)) + 1):
            if together:
                read = _read(parquet, block, [KEY, *columns], counts)
                rows, wanted = matcher.match(read.column(0))
                if len(rows):
                    part = read.drop_columns([KEY]).take(pa.array(rows))
                    check_decoded(part)
                    found.append((wanted, part))
                continue
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
