"""``metadata.basefile.sort_order`` (the key sort of base files and index log blocks) orders
strings exactly as Arrow does, whatever prefixes, widths and bytes the keys share. Arrow
itself sorts fewer than ``ARROW_SORT_BELOW`` keys: the property test lowers that bound so its
small inputs take the numpy path."""

from __future__ import annotations

import itertools
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata import keyorder
from lakebraid.metadata.keyorder import sort_order

PREFIXES = st.sampled_from(["", "key-", "user-000000", "é", "\x00"])
TAILS = st.text(alphabet="09az\x00é\U0001f600", max_size=12)


@settings(max_examples=300, deadline=None)
@given(prefix=PREFIXES, tails=st.lists(TAILS, max_size=60), width=st.booleans())
def test_sort_order_sorts_like_arrow(prefix: str, tails: list[str], width: bool) -> None:
    if width:  # one width (the strided path): pad every tail to the longest
        longest = max((len(t.encode()) for t in tails), default=0)
        tails = [t + "0" * (longest - len(t.encode())) for t in tails]
    keys = pa.array([prefix + t for t in tails], pa.string())
    with mock.patch.object(keyorder, "ARROW_SORT_BELOW", 2):
        order = sort_order(keys).to_pylist()
    assert (
        keys.take(pa.array(order, pa.int64())).to_pylist()
        == keys.take(pc.sort_indices(keys)).to_pylist()
    )
    assert sorted(order) == list(range(len(keys)))


def test_sort_order_of_many_keys_with_a_long_shared_prefix() -> None:
    keys = pa.array([f"key-{(i * 7919) % 100_003:010d}" for i in range(100_003)], pa.string())
    order = sort_order(keys)
    assert keys.take(order).to_pylist() == sorted(keys.to_pylist())


@settings(max_examples=150, deadline=None)
@given(
    tails=st.lists(TAILS, min_size=1, max_size=60),
    look=st.integers(2, 8),
    swap=st.integers(0, 59),
)
def test_keys_already_in_order_or_out_of_order_past_the_first_look(
    tails: list[str], look: int, swap: int
) -> None:
    """Sorted keys (ties included) come back as the identity, Arrow's stable order; keys
    sorted but for one pair past the first ``look`` are still sorted in full."""
    ordered = sorted(tails, key=str.encode)
    keys = pa.array(ordered, pa.string())
    with mock.patch.object(keyorder._ascending, "__defaults__", (look,)):
        assert sort_order(keys).to_pylist() == pc.sort_indices(keys).to_pylist()
        at = swap % len(ordered)
        if at + 1 < len(ordered) and ordered[at] != ordered[at + 1]:
            broken = [*ordered[:at], ordered[at + 1], ordered[at], *ordered[at + 2 :]]
            keys = pa.array(broken, pa.string())
            order = sort_order(keys)
            assert keys.take(order).to_pylist() == keys.take(pc.sort_indices(keys)).to_pylist()


@settings(max_examples=100, deadline=None)
@given(
    runs=st.lists(st.lists(st.integers(0, 999), min_size=1, max_size=40), min_size=2, max_size=6),
    width=st.integers(3, 12),
)
def test_sorted_runs_of_one_width_come_back_in_arrows_stable_order(
    runs: list[list[int]], width: int
) -> None:
    """Log blocks one after another: sorted runs of keys of one width, a key repeated across
    runs. The indices are Arrow's stable sort's, ties in their input order."""
    keys = pa.array([f"key-{n:0{width}d}" for run in runs for n in sorted(set(run))], pa.string())
    with mock.patch.object(keyorder, "ARROW_SORT_BELOW", 2):
        order = sort_order(keys).to_pylist()
    assert order == pc.sort_indices(keys).to_pylist()


@settings(max_examples=200, deadline=None)
@given(shared=st.binary(max_size=30), rest=st.integers(1, 14), data=st.data())
def test_the_prefix_keys_of_one_width_share(shared: bytes, rest: int, data: st.DataObject) -> None:
    """``_fixed_prefix``: the leading bytes every key shares, capped at the key width less 8;
    found a word of 8 bytes at a time, so the first difference counts wherever it falls in a
    word and whatever bytes differ after it."""
    tail = st.binary(min_size=rest, max_size=rest)
    keys = [shared + t for t in data.draw(st.lists(tail, min_size=1, max_size=20))]
    width = len(keys[0])
    fixed = np.array(keys, dtype=f"S{width}")
    naive = next((i for i in range(width) if len({k[i] for k in keys}) > 1), width)
    assert keyorder._fixed_prefix(fixed) == max(0, min(naive, width - 8))


