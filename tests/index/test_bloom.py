"""Key bloom filters: no false negatives, a round trip through bytes, folding and union keep
every key, the bits follow the documented probe rule, and damaged bytes are refused."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.bloom import BITS_PER_KEY, MIN_BITS, PROBES, KeyBloom
from lakebraid.index.errors import BloomFormatError
from lakebraid.metadata.hashing import stable_hash

keys = st.lists(st.text(max_size=12), max_size=300, unique=True)


@settings(max_examples=80, deadline=None)
@given(members=keys, others=keys)
def test_every_member_may_be_contained_and_the_bytes_round_trip(
    members: list[str], others: list[str]
) -> None:
    bloom = KeyBloom.of(pa.array(members, pa.string()))
    assert bloom.may_contain(pa.array(members, pa.string())).all()
    assert bloom.bits >= max(MIN_BITS, BITS_PER_KEY * len(members))
    assert bloom.bits & (bloom.bits - 1) == 0
    back = KeyBloom.decode(bloom.encode())
    assert back == bloom
    probe = pa.array(others, pa.string())
    assert np.array_equal(back.may_contain(probe), bloom.may_contain(probe))


@settings(max_examples=60, deadline=None)
@given(a=keys, b=keys, shrink=st.integers(0, 4))
def test_folded_and_united_filters_keep_every_key(a: list[str], b: list[str], shrink: int) -> None:
    left, right = KeyBloom.of(pa.array(a, pa.string())), KeyBloom.of(pa.array(b, pa.string()))
    both = left.union(right)
    assert both.bits == min(left.bits, right.bits)
    assert both.may_contain(pa.array(a + b, pa.string())).all()
    size = max(MIN_BITS, left.bits >> shrink)
    assert left.folded(size).may_contain(pa.array(a, pa.string())).all()


def test_the_bits_follow_the_documented_probe_rule() -> None:
    """Bits computed here from the scalar hash, one key at a time, in Python integers."""
    words = ["", "a", "key-1", "Grüße, 世界", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"]
    bloom = KeyBloom.of(pa.array(words))
    m = bloom.bits
    assert m == 64  # 5 keys x 10 bits -> the least power of two >= 64
    expected = bytearray(m // 8)
    for word in words:
        h = stable_hash(word)
        h1, h2 = h & 0xFFFFFFFF, (h >> 32) | 1
        for i in range(PROBES):
            j = ((h1 + i * h2) % (1 << 64)) % m
            expected[j // 8] |= 1 << (j % 8)
    assert bloom.encode() == bytes([PROBES]) + bytes(expected)


def test_false_positives_stay_near_one_percent() -> None:
    members = pa.array([f"member-{i}" for i in range(20_000)])
    strangers = pa.array([f"stranger-{i}" for i in range(50_000)])
    rate = KeyBloom.of(members).may_contain(strangers).mean()
    assert rate < 0.02, rate


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "too few"),
        (bytes([7]) + bytes(7), "too few"),
        (bytes([7]) + bytes(12), "bits"),  # 96 bits: not a power of two
        (bytes([0]) + bytes(8), "0 probes"),
        (bytes([31]) + bytes(8), "31 probes"),
    ],
)
def test_damaged_bytes_are_refused(data: bytes, why: str) -> None:
    with pytest.raises(BloomFormatError, match=why):
        KeyBloom.decode(data)


def test_filters_of_different_probes_do_not_unite() -> None:
    a = KeyBloom.of(pa.array(["x"]), probes=3)
    with pytest.raises(BloomFormatError, match="probes"):
        a.union(KeyBloom.of(pa.array(["x"])))
