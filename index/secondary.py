"""Secondary indexes: value -> record keys of a chosen column, in the metadata partition
``secondary_index`` (record ``metadata.records.SecondaryIndexRecord``).

An entry's key is ``column + "\\x00" + escaped value + "\\x00" + record key``. The value is its
canonical text (``index.keys``: the rules of record keys, so ``7`` and ``"7"`` meet in an
integer column), escaped so it holds no NUL (``"\\x01"`` -> ``"\\x01\\x02"``, ``"\\x00"`` ->
``"\\x01\\x01"``): the key is unambiguous and one value's entries are the contiguous range of
keys that start with ``column \\x00 value \\x00`` (its *prefix*). Null values are not indexed.
Entries are routed to file groups by the hash of their prefix, so one value lives in one file
group.

Entries derive from data files alone: a data file of a table with an index on ``c`` holds the
entries ``prefix(c, row's value) + row's key`` of its rows. A commit that replaced file ``old``
by ``new`` in a file group adds the entries of ``new`` that ``old`` lacks and deletes the
others (:func:`entry_changes`), whichever engine wrote the files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.index.keys import RECORD_KEY, key_text, key_type_problem
from lakebraid.index.literals import index_values
from lakebraid.index.lookup import lookup
from lakebraid.index.scope import in_partition
from lakebraid.index.sql_filter import Condition
from lakebraid.metadata.arrow_records import KEY
from lakebraid.metadata.basefile import base_info
from lakebraid.metadata.commits import WriteStatus
from lakebraid.metadata.errors import CorruptBaseFileError, MetadataValueError
from lakebraid.metadata.files import open_file
from lakebraid.metadata.hashing import file_group_id, file_groups_of
from lakebraid.metadata.hexkeys import with_string_keys
from lakebraid.metadata.integrity import READ_OPTIONS, check_decoded, guarded
from lakebraid.metadata.logblock import BlockType
from lakebraid.metadata.logcache import LOGS
from lakebraid.metadata.logwrite import append_blocks, encode_block
from lakebraid.metadata.reader import MetadataReader, fold_logs
from lakebraid.metadata.records import Partition, SecondaryIndexRecord, ints_to_file_id
from lakebraid.metadata.writer import WrittenLog
from lakebraid.timeline.layout import TableLayout

INDEX = Partition.SECONDARY_INDEX
SEP = "\x00"


def value_problem(data_type: pa.DataType) -> str | None:
    """Why a column of ``data_type`` cannot be indexed (None: it can)."""
    return key_type_problem(data_type)


def value_texts(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The escaped canonical text of values (nulls stay null)."""
    text = key_text(values)
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    text = pc.replace_substring(text, "\x01", "\x01\x02")
    return pc.replace_substring(text, SEP, "\x01\x01")


def prefixes(column: str, texts: pa.Array) -> pa.Array:
    """``column \\x00 text \\x00`` of escaped value texts."""
    return pc.binary_join_element_wise(pa.scalar(column), texts, pa.scalar(""), SEP)


def groups_of(column: str, texts: pa.Array, n: int) -> np.ndarray:
    """The file group of each value: the hash of its prefix."""
    return file_groups_of(prefixes(column, texts), n)


def file_keys(
    fs: AbstractFileSystem, path: str, record_key: str, partition: str | None = None
) -> pa.Array:
    """The index keys of one data file's rows: their record keys (canonical text), prefixed
    with ``partition`` for a partition-scoped record index (``index.scope``)."""
    with open_file(fs, path) as handle:
        parquet = pq.ParquetFile(handle)
        key_column = RECORD_KEY if RECORD_KEY in parquet.schema_arrow.names else record_key
        keys = key_text(parquet.read(columns=[key_column]).column(key_column))
    return in_partition(keys, partition)


def file_entries(
    fs: AbstractFileSystem,
    path: str,
    columns: Sequence[str],
    record_key: str,
    partition: str | None = None,
) -> dict[str, pa.Array]:
    """``{column: entry keys}`` of one data file (rows with a null value have none); the
    record-key part is the row's index key (``partition``: see :func:`file_keys`)."""
    with open_file(fs, path) as handle:
        parquet = pq.ParquetFile(handle)
        names = set(parquet.schema_arrow.names)
        key_column = RECORD_KEY if RECORD_KEY in names else record_key
        present = [c for c in columns if c in names]  # a file from before a column existed
        table = parquet.read(columns=[*dict.fromkeys([*present, key_column])])
    keys = in_partition(key_text(table.column(key_column)), partition)
    found = {c: pa.array([], pa.string()) for c in columns}
    for column in present:
        texts = value_texts(table.column(column))
        prefix = prefixes(column, texts)
        entries = pc.binary_join_element_wise(prefix, keys, "")
        found[column] = entries.filter(pc.is_valid(texts))
    return found


