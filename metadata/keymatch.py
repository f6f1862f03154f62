"""Matching keys against the sorted keys of a base file: :class:`KeyMatcher` (wanted keys,
sorted and unique, against sorted runs), :func:`match_rows` (the rows of keys in a few sorted
runs that hold a wanted key) and :func:`locate` (the row of each probe key). Keys of one width
are searched as 8-byte words after their shared prefix (``keyorder.key_words``); others take
an Arrow hash join."""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.keyorder import fixed_view, key_words, wanted_keys

MAX_RUNS = 8  # sorted runs :func:`match_rows` merges; keys in more take a hash join


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


class Located(NamedTuple):
    """Where probe keys are in an array of unique keys: ``rows``, per probe key, the row
    holding it (-1: none); ``order``, the probe keys held, by index, in the order of their
    rows (the probe keys of one row in their own order)."""

    rows: np.ndarray
    order: np.ndarray


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
        return cls(view, skip, key_words(view, skip))

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

    def locate(self, probe: np.ndarray) -> Located:
        """Per key of ``probe`` (``S<w>`` of the run's width, any order, repeats allowed): the
        row of the run holding it (see :class:`Located`). Only keys that share the run's
        prefix and whose word lies within the run's are searched, in word order (one sweep of
        the run, not one per sorted run of the probe: 10 runs of 3,300 keys in 333k, 1.9 ms
        against 3.6), which is the order of their rows too but where keys of one word differ."""
        rows = np.full(len(probe), -1, np.int64)
        theirs = key_words(probe, self.skip)
        inside = (theirs >= self.words[0]) & (theirs <= self.words[-1])
        if self.skip:
            inside &= _prefixed(probe, self.view[0], self.skip)
        inside = np.flatnonzero(inside)
        if not len(inside):
            return Located(rows, inside)
        inside = inside[np.argsort(theirs[inside], kind="stable")]  # timsort: merges runs
        tie = self.view.itemsize - self.skip > 8  # keys past their word: ties by whole key
        at, found = self._search(probe[inside] if tie else None, theirs[inside])
        order = inside[found]
        if tie:  # keys of one word are in probe order, not necessarily their rows'
            by_row = np.argsort(at, kind="stable")
            order, at = order[by_row], at[by_row]
        rows[order] = at
        return Located(rows, order)

    def _search(
        self, wanted: np.ndarray | None, theirs: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the run equal to some of ``wanted`` (keys sharing the run's prefix, their
        words within its first and last; any order) and which. ``theirs``: their words, when
        known; ``wanted`` may then be None where the word is the rest of every key."""
        view = self.view
        ours = self.words
        theirs = key_words(wanted, self.skip) if theirs is None else theirs
        rows = np.searchsorted(ours, theirs)  # the first row of each word (< len: in range)
        if view.itemsize - self.skip <= 8:  # the word holds every byte after the prefix
            found = np.flatnonzero(ours[rows] == theirs)
            return rows[found].astype(np.int64), found
        assert wanted is not None, "keys past their word are compared whole"
        hit = view[rows] == wanted
        tied = np.flatnonzero(~hit & (ours[rows] == theirs))  # rows of one word: search them
        if len(tied):
            # (a key past the run's last, of its last word: no row; the last is compared)
            rows[tied] = np.minimum(np.searchsorted(view, wanted[tied]), len(view) - 1)
            hit[tied] = view[rows[tied]] == wanted[tied]
        found = np.flatnonzero(hit)
        return rows[found].astype(np.int64), found


def _prefixed(view: np.ndarray, first: bytes, skip: int) -> np.ndarray:
    """Per item of ``view`` (``S<w>``): whether its first ``skip`` bytes are those of
    ``first`` (an item of the same width; numpy drops its trailing zero bytes)."""
    first = bytes(first).ljust(view.itemsize, b"\0")
    if view.itemsize >= 8 and skip <= 8:  # the prefix in each item's first 8 bytes
        whole = np.ascontiguousarray(view)
        head = np.ndarray((len(view),), dtype="<u8", buffer=whole, strides=(view.itemsize,))
        mask = np.uint64((1 << 8 * skip) - 1)  # its bytes, little-endian: no byte swap
        start = np.frombuffer(first[:8], dtype="<u8")[0]
        return (head & mask) == (start & mask)
    head = view.view(np.uint8).reshape(len(view), view.itemsize)[:, :skip]
    return (head == np.frombuffer(first[:skip], np.uint8)).all(axis=1)


def _one_run(keys: pa.Array) -> SortedRun | None:
    """``keys`` as one :class:`SortedRun` when they are of one width and strictly ascending
    (a base file as written), found from the words the run's searches need anyway
    (:func:`_in_order`). None: not so, or not known so cheaply (:func:`_run_bounds`)."""
    view = _keys_view(keys)
    if view is None:
        return None
    run = SortedRun.of(view)
    return run if _in_order(run) else None


def _keys_view(keys: pa.Array) -> np.ndarray | None:
    """``keys`` as ``S<w>`` when there are two or more, of one width, without nulls."""
    return fixed_view(keys) if len(keys) >= 2 and not keys.null_count else None


def _in_order(run: SortedRun) -> bool:
    """Whether the run's keys are strictly ascending: all share the first and last key's
    prefix, and each word exceeds the one before (equal words: the whole keys compared)."""
    view, words = run.view, run.words
    if run.skip and not bool(_prefixed(view, view[0], run.skip).all()):
        return False
    rises = words[1:] > words[:-1]
    if rises.all():
        return True
    if view.itemsize - run.skip <= 8 or bool((words[1:] < words[:-1]).any()):
        return False  # the word holds the whole rest of each key: equal words, equal keys
    tied = np.flatnonzero(~rises)
    return bool((view[tied + 1] > view[tied]).all())


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


def locate(keys: pa.Array, probe: pa.Array) -> Located:
    """Per key of ``probe`` (strings, no nulls, any order, repeats allowed): the row of
    ``keys`` (strings, no nulls, unique: a base file's) holding it (see :class:`Located`).

    Keys and probe keys of one width are searched as :meth:`SortedRun.locate` does, as if
    ``keys`` were one strictly ascending run (a base file as written). Every probe key found
    there, in ascending rows and equal to the key at its row (:func:`_all_held_in_order`),
    is an exact answer whatever the order of ``keys``. Only when some probe key was not found is the
    order of ``keys`` checked (:func:`_in_order`, a pass over every key: 0.6 of a 3 ms
    merge-on-read search of 33k log keys in 333k), since a search trusts it to rule keys out.
    Otherwise the distinct probe keys, sorted, are matched as :func:`match_rows` matches
    them."""
    view = _keys_view(keys)
    run = SortedRun.of(view) if view is not None else None
    probed = fixed_view(probe) if run is not None else None
    if run is not None and probed is not None and probed.itemsize == run.view.itemsize:
        found = run.locate(probed)
        if _all_held_in_order(found, run, len(probed)) or _in_order(run):
            return found
        run = None  # not one run: its misses may be held after all
    elif run is not None and not _in_order(run):
        run = None  # (the keys viewed once: _one_run's test, without a second view)
    wanted = wanted_keys(probe, pa.string(), unique=False)
    rows, found_at = _match_rows(keys, wanted, run)
    where = np.full(len(wanted), -1, np.int64)
    where[found_at] = rows
    rows = where[pc.index_in(probe, value_set=wanted).to_numpy(zero_copy_only=False)]
    held = np.flatnonzero(rows >= 0)
    return Located(rows, held[np.argsort(rows[held], kind="stable")])


def _all_held_in_order(found: Located, run: SortedRun, probes: int) -> bool:
    """Whether every one of ``probes`` probe keys was found in ``run`` and ``found.order``
    lists them by ascending row (as it does in a sorted run, searched in key order), each
    found equal to the key at its row with no assumption on the keys' order: a hit is
    compared whole, or by its word where the word holds every byte after the run's prefix
    (``SortedRun._search``), and then the prefix of the key at its row is checked here (the
    probe's was: a key between the first and last need not share it unless they ascend)."""
    if len(found.order) != probes:
        return False
    at = found.rows[found.order]
    if not bool((at[1:] >= at[:-1]).all()):
        return False
    view = run.view
    if run.skip and view.itemsize - run.skip <= 8:
        return bool(_prefixed(view[at], view[0], run.skip).all())
    return True
