"""A column of a base file with some of its rows replaced in place: how a merge-on-read read
puts a log's newer version of a row where the base holds the row
(``writers.write.logmerge``). A plain function over pyarrow data, safe in Spark executors.

Each chunk is first read as a copy-on-write read reads it (cast to the read type; a text
dictionary decoded by ``datafile.cast_column``). Its values are then patched where they are
when they have one width in bytes and no nulls, the new values too: fixed-width types
(integers, floats, times, decimals) and text of one width (commit times, dates as text,
codes, UUIDs). The patch writes into the chunk's own value buffer when the caller owns the
column (``owned``: rows it has just read and hands over; a buffer Arrow marks immutable, such
as a memory map, is copied first), else into a copy. Anything else takes one ``take`` from
the chunk and the new values. New values picked out of a log (``picks``) are gathered by
numpy as items of one width, with no Arrow array of them; a one-value text dictionary whose
every new value is that value (a partition column) is decoded and not patched at all.

Arrow's ``replace_with_mask`` gives the same values, but took 15 ms per 333k-row text column
with 10% of its rows replaced; a patch in place takes 0.1 ms, a copy 0.6 ms, a ``take`` of
text of several widths 3.8 ms.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lakebraid.metadata.arrow_records import TEXT_OFFSETS, fixed_width_array, flat, pool_copy
from lakebraid.metadata.keyorder import fixed_view
from lakebraid.writers.write.datafile import cast_column

_WORD = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def replaced(
    column: pa.ChunkedArray,
    rows: np.ndarray,
    values: pa.Array,
    kind: pa.DataType,
    *,
    owned: bool = False,
    picks: np.ndarray | None = None,
) -> pa.ChunkedArray:
    """``column`` (as stored) in ``kind``, its ``rows`` (ascending, unique) replaced by
    ``values`` (in ``kind``, one per row, in the same order; ``picks``: by ``values[picks]``,
    one pick per row). ``owned``: no one else holds ``column``'s buffers, so they may be
    written (see the module doc)."""
    if not len(rows):
        return cast_column(column, kind)
    items = _items(values, kind) if values.null_count == 0 else None
    if items is not None and _unchanged(column, items, kind):
        return cast_column(column, kind)
    if items is not None:  # new values of one width: numpy gathers the picks
        new: pa.Array | np.ndarray = items if picks is None else items[picks]
    else:
        new = values if picks is None else values.take(pa.array(picks))
    chunks, start, first = [], 0, 0
    bounds = np.cumsum([len(c) for c in column.chunks])
    for chunk, end, last in zip(column.chunks, bounds, np.searchsorted(rows, bounds), strict=True):
        local = rows[first:last] - start
        chunks.append(_chunk(chunk, local, new[first:last], kind, owned))
        first, start = last, int(end)
    return pa.chunked_array(chunks, kind)


def _chunk(
    chunk: pa.Array, rows: np.ndarray, new: pa.Array | np.ndarray, kind: pa.DataType, owned: bool
) -> pa.Array:
    """One chunk of :func:`replaced`; ``new``: its new values, as items of one width
    (:func:`_items`, no nulls) or an Arrow array."""
    base = flat(cast_column(pa.chunked_array([chunk], chunk.type), kind))  # itself if of kind
    if not len(rows):
        return base
    if isinstance(new, np.ndarray):
        decoded = pa.types.is_dictionary(chunk.type) and kind == chunk.type.value_type
        source = chunk.dictionary if decoded else None
        items = _items(base, kind, source) if base.null_count == 0 else None
        if items is not None and items.dtype == new.dtype:
            if owned and items.flags.writeable:
                items[rows] = new
                return base  # its buffer patched
            buffer, copy = pool_copy(items)  # the result's own buffer: Arrow's pool
            copy[rows] = new
            return fixed_width_array(kind, len(base), items.itemsize, buffer)
        # taken from below at once (its buffers Arrow's), so viewed, not copied
        data = pa.py_buffer(np.ascontiguousarray(new))
        new = fixed_width_array(kind, len(new), new.itemsize, data)
    at = np.arange(len(base), dtype=np.int64)
    at[rows] = len(base) + np.arange(len(rows), dtype=np.int64)
    return pa.concat_arrays([base, new]).take(pa.array(at))


def _unchanged(column: pa.ChunkedArray, new: np.ndarray, kind: pa.DataType) -> bool:
    """Whether every new value (``new``: items of one width) equals the one value every row of
    ``column`` holds: each chunk a one-value text dictionary without nulls, all of one value
    (a partition column, a commit time), whose rows then need no patch."""
    value = None
    for chunk in column.chunks:
        if not pa.types.is_dictionary(chunk.type) or kind != chunk.type.value_type:
            return False
        dictionary = chunk.dictionary
        if len(dictionary) != 1 or chunk.null_count or dictionary.null_count:
            return False
        if value is not None and not dictionary.equals(value):
            return False
        value = dictionary
    # (a valid index of a one-value dictionary is 0)
    items = None if value is None else _items(value, kind)
    if items is None or items.dtype != new.dtype:
        return False
    if new.dtype.kind == "u":
        return bool((new == items[0]).all())
    # numpy compares void items slowly, and bytes by row: one comparison of the whole buffer
    return np.ascontiguousarray(new).tobytes() == items[:1].tobytes() * len(new)


def _items(
    array: pa.Array, kind: pa.DataType, dictionary: pa.Array | None = None
) -> np.ndarray | None:
    """The values of ``array`` (no nulls) as numpy items of one width, viewing its buffer
    (writable when the buffer is mutable); None when they have no one width.
    ``dictionary``: text ``array`` was decoded from (``keyorder.fixed_view``'s
    ``decoded_from``)."""
    if kind in TEXT_OFFSETS:
        text = fixed_view(array, decoded_from=dictionary)
        return None if text is None else text.view(_WORD.get(text.itemsize, f"V{text.itemsize}"))
    try:
        width = kind.bit_width
    except ValueError:  # variable width (nested)
        return None
    if width < 8 or width % 8 or pa.types.is_dictionary(kind):
        return None
    item = np.dtype(_WORD.get(width // 8, f"V{width // 8}"))
    return np.frombuffer(
        array.buffers()[1], dtype=item, count=len(array), offset=array.offset * item.itemsize
    )
