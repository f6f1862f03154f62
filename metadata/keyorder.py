"""Sorted string keys: the sort of base files and index log blocks, the check that a log
block's keys are sorted and unique, the ``S<width>`` view of keys of one width and the matching
of wanted keys against the sorted keys of a base file (the fixed-width forms a base file stores
its keys in are ``metadata.hexkeys``)."""

from __future__ import annotations

import itertools
import operator
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.errors import MetadataValueError

ARROW_SORT_BELOW = 10_000  # keys; measured crossover of Arrow's sort and :func:`sort_order`'s
MAX_RUNS = 8  # sorted runs :func:`match_rows` merges; keys in more take a hash join


def sort_order(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Indices that sort ``keys`` (:func:`order_unless_sorted`; the identity for keys in
    order already)."""
    order = order_unless_sorted(keys)
    return pa.array(np.arange(len(keys), dtype=np.int64)) if order is None else order


def order_unless_sorted(keys: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """Indices that sort ``keys`` (strings) ascending by their UTF-8 bytes, as Arrow sorts.

    A numpy sort of 8 bytes as big-endian integers -- the 8 after the prefix every key shares
    (that of the least and the greatest key), short keys padded with zero bytes -- orders all
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
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks else pa.array([], pa.string())
    n = len(keys)
    if _ascending(keys):
        return None
    offsets = _offsets(keys)
    if n < ARROW_SORT_BELOW or offsets is None:
        return pc.sort_indices(keys)
    bounds = pc.min_max(keys)
    low, high = (str(bounds[end].as_py()).encode() for end in ("min", "max"))
    skip = _shared_prefix(low, high)  # every key starts with these bytes
    fixed = fixed_view(keys)
    if fixed is not None:  # one width: strided reads of the 8 bytes (:func:`_word`)
        values = _word(fixed, min(skip, fixed.itemsize))
    else:
        data, starts = _data(keys), offsets[:-1].astype(np.int64) + skip
        lengths = np.diff(offsets) - skip
        prefix = np.zeros((n, 8), dtype=np.uint8)
        for j in range(8):
            has = lengths > j
            prefix[has, j] = data[starts[has] + j]
        values = prefix.view(">u8").ravel().astype(np.uint64)  # native byte order
    whole = fixed is not None and fixed.itemsize - skip <= 8  # a word holds a key's rest
    order = np.argsort(values, kind="stable" if whole else "quicksort")
    if whole:  # equal words are equal keys, kept in their order as Arrow's stable sort does
        return pa.array(order)
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


def _ascending(keys: pa.Array, look: int = 1024) -> bool:
    """Whether ``keys`` (no nulls) are already in ascending order, ties allowed (then the
    identity is the stable sort). The first ``look`` keys are compared first, so keys out of
    order cost next to nothing."""
    n = len(keys)
    if keys.null_count:
        return False
    if n < 2:
        return True
    head = keys.slice(0, min(n, look))
    if not pc.all(pc.less_equal(head[:-1], head[1:])).as_py():
        return False
    if n > look:  # every ``stride``-th key: sorted runs one after another fail here
        sample = keys.take(pa.array(np.arange(0, n, max(1, n // look))))
        if not pc.all(pc.less_equal(sample[:-1], sample[1:])).as_py():
            return False
    return n <= look or bool(pc.all(pc.less_equal(keys[:-1], keys[1:])).as_py())


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


def fixed_view(array: pa.Array) -> np.ndarray | None:
    """The strings of ``array`` as a numpy ``S<width>`` array (no copy) when they all have one
    width, else None; a ``fixed_size_binary`` array (a base file's fixed-width key column) is
    viewed as is. numpy orders such arrays bytewise, unsigned, as Arrow does (equal widths:
    the trailing zero bytes numpy ignores cannot change an order or an equality)."""
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
    if len(array) > 1 and not bool(np.all(np.diff(offsets) == width)):
        return None
    return _data(array)[first:last].view(f"S{width}")


class KeyMatcher:
    """Matches wanted keys (unique, sorted; strings or packed) against sorted runs of a base
    file's keys: :meth:`match` gives the matching rows and which wanted keys they hold.

    When a run's keys all have one width (UUIDs, hashes, zero-padded ids) this is a merge of
    two sorted arrays: a binary search of the wanted keys' 8 bytes after the run's shared
    prefix (big-endian integers: ten times faster than numpy's searches of byte strings),
    then a check of the whole key, and a byte-string search for the few whose 8 bytes tie.
    Otherwise an Arrow hash join (``is_in``)."""

    def __init__(self, keys: pa.Array):
        self.keys = keys
        self._probes: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}

    def _probe(self, width: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The wanted keys of ``width`` bytes as ``S<width>``, and their indices."""
        if width not in self._probes:
            keys = self.keys
            whole = fixed_view(keys)  # keys of one width (or fixed_size_binary): no sieve
            if whole is not None or pa.types.is_fixed_size_binary(keys.type):
                fits = whole is not None and whole.itemsize == width
                self._probes[width] = (whole, np.arange(len(keys))) if fits else None
            else:  # the keys of this width among others
                same = pc.equal(pc.binary_length(keys), width)
                view = fixed_view(keys.filter(same))
                fits = view is not None and view.itemsize == width
                self._probes[width] = (view, np.flatnonzero(same.to_numpy(False))) if fits else None
        return self._probes[width]

    def match(self, column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``column`` (sorted, unique keys) holding a wanted key, and the indices
        of those wanted keys, both ascending."""
        if isinstance(column, pa.ChunkedArray):
            column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        view = fixed_view(column)
        if view is None:
            rows = np.flatnonzero(pc.is_in(column, value_set=self.keys).to_numpy(False))
            found = pc.index_in(column.take(pa.array(rows)), value_set=self.keys)
            return rows, found.to_numpy(False).astype(np.int64)
        return self.match_run(SortedRun.of(view))

    def match_run(self, run: SortedRun) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``run`` holding a wanted key, and the indices of those wanted keys."""
        probe = self._probe(run.view.itemsize)
        if probe is None:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        wanted, index = probe
        rows, hit = run.find(wanted)
        return rows, index[hit]


class SortedRun(NamedTuple):
    """Keys as ``S<w>`` (strictly ascending), with the 8 bytes after their shared prefix
    (``skip`` bytes) as integers (:func:`_word`)."""

    view: np.ndarray
    skip: int
    words: np.ndarray

    @classmethod
    def of(cls, view: np.ndarray) -> SortedRun:
        ends = view[[0, -1]].view(np.uint8).reshape(2, view.itemsize)
        differ = np.flatnonzero(ends[0] != ends[1])
        skip = min(int(differ[0]) if len(differ) else view.itemsize, max(0, view.itemsize - 8))
        return cls(view, skip, _word(view, skip))

    def find(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the run equal to some of ``wanted`` (``S<w>``, sorted, unique)
        and which: a binary search of the words, then a check of the whole keys."""
        view = self.view
        lo = int(np.searchsorted(wanted, view[0], side="left"))
        hi = int(np.searchsorted(wanted, view[-1], side="right"))
        if hi <= lo:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        rows, found = self._search(wanted[lo:hi])
        return rows, found + lo

    def locate(self, probe: np.ndarray) -> np.ndarray:
        """Per key of ``probe`` (``S<w>`` of the run's width, any order, repeats allowed): the
        row of the run holding it, -1 where none does."""
        view = self.view
        rows = np.full(len(probe), -1, np.int64)
        inside = np.flatnonzero((probe >= view[0]) & (probe <= view[-1]))
        if len(inside):
            at, found = self._search(probe[inside])
            rows[inside[found]] = at
        return rows

    def _search(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the run equal to some of ``wanted`` (keys within the run's first and last,
        so sharing their prefix; any order) and which."""
        view = self.view
        ours, theirs = self.words, _word(wanted, self.skip)
        rows = np.searchsorted(ours, theirs)  # the first row of each word (< len: in range)
        if view.itemsize - self.skip <= 8:  # the word holds every byte after the prefix
            found = np.flatnonzero(ours[rows] == theirs)
            return rows[found].astype(np.int64), found
        hit = view[rows] == wanted
        tied = np.flatnonzero(~hit & (ours[rows] == theirs))  # rows of one word: search them
        if len(tied):
            rows[tied] = np.searchsorted(view, wanted[tied])
            hit[tied] = view[rows[tied]] == wanted[tied]
        found = np.flatnonzero(hit)
        return rows[found].astype(np.int64), found


def _one_run(keys: pa.Array) -> SortedRun | None:
    """``keys`` as one :class:`SortedRun` when they are of one width and strictly ascending
    (a base file as written), found from the words the run's searches need anyway: all keys
    share the first and last key's prefix, and each word exceeds the one before (equal words:
    the whole keys compared). None: not so, or not known so cheaply (:func:`_run_bounds`)."""
    view = fixed_view(keys) if len(keys) >= 2 and not keys.null_count else None
    if view is None:
        return None
    run = SortedRun.of(view)
    if run.skip and view.itemsize >= 8 and run.skip <= 8:  # the prefix in each key's first 8
        whole = np.ascontiguousarray(view)
        first = np.ndarray((len(view),), dtype="<u8", buffer=whole, strides=(view.itemsize,))
        mask = np.uint64((1 << 8 * run.skip) - 1)  # its bytes, little-endian: no byte swap
        if not bool(((first & mask) == (first[0] & mask)).all()):
            return None
    elif run.skip:
        head = view.view(np.uint8).reshape(len(view), view.itemsize)[:, : run.skip]
        if not bool((head == head[0]).all()):
            return None
    words = run.words
    rises = words[1:] > words[:-1]
    if rises.all():
        return run
    if view.itemsize - run.skip <= 8 or bool((words[1:] < words[:-1]).any()):
        return None  # the word holds the whole rest of each key: equal words, equal keys
    tied = np.flatnonzero(~rises)
    return run if bool((view[tied + 1] > view[tied]).all()) else None


def _run_bounds(keys: pa.Array) -> list[int] | None:
    """Where the strictly ascending runs of ``keys`` (of one width) start, and their end; None
    when the keys are of several widths, hold nulls or form more than ``MAX_RUNS`` runs."""
    if len(keys) < 2 or keys.null_count or fixed_view(keys) is None:
        return None
    falls = pc.less_equal(keys[1:], keys[:-1]).to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(falls) + 1
    if len(starts) >= MAX_RUNS:
        return None
    return [0, *starts.tolist(), len(keys)]


def match_rows(keys: pa.Array, wanted: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``keys`` (strings, no nulls, any order) that hold a key of ``wanted`` (sorted,
    unique), ascending, and the index in ``wanted`` of the key each holds.

    Keys in at most ``MAX_RUNS`` ascending runs (a base file written sorted, or such a file
    with sorted rows after it) are matched run by run, each a merge of two sorted arrays
    (:class:`KeyMatcher`): about half the time of a hash join for 333k keys of one width. One
    sorted run is found from the words its merge needs anyway (:func:`_one_run`), more by one
    exact comparison pass; other keys take Arrow's hash join."""
    return _match_rows(keys, wanted, _one_run(keys))


def _match_rows(
    keys: pa.Array, wanted: pa.Array, one: SortedRun | None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`match_rows` given ``keys`` as one sorted run already (None: they are not)."""
    if one is not None:
        return KeyMatcher(wanted).match_run(one)
    bounds = _run_bounds(keys)
    if bounds is None:
        found = pc.index_in(keys, value_set=wanted)
        rows = np.flatnonzero(pc.is_valid(found).to_numpy(zero_copy_only=False))
        return rows, found.take(pa.array(rows)).to_numpy(zero_copy_only=False).astype(np.int64)
    matcher = KeyMatcher(wanted)
    parts = [matcher.match(keys.slice(a, b - a)) for a, b in itertools.pairwise(bounds)]
    rows = np.concatenate([r + a for (r, _), a in zip(parts, bounds, strict=False)])
    return rows.astype(np.int64), np.concatenate([f for _, f in parts]).astype(np.int64)


def locate(keys: pa.Array, probe: pa.Array) -> np.ndarray:
    """Per key of ``probe`` (strings, no nulls, any order, repeats allowed): the row of
    ``keys`` (strings, no nulls, unique: a base file's) holding it, -1 where none does.

    Keys of one width in one strictly ascending run (a base file as written) are searched as
    :meth:`SortedRun.locate` does, when the probe's keys have that width too; otherwise the
    distinct probe keys, sorted, are matched as :func:`match_rows` matches them."""
    run = _one_run(keys)
    view = fixed_view(probe) if run is not None else None
    if run is not None and view is not None and view.itemsize == run.view.itemsize:
        return run.locate(view)
    wanted = wanted_keys(probe, pa.string(), unique=False)
    rows, found = _match_rows(keys, wanted, run)
    where = np.full(len(wanted), -1, np.int64)
    where[found] = rows
    return where[pc.index_in(probe, value_set=wanted).to_numpy(zero_copy_only=False)]


def _word(view: np.ndarray, skip: int) -> np.ndarray:
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
