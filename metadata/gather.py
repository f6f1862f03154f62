"""Rows of a table taken by position, as a write takes each file group's rows out of one
batch: :func:`taken_by_key` (a group's rows in key order) and :func:`take_rows`.

Arrow's take of text moves each value through its offsets: 1M keys of 14 bytes out of 3M took
51 ms. Text of one width (ids, UUIDs, hashes, zero-padded numbers) is gathered by numpy as
fixed-width items instead (18 ms), its offsets a multiple of the width: :func:`fixed_columns`
finds such columns once per batch (their views), :func:`take_rows` uses them for every take.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from lakebraid.metadata.arrow_records import flat, identity
from lakebraid.metadata.hexkeys import strings_of
from lakebraid.metadata.keyorder import fixed_view, order_unless_sorted, stable_order

Views = Mapping[str, np.ndarray]  # column name -> its text as ``S<width>`` (fixed_view)
_MAX_BYTES = (1 << 31) - 1  # a string array's int32 offsets


def fixed_columns(table: pa.Table) -> dict[str, np.ndarray]:
    """The columns of ``table`` held as one chunk of text (``string``) of one width without
    nulls, as ``S<width>`` views of their bytes (no copy): :func:`take_rows` gathers them."""
    views: dict[str, np.ndarray] = {}
    seen: dict[tuple[int, ...], np.ndarray | None] = {}  # a column held twice: viewed once
    for field, column in zip(table.schema, table.columns, strict=True):
        if field.type == pa.string() and column.num_chunks == 1:
            chunk = column.chunk(0)
            held = identity(chunk)
            if held not in seen:
                seen[held] = fixed_view(chunk)
            if seen[held] is not None:
                views[field.name] = seen[held]
    return views


def take_rows(table: pa.Table, positions: np.ndarray, views: Views | None = None) -> pa.Table:
    """``table.take(positions)``; the columns of ``views`` (:func:`fixed_columns` of this
    table) gathered by numpy (see the module doc); dictionary columns of one index array (a
    record-index entry's four location columns) have their indices taken once."""
    indices = pa.array(positions)
    columns = []
    taken: dict[tuple[int, ...], pa.Array] = {}  # an index array -> its taken indices
    for field, column in zip(table.schema, table.columns, strict=True):
        view = views.get(field.name) if views else None
        if view is not None:
            columns.append(_gathered(view, positions))
        elif pa.types.is_dictionary(field.type) and column.num_chunks == 1:
            columns.append(_dictionary_taken(column.chunk(0), indices, taken))
        else:
            columns.append(column.take(indices))
    return pa.Table.from_arrays(columns, schema=table.schema)


def _dictionary_taken(
    chunk: pa.DictionaryArray, at: pa.Array, taken: dict[tuple[int, ...], pa.Array]
) -> pa.Array:
    """``chunk.take(at)``, its indices taken only if no earlier column of ``taken`` held the
    same index array (the same buffers, offset and length): that column's taken indices are
    this one's too, valid in its own dictionary as the shared ones were."""
    codes = chunk.indices
    held = identity(codes)
    if held not in taken:
        taken[held] = codes.take(at)
    ordered = chunk.type.ordered
    return pa.DictionaryArray.from_arrays(
        taken[held], chunk.dictionary, ordered=ordered, safe=False
    )


def _every_row(positions: np.ndarray, rows: int) -> bool:
    """Whether ``positions`` are ``0, 1, ..., rows - 1``: every row, in its order."""
    if len(positions) != rows:
        return False
    return not rows or (positions[0] == 0 and bool((np.diff(positions) == 1).all()))


def _gathered(view: np.ndarray, positions: np.ndarray) -> pa.Array:
    """The ``string`` values of ``view`` (``S<width>``) at ``positions``. A position outside
    the rows, negative ones included (numpy would count those from the end), or more bytes
    than int32 offsets address raise as Arrow's take does."""
    width, count = view.itemsize, len(positions)
    if count * width > _MAX_BYTES:
        raise pa.ArrowInvalid(f"{count} values of {width} bytes overflow a string array")
    if count and not 0 <= int(positions.min()) <= int(positions.max()) < len(view):
        raise pa.ArrowIndexError(f"a position is outside the {len(view)} rows taken from")
    return strings_of(np.take(view.view(f"V{width}"), positions).view(f"S{width}"))


def taken_by_key(
    rows: pa.Table,
    key: str,
    positions: np.ndarray,
    copies: Sequence[str] = (),
    words: np.ndarray | None = None,
    views: Views | None = None,
) -> pa.Table:
    """Rows ``positions`` of ``rows`` sorted by the column ``key`` (for unique keys: equal
    keys come in no promised order). The keys are taken once and ordered within the taken ones;
    the columns named in ``copies`` hold the same values as ``key`` and get those ordered keys
    too; the other columns are taken once, in key order (no text taken twice). ``words``:
    ``keyorder.ordering_words`` of the whole ``key`` column, which order the positions
    before anything is taken (equal keys then keep their order, as a stable sort does).
    ``views``: :func:`fixed_columns` of ``rows``. Every row of ``rows``, already in key order
    by ``words`` (an append of ids that grow, one file group), is ``rows`` itself: no copy."""
    same = {key, *copies}
    if words is not None:
        at = words[positions]
        if len(at) > 1 and not bool((at[1:] >= at[:-1]).all()):
            positions = positions[stable_order(at)]
        elif _every_row(positions, rows.num_rows):  # all rows, in key order: nothing to take
            return rows
        taken = take_rows(
            rows.select([n for n in rows.column_names if n not in copies]), positions, views
        )
        ordered = taken.column(key)
        columns = [ordered if n in same else taken.column(n) for n in rows.column_names]
        return pa.Table.from_arrays(columns, schema=rows.schema)
    keys = flat(take_rows(rows.select([key]), positions, views).column(0))
    by_key = order_unless_sorted(keys)
    if by_key is None:  # rows given in key order (sorted input): taken as they are
        ordered, taken = keys, positions
    else:
        ordered, taken = flat(keys.take(by_key)), positions[by_key.to_numpy()]
    rest = rows.select([n for n in rows.column_names if n not in same])
    rest = take_rows(rest, taken, views)
    columns = [ordered if n in same else rest.column(n) for n in rows.column_names]
    return pa.Table.from_arrays(columns, schema=rows.schema)