def entry_changes(
    fs: AbstractFileSystem,
    layout: TableLayout,
    statuses: Sequence[WriteStatus],
    columns: Sequence[str],
    record_key: str,
    threads: int = 2,
    scoped: bool = False,
) -> tuple[pa.Array, pa.Array]:
    """The entries a commit adds and deletes for indexes on ``columns``, from the files its
    write statuses replaced and wrote (``scoped``: a partition-scoped record index)."""
    paths = []
    for s in statuses:
        old = layout.data_file(s.partition, s.old_file) if s.old_file else None
        new = layout.data_file(s.partition, s.file_name) if s.file_name else None
        paths.append((old, new, s.partition if scoped else None))

    def one(pair: tuple[str | None, str | None, str | None]) -> tuple[pa.Array, pa.Array]:
        old, new = (_entries(fs, p, columns, record_key, pair[2]) for p in pair[:2])
        added = new.filter(pc.invert(pc.is_in(new, value_set=old)))
        gone = old.filter(pc.invert(pc.is_in(old, value_set=new)))
        return added, gone

    with ThreadPoolExecutor(max(1, min(threads, len(paths)))) as pool:
        done = list(pool.map(one, paths))
    added = _concat([a for a, _ in done])
    gone = _concat([g for _, g in done])
    # a key that moved between file groups with its value: added in one, gone from another
    return added, gone.filter(pc.invert(pc.is_in(gone, value_set=added)))


def _entries(
    fs: AbstractFileSystem,
    path: str | None,
    columns: Sequence[str],
    record_key: str,
    partition: str | None,
) -> pa.Array:
    if path is None:
        return pa.array([], pa.string())
    return _concat(list(file_entries(fs, path, columns, record_key, partition).values()))


def _concat(arrays: Iterable[pa.Array]) -> pa.Array:
    arrays = [a for a in arrays if len(a)]
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())


def group_of_entries(entries: pa.Array, n: int) -> np.ndarray:
    """The file group of each entry key (by its prefix: up to the second NUL)."""
    cut = pc.extract_regex(entries, r"^(?P<p>[^\x00]*\x00[^\x00]*\x00)")
    return file_groups_of(pc.struct_field(cut, "p"), n)


def write_logs(
    fs: AbstractFileSystem,
    layout: TableLayout,
    instant: str,
    added: pa.Array,
    gone: pa.Array,
    n: int,
) -> list[WrittenLog]:
    """The log files of ``instant`` in the secondary-index partition: one data block per
    file group holding its added entries and tombstones of the gone ones."""
    if len(added) + len(gone) == 0:
        return []
    keys = pa.concat_arrays([added.cast(pa.string()), gone.cast(pa.string())])
    deleted = np.concatenate([np.zeros(len(added), bool), np.ones(len(gone), bool)])
    groups = group_of_entries(keys, n)
    written = []
    for index in np.unique(groups).tolist():
        mask = groups == index
        part_keys = keys.filter(pa.array(mask)).to_pylist()
        part_deleted = deleted[mask].tolist()
        records = sorted(
            (SecondaryIndexRecord(k, d) for k, d in zip(part_keys, part_deleted, strict=True)),
            key=lambda r: r.key,
        )
        group = file_group_id(str(INDEX), int(index))
        blob = encode_block(
            BlockType.DATA, instant=instant, partition=INDEX, file_group=group, records=records
        )
        path = layout.metadata_log_file(str(INDEX), group, instant)
        append_blocks(fs, path, [blob])
        name = path.rsplit("/", 1)[-1]
        written.append(WrittenLog(str(INDEX), group, name, len(blob), len(records)))
    return written


def keys_for(reader: MetadataReader, column: str, values: pa.Array) -> pa.Array:
    """The record keys whose ``column`` holds one of ``values`` (in the column's type) as of
    the reader's point; the index on ``column`` must be visible there."""
    texts = pc.unique(value_texts(values).drop_null())
    if len(texts) == 0:
        return pa.array([], pa.string())
    wanted = prefixes(column, texts)
    n = reader.group_count(INDEX)
    groups = groups_of(column, texts, n)
    parts = []
    for index in np.unique(groups).tolist():
        mine = wanted.filter(pa.array(groups == index)).to_pylist()
        parts.append(_group_keys(reader, index, mine))
    return pc.unique(_concat(parts))


