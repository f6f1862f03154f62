"""Sharding of metadata records into file groups; the hash is fixed by the format.

**Hash, format version 1** (:func:`stable_hash`; never Python's ``hash()``, which is salted per
process). For a key ``k``, with all arithmetic on unsigned 64-bit integers modulo 2**64:

1. FNV-1a 64 over the UTF-8 bytes of ``k``: ``h = 0xcbf29ce484222325``; for each byte ``b``:
   ``h = (h XOR b) * 0x100000001b3``.
2. The 64-bit finaliser of MurmurHash3 (``fmix64``), so the low bits mix well for ``mod n``::

       h ^= h >> 33;  h *= 0xff51afd7ed558ccd
       h ^= h >> 33;  h *= 0xc4ceb9fe1a85ec53
       h ^= h >> 33

The file group of ``k`` among ``n`` groups is ``stable_hash(k) mod n``
(:func:`file_group_of`). Both steps work a byte at a time over all keys at once, so
:func:`file_groups_of` computes them with numpy over the UTF-8 buffer of an Arrow string array.

Test vectors (``stable_hash`` in hex, then the file group for ``n = 10``); step 1 alone gives
the published FNV-1a 64 values, e.g. ``0xaf63dc4c8601ec8c`` for ``"a"``::

    ""                                      0xefd01f60ba992926  2
    "a"                                     0x82a2a958a9bece5b  5
    "key-1"                                 0xa002e14b20bb64ec  2
    "3f2504e0-4f89-11d3-9a0c-0305e82c3301"  0x3a05a74f9c952443  7
    "Grüße, 世界"                            0x397f259d91e888ab  7

**Partition-scoped record index** (:func:`scoped_groups`; keys ``partition NUL key``,
``lakebraid.index.scope``): a data partition ``p`` with a *span* ``[first, count]`` (set by
the latest reindex, ``ReindexPlan.spans``) keeps its keys in groups ``first .. first + count -
1`` (mod ``n``): the group of key ``k`` is ``(first + stable_hash(k) mod count) mod n``. A
partition without a span (small, or new since the reindex) keeps all its keys in group
``stable_hash(p) mod n``. So a lookup in one partition reads only that partition's groups.

File groups are named ``<partition>-<index, zero padded to 4 digits>``, e.g.
``record_index-0007`` (:func:`file_group_id` / :func:`parse_file_group_id`). How many file
groups the record index gets is ``lakebraid.index.sizing``'s estimate.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.errors import MetadataTypeError, MetadataValueError

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
FMIX_C1 = 0xFF51AFD7ED558CCD
FMIX_C2 = 0xC4CEB9FE1A85EC53
_MASK = (1 << 64) - 1

_CHUNK = 1 << 20  # keys hashed per numpy pass (keeps the working set in cache)
_BLOCK = 1 << 16  # keys of one width transposed at a time (twice as fast as strided columns)
_GROUP_RE = re.compile(r"^(?P<partition>[a-z][a-z0-9_]*)-(?P<index>\d{4,})$")


def stable_hash(key: str) -> int:
    """The format's 64-bit hash of ``key`` (unsigned); see the module docstring."""
    return _fmix64(_fnv(key.encode("utf-8")))


def _fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * FMIX_C1) & _MASK
    h ^= h >> 33
    h = (h * FMIX_C2) & _MASK
    return h ^ (h >> 33)


def file_group_of(key: str, n_groups: int) -> int:
    """Index of the file group (0 .. n_groups - 1) that holds ``key``."""
    _check_groups(n_groups)
    return stable_hash(key) % n_groups


