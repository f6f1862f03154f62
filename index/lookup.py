"""Record-index lookups: where keys live as of a :class:`metadata.reader.MetadataReader`'s
read point.

:func:`lookup` and :func:`locate` sort the wanted keys by their record-index file group and
run one task per file group holding wanted keys (``MetadataReader.map_groups``, on up to
``MetadataReader.threads()`` threads); each task reads its group's merged rows of just those
keys (``MetadataReader.group_table``: base file by seek or scan, then the cached columns of
the group's log files). :func:`locations` answers with :class:`metadata.records.RecordLocation`
values for callers that want Python objects.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.arrow_records import KEY, empty_table
from lakebraid.metadata.basefile import remote
from lakebraid.metadata.baselookup import spanned_row_groups
from lakebraid.metadata.hashing import group_order
from lakebraid.metadata.indexfold import key_range, misses_slice
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import (
    Partition,
    RecordLocation,
    int_to_instant,
    ints_to_file_id,
)


def lookup(
    reader: MetadataReader,
    keys: pa.Array | pa.ChunkedArray | Sequence[str],
    *,
    unique: bool = False,
) -> pa.Table:
    """Record-index rows (key, partition, file_id_hi, file_id_lo, instant) of the keys
    that exist; absent keys have no row. One task per file group holding wanted keys.
    ``unique=True``: the caller guarantees no key repeats (else each group's task drops
    repeats from its keys once sorted, cheaper than a hash of them all)."""
    return _lookup(reader, _as_array(keys), positions=False, unique=unique)[0]


def locate(
    reader: MetadataReader, keys: pa.Array | pa.ChunkedArray, hashes: np.ndarray | None = None
) -> tuple[pa.Table, pa.Array]:
    """:func:`lookup` of unique ``keys``, and for every key the row of the result that
    holds it (int64, null when absent): each file group's task also matches its keys
    against its rows, so the caller needs no join of its own. ``hashes``: the keys' format
    hashes when the caller has them (``metadata.hashing.stable_hashes``; not hashed again)."""
    return _lookup(reader, _as_array(keys), positions=True, unique=True, hashes=hashes)


LIGHT_READS = 1  # row groups per record-index group up to which a lookup runs on one thread


def _lookup(
    reader: MetadataReader,
    wanted: pa.Array,
    *,
    positions: bool,
    unique: bool,
    hashes: np.ndarray | None = None,
) -> tuple[pa.Table, pa.Array]:
    partition = Partition.RECORD_INDEX
    n = reader.group_count(partition)
    if len(wanted) == 0:
        return empty_table(partition), pa.array([], pa.int64())
    groups = reader.point.index_groups(wanted, hashes)
    # each group's task sorts its keys (``slice_table``): the order only gathers groups
    order = None if bool((groups == groups[0]).all()) else group_order(groups, n)
    if order is not None:
        wanted, groups = wanted.take(pa.array(order)), groups[order]
    bounds = _run_bounds(groups)

    # fewer groups than threads (small tables): each group's scan uses the spare ones
    inner = max(1, reader.threads() // max(1, len(bounds)))

    ranges = [key_range(wanted[start:end]) for _, start, end in bounds]  # computed once

    def one(j: int) -> tuple[pa.Table, pa.Array | None]:
        group, start, end = bounds[j]
        asked = wanted[start:end]
        piece, folder = reader.slice(partition, group), reader.folder(partition)
        if misses_slice(reader.fs, folder, piece, asked, ranges[j]):  # keys past every file's
            rows = empty_table(partition)  # (appends of growing keys): nothing sorted
        else:
            rows = reader.group_table(partition, group, asked, inner, unique=unique)
        return rows, pc.index_in(asked, value_set=rows.column(KEY)) if positions else None

    most = _threads(reader, bounds, ranges)
    done = reader.map_groups(one, range(len(bounds)), most=most)
    found = pa.concat_tables([rows for rows, _ in done])
    if not positions:
        return found, pa.array([], pa.int64())
    offsets = np.cumsum([0, *(rows.num_rows for rows, _ in done)])
    at = pa.concat_arrays(
        [
            pc.add(hit.cast(pa.int64()), int(offset))  # type: ignore[union-attr]
            for (_, hit), offset in zip(done, offsets.tolist(), strict=False)
        ]
    )
    if order is None:
        return found, at
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[order] = np.arange(len(order))
    return found, at.take(pa.array(inverse))  # back to the order of the keys asked


def _threads(
    reader: MetadataReader,
    bounds: list[tuple[int, int, int]],
    ranges: list[tuple[str, str] | None],
) -> int:
    """1 when the keys a lookup on local disk asks of each record-index group span at most
    :data:`LIGHT_READS` row groups of its base file on average (their range against the
    footers' key bounds; a seek reads no more): each group's work is then
    mostly Python, and threads contend for the interpreter more than they overlap (1,000
    keys of one day in 10 groups of 1M keys: 21.0 ms on one thread, 24.4 ms on two; 1,000
    random keys, ~60 row groups a group: 189 ms against 119); 0 (the reader's threads)
    otherwise, and always on an object store, where threads overlap requests."""
    if len(bounds) <= 1:
        return 1  # one group's task: nothing to share out
    if remote(reader.fs) or reader.threads() <= 1:
        return 0
    partition = Partition.RECORD_INDEX
    folder, reads = reader.folder(partition), 0
    for (group, _, _), asked in zip(bounds, ranges, strict=True):
        base = reader.slice(partition, group).base
        if base is not None and asked is not None:  # (keys are never null: always a range)
            reads += spanned_row_groups(reader.fs, f"{folder}/{base}", *asked)
        if reads > LIGHT_READS * len(bounds):
            return 0
    return 1


def locations(reader: MetadataReader, keys: Sequence[str]) -> dict[str, RecordLocation | None]:
    """``{key: RecordLocation | None}`` for every key asked."""
    found: dict[str, RecordLocation | None] = dict.fromkeys(keys)
    rows = lookup(reader, list(found)).to_pydict()
    ids: dict[tuple[int, int], str] = {}  # few distinct file ids and instants: convert once
    instants: dict[int, str] = {}
    for key, part, hi, lo, instant in zip(
        rows[KEY],
        rows["partition"],
        rows["file_id_hi"],
        rows["file_id_lo"],
        rows["instant"],
        strict=True,
    ):
        fid = ids.get((hi, lo))
        if fid is None:
            fid = ids[(hi, lo)] = ints_to_file_id(hi, lo)
        when = instants.get(instant)
        if when is None:
            when = instants[instant] = int_to_instant(instant)
        found[key] = RecordLocation(part, fid, when)
    return found


def _as_array(keys: pa.Array | pa.ChunkedArray | Sequence[str]) -> pa.Array:
    if not isinstance(keys, pa.Array | pa.ChunkedArray):
        return pa.array(keys, pa.string())
    return keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys


def _run_bounds(groups: np.ndarray) -> list[tuple[int, int, int]]:
    """(group, start, end) of each run of equal values in a sorted int array."""
    values = np.asarray(groups)
    if len(values) == 0:
        return []
    edges = [0, *((values[1:] != values[:-1]).nonzero()[0] + 1).tolist(), len(values)]
    return [(int(values[a]), a, b) for a, b in itertools.pairwise(edges)]
