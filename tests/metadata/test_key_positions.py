"""``keyorder.KeyPositions`` finds exactly the row of each wanted key in a key column, whatever
the order of the column's keys: one sorted run (a base file as written: its check from the
words alone), a few runs (merges), many runs or keys of several widths (a hash join); checked
against a dict."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.keyorder import MAX_RUNS, KeyPositions

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
@given(case=cases(), parts=st.integers(1, 3))
def test_the_row_of_each_wanted_key(case: tuple[list[str], list[str]], parts: int) -> None:
    keys, wanted = case
    row = {k: i for i, k in enumerate(keys)}
    pieces = [wanted[i::parts] for i in range(parts)]  # several lookups, each sorted, unique
    found = KeyPositions(pa.array(keys, pa.string())).rows_of(
        [pa.array(p, pa.string()) for p in pieces]
    )
    assert [f.tolist() for f in found] == [[row.get(k, -1) for k in p] for p in pieces]


def test_a_slice_of_a_larger_array_is_matched_at_its_own_rows() -> None:
    keys = pa.array([f"k{i:05d}" for i in range(1000)], pa.string()).slice(10, 500)
    wanted = pa.array(["k00005", "k00010", "k00300", "k00509", "k00510"], pa.string())
    (found,) = KeyPositions(keys).rows_of([wanted])
    assert found.tolist() == [-1, 0, 290, 499, -1]


@pytest.mark.parametrize(
    ("keys", "wanted", "rows"),
    [
        # the first and last key share a prefix the middle one lacks; past it the words rise
        (["aa00000001", "zz00000005", "aa00000009"], ["aa00000009", "zz00000005"], [2, 1]),
        # equal words, the bytes past them falling: only the whole keys tell
        (["aa00000000zz", "aa00000000yy", "ab0000000000"], ["aa00000000yy"], [1]),
    ],
    ids=["prefix", "past-the-word"],
)
def test_keys_that_only_look_sorted_by_their_words_are_not_one_run(
    keys: list[str], wanted: list[str], rows: list[int]
) -> None:
    (found,) = KeyPositions(pa.array(keys, pa.string())).rows_of([pa.array(wanted, pa.string())])
    assert found.tolist() == rows
