"""Sorted string keys: the sort of base files and index log blocks, the check that a log
block's keys are sorted and unique, the ``S<width>`` view of keys of one width and the 8-byte
words that order them (matching wanted keys against sorted keys is ``metadata.keymatch``; the
fixed-width forms a base file stores its keys in are ``metadata.hexkeys``)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.errors import MetadataValueError

ARROW_SORT_BELOW = 10_000  # keys; measured crossover of Arrow's sort and :func:`sort_order`'s


def sort_order(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Indices that sort ``keys`` (:func:`order_unless_sorted`; the identity for keys in
    order already)."""
    order = order_unless_sorted(keys)
    return pa.array(np.arange(len(keys), dtype=np.int64)) if order is None else order


def stable_order(words: np.ndarray) -> np.ndarray:
    """``np.argsort(words, kind="stable")`` (unsigned integers), found by numpy's default
    sort when no two words are equal (unique keys: then every sort gives the one order), which
    is several times faster (1M random words: 25 ms against 90 for the stable sort); words
    that tie take the stable sort."""
    order = np.argsort(words)
    ordered = words[order]
    if len(words) > 1 and bool((ordered[1:] == ordered[:-1]).any()):
        return np.argsort(words, kind="stable")
    return order


def order_unless_sorted(keys: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """Indices that sort ``keys`` (strings) ascending by their UTF-8 bytes, as Arrow sorts.

    A numpy sort of 8 bytes as big-endian integers -- the 8 after the prefix every key shares
    (keys of one width: :func:`_fixed_prefix`; else that of the least and the greatest key),
    short keys padded with zero bytes -- orders all
    keys whose such bytes differ; the runs of equal prefixes are then
    sorted by Arrow (none when the keys have one width and the 8 bytes hold all of each key
    after the shared prefix: equal integers are then equal keys, left in their order by a
    stable sort). Random keys (UUIDs, hashes) have few such ties, which makes this about
    three times faster than Arrow's string sort; when more than a quarter of the keys tie
    (long shared prefixes) Arrow sorts them all, as it does fewer than ``ARROW_SORT_BELOW``
    keys (its sort is faster than the numpy steps' fixed costs there). Keys already in order
    (ids that grow, rows written sorted) are found so by one comparison pass and not sorted
    (None: no order to apply); sorted runs one after another (log blocks) fail a sampled
    pass first."""
    keys = _one_array(keys)
    n = len(keys)
    if _ascending(keys):
        return None
    offsets = _offsets(keys)
    if n < ARROW_SORT_BELOW or offsets is None:
        return pc.sort_indices(keys)
    fixed = fixed_view(keys)
    if fixed is not None:  # one width: strided reads of the 8 bytes (:func:`key_words`)
        skip = _fixed_prefix(fixed)
        values = key_words(fixed, skip)
    else:
        bounds = pc.min_max(keys)
        low, high = (str(bounds[end].as_py()).encode() for end in ("min", "max"))
        skip = _shared_prefix(low, high)  # every key starts with these bytes
        data, starts = _data(keys), offsets[:-1].astype(np.int64) + skip
        lengths = np.diff(offsets) - skip
        prefix = np.zeros((n, 8), dtype=np.uint8)
        for j in range(8):
            has = lengths > j
            prefix[has, j] = data[starts[has] + j]
        values = prefix.view(">u8").ravel().astype(np.uint64)  # native byte order
    whole = fixed is not None and fixed.itemsize - skip <= 8  # a word holds a key's rest
    if whole:  # equal words are equal keys, kept in their order as Arrow's stable sort does
        return pa.array(stable_order(values))
    order = np.argsort(values)
    ordered = values[order]
    tied = np.zeros(n, dtype=bool)
    equal = ordered[1:] == ordered[:-1]
    tied[1:] |= equal
    tied[:-1] |= equal
    count = int(np.count_nonzero(tied))
    if count > n // 4:
        return pc.sort_indices(keys)
    if count:
        rows = order[tied]  # runs of equal prefixes, the runs in ascending prefix order
        sub = pa.table({"p": pa.array(values[rows]), "k": keys.take(pa.array(rows))})
        again = pc.sort_indices(sub, sort_keys=[("p", "ascending"), ("k", "ascending")])
        order[tied] = rows[again.to_numpy()]
    return pa.array(order)


def ordering_words(
    keys: pa.Array | pa.ChunkedArray, view: np.ndarray | None = None
) -> np.ndarray | None:
    """Per key of ``keys`` (strings), a uint64 that orders them as their bytes do, equal
    words for equal keys only: the 8 bytes after their shared prefix (:func:`_fixed_prefix`)
    when every key has one width and those 8 bytes hold all the rest of each key (ids of one
    width, zero-padded numbers); else None. Taken at any positions, they order those keys
    without the keys being taken first (``gather.taken_by_key``). ``view``: their
    :func:`fixed_view`, when the caller has it."""
    fixed = view if view is not None else fixed_view(_one_array(keys))
    if fixed is None:
        return None
    skip = _fixed_prefix(fixed)
    return key_words(fixed, skip) if fixed.itemsize - skip <= 8 else None


def _one_array(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``keys`` as one array: a single chunk as it is (no copy), several combined."""
    if not isinstance(keys, pa.ChunkedArray):
        return keys
    if keys.num_chunks == 1:
        return keys.chunk(0)
    return keys.combine_chunks() if keys.num_chunks else pa.array([], keys.type)


def _ascending(keys: pa.Array, look: int = 1024) -> bool:
    """Whether ``keys`` (no nulls) are already in ascending order, ties allowed (then the
    identity is the stable sort). The first ``look`` keys are compared first, so keys out of
    order cost next to nothing."""
    n = len(keys)
    if not _sampled(keys, look, pc.less_equal):
        return False
    return n <= look or bool(pc.all(pc.less_equal(keys[:-1], keys[1:])).as_py())


def strictly_ascending(keys: pa.Array | pa.ChunkedArray, look: int = 1024) -> bool:
    """Whether ``keys`` (strings) ascend with no key twice: a batch written in key order
    holds nothing to de-duplicate. Sampled first as :func:`_ascending` is (keys out of order
    cost next to nothing); then, for keys with :func:`ordering_words`, one integer comparison
    per key (10M keys of 14 bytes: 0.08 s), else the text compared."""
    keys = _one_array(keys)
    if not _sampled(keys, look, pc.less):
        return False
    if len(keys) <= look:
        return True
    words = ordering_words(keys)
    if words is not None:
        return bool((words[1:] > words[:-1]).all())
    return bool(pc.all(pc.less(keys[:-1], keys[1:])).as_py())


def _sampled(keys: pa.Array, look: int, rises: Callable[[Any, Any], pa.Array]) -> bool:
    """Whether ``keys`` hold no null and ``rises`` holds from each key to the next among the
    first ``look`` keys and among every ``n // look``-th key (sorted runs one after another
    fail there), which all keys in order pass: the cheap part of an order check."""
    n = len(keys)
    if keys.null_count:
        return False
    if n < 2:
        return True
    head = keys.slice(0, min(n, look))
    if not pc.all(rises(head[:-1], head[1:])).as_py():
        return False
    if n > look:
        sample = keys.take(pa.array(np.arange(0, n, max(1, n // look))))
        if not pc.all(rises(sample[:-1], sample[1:])).as_py():
            return False
    return True


def wanted_keys(keys: pa.Array | pa.ChunkedArray, kind: pa.DataType, *, unique: bool) -> pa.Array:
    """``keys`` as ``kind``, sorted (:func:`sort_order`) and, unless ``unique`` (the caller
    guarantees no key repeats), without repeats."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    keys = keys if keys.type == kind else keys.cast(kind)
    if not _ascending(keys):  # keys sorted already (a caller's, or repeats) need no copy
        keys = keys.take(sort_order(keys))
    if not unique and len(keys) > 1:  # a key asked twice is still one row
        keys = keys.filter(pa.concat_arrays([pa.array([True]), pc.not_equal(keys[1:], keys[:-1])]))
    return keys


def check_block_keys(keys: list[str]) -> None:
    """Refuse a log block's keys unless sorted and unique (code point order, which is UTF-8
    byte order)."""
    if all(map(operator.lt, keys, keys[1:])):
        return
    i = next(i for i in range(1, len(keys)) if not keys[i - 1] < keys[i])
    problem = "duplicate" if keys[i - 1] == keys[i] else "out of order"
    raise MetadataValueError(
        f"block keys must be sorted and unique: key {i} {keys[i]!r} is {problem}"
    )


def _fixed_prefix(fixed: np.ndarray) -> int:
    """The leading bytes every key of ``fixed`` (``S<w>``, one width) shares, at most
    ``w - 8`` (0 for keys of at most 8 bytes): the 8 bytes after it then end each key, so
    they are read as one strided word (:func:`key_words`); shared bytes among them are equal in
    every word and change no order. Found a word of 8 bytes at a time: each key's word XOR
    the first key's, OR-ed over all keys; its lowest set byte is the first that differs."""
    n, width = len(fixed), fixed.itemsize
    limit = width - 8
    if limit <= 0 or n < 2:
        return max(0, limit)
    whole = np.ascontiguousarray(fixed)
    count = 0  # bytes known shared
    while count < limit:
        at = min(count, limit)  # bytes at..at+7: inside each key
        word = np.ndarray((n,), dtype="<u8", buffer=whole, offset=at, strides=(width,))
        differ = _differ(word)
        if differ:  # little-endian: the lowest set byte is the first that differs
            return min(limit, at + ((differ & -differ).bit_length() - 1) // 8)
        count = at + 8
    return limit


def _differ(word: np.ndarray, block: int = 1 << 16) -> int:
    """The OR of every item of ``word`` XOR its first: a block at a time in one scratch array
    that stays in cache (10M keys of 14 bytes: 8 ms against 18 for one XOR of them all),
    stopping once the first byte differs (no earlier byte can)."""
    n, first = len(word), word[0]
    scratch = np.empty(min(n, block), np.uint64)
    differ = 0
    for start in range(0, n, block):
        part = scratch[: min(n, start + block) - start]
        np.bitwise_xor(word[start : start + len(part)], first, out=part)
        differ |= int(np.bitwise_or.reduce(part))
        if differ & 0xFF:
            break
    return differ


def _shared_prefix(a: bytes, b: bytes) -> int:
    """The number of leading bytes ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.frombuffer(a[:n], np.uint8) != np.frombuffer(b[:n], np.uint8))
    return int(differ[0]) if len(differ) else n


def _offsets(array: pa.Array) -> np.ndarray | None:
    """The offsets of a string/binary array, int32 or int64 (None: another type, or nulls)."""
    kind = array.type
    large = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
    if array.null_count or not (large or pa.types.is_string(kind) or pa.types.is_binary(kind)):
        return None
    raw = np.frombuffer(array.buffers()[1], dtype=np.int64 if large else np.int32)
    return raw[array.offset : array.offset + len(array) + 1]


def _data(array: pa.Array, index: int = 2) -> np.ndarray:
    buffer = array.buffers()[index]
    return np.empty(0, np.uint8) if buffer is None else np.frombuffer(buffer, dtype=np.uint8)


def _steps_of(offsets: np.ndarray, width: int, block: int = 1 << 16) -> bool:
    """Whether each offset is the one before plus ``width``: a block of differences at a time
    in one scratch array that stays in cache (10M offsets in 10 ms against 15 for one
    ``np.diff`` of them all)."""
    n = len(offsets) - 1
    step = np.empty(min(n, block), offsets.dtype)
    for start in range(0, n, block):
        end = min(n, start + block)
        part = step[: end - start]
        np.subtract(offsets[start + 1 : end + 1], offsets[start:end], out=part)
        if not bool((part == width).all()):
            return False
    return True


def fixed_view(array: pa.Array, *, decoded_from: pa.Array | None = None) -> np.ndarray | None:
    """The strings of ``array`` as a numpy ``S<width>`` array (no copy) when they all have one
    width, else None; a ``fixed_size_binary`` array (a base file's fixed-width key column) is
    viewed as is. numpy orders such arrays bytewise, unsigned, as Arrow does (equal widths:
    the trailing zero bytes numpy ignores cannot change an order or an equality).
    ``decoded_from``: the dictionary ``array`` was decoded from (each of its values one of
    them), so their one width is its too and its offsets need no check one by one."""
    if pa.types.is_fixed_size_binary(array.type):
        width = array.type.byte_width
        if array.null_count or width == 0 or len(array) == 0:
            return None
        start = array.offset * width
        return _data(array, 1)[start : start + width * len(array)].view(f"S{width}")
    offsets = _offsets(array)
    if offsets is None or len(array) == 0:
        return None
    first, last = int(offsets[0]), int(offsets[-1])
    width = int(offsets[1]) - first
    if width == 0 or last - first != width * len(array):
        return None
    if decoded_from is not None:
        known = fixed_view(decoded_from)
        if known is None or known.itemsize != width:
            return None
    elif len(array) > 1 and not _steps_of(offsets, width):
        return None
    return _data(array)[first:last].view(f"S{width}")


def key_words(view: np.ndarray, skip: int) -> np.ndarray:
    """Bytes ``skip`` to ``skip + 8`` of each ``S<w>`` item as a native uint64 of their
    big-endian value (zero bytes past the end), which orders as the items do once their
    first ``skip`` bytes are equal."""
    n, width = len(view), view.itemsize
    view = np.ascontiguousarray(view)
    if width >= skip + 8:
        word = np.ndarray((n,), dtype=">u8", buffer=view, offset=skip, strides=(width,))
        return word.astype(np.uint64)
    if width - skip in (1, 2, 4):  # a whole integer of the bytes, shifted: no padded copy
        size = width - skip
        word = np.ndarray((n,), dtype=f">u{size}", buffer=view, offset=skip, strides=(width,))
        return word.astype(np.uint64) << np.uint64(8 * (8 - size))
    padded = np.zeros((n, 8), np.uint8)
    padded[:, : width - skip] = view.view(np.uint8).reshape(n, width)[:, skip:]
    return padded.view(">u8").ravel().astype(np.uint64)