def file_groups_of(
    keys: pa.Array | pa.ChunkedArray | Sequence[str],
    n_groups: int,
    hashes: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`file_group_of` of every key, as an int64 numpy array (nulls are refused);
    ``hashes``: the keys' :func:`stable_hashes` when the caller has them."""
    _check_groups(n_groups)
    if hashes is None and n_groups == 1:  # every key is in group 0: no hash, the checks kept
        if isinstance(keys, pa.Array | pa.ChunkedArray):
            _check_keys(keys)
            return np.zeros(len(keys), np.int64)
        if all(isinstance(key, str) for key in keys):  # else refused below, as when hashed
            return np.zeros(len(keys), np.int64)
    if hashes is None:
        hashes = stable_hashes(keys)
    elif len(hashes) != len(keys):
        raise MetadataValueError(f"{len(hashes)} hashes given for {len(keys)} keys")
    # the remainder as hash - (hash // n) * n: numpy divides by a constant without a
    # division per value (10M hashes: 35 ms against 51 for ``%`` and the int64 copy)
    n = np.uint64(n_groups)
    hashes = hashes.astype(np.uint64, copy=False)  # (int64 with uint64 would promote to float)
    rest = hashes // n
    rest *= n
    np.subtract(hashes, rest, out=rest)
    return rest.view(np.int64)  # each below n_groups: the same value as int64


def scoped_groups(
    keys: pa.Array | pa.ChunkedArray | Sequence[str],
    n_groups: int,
    spans: Mapping[str, Sequence[int]],
) -> np.ndarray:
    """The file group of every partition-scoped index key (``partition NUL key``) among
    ``n_groups``, by the spans of the partitions (see the module docstring)."""
    _check_groups(n_groups)
    if not isinstance(keys, pa.Array | pa.ChunkedArray):
        keys = pa.array(keys, pa.string())
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if len(keys) == 0:
        return np.empty(0, np.int64)
    hashes = stable_hashes(keys)
    partitions = pc.list_element(pc.split_pattern(keys, "\x00", max_splits=1), 0)
    encoded = pc.dictionary_encode(partitions)
    names = encoded.dictionary.to_pylist()
    n = np.uint64(n_groups)
    first = stable_hashes(encoded.dictionary) % n  # a partition's home group
    count = np.ones(len(names), np.uint64)
    for i, name in enumerate(names):
        span = spans.get(name)
        if span is not None:
            first[i], count[i] = span[0] % n_groups, max(1, min(span[1], n_groups))
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    return ((first[codes] + hashes % count[codes]) % n).astype(np.int64)


def group_order(groups: np.ndarray, n_groups: int) -> np.ndarray:
    """A stable order of rows by their group number (0 .. ``n_groups`` - 1): numpy sorts
    8- and 16-bit integers by radix, several times faster than 64-bit ones."""
    small = np.uint8 if n_groups <= 1 << 8 else np.uint16 if n_groups <= 1 << 16 else np.int64
    return np.argsort(groups.astype(small, copy=False), kind="stable")


# up to this many groups, :class:`GroupRows` finds a group's rows by one scan of the codes
# (10M rows in 10 groups on 2 threads: 0.12 s against 0.30-1.0 s for the stable sort, the
# gather and the edges, whose three 80 MB arrays are faulted in anew); beyond, it sorts once
SCAN_GROUPS = 64


class GroupRows:
    """The rows of each group of a row -> group array (``0 .. n_groups - 1``), ascending:
    what slices of :func:`group_order` give, without its order of every row when the groups
    are few (:data:`SCAN_GROUPS`): :meth:`rows` then scans the codes for one group, on the
    caller's thread (each group's task on its own: the scans run in parallel)."""

    def __init__(self, groups: np.ndarray, n_groups: int):
        counts = np.bincount(groups, minlength=n_groups) if len(groups) else np.zeros(0, int)
        self.present: list[int] = np.flatnonzero(counts).tolist()  # groups with rows
        self._codes: np.ndarray | None = None  # few groups: each row's group, scanned
        self._order = np.empty(0, np.int64)  # many: the rows by group, and each group's span
        self._spans: dict[int, tuple[int, int]] = {}
        if n_groups <= SCAN_GROUPS:
            self._codes = groups.astype(np.uint8, copy=False)
        else:
            self._order = group_order(groups, n_groups)
            ends = np.cumsum(counts)
            self._spans = {g: (int(ends[g] - counts[g]), int(ends[g])) for g in self.present}

    def rows(self, group: int) -> np.ndarray:
        """The rows (int64 positions, ascending) of ``group``."""
        if self._codes is not None:
            return np.flatnonzero(self._codes == group)
        start, end = self._spans.get(group, (0, 0))
        return self._order[start:end]


def stable_hashes(keys: pa.Array | pa.ChunkedArray | Sequence[str]) -> np.ndarray:
    """:func:`stable_hash` of every key, as a uint64 numpy array (nulls are refused)."""
    if isinstance(keys, pa.ChunkedArray):
        chunks = [_hash_array(c) for c in keys.chunks]
        return np.concatenate(chunks) if chunks else np.empty(0, np.uint64)
    if not isinstance(keys, pa.Array):
        keys = pa.array(keys, type=pa.large_string())
    return _hash_array(keys)


def shared_hashes(hashes: np.ndarray) -> np.ndarray | None:
    """Per row of ``hashes``: whether another row has the same hash (None when no two do).
    A numeric sort; the rows it marks hold the repeated keys (and rare collisions), which
    callers then compare as text. From ``_CHUNK`` rows the hashes are split by their top bit
    (equal hashes share it) and the two halves sorted on two threads (numpy's sort releases
    the GIL): 10M hashes 0.45 s against 0.73."""
    if len(hashes) < _CHUNK or (os.cpu_count() or 1) < 2:
        repeated = _repeated(hashes)
    else:
        high = hashes >= np.uint64(1 << 63)
        with ThreadPoolExecutor(2) as pool:
            repeated = np.concatenate(list(pool.map(_repeated, (hashes[~high], hashes[high]))))
    return np.isin(hashes, repeated) if len(repeated) else None


def _repeated(hashes: np.ndarray) -> np.ndarray:
    """The values that occur more than once in ``hashes`` (some repeated)."""
    ordered = np.sort(hashes)
    return ordered[1:][ordered[1:] == ordered[:-1]]


def _check_keys(keys: pa.Array | pa.ChunkedArray) -> None:
    """Refuse keys that are not text or hold nulls, as :func:`stable_hashes` does."""
    kind = keys.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        if not pa.types.is_string_view(kind):
            raise MetadataTypeError(f"keys must be strings, not {kind}")
    if keys.null_count:
        raise MetadataValueError("keys may not be null")


def _hash_array(array: pa.Array) -> np.ndarray:
    _check_keys(array)
    if pa.types.is_string_view(array.type):
        array = array.cast(pa.large_string())
    n = len(array)
    _, offsets_buf, data_buf = array.buffers()
    width = np.int32 if pa.types.is_string(array.type) else np.int64
    offsets = np.frombuffer(offsets_buf, dtype=width)[array.offset : array.offset + n + 1]
    offsets = offsets.astype(np.int64)
    data = np.empty(0, np.uint8) if data_buf is None else np.frombuffer(data_buf, dtype=np.uint8)
    out = np.empty(n, dtype=np.uint64)

    def one(lo: int) -> None:  # FNV-1a then fmix64, a chunk at a time on its thread
        hi = min(n, lo + _CHUNK)
        out[lo:hi] = _fmix64_array(_hash_chunk(data, offsets[lo : hi + 1]))

    starts = range(0, n, _CHUNK)
    if len(starts) <= 1:
        for lo in starts:
            one(lo)
    else:  # numpy's loops release the GIL: the chunks hash on all cores
        with ThreadPoolExecutor(min(len(starts), os.cpu_count() or 1)) as pool:
            list(pool.map(one, starts))
    return out


def _hash_chunk(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """FNV-1a 64 of the byte strings ``data[offsets[i]:offsets[i + 1]]``."""
    starts, lengths = offsets[:-1], np.diff(offsets)
    n = len(starts)
    prime = np.uint64(FNV_PRIME)
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    width = int(lengths.max())
    if width == int(lengths.min()):  # every key as long: a 2-D view, one column per byte
        h = np.empty(n, dtype=np.uint64)  # each block's first fill sets its keys' hashes
        matrix = data[int(offsets[0]) : int(offsets[0]) + n * width].reshape(n, width)
        byte = np.empty(min(n, _BLOCK), np.uint64)
        for lo in range(0, n, _BLOCK):  # a block's bytes by position: contiguous rows
            block = np.ascontiguousarray(matrix[lo : lo + _BLOCK].T)
            part = h[lo : lo + _BLOCK]
            shared = _shared_columns(block)
            part.fill(_fnv(bytes(block[:shared, 0])))  # the bytes every key of the block shares
            wide = byte[: len(part)]
            for j in range(shared, width):
                np.copyto(wide, block[j], casting="unsafe")
                np.bitwise_xor(part, wide, out=part)
                np.multiply(part, prime, out=part)
        return h
    # ragged keys: hash byte j of every key still longer than j, dropping finished keys
    h = np.full(n, FNV_OFFSET, dtype=np.uint64)
    active = np.arange(n)
    h_active, s_active, l_active = h.copy(), starts.copy(), lengths.copy()
    for j in range(width):
        alive = l_active > j
        if not alive.all():
            done = ~alive
            h[active[done]] = h_active[done]
            active, h_active = active[alive], h_active[alive]
            s_active, l_active = s_active[alive], l_active[alive]
        np.bitwise_xor(h_active, data[s_active + j], out=h_active)
        np.multiply(h_active, prime, out=h_active)
    h[active] = h_active
    return h


def _shared_columns(block: np.ndarray) -> int:
    """How many leading rows of ``block`` (keys of one width transposed: row ``j`` holds
    byte ``j`` of every key) hold one value: a prefix all the keys share (``key-000``, a
    tenant id), whose FNV-1a steps are then taken once for the block instead of per key."""
    count = 0
    while count < len(block) and bool((block[count] == block[count, 0]).all()):
        count += 1
    return count


def _fnv(data: bytes) -> int:
    """FNV-1a 64 of ``data`` (step 1 of :func:`stable_hash`), without the finaliser."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & _MASK
    return h


def _fmix64_array(h: np.ndarray) -> np.ndarray:
    """fmix64 of every hash of ``h``, in place (one scratch array, no temporary per step)."""
    shift, scratch = np.uint64(33), np.empty_like(h)
    for factor in (np.uint64(FMIX_C1), np.uint64(FMIX_C2)):
        np.right_shift(h, shift, out=scratch)
        np.bitwise_xor(h, scratch, out=h)
        np.multiply(h, factor, out=h)
    np.right_shift(h, shift, out=scratch)
    np.bitwise_xor(h, scratch, out=h)
    return h


def _check_groups(n_groups: int) -> None:
    if n_groups < 1:
        raise MetadataValueError(f"the number of file groups must be >= 1, not {n_groups}")


def file_group_id(partition: str, index: int) -> str:
    """The id of file group ``index`` of a metadata partition, e.g. ``record_index-0007``."""
    if index < 0:
        raise MetadataValueError(f"file group index must be >= 0, not {index}")
    group = f"{partition}-{index:04d}"
    if not _GROUP_RE.match(group):
        raise MetadataValueError(f"{partition!r} is not a metadata partition name")
    return group


def parse_file_group_id(group: str) -> tuple[str, int]:
    """Inverse of :func:`file_group_id`: ``"record_index-0007"`` -> ``("record_index", 7)``."""
    match = _GROUP_RE.match(group)
    if match is None:
        raise MetadataValueError(f"{group!r} is not a file group id like 'record_index-0007'")
    partition, index = match["partition"], int(match["index"])
    if file_group_id(partition, index) != group:
        raise MetadataValueError(
            f"{group!r} is not a canonical file group id (extra leading zeros)"
        )
    return partition, index
