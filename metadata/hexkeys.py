"""The fixed-width forms a base file stores its sorted string keys in (``metadata.basefile``):
their bytes when all keys have one width, and hex digits packed two to a byte when the keys
also fit one template (:class:`HexKeys`: UUIDs, hashes, zero-padded ids); and back to strings.

Every pass works on the keys' bytes *by position*: an ``(n, width)`` byte matrix is transposed
once into ``width`` contiguous rows of ``n`` bytes, so each test (is this position constant? are
its bytes hex digits?) and each packed byte is a numpy operation over contiguous memory. On 1M
zero-padded ids of 13 bytes, choosing the packing and packing take 30-70 ms against 175 ms for
the same work on the strided columns of the ``(n, width)`` matrix; on 1M UUIDs 230 against 530
ms (this machine's memory speed varies).
"""

from __future__ import annotations

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.arrow_records import fixed_width_array
from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.keyorder import fixed_view

HEX = np.frombuffer(b"0123456789abcdef", np.uint8)  # nibble -> its lowercase hex digit
NIBBLE = np.full(256, 255, np.uint8)  # byte -> its value as a lowercase hex digit, else 255
NIBBLE[HEX] = np.arange(16, dtype=np.uint8)
ZERO, NINE, LAST = ord("0"), ord("9"), ord("f")
BAND = 1 << 14  # rows of a matrix transposed at a time (:func:`_transpose`)