def _group_keys(reader: MetadataReader, index: int, wanted: list[str]) -> pa.Array:
    """Record keys of the entries under any of the ``wanted`` prefixes in one file group:
    the base's row groups that may hold them, then the slice's logs (newest wins)."""
    piece = reader.slice(INDEX, index)
    folder, fs = reader.folder(INDEX), reader.fs
    found: dict[str, bool] = {}
    if piece.base is not None:
        for key in _base_range(fs, f"{folder}/{piece.base}", wanted):
            found[key] = True
    blocks = [
        b for name, size in piece.log_files() for b in LOGS.blocks(fs, f"{folder}/{name}", size)
    ]
    for key, record in fold_logs(INDEX, blocks).items():
        if key.startswith(tuple(wanted)):
            found[key] = record is not None and not record.deleted  # type: ignore[union-attr]
    live = [k for k, alive in found.items() if alive]
    return pa.array([k[k.index(SEP, k.index(SEP) + 1) + 1 :] for k in live], pa.string())


def _base_range(fs: AbstractFileSystem, path: str, wanted: list[str]) -> list[str]:
    """Entry keys of a base file under the ``wanted`` prefixes: each prefix is the key range
    ``[prefix, prefix[:-1] + "\\x01")``; only the row groups whose key range (footer) meets one
    are read, their whole key column checked."""
    ranges = [(p, p[:-1] + "\x01") for p in wanted]
    info = base_info(fs, path)
    bounds = zip(info.row_group_min, info.row_group_max, strict=True)
    picked = [
        i
        for i, (first, last) in enumerate(bounds)
        if any(a <= last and first < b for a, b in ranges)
    ]
    if not picked:
        return []
    with guarded(path, CorruptBaseFileError), open_file(fs, path) as handle:
        parquet = pq.ParquetFile(handle, **READ_OPTIONS)
        table = parquet.read_row_groups(picked, columns=[KEY])
        expected = sum(parquet.metadata.row_group(i).num_rows for i in picked)
        if table.num_rows != expected:
            raise MetadataValueError(f"row groups {picked}: {table.num_rows} rows, {expected} due")
        check_decoded(table)
        keys = with_string_keys(table, KEY, info.key_hex, validate=True).column(KEY)
    keys = keys.combine_chunks()
    found = []
    for lo, hi in ranges:
        found.extend(
            keys.filter(pc.and_(pc.greater_equal(keys, lo), pc.less(keys, hi))).to_pylist()
        )
    return found


def all_entries(reader: MetadataReader, columns: Sequence[str]) -> pa.Array:
    """Every entry of the indexes on ``columns`` as of the reader's point (validation)."""
    parts = []
    for index in range(reader.group_count(INDEX)):
        keys = reader.group_table(INDEX, index).column(KEY).combine_chunks().cast(pa.string())
        hit = pc.starts_with(keys, columns[0] + SEP)
        for column in columns[1:]:
            hit = pc.or_(hit, pc.starts_with(keys, column + SEP))
        parts.append(keys.filter(hit))
    return _concat(parts)


def matching_groups(
    reader: MetadataReader, conditions: Sequence[Condition], types: dict[str, pa.DataType]
) -> set[tuple[str, str]] | None:
    """The (partition, file id) of every file group holding a row that an equality or
    ``in`` condition on an indexed column allows (value -> record keys -> record index), or
    None when no condition can use an index (``index.literals``: a literal Spark compares
    with the column otherwise than by its value uses none)."""
    found: set[tuple[str, str]] | None = None
    for cond in conditions:
        if cond.op not in ("=", "in") or cond.column not in reader.point.secondary:
            continue
        kind = types.get(cond.column)
        values = None if kind is None else index_values(cond.values, kind)
        if values is None:
            continue  # a literal Spark compares otherwise: left to statistics and the filter
        keys = keys_for(reader, cond.column, values)
        groups = groups_of_keys(reader, keys)
        found = groups if found is None else found & groups
    return found


def wanted_keys(
    conditions: Sequence[Condition], record_key: str, types: dict[str, pa.DataType]
) -> pa.Array | None:
    """The canonical texts of the record keys that the equality and ``in`` conditions on the
    record key column allow (all such conditions hold at once), sorted; None when no
    condition names that column (or none is read as Spark reads it:
    ``index.literals``)."""
    found: set[str] | None = None
    for cond in conditions:
        if cond.op not in ("=", "in") or cond.column != record_key:
            continue
        values = index_values(cond.values, types[record_key]) if record_key in types else None
        if values is None:
            continue
        texts = {t for t in key_text(values).to_pylist() if t is not None}
        found = texts if found is None else found & texts
    return None if found is None else pa.array(sorted(found), pa.string())


def groups_of_keys(reader: MetadataReader, keys: pa.Array) -> set[tuple[str, str]]:
    """The (partition, file id) of the file groups holding ``keys`` (record index)."""
    rows = lookup(reader, keys, unique=True)
    pairs = set(
        zip(
            rows.column("partition").to_pylist(),
            rows.column("file_id_hi").to_pylist(),
            rows.column("file_id_lo").to_pylist(),
            strict=True,
        )
    )
    return {(part, ints_to_file_id(hi, lo)) for part, hi, lo in pairs}