@settings(max_examples=300, deadline=None)
@given(
    drawn=st.lists(
        st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 8)), min_size=1, max_size=30
    ),
    block=st.integers(1, 7),
)
def test_the_first_differing_byte_is_found_a_block_at_a_time(
    drawn: list[tuple[int, int]], block: int
) -> None:
    """``_differ``, a block at a time, stopping at a first byte that differs: its lowest set
    byte is that of every word XOR the first, OR-ed over all (none when none differs),
    wherever the words that differ early are (each word keeps its own number of low bytes
    the first word's)."""
    first = drawn[0][0]
    words = [w & ~((1 << 8 * same) - 1) | first & ((1 << 8 * same) - 1) for w, same in drawn]
    word = np.array(words, np.uint64)
    full = int(np.bitwise_or.reduce(word ^ word[0]))
    got = keyorder._differ(word, block)
    assert (got == 0) == (full == 0)
    assert ((got & -got).bit_length() - 1) // 8 == ((full & -full).bit_length() - 1) // 8


@settings(max_examples=200, deadline=None)
@given(
    widths=st.lists(st.integers(0, 4), min_size=1, max_size=30),
    block=st.integers(1, 7),
)
def test_offsets_in_steps_of_one_width_a_block_at_a_time(widths: list[int], block: int) -> None:
    """``_steps_of``: every value's width is the first one's, checked a block of differences
    at a time; a value of another width in any block, first or last, is found."""
    offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int32)
    assert keyorder._steps_of(offsets, widths[0], block) == (len(set(widths)) == 1)
    keys = pa.array(["x" * w for w in widths], pa.string())
    view = keyorder.fixed_view(keys)
    assert (view is not None) == (len(set(widths)) == 1 and widths[0] > 0)


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(st.integers(0, 300), max_size=40),
    sort=st.booleans(),
    look=st.integers(2, 8),
)
def test_strictly_ascending_keys_are_sorted_and_unique(
    ids: list[int], sort: bool, look: int
) -> None:
    """``strictly_ascending`` is true exactly for keys in order with no repeat, for keys with
    ordering words (one width, within 8 bytes), keys without (wider, or ragged), past the
    sampled look and within it."""
    ids = sorted(ids) if sort else ids
    for keys in (
        [f"k{i:03d}" for i in ids],  # one width within 8 bytes: ordering words
        [f"{i:03d}{'x' * 10}{i:03d}" for i in ids],  # one width, 16 bytes apart: no words
        [f"k{i}" for i in ids],  # several widths: the text compared
    ):
        want = all(a < b for a, b in itertools.pairwise(keys))
        array = pa.array(keys, pa.string())
        assert keyorder.strictly_ascending(array, look) == want
        chunked = pa.chunked_array([keys[: len(keys) // 2], keys[len(keys) // 2 :]], pa.string())
        assert keyorder.strictly_ascending(chunked, look) == want


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.integers(0, 2**64 - 1), max_size=80),
    repeats=st.lists(st.integers(0, 79), max_size=10),
)
def test_stable_order_is_numpys_stable_sort(words: list[int], repeats: list[int]) -> None:
    """With or without equal words (then the stable sort decides), the order is numpy's
    stable argsort; unique words take the faster sort and give the same order."""
    values = list(words) + [words[i] for i in repeats if i < len(words)]
    array = np.array(values, dtype=np.uint64)
    got = keyorder.stable_order(array)
    assert got.tolist() == np.argsort(array, kind="stable").tolist()
    assert got.dtype.kind == "i"


def test_text_decoded_from_a_dictionary_is_viewed_at_its_width_only() -> None:
    """``fixed_view(decoded_from=)`` trusts the dictionary's one width for the decoded text's
    offsets; a dictionary of another width, or of several, gives no view."""
    dictionary = pa.array(["ab", "cd"])
    decoded = pa.DictionaryArray.from_arrays(pa.array([1, 0, 1], pa.int32()), dictionary)
    text = decoded.cast(pa.string())
    assert keyorder.fixed_view(text, decoded_from=dictionary).tolist() == [b"cd", b"ab", b"cd"]
    assert keyorder.fixed_view(text, decoded_from=pa.array(["abc"])) is None
    assert keyorder.fixed_view(text, decoded_from=pa.array(["a", "bcd"])) is None
