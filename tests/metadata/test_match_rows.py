"""``keymatch.match_rows`` finds exactly the rows whose key is wanted, and which wanted key each
holds, whatever the order of the keys: one sorted run (a base file as written), a few runs
(merges), many runs or keys of several widths (a hash join); checked against a dict.
``keymatch.locate`` gives, per probe key (any order, repeats allowed), the row holding it or
-1, and the keys held in the order of their rows, on the same cases."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.keymatch import MAX_RUNS, locate, match_rows

# bytes that sort low and high, NUL included (numpy's S dtype ignores trailing NULs)
ALPHABET = st.sampled_from(["\x00", "0", "1", "9", "a", "z", "~"])


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    width = draw(st.integers(1, 20))
    # shared prefixes that leave 8 or 9 bytes after them: the edge of one word's reach
    edge = st.sampled_from([max(0, width - 9), max(0, width - 8)])
    size = draw(st.one_of(st.integers(0, width - 1), edge))
    prefix = draw(st.text(alphabet=ALPHABET, min_size=size, max_size=size))
    suffix = st.text(alphabet=ALPHABET, min_size=width - len(prefix), max_size=width - len(prefix))
    keys = draw(st.lists(suffix.map(lambda s: prefix + s), min_size=2, max_size=60, unique=True))
    if draw(st.booleans()):  # a key of another width: no merge
        keys.append(draw(st.text(alphabet=ALPHABET, min_size=width + 1, max_size=width + 3)))
        keys = list(dict.fromkeys(keys))
    runs = draw(st.integers(1, MAX_RUNS + 2))
    cuts = sorted(draw(st.lists(st.integers(0, len(keys)), min_size=runs - 1, max_size=runs - 1)))
    bounds = [0, *cuts, len(keys)]
    ordered = [k for a, b in itertools.pairwise(bounds) for k in sorted(keys[a:b])]
    if draw(st.booleans()):
        ordered = draw(st.permutations(ordered))
    present = draw(st.lists(st.sampled_from(ordered), max_size=len(ordered)))
    absent = draw(st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=width + 2)))
    at = st.one_of(st.integers(0, width - 1), st.just(width - 1))
    edits = st.tuples(st.sampled_from(ordered), at, ALPHABET)
    near = [k[:at] + c + k[at + 1 :] for k, at, c in draw(st.lists(edits, max_size=8))]
    wanted = sorted(set(present) | set(absent) | set(near))  # near: one byte changed
    return ordered, wanted


@settings(max_examples=300, deadline=None)
@given(case=cases())
def test_the_rows_holding_wanted_keys_and_which(case: tuple[list[str], list[str]]) -> None:
    keys, wanted = case
    rows, found = match_rows(pa.array(keys, pa.string()), pa.array(wanted, pa.string()))
    where = {k: i for i, k in enumerate(wanted)}
    expected = [i for i, k in enumerate(keys) if k in where]
    assert rows.tolist() == expected
    assert found.tolist() == [where[keys[i]] for i in expected]


def test_a_slice_of_a_larger_array_is_matched_at_its_own_rows() -> None:
    keys = pa.array([f"k{i:05d}" for i in range(1000)], pa.string()).slice(10, 500)
    wanted = pa.array(["k00005", "k00010", "k00300", "k00509", "k00510"], pa.string())
    rows, found = match_rows(keys, wanted)
    assert rows.tolist() == [0, 290, 499] and found.tolist() == [1, 2, 3]


@pytest.mark.parametrize(
    ("keys", "wanted", "rows", "found"),
    [
        # the first and last key share a prefix the middle one lacks; past it the words rise
        (["aa00000001", "zz00000005", "aa00000009"], ["aa00000009", "zz00000005"], [1, 2], [1, 0]),
        # equal words, the bytes past them falling: only the whole keys tell
        (["aa00000000zz", "aa00000000yy", "ab0000000000"], ["aa00000000yy"], [1], [0]),
    ],
    ids=["prefix", "past-the-word"],
)
def test_keys_that_only_look_sorted_by_their_words_are_not_one_run(
    keys: list[str], wanted: list[str], rows: list[int], found: list[int]
) -> None:
    got, which = match_rows(pa.array(keys, pa.string()), pa.array(sorted(wanted), pa.string()))
    assert got.tolist() == rows and which.tolist() == found


@settings(max_examples=300, deadline=None)
@given(case=cases(), data=st.data())
def test_each_probe_key_is_found_at_its_row(
    case: tuple[list[str], list[str]], data: st.DataObject
) -> None:
    keys, wanted = case
    if data.draw(st.booleans()):  # probe keys of the base keys' width only: the search
        wanted = [k for k in wanted if len(k.encode()) == len(keys[0].encode())]
    if data.draw(st.booleans()):  # base keys only: all found, the base's order unchecked
        held = set(keys)
        wanted = [k for k in wanted if k in held]
    probe = data.draw(st.lists(st.sampled_from(wanted), max_size=40)) if wanted else []
    got = locate(pa.array(keys, pa.string()), pa.array(probe, pa.string()))
    where = {k: i for i, k in enumerate(keys)}
    rows = [where.get(k, -1) for k in probe]
    assert got.rows.tolist() == rows
    # the probe keys held, by row, those of one row in probe order
    held = sorted((r, i) for i, r in enumerate(rows) if r >= 0)
    assert got.order.tolist() == [i for _, i in held]


def test_probe_keys_of_the_base_width_outside_its_range_are_absent() -> None:
    keys = pa.array([f"k{i:05d}" for i in range(100, 200)], pa.string())
    probe = pa.array(["k00199", "k00099", "k00200", "k00150", "k00100", "k00150"], pa.string())
    assert locate(keys, probe).rows.tolist() == [99, -1, -1, 50, 0, 50]


def test_a_base_sorted_but_for_one_key_of_another_prefix_is_not_searched() -> None:
    # the first and last keys share "aa"; the middle one does not: no binary search may trust it
    keys = pa.array(["aa00000001", "zz00000005", "aa00000009"], pa.string())
    probe = pa.array(["aa00000009", "zz00000005", "aa00000001"], pa.string())
    assert locate(keys, probe).rows.tolist() == [2, 1, 0]


def test_a_probe_of_another_prefix_but_a_base_key_s_word_is_absent() -> None:
    # the words after the shared prefix "aa" are equal; the prefix is not
    keys = pa.array(["aa00000001", "aa00000005", "aa00000009"], pa.string())
    probe = pa.array(["zz00000005", "aa00000005", "ab00000005"], pa.string())
    assert locate(keys, probe).rows.tolist() == [-1, 1, -1]


def test_a_probe_past_the_last_key_sharing_its_word_is_absent() -> None:
    # 20-byte keys with no shared prefix: the word is their first 8 bytes, ties go on to the
    # whole key, and the probe sorts after every key of the run
    keys = pa.array(["a" * 20, "b" + "a" * 19], pa.string())
    probe = pa.array(["b" + "a" * 18 + "z", "b" + "a" * 19, "a" * 19 + "b"], pa.string())
    assert locate(keys, probe).rows.tolist() == [-1, 1, -1]


def test_keys_of_one_word_are_ordered_by_their_rows() -> None:
    # rows 0 and 1 share their first 8 bytes (the word, no shared prefix): searched in word
    # order the probe finds row 1 before row 0
    keys = pa.array(["aaaaaaaaaa", "aaaaaaaaab", "zaaaaaaaaa"], pa.string())
    probe = pa.array(["aaaaaaaaab", "aaaaaaaaaa", "aaaaaaaaab"], pa.string())
    got = locate(keys, probe)
    assert got.rows.tolist() == [1, 0, 1]
    assert got.order.tolist() == [1, 0, 2]


def test_a_probe_sharing_a_word_with_a_base_key_of_another_prefix_is_absent() -> None:
    # "zz00000005" lacks the "aa" its neighbours share, and holds the word of "aa00000005":
    # every probe key "found" at a row must equal the key there whole
    keys = pa.array(["aa00000001", "zz00000005", "aa00000009"], pa.string())
    probe = pa.array(["aa00000005", "aa00000001"], pa.string())
    got = locate(keys, probe)
    assert got.rows.tolist() == [-1, 0]
    assert got.order.tolist() == [1]
