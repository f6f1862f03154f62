"""A record-index file slice's log entries, and its fold into a new base in the stored form.

:func:`index_log_state` gives the newest entry of each key in a slice's log files (lookups
and folds apply it to the base's rows: ``metadata.reader``).

:func:`fold_stored` folds a slice whose base is a version 4 file with a location table
(``metadata.basefile``) without expanding its locations: the ``location`` column stays
codes, and only the log entries are located in the base's table, extended by their new
locations (``metadata.locations.codes_in``); the merged codes are then renumbered over the
locations still in use, in first-use order (``locations.renumbered``). Fixed-width keys stay
in their stored form too when every log key fits it (the log keys are packed by the base's
``metadata.hexkeys`` packing, or taken as bytes); otherwise, or for a base of text keys, the
keys are merged as text and packed again as ``basewrite.write_base`` packs them. The rows,
``location`` column and location table written are those of the generic fold
(``reader.slice_table``, then ``basewrite.write_base``) of the same slice (the caller writes it with
``basewrite.write_stored``); only the key
packing may differ, the base's own kept where the generic fold would choose it again. On a
1M-entry base the generic fold spends most of its time unpacking keys, expanding locations
and encoding both again.

A slice without a base, with a base of the four location columns (versions 1 to 3, or more
than ``locations.MAX_LOCATIONS`` locations), or whose fold would leave no entry or exceed
that many locations gives None: the caller folds it the generic way.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from lakebraid.metadata.arrow_records import (
    KEY,
    bool_array,
    first_per_key,
    flat,
    joined_runs,
    merge_by_key,
)
from lakebraid.metadata.basefile import open_base, read_stored
from lakebraid.metadata.hexkeys import HexKeys, as_fixed, key_strings, stored_keys
from lakebraid.metadata.keymatch import KeyMatcher
from lakebraid.metadata.locations import LOCATION, codes_in, renumbered
from lakebraid.metadata.logcache import LOGS
from lakebraid.metadata.slices import FileSlice


def index_log_state(
    fs: AbstractFileSystem, folder: str, piece: FileSlice, keys: pa.Array | None = None
) -> pa.Table | None:
    """The newest entry of each key in a record-index slice's log files (``keys``: sorted
    and unique, only those), sorted by key, ``deleted`` marking tombstones (and a ``_seq``
    column: the log's place); None when the logs hold none. Each log file's columns are
    cached like its blocks."""
    parts, matcher = [], None
    for seq, (name, size) in enumerate(piece.log_files()):
        path = f"{folder}/{name}"
        table = LOGS.index_table(fs, path, size)
        if keys is not None and table.num_rows:  # a lookup: the asked keys' entries only
            matcher = matcher or KeyMatcher(keys)  # sorted and unique (slice_table)
            run = LOGS.index_run(fs, path, size)
            at = matcher.match(table.column(KEY)) if run is None else matcher.match_run(run)
            table = table.take(pa.array(at[0])) if len(at[0]) else None  # none asked
        if table is not None and table.num_rows:
            parts.append(table.append_column("_seq", pa.array(np.full(len(table), seq, np.int32))))
    if not parts:
        return None
    state = joined_runs(parts, KEY)  # logs of disjoint key ranges: concatenated, no sort
    if state is None:
        state = first_per_key(pa.concat_tables(parts), KEY, [("_seq", "descending")])
    return state


def key_range(keys: pa.Array) -> tuple[str, str] | None:
    """The least and greatest of ``keys`` (strings; None: none, or nulls only). Arrow's
    ``min_max`` of text takes about 0.1-0.25 ms per 10,000 keys: a lookup computes it once
    per record-index group and passes it on."""
    if not len(keys):
        return None
    bounds = pc.min_max(keys)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    return None if low is None or high is None else (low, high)


def misses_slice(
    fs: AbstractFileSystem,
    folder: str,
    piece: FileSlice,
    keys: pa.Array,
    bounds: tuple[str, str] | None = None,
) -> bool:
    """Whether no file of a record-index slice can hold any of ``keys`` (strings, any order,
    no nulls): their range meets neither the base's key range (its footer's row-group
    bounds) nor any log's (its least and greatest key). Keys that grow with time (sequence
    numbers, timestamps: what appends insert) miss every older file, and a lookup of them
    then sorts and matches nothing. ``bounds``: :func:`key_range` of ``keys`` when the
    caller has it."""
    if not len(keys):
        return True
    if bounds is None:
        bounds = key_range(keys)
    if bounds is None:  # nulls only: the full lookup says what they are
        return False
    low, high = bounds
    if piece.base is not None:
        info = open_base(fs, f"{folder}/{piece.base}").info
        if info.num_rows and min(info.row_group_min) <= high and low <= max(info.row_group_max):
            return False
    for name, size in piece.log_files():
        held = LOGS.index_bounds(fs, f"{folder}/{name}", size)
        if held is not None and held[0] <= high and low <= held[1]:
            return False
    return True


class StoredFold(NamedTuple):
    """A folded slice in the stored form: ``key`` (strictly ascending; ``fixed_size_binary``
    unless the keys have several widths) and ``location`` (int32) rows, the packing of the
    keys (None: their bytes, or text) and the ``lakebraid.locations`` entry the codes index."""

    rows: pa.Table
    codec: HexKeys | None
    locations: bytes


class _Run(NamedTuple):
    """Sorted unique keys (stored form or text), their location codes, the keys' packing,
    and the location table the codes index."""

    keys: pa.Array
    codes: np.ndarray
    codec: HexKeys | None
    table: pa.Table


def fold_stored(fs: AbstractFileSystem, folder: str, piece: FileSlice) -> StoredFold | None:
    """The slice's base with its logs applied (newest entry wins, tombstones remove the
    key), in the stored form; None when the slice does not allow it (see the module doc)."""
    if piece.base is None:
        return None
    stored, footer = read_stored(fs, f"{folder}/{piece.base}")
    if footer.locations is None or stored.column_names != [KEY, LOCATION]:
        return None
    codes = flat(stored.column(LOCATION)).to_numpy(zero_copy_only=False)
    run = _Run(flat(stored.column(KEY)), codes, footer.info.key_hex, footer.locations)
    state = index_log_state(fs, folder, piece)
    found = _applied(run, state) if state is not None else run
    if found is None or not len(found.keys):
        return None  # an empty base stores text keys: the generic fold writes it
    keys, codec = found.keys, found.codec
    if not pa.types.is_fixed_size_binary(keys.type):  # text: packed as ``write_base`` packs
        fixed, codec = stored_keys(keys)
        keys = keys if fixed is None else fixed
    numbered = renumbered(found.codes, found.table)
    if numbered is None:
        return None
    location, note = numbered
    schema = pa.schema([pa.field(KEY, keys.type), pa.field(LOCATION, pa.int32(), nullable=False)])
    return StoredFold(pa.Table.from_arrays([keys, location], schema=schema), codec, note)


def _applied(run: _Run, state: pa.Table) -> _Run | None:
    """``run`` with the log entries ``state`` (:func:`index_log_state`) applied; its keys
    turn to text when a new key does not fit their stored form. None over
    ``locations.MAX_LOCATIONS`` locations."""
    text = flat(state.column(KEY))
    live = np.flatnonzero(~state.column("deleted").to_numpy(zero_copy_only=False))
    keys, codec = run.keys, run.codec
    logged, at = text, None  # ``at``: the indices of the log keys ``logged`` holds (None: all)
    if pa.types.is_fixed_size_binary(keys.type):
        logged, at = _stored_form(text, codec, keys.type.byte_width)
        at = None if len(at) == len(text) else at
        if at is not None and not _holds(at, live):  # the stored form cannot hold a new key
            keys, codec = key_strings(keys, codec, validate=False), None
            logged, at = text, None
    rows = drop_keys(pa.table({KEY: keys, LOCATION: run.codes}), logged)
    if not len(live):
        return _run_of(rows, codec, run.table)
    whole = len(live) == len(text)  # no tombstone: every entry is added
    found = codes_in(run.table, state if whole else state.take(pa.array(live)))
    if found is None:
        return None
    codes, table = found
    places = live if at is None else np.searchsorted(at, live)
    added = logged if whole and at is None else logged.take(pa.array(places))
    rows = merge_by_key(rows, pa.table({KEY: added, LOCATION: codes}).cast(rows.schema))
    return _run_of(rows, codec, table)


def _holds(at: np.ndarray, live: np.ndarray) -> bool:
    """Whether every index of ``live`` is one of ``at`` (both ascending)."""
    places = np.searchsorted(at, live)
    return bool((places < len(at)).all()) and bool(
        np.all(at[np.minimum(places, len(at) - 1)] == live)
    )


def _run_of(rows: pa.Table, codec: HexKeys | None, table: pa.Table) -> _Run:
    codes = flat(rows.column(LOCATION)).to_numpy(zero_copy_only=False)
    return _Run(flat(rows.column(KEY)), codes, codec, table)


def _stored_form(keys: pa.Array, codec: HexKeys | None, width: int) -> tuple[pa.Array, np.ndarray]:
    """The string ``keys`` that a base storing ``fixed_size_binary(width)`` keys (packed by
    ``codec``, else their bytes) can hold, in that form, and their indices (ascending)."""
    if codec is not None:
        return codec.pack(keys)
    same = pc.equal(pc.binary_length(keys), width).to_numpy(zero_copy_only=False)
    index = np.flatnonzero(same)
    fixed = as_fixed(keys.take(pa.array(index))) if len(index) else None
    if fixed is None:
        return pa.array([], pa.binary(width)), np.empty(0, np.int64)
    return fixed, index


def drop_keys(rows: pa.Table, gone: pa.Array | pa.ChunkedArray) -> pa.Table:
    """``rows`` (sorted by unique key) less those whose key is in ``gone`` (sorted, unique,
    in the same form: text, or a base's stored form): a merge of the two key runs
    (``KeyMatcher``), not a hash set of a whole base's keys."""
    if not len(gone) or not rows.num_rows:
        return rows
    at, _ = KeyMatcher(flat(gone)).match(rows.column(KEY))
    if not len(at):
        return rows
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[at] = False
    return rows.filter(bool_array(keep))
