"""The key footer of a merge-on-read data log block (the seeds' RFC-06 key index): the block's
own key range and bloom filter (:class:`KeyFooter`) and those of every block of the file
slice's logs so far (:class:`SliceKeys`, grown by :func:`slice_after`); a writer builds both
at once (:meth:`KeyFooter.of`). The block format that
carries it is ``index.datalog``'s (its docstring documents the footer's fields)."""

from __future__ import annotations

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.bloom import KeyBloom
from lakebraid.index.errors import BloomFormatError


class SliceKeys(msgspec.Struct, frozen=True):
    """The keys of a file slice's log blocks so far."""

    blocks: int
    keys: int  # keys summed over blocks (a key in two blocks counts twice)
    min_key: str
    max_key: str
    bloom: bytes | None  # index.bloom encoding; None: no slice filter kept


class KeyFooter(msgspec.Struct, frozen=True):
    min_key: str
    max_key: str
    bloom: bytes
    slice: SliceKeys

    @classmethod
    def of(
        cls, keys: pa.Array, previous: SliceKeys | None, earlier_keys: pa.Array | None = None
    ) -> KeyFooter:
        """The footer of a block of ``keys`` (sorted, non-empty) appended after ``previous``
        (:func:`slice_after`); the block's filter is the slice's for a slice's first block."""
        bloom = KeyBloom.of(keys).encode()
        after = slice_after(previous, keys, earlier_keys, first_bloom=bloom)
        return cls(keys[0].as_py(), keys[-1].as_py(), bloom, after)

    def may_hold(self, key: str) -> bool:
        """Whether this block may hold ``key`` (False: surely not)."""
        return self.may_hold_any(pa.array([key], pa.string()))

    def may_hold_any(self, keys: pa.Array) -> bool:
        """Whether this block may hold any of ``keys`` (False: surely none)."""
        inside = pc.and_(pc.greater_equal(keys, self.min_key), pc.less_equal(keys, self.max_key))
        candidates = keys.filter(pc.fill_null(inside, False))
        return len(candidates) > 0 and _bloom_may_hold(self.bloom, candidates)

    def slice_may_hold(self, key: str) -> bool:
        """Whether any block of the slice's logs so far may hold ``key``."""
        s = self.slice
        in_range = s.min_key <= key <= s.max_key
        return in_range and (s.bloom is None or _bloom_may_hold(s.bloom, pa.array([key])))


def _bloom_may_hold(encoded: bytes, keys: pa.Array) -> bool:
    """Whether the filter ``encoded`` may hold any of ``keys``."""
    try:
        return bool(KeyBloom.decode(encoded).may_contain(keys).any())
    except BloomFormatError:
        return True  # the CRC held: a filter this lakebraid cannot read rules nothing out


def slice_after(
    previous: SliceKeys | None,
    keys: pa.Array,
    earlier_keys: pa.Array | None = None,
    first_bloom: bytes | None = None,
) -> SliceKeys:
    """The slice's keys once a block of ``keys`` (sorted, non-empty) is appended. The slice
    filter keeps its size while it holds :data:`~lakebraid.index.bloom.BITS_PER_KEY` bits per
    key; past that it is rebuilt at a larger size from ``earlier_keys`` when given, else
    dropped (readers then test each block's own filter). ``first_bloom``: the keys' own
    filter, encoded, when the caller has it (the slice's filter after its first block)."""
    lo, hi = keys[0].as_py(), keys[-1].as_py()
    if previous is None:
        bloom = first_bloom if first_bloom is not None else KeyBloom.of(keys).encode()
        return SliceKeys(1, len(keys), lo, hi, bloom)
    total = previous.keys + len(keys)
    bloom: bytes | None = None
    kept = KeyBloom.decode(previous.bloom) if previous.bloom is not None else None
    if kept is not None and kept.holds(total):
        bloom = kept.add(keys).encode()
    elif earlier_keys is not None:
        bloom = KeyBloom.of(pa.concat_arrays([earlier_keys, keys]), size=None).encode()
    return SliceKeys(
        previous.blocks + 1, total, min(lo, previous.min_key), max(hi, previous.max_key), bloom
    )
