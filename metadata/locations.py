"""The location column of record-index base files (``metadata.basefile``, version 4): this
module alone encodes and decodes it.

A record-index entry's location is four values: ``partition`` (string), ``file_id_hi``,
``file_id_lo`` and ``instant`` (int64; ``metadata.records``). Few distinct locations serve
many keys (one per file group and instant that wrote keys), so a version 4 base file of the
``record_index`` partition stores them as one column::

    location     int32    index into the footer's location table, 0 <= location < L

and the Parquet key-value entry ``lakebraid.locations``, JSON of four arrays of length ``L``
(the table's columns, in the order above)::

    [[partition, ...], [file_id_hi, ...], [file_id_lo, ...], [instant, ...]]

Each row's location is row ``location`` of that table. A lookup then decodes one small
integer column for the row groups it hits instead of four (a string and three int64s), and a
fold encodes one. The table lists each distinct location once, in first-use order. A file
with more than :data:`MAX_LOCATIONS` distinct locations stores the four columns as they are
(as version 3 does), which readers tell by the absence of the entry.

Readers check that every ``location`` is within the table (``MetadataValueError`` otherwise,
which the base reader reports as a corrupt file naming it) and that the table's four arrays
have one length and their types; the entry itself is covered by the footer's CRC-32.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.arrow_records import flat
from lakebraid.metadata.errors import MetadataValueError

LOCATIONS_KEY = b"lakebraid.locations"
LOCATION = "location"
COLUMNS = ("partition", "file_id_hi", "file_id_lo", "instant")
TYPES = (pa.string(), pa.int64(), pa.int64(), pa.int64())
MAX_LOCATIONS = 1 << 16  # more: the footer would outgrow the column it replaces
_Note = tuple[list[str], list[int], list[int], list[int]]
# odd 64-bit multipliers mixing the four integers of a location into one fingerprint
_MIX = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xC2B2AE3D27D4EB4F),
    np.uint64(0x165667B19E3779F9),
    np.uint64(0xD6E8FEB86659FD93),
)


def encode(table: pa.Table) -> tuple[pa.Table, bytes] | None:
    """``table`` with :data:`COLUMNS` replaced by the :data:`LOCATION` column (in the place
    of the first), and the ``lakebraid.locations`` entry; None when ``table`` lacks one of
    :data:`COLUMNS` or holds more than :data:`MAX_LOCATIONS` locations. A dictionary
    ``partition`` column (as writers build it) is compared by its codes: no string per row;
    four dictionary columns of one index array (a write's statuses) are numbered from that
    array and their few entries (:func:`_shared_codes`): no integer per row either."""
    if not set(COLUMNS) <= set(table.column_names):
        return None
    coded = _shared_codes([flat(table.column(name)) for name in COLUMNS])
    if coded is not None:
        return _encoded(table, *coded)
    codes, texts = _partition_codes(flat(table.column(COLUMNS[0])))
    ints = [
        _plain(table.column(name), kind) for name, kind in zip(COLUMNS[1:], TYPES[1:], strict=True)
    ]
    found = _distinct([codes, *(v.to_numpy().view(np.uint64) for v in ints)])
    if found is None:
        return None
    location, first = found
    chosen = pa.array(first, pa.int64())
    partitions = texts.take(pa.array(codes[first])).to_pylist()
    return _encoded(table, location, [partitions, *(v.take(chosen).to_pylist() for v in ints)])


def _encoded(table: pa.Table, location: pa.Array, note: list[list]) -> tuple[pa.Table, bytes]:
    at = table.column_names.index(COLUMNS[0])
    kept = table.drop_columns(list(COLUMNS))
    field = pa.field(LOCATION, pa.int32(), nullable=False)
    return kept.add_column(at, field, location), msgspec.json.encode(note)


def _shared_codes(columns: list[pa.Array]) -> tuple[pa.Array, list[list]] | None:
    """:func:`encode`'s location column and table for four dictionary columns of one index
    array (the writer's codes, ``arrow_records.index_table(coded=True)``): equal entries of
    the dictionaries are one location, numbered in first-use order as :func:`_distinct`
    numbers them. None for any other columns (or nulls, or over :data:`MAX_LOCATIONS`)."""
    if not all(pa.types.is_dictionary(c.type) for c in columns):
        return None
    codes = columns[0].indices
    if codes.null_count or not all(c.indices.equals(codes) for c in columns[1:]):
        return None
    values = [c.dictionary.cast(kind) for c, kind in zip(columns, TYPES, strict=True)]
    if any(v.null_count or len(v) != len(values[0]) for v in values):
        return None
    entries = list(zip(*(v.to_pylist() for v in values), strict=True))  # one per code
    first_code: dict[tuple, int] = {}
    same = np.array([first_code.setdefault(e, i) for i, e in enumerate(entries)], np.int64)
    if not len(codes):
        return pa.array([], pa.int32()), [[], [], [], []]
    ids = same[codes.to_numpy()]  # each row's location as the first code of its entry
    found = _group(pa.array(ids))  # numbered in first-use order
    if found is None:
        return None
    location, first = found
    chosen = [entries[i] for i in ids[first].tolist()]
    return location, [list(c) for c in zip(*chosen, strict=True)]


def plain_locations(table: pa.Table, *, partition_too: bool = True) -> pa.Table:
    """``table`` with its dictionary location columns decoded (the stored types of the
    four-column layout); ``partition_too`` False: a dictionary ``partition`` column kept."""
    for name, kind in zip(COLUMNS, TYPES, strict=True):
        if name not in table.column_names or (name == COLUMNS[0] and not partition_too):
            continue
        at = table.column_names.index(name)
        if pa.types.is_dictionary(table.schema.field(at).type):
            column = table.column(at).cast(kind)
            table = table.set_column(at, table.schema.field(at).with_type(kind), column)
    return table


def table_of(note: bytes) -> pa.Table:
    """The location table of a ``lakebraid.locations`` entry, checked."""
    try:
        columns = msgspec.json.decode(note, type=_Note)
        arrays = [pa.array(c, kind) for c, kind in zip(columns, TYPES, strict=True)]
    except (msgspec.ValidationError, msgspec.DecodeError, pa.ArrowException) as exc:
        raise MetadataValueError(f"unreadable {LOCATIONS_KEY.decode()} entry: {exc}") from None
    if len({len(a) for a in arrays}) != 1:
        raise MetadataValueError(f"the {LOCATIONS_KEY.decode()} arrays differ in length")
    return pa.table(arrays, names=list(COLUMNS))


def expand(table: pa.Table, locations: pa.Table) -> pa.Table:
    """``table`` with its :data:`LOCATION` column replaced by the four columns it indexes in
    ``locations`` (:func:`table_of`), checked to be in range."""
    at = table.column_names.index(LOCATION)
    codes = table.column(LOCATION)
    check_codes(codes, locations.num_rows)
    out = table.drop_columns([LOCATION])
    for i, name in enumerate(COLUMNS):
        out = out.add_column(at + i, pa.field(name, TYPES[i]), locations.column(name).take(codes))
    return out


def check_codes(codes: pa.Array | pa.ChunkedArray, count: int) -> None:
    """Raise ``MetadataValueError`` unless every :data:`LOCATION` code is one of a table of
    ``count`` locations (none null)."""
    if len(codes) and codes.null_count:
        raise MetadataValueError(f"a null {LOCATION}")
    if len(codes):
        bounds = pc.min_max(codes)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low < 0 or high >= count:
            raise MetadataValueError(
                f"{LOCATION} {low if low < 0 else high} is outside the footer's table of "
                f"{count} locations"
            )


def codes_in(known: pa.Table, table: pa.Table) -> tuple[np.ndarray, pa.Table] | None:
    """Each row's location (``table``'s :data:`COLUMNS`) as an index into ``known`` (a
    location table, :func:`table_of`: distinct rows) extended by the locations it lacks,
    appended in first-use order; and that extended table. None over :data:`MAX_LOCATIONS`.
    The work is over ``known`` and ``table`` together, never over a base file's rows."""
    count = known.num_rows
    both = pa.concat_tables([known, table.select(list(COLUMNS)).cast(known.schema)])
    codes, _ = _partition_codes(flat(both.column(COLUMNS[0])))
    pairs = zip(COLUMNS[1:], TYPES[1:], strict=True)
    ints = [_plain(both.column(name), kind) for name, kind in pairs]
    found = _distinct([codes, *(v.to_numpy().view(np.uint64) for v in ints)])
    if found is None:
        return None
    location, first = found  # numbered in first-use order: ``known``'s rows come first
    fresh = first >= count  # a location first met in ``table``: appended, in that order
    if count + int(np.count_nonzero(fresh)) > MAX_LOCATIONS:
        return None
    index = np.where(fresh, count + np.cumsum(fresh) - 1, first).astype(np.int32)
    extended = pa.concat_tables([known, both.take(pa.array(first[fresh], pa.int64()))])
    return index[location.to_numpy()[count:]], extended


def renumbered(codes: np.ndarray, locations: pa.Table) -> tuple[pa.Array, bytes] | None:
    """``codes`` (indices into ``locations``) renumbered over the locations in use, in
    first-use order, as :func:`encode` numbers them, and the ``lakebraid.locations`` entry
    of those; None over :data:`MAX_LOCATIONS`."""
    count, n = locations.num_rows, len(codes)
    first = np.full(count, n, np.int64)
    first[codes[::-1]] = np.arange(n - 1, -1, -1)  # the last write wins: the first row
    used = np.flatnonzero(first < n)
    order = used[np.argsort(first[used], kind="stable")]
    if len(order) > MAX_LOCATIONS:
        return None
    remap = np.zeros(count, np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    chosen = locations.take(pa.array(order, pa.int64()))
    note = [chosen.column(name).to_pylist() for name in COLUMNS]
    return pa.array(remap[codes], pa.int32()), msgspec.json.encode(note)


def logical_schema(schema: pa.Schema) -> pa.Schema:
    """The schema readers see of a stored ``schema`` (:data:`LOCATION` as :data:`COLUMNS`)."""
    if LOCATION not in schema.names:
        return schema
    at = schema.get_field_index(LOCATION)
    fields = [pa.field(n, t) for n, t in zip(COLUMNS, TYPES, strict=True)]
    kept = [f for f in schema if f.name != LOCATION]
    return pa.schema(kept[:at] + fields + kept[at:], metadata=schema.metadata)


def _plain(column: pa.ChunkedArray, kind: pa.DataType) -> pa.Array:
    plain = flat(column).cast(kind)  # dictionaries decoded
    if plain.null_count:
        raise MetadataValueError("a record-index location with a null")
    return plain


def _partition_codes(column: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Per row a code of its partition (uint64) and the text of each code: a dictionary
    column's own indices when its values are distinct, else those of its text encoded."""
    if column.null_count:
        raise MetadataValueError("a record-index location with a null")
    if pa.types.is_dictionary(column.type):
        values = column.dictionary.cast(pa.string())
        if not values.null_count and len(pc.unique(values)) == len(values):
            return column.indices.to_numpy().astype(np.uint64), values
        column = column.cast(pa.string())
    encoded = pc.dictionary_encode(column.cast(pa.string()))
    return encoded.indices.to_numpy().astype(np.uint64), encoded.dictionary


def _distinct(values: list[np.ndarray]) -> tuple[pa.Array, np.ndarray] | None:
    """Per row its location's index (int32), and the first row of each location; None over
    :data:`MAX_LOCATIONS`. ``values``: the location's four values as integers (the partition
    by its code). Rows are grouped by a fingerprint of them, then checked value by value
    against their group's first row: a fingerprint shared by two locations (never seen)
    falls back to an exact grouping."""
    if not len(values[0]):
        return pa.array([], pa.int32()), np.zeros(0, np.int64)
    with np.errstate(over="ignore"):
        mixed = values[0] * _MIX[0]
        for value, factor in zip(values[1:], _MIX[1:], strict=True):
            mixed ^= value * factor
    found = _group(pa.array(mixed))
    if found is None:
        return None
    codes, first = found
    rows = first[codes.to_numpy()]
    if all(np.array_equal(value, value[rows]) for value in values):
        return codes, first
    return _exact(values)


def _group(column: pa.Array) -> tuple[pa.Array, np.ndarray] | None:
    """Dictionary codes of ``column`` (int32) and the first row of each code."""
    encoded = pc.dictionary_encode(column)
    n = len(encoded.dictionary)
    if n > MAX_LOCATIONS:
        return None
    codes = encoded.indices.to_numpy()
    first = np.empty(n, np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # the last write wins: the first row
    return encoded.indices.cast(pa.int32()), first


def _exact(values: list[np.ndarray]) -> tuple[pa.Array, np.ndarray] | None:
    """:func:`_group` over the four values themselves, one at a time."""
    code: np.ndarray | None = None
    for value in values:
        found = _group(pa.array(value))
        if found is None:
            return None
        own, first = found
        step = own.to_numpy().astype(np.int64)
        code = step if code is None else code * len(first) + step
        found = _group(pa.array(code))
        if found is None:
            return None
        code = found[0].to_numpy().astype(np.int64)
    assert code is not None
    return _group(pa.array(code))