class HexKeys(msgspec.Struct, frozen=True, array_like=True):
    """Keys of one UTF-8 width whose bytes at ``positions`` are lowercase hex digits and at
    every other position those of ``template`` (one of the keys): stored as the digits at
    ``positions``, two to a byte (high nibble first, an odd last one with a zero nibble).
    The packing keeps the keys' order: equal bytes elsewhere, and digits sort as nibbles."""

    template: str
    positions: tuple[int, ...]

    @property
    def width(self) -> int:
        return (len(self.positions) + 1) // 2

    def check(self) -> None:
        """Raise ``MetadataValueError`` unless the positions are ascending, within the
        template and hex digits there (so that unpacked keys are UTF-8)."""
        raw = np.frombuffer(self.template.encode(), np.uint8)
        at = np.array(self.positions, dtype=np.int64)
        ordered = len(at) and at[0] >= 0 and at[-1] < len(raw) and bool(np.all(np.diff(at) > 0))
        if not ordered or bool(np.any(NIBBLE[raw[at]] == 255)):
            raise MetadataValueError("the hex key entry is inconsistent")

    def pack(self, keys: pa.Array) -> tuple[pa.Array, np.ndarray]:
        """``keys`` (strings or fixed-width bytes) that fit, packed, and their indices."""
        raw = self.template.encode()
        view, index = fixed_view(keys), np.arange(len(keys))
        if view is None and not pa.types.is_fixed_size_binary(keys.type):  # several widths
            keys = keys.filter(same := pc.equal(pc.binary_length(keys), len(raw)))
            index = np.flatnonzero(same.to_numpy(zero_copy_only=False))
            view = fixed_view(keys)
        if view is None or view.itemsize != len(raw):
            return pa.array([], pa.binary(self.width)), np.empty(0, np.int64)
        rows = _by_position(view)  # (width, n): a few whole-matrix steps, however many keys
        template = np.frombuffer(raw, np.uint8)
        fixed = np.setdiff1d(np.arange(len(raw)), self.positions)
        fits = (rows[fixed] == template[fixed, None]).all(axis=0)
        nibbles, ok = _nibble_rows(rows[list(self.positions)])  # (digits, n)
        if ok is not None:
            fits &= ok.all(axis=0)
        if not fits.all():
            nibbles = nibbles[:, fits]
        return _pack(nibbles, int(np.count_nonzero(fits))), index[fits]

    def unpack(self, packed: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Packed keys as strings."""
        if isinstance(packed, pa.ChunkedArray):  # one pass over all chunks
            packed = packed.combine_chunks() if packed.num_chunks else pa.array([], pa.string())
        view = fixed_view(packed)
        if view is None:
            return pa.array([], pa.string())
        rows = _by_position(view)
        raw = np.frombuffer(self.template.encode(), np.uint8)
        out = np.empty((len(raw), len(view)), np.uint8)
        varying = set(self.positions)
        for at, byte in enumerate(raw):
            if at not in varying:
                out[at].fill(byte)
        for j, at in enumerate(self.positions):
            nibble = rows[j // 2] >> 4 if j % 2 == 0 else rows[j // 2] & 15
            np.add(nibble, ZERO, out=out[at])  # "0".."9", then "a".."f" 39 bytes further
            np.add(out[at], (nibble > 9).view(np.uint8) * np.uint8(39), out=out[at])
        return strings_of(_transpose(out).reshape(-1).view(f"S{len(raw)}"))


def _by_position(view: np.ndarray) -> np.ndarray:
    """The bytes of an ``S<width>`` array by position: ``(width, n)``, each row contiguous."""
    n, width = len(view), view.itemsize
    return _transpose(np.ascontiguousarray(view).view(np.uint8).reshape(n, width))


def _transpose(matrix: np.ndarray) -> np.ndarray:
    """A contiguous copy of ``matrix.T``, copied :data:`BAND` keys at a time along its long
    axis (a band's bytes stay in cache: 3x faster than one strided copy of a wide matrix)."""
    rows, columns = matrix.shape
    out = np.empty((columns, rows), matrix.dtype)
    if rows >= columns:
        for start in range(0, rows, BAND):
            out[:, start : start + BAND] = matrix[start : start + BAND].T
    else:
        for start in range(0, columns, BAND):
            out[start : start + BAND] = matrix[:, start : start + BAND].T
    return out


def _nibble_rows(row: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The values of bytes (one position's, or a matrix of positions by keys) as hex digits,
    and which are hex digits (None: all, found from the least and greatest byte alone)."""
    if row.size and int(row.min()) >= ZERO and int(row.max()) <= NINE:
        return row - np.uint8(ZERO), None
    values = NIBBLE.take(row)
    return values, values != 255


def _nibbles(row: np.ndarray) -> np.ndarray | None:
    """The values of one position's bytes as hex digits (None: some byte is not one)."""
    if len(row) and (int(row.min()) < ZERO or int(row.max()) > LAST):
        return None
    values, ok = _nibble_rows(row)
    return values if ok is None or bool(ok.all()) else None


def _pack(nibbles: list[np.ndarray] | np.ndarray, n: int) -> pa.Array:
    """``n`` keys' digits (one array per position, or a matrix of a row per position) packed
    two to a byte."""
    width = (len(nibbles) + 1) // 2
    out = np.empty((width, n), np.uint8)
    for b in range(width):
        np.left_shift(nibbles[2 * b], 4, out=out[b])
        if 2 * b + 1 < len(nibbles):
            np.bitwise_or(out[b], nibbles[2 * b + 1], out=out[b])
    return pa.Array.from_buffers(pa.binary(width), n, [None, pa.py_buffer(_transpose(out))])


def _analyse(view: np.ndarray) -> tuple[HexKeys, list[np.ndarray]] | None:
    """The :class:`HexKeys` of ``S<width>`` keys (at least two) and their digits by position
    (varying positions only), when every varying position holds hex digits; else None."""
    if len(view) < 2:
        return None
    rows = _by_position(view)
    varying = [at for at, row in enumerate(rows) if row.min() != row.max()]
    nibbles = []
    for at in varying:
        values = _nibbles(rows[at])
        if values is None:
            return None
        nibbles.append(values)
    if not varying:
        return None
    return HexKeys(bytes(rows[:, 0]).decode(), tuple(varying)), nibbles


def hex_keys(fixed: pa.Array) -> HexKeys | None:
    """The :class:`HexKeys` of fixed-width keys (at least two) when they fit one, else None."""
    view = fixed_view(fixed)
    found = _analyse(view) if view is not None else None
    return found[0] if found is not None else None


def as_fixed(keys: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """String ``keys`` that all have one byte width ``w`` (at least 1) as a
    ``fixed_size_binary(w)`` array of the same bytes (no copy for one chunk), else None."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks else pa.array([], pa.string())
    view = fixed_view(keys)
    if view is None:
        return None
    width = view.itemsize
    return pa.Array.from_buffers(pa.binary(width), len(view), [None, pa.py_buffer(view)])


def as_strings(fixed: pa.Array | pa.ChunkedArray, *, validate: bool) -> pa.Array:
    """A ``fixed_size_binary`` array as strings (no copy of the bytes); ``validate``: check
    them for UTF-8 (not needed for bytes equal to wanted keys, which were strings)."""
    if isinstance(fixed, pa.ChunkedArray):
        chunks = [as_strings(c, validate=validate) for c in fixed.chunks]
        return pa.concat_arrays(chunks) if chunks else pa.array([], pa.string())
    view = fixed_view(fixed)
    if view is None:  # empty (a fixed-width column holds no nulls)
        return pa.array([], pa.string()) if len(fixed) == 0 else fixed.cast(pa.string())
    out = strings_of(view)
    if validate:
        out.validate(full=True)  # UTF-8
    return out


def strings_of(view: np.ndarray) -> pa.Array:
    """An ``S<width>`` numpy array as an Arrow string array over the same bytes."""
    n, width = len(view), view.itemsize
    kind = pa.large_string() if n * width >= 2**31 else pa.string()
    return fixed_width_array(kind, n, width, pa.py_buffer(np.ascontiguousarray(view)))


def stored_keys(keys: pa.Array | pa.ChunkedArray) -> tuple[pa.Array | None, HexKeys | None]:
    """How a base file stores its sorted ``keys``: packed (and the packing) when they fit
    :class:`HexKeys`, else their bytes when all have one width, else (None, None): strings."""
    fixed = as_fixed(keys)
    view = fixed_view(fixed) if fixed is not None else None
    found = _analyse(view) if view is not None else None
    if found is None or view is None:
        return fixed, None
    codec, nibbles = found
    return _pack(nibbles, len(view)), codec


def key_strings(
    column: pa.Array | pa.ChunkedArray, codec: HexKeys | None, *, validate: bool
) -> pa.Array:
    """A base file's fixed-width key column as strings; ``validate``: check unpacked bytes
    for UTF-8 (bytes equal to wanted keys, or hex digits in a checked template, need none)."""
    return codec.unpack(column) if codec is not None else as_strings(column, validate=validate)


def with_string_keys(
    table: pa.Table, name: str, codec: HexKeys | None, *, validate: bool
) -> pa.Table:
    """``table`` with its fixed-width key column ``name`` as strings (:func:`key_strings`)."""
    at = table.schema.get_field_index(name)
    if at < 0 or pa.types.is_string(table.schema.field(at).type):
        return table
    keys = key_strings(table.column(at), codec, validate=validate)
    return table.set_column(at, table.schema.field(at).with_type(pa.string()), keys)


def string_key_schema(schema: pa.Schema, name: str) -> pa.Schema:
    """A base file's Arrow schema as readers get its rows: string keys."""
    at = schema.get_field_index(name)
    return schema.set(at, schema.field(at).with_type(pa.string()))


def check_key_type(kind: pa.DataType, codec: HexKeys | None, version: int) -> None:
    """Raise ``MetadataValueError`` unless a base file of ``version`` may store its keys as
    ``kind`` with ``codec``: strings (unpacked), or in version 3 fixed-width bytes."""
    if codec is not None:
        codec.check()
    fixed = pa.types.is_fixed_size_binary(kind) and kind.byte_width > 0 and version >= 3
    if not (pa.types.is_string(kind) and codec is None) and not fixed:
        raise MetadataValueError(f"a version {version} base file with {kind} keys")
    if codec is not None and kind != pa.binary(codec.width):
        raise MetadataValueError(f"{kind} keys do not hold {len(codec.positions)} hex digits")
