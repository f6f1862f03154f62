"""Bloom filters of record keys, format version 1: whether a set of keys may hold a key (no
false negatives), in a few bits per key. Merge-on-read log blocks carry them in their footers
(``index.datalog``) so a reader skips blocks, and whole file slices, without the key.

Encoding (:meth:`KeyBloom.encode`)::

    offset  size  field
    0       1     probes k (u8, 1..30)
    1       m/8   the m bits: bit j is bit (j mod 8), least significant first, of byte j div 8

``m`` is a power of two, at least 64. A key's probes come from its ``stable_hash``
(``metadata.hashing``, FNV-1a 64 then fmix64, over the key's canonical text):
``h1 = h mod 2**32``, ``h2 = (h div 2**32) OR 1``, and probe ``i`` (``0 <= i < k``) sets bit
``(h1 + i * h2) mod m``, in unsigned 64-bit arithmetic. Sizing (:meth:`KeyBloom.of`): ``m`` is
the least power of two of at least :data:`BITS_PER_KEY` bits per key (about 1% false
positives at k = 7).

Because ``m`` is a power of two, a filter halves without its keys (:meth:`KeyBloom.folded`:
bit ``j`` of the half is bit ``j`` OR bit ``j + m/2``; a key's probes mod m/2 are its probes
mod m, reduced), so filters of different sizes union at the smaller size
(:meth:`KeyBloom.union`) and still hold every key of both.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lakebraid.index.errors import BloomFormatError
from lakebraid.metadata.hashing import stable_hashes

FORMAT_VERSION = 1
BITS_PER_KEY = 10
PROBES = 7
MIN_BITS = 64
_MASK32 = np.uint64(0xFFFFFFFF)


class KeyBloom:
    """An immutable Bloom filter of record keys (see the module doc)."""

    __slots__ = ("_bits", "probes")

    def __init__(self, bits: np.ndarray, probes: int):
        size = len(bits) * 8
        if size < MIN_BITS or size & (size - 1) or not 1 <= probes <= 30:
            raise BloomFormatError(f"a bloom filter of {size} bits and {probes} probes")
        self._bits = bits.astype(np.uint8, copy=False)
        self._bits.flags.writeable = False
        self.probes = probes

    @property
    def bits(self) -> int:
        return len(self._bits) * 8

    @classmethod
    def of(
        cls, keys: pa.Array | pa.ChunkedArray, probes: int = PROBES, size: int | None = None
    ) -> KeyBloom:
        """The filter of ``keys`` (canonical key text), of ``size`` bits (default: sized by
        :data:`BITS_PER_KEY`, :func:`size_for`)."""
        size = size_for(len(keys)) if size is None else size
        if size < MIN_BITS or size & (size - 1):
            raise BloomFormatError(f"a bloom filter of {size} bits (a power of two >= 64)")
        flat = np.zeros(size, dtype=bool)
        flat[_positions(keys, size, probes).ravel()] = True
        return cls(np.packbits(flat, bitorder="little"), probes)

    def may_contain(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Per key: False when it is surely absent, True when it may be present."""
        if len(keys) == 0:
            return np.zeros(0, dtype=bool)
        flat = np.unpackbits(self._bits, bitorder="little").astype(bool)
        return flat[_positions(keys, self.bits, self.probes)].all(axis=1)

    def folded(self, size: int) -> KeyBloom:
        """This filter at ``size`` bits (a smaller power of two), holding the same keys."""
        if size > self.bits or size < MIN_BITS or size & (size - 1):
            raise BloomFormatError(f"cannot fold {self.bits} bits to {size}")
        flat = np.unpackbits(self._bits, bitorder="little").reshape(-1, size)
        return KeyBloom(np.packbits(flat.any(axis=0), bitorder="little"), self.probes)

    def holds(self, keys: int) -> bool:
        """Whether this filter is large enough for ``keys`` keys (:data:`BITS_PER_KEY`)."""
        return self.bits >= keys * BITS_PER_KEY

    def add(self, keys: pa.Array | pa.ChunkedArray) -> KeyBloom:
        """This filter with ``keys`` added, at the same size."""
        more = KeyBloom.of(keys, self.probes, self.bits)
        return KeyBloom(self._bits | more._bits, self.probes)

    def union(self, other: KeyBloom) -> KeyBloom:
        """A filter of both filters' keys, at the smaller size."""
        if other.probes != self.probes:
            raise BloomFormatError(f"bloom filters of {self.probes} and {other.probes} probes")
        size = min(self.bits, other.bits)
        a, b = self.folded(size), other.folded(size)
        return KeyBloom(a._bits | b._bits, self.probes)

    def encode(self) -> bytes:
        return bytes([self.probes]) + self._bits.tobytes()

    @classmethod
    def decode(cls, data: bytes) -> KeyBloom:
        if len(data) < 1 + MIN_BITS // 8:
            raise BloomFormatError(f"{len(data)} bytes are too few for a bloom filter")
        return cls(np.frombuffer(data, dtype=np.uint8, offset=1), data[0])

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, KeyBloom)
            and other.probes == self.probes
            and np.array_equal(other._bits, self._bits)
        )

    def __hash__(self) -> int:
        return hash((self.probes, self._bits.tobytes()))

    def __repr__(self) -> str:
        return f"KeyBloom({self.bits} bits, {self.probes} probes)"


def size_for(keys: int) -> int:
    """The least power of two of at least :data:`BITS_PER_KEY` bits per key (and 64)."""
    wanted = max(MIN_BITS, keys * BITS_PER_KEY)
    return 1 << (wanted - 1).bit_length()


def _positions(keys: pa.Array | pa.ChunkedArray, size: int, probes: int) -> np.ndarray:
    """Each key's ``probes`` bit positions in a filter of ``size`` bits (keys x probes)."""
    h = stable_hashes(keys).astype(np.uint64)
    h1 = h & _MASK32
    h2 = (h >> np.uint64(32)) | np.uint64(1)
    steps = np.arange(probes, dtype=np.uint64)
    return ((h1[:, None] + steps[None, :] * h2[:, None]) % np.uint64(size)).astype(np.int64)
