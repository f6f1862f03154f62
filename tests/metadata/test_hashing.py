"""The format's key hash: test vectors, stability across processes, vectorised == scalar."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata import hashing
from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.hashing import (
    SCAN_GROUPS,
    GroupRows,
    file_group_id,
    file_group_of,
    file_groups_of,
    group_order,
    parse_file_group_id,
    scoped_groups,
    stable_hash,
    stable_hashes,
)

REPO = Path(__file__).resolve().parents[2]
FAST = settings(max_examples=150, deadline=None)

VECTORS = [
    ("", 0xEFD01F60BA992926, 2),
    ("a", 0x82A2A958A9BECE5B, 5),
    ("key-1", 0xA002E14B20BB64EC, 2),
    ("3f2504e0-4f89-11d3-9a0c-0305e82c3301", 0x3A05A74F9C952443, 7),
    ("Gr\u00fc\u00dfe, \u4e16\u754c", 0x397F259D91E888AB, 7),
]


@pytest.mark.parametrize(("key", "digest", "group"), VECTORS)
def test_vectors(key: str, digest: int, group: int) -> None:
    assert stable_hash(key) == digest
    assert file_group_of(key, 10) == group
    assert int(stable_hashes([key])[0]) == digest
    assert int(file_groups_of([key], 10)[0]) == group


def test_vectors_are_in_the_docstring() -> None:
    text = (REPO / "metadata" / "hashing.py").read_text()
    for key, digest, group in VECTORS:
        assert f'"{key}"' in text and f"{digest:#018x}  {group}" in text


def test_stable_across_processes_and_hash_seeds() -> None:
    code = "from metadata.hashing import stable_hash; print(stable_hash('key-1'))"
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert int(out.stdout) == VECTORS[2][1]


@FAST
@given(st.lists(st.text(max_size=20), max_size=60), st.integers(1, 1000))
def test_vectorised_equals_scalar(keys: list[str], n: int) -> None:
    expected = [file_group_of(k, n) for k in keys]
    assert file_groups_of(keys, n).tolist() == expected
    assert file_groups_of(pa.array(keys, pa.string()), n).tolist() == expected
    assert file_groups_of(pa.array(keys, pa.string_view()), n).tolist() == expected
    assert stable_hashes(keys).tolist() == [stable_hash(k) for k in keys]


@FAST
@given(st.integers(0, 12), st.lists(st.text(min_size=0, max_size=3), max_size=40))
def test_equal_length_keys_and_slices(width: int, tails: list[str]) -> None:
    keys = [(t + "x" * 12)[:width] for t in tails]  # equal length in characters (bytes vary)
    ascii_keys = ["y" * width for _ in tails]  # equal length in bytes: the 2-D fast path
    for batch in (keys, ascii_keys):
        array = pa.array(["pad", *batch, "pad"], pa.string()).slice(1, len(batch))
        assert stable_hashes(array).tolist() == [stable_hash(k) for k in batch]


def test_chunked_arrays() -> None:
    keys = [str(uuid.uuid4()) for _ in range(300)] + ["", "\u00e9"]
    chunked = pa.chunked_array([keys[:100], keys[100:], []], pa.string())
    assert file_groups_of(chunked, 13).tolist() == [file_group_of(k, 13) for k in keys]


def test_keys_hashed_in_several_chunks_on_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past one chunk the keys hash (FNV-1a and fmix64) a chunk per thread: each key mixed
    once, whatever chunk it falls in, ragged or of one length."""
    monkeypatch.setattr(hashing, "_CHUNK", 97)
    ragged = [str(i) * (i % 5) for i in range(1_000)]
    even = [f"key-{i:06d}" for i in range(1_000)]
    for keys in (ragged, even):
        array = pa.array(["pad", *keys], pa.string()).slice(1)
        assert stable_hashes(array).tolist() == [stable_hash(k) for k in keys]


def test_many_keys_spread_evenly() -> None:
    keys = pa.array([str(uuid.uuid4()) for _ in range(64_000)])
    counts = np.bincount(file_groups_of(keys, 16), minlength=16)
    assert counts.min() > 3600 and counts.max() < 4400
    sequential = pa.array([f"key-{i:08d}" for i in range(64_000)])
    counts = np.bincount(file_groups_of(sequential, 64), minlength=64)
    assert counts.min() > 800 and counts.max() < 1200


@pytest.mark.parametrize("groups", [1, 4], ids=["one group", "several"])
def test_nulls_and_non_strings_are_refused(groups: int) -> None:
    """One group needs no hash (every key is in group 0): the keys are checked alike."""
    with pytest.raises(ValueError):
        file_groups_of(pa.array(["a", None]), groups)
    with pytest.raises(ValueError):
        file_groups_of(pa.chunked_array([["a"], [None]], pa.string()), groups)
    with pytest.raises(TypeError):
        file_groups_of(pa.array([1, 2]), groups)
    with pytest.raises(ValueError):  # a list is checked as an array is
        file_groups_of(["a", None], groups)  # type: ignore[list-item]
    with pytest.raises((TypeError, ValueError)):
        file_groups_of(["a", 1], groups)  # type: ignore[list-item]
    assert file_groups_of(pa.array(["a", "b"], pa.string_view()), groups).tolist() == [
        file_group_of("a", groups),
        file_group_of("b", groups),
    ]
    with pytest.raises(ValueError):
        file_group_of("a", 0)


def test_file_group_ids() -> None:
    assert file_group_id("record_index", 7) == "record_index-0007"
    assert file_group_id("files", 12345) == "files-12345"
    for partition, index in [("record_index", 7), ("column_stats", 0), ("files", 12345)]:
        assert parse_file_group_id(file_group_id(partition, index)) == (partition, index)
    for bad in ["record_index-7", "record_index-00007", "Files-0001", "files_0001", "-0001"]:
        with pytest.raises(ValueError):
            parse_file_group_id(bad)
    with pytest.raises(ValueError):
        file_group_id("files", -1)


@settings(max_examples=100, deadline=None)
@given(n_groups=st.sampled_from([1, 7, 256, 257, 70_000]), data=st.data())
def test_group_order_is_a_stable_sort_by_group(n_groups: int, data: st.DataObject) -> None:
    groups = np.array(
        data.draw(st.lists(st.integers(0, n_groups - 1), max_size=300)), dtype=np.int64
    )
    order = group_order(groups, n_groups)
    assert order.tolist() == sorted(range(len(groups)), key=lambda i: (groups[i], i))


@settings(max_examples=100, deadline=None)
@given(n_groups=st.sampled_from([1, 7, SCAN_GROUPS, SCAN_GROUPS + 1, 300]), data=st.data())
def test_group_rows_are_each_groups_rows_in_order(n_groups: int, data: st.DataObject) -> None:
    """Scanned (few groups) or sorted (many), each group's rows are its positions, ascending;
    ``present`` names exactly the groups that have rows."""
    groups = np.array(
        data.draw(st.lists(st.integers(0, n_groups - 1), max_size=300)), dtype=np.int64
    )
    members = GroupRows(groups, n_groups)
    assert members.present == sorted(set(groups.tolist()))
    for group in members.present:
        expected = [i for i, g in enumerate(groups.tolist()) if g == group]
        assert members.rows(group).tolist() == expected


# ---- partition-scoped routing ----------------------------------------------------------------

SCOPED_PARTS = st.sampled_from(["day=a", "day=b", "day=c", "day=d"])


@given(
    st.lists(st.tuples(SCOPED_PARTS, st.text(max_size=6)), max_size=60),
    st.integers(1, 9),
    st.dictionaries(SCOPED_PARTS, st.tuples(st.integers(0, 20), st.integers(1, 12)), max_size=3),
)
def test_scoped_groups_keep_each_partition_in_its_span(pairs, n, given) -> None:
    spans = {p: list(span) for p, span in given.items()}
    keys = [f"{p}\x00{k}" for p, k in pairs]
    groups = scoped_groups(pa.array(keys, pa.string()), n, spans)
    assert len(groups) == len(keys)
    for (partition, _), key, group in zip(pairs, keys, groups.tolist(), strict=True):
        assert 0 <= group < n
        if partition in spans:  # the span's groups, by hand: first .. first + width - 1 mod n
            first, width = spans[partition][0] % n, max(1, min(spans[partition][1], n))
            assert group in {(first + i) % n for i in range(width)}
            assert group == (first + stable_hash(key) % width) % n
        else:  # one home group per partition: the hash of its path
            assert group == stable_hash(partition) % n
    # the same keys route alike one at a time (no dependence on the batch)
    alone = [int(scoped_groups(pa.array([k], pa.string()), n, spans)[0]) for k in keys]
    assert alone == groups.tolist()


@FAST
@given(st.lists(st.integers(0, 6), max_size=40))
def test_shared_hashes_marks_every_row_whose_hash_repeats(values: list[int]) -> None:
    hashes = np.array(values, dtype=np.uint64)
    marked = hashing.shared_hashes(hashes)
    expected = [values.count(v) > 1 for v in values]
    assert (marked is None) == (not any(expected))
    if marked is not None:
        assert marked.tolist() == expected


@pytest.mark.parametrize("repeats", [0, 1, 50])
def test_shared_hashes_of_many_rows_split_by_the_top_bit_mark_the_same_rows(repeats: int) -> None:
    """From ``_CHUNK`` rows the two halves (top bit clear, set) are searched apart: repeats
    planted in both halves, at the two extremes of the range, are all marked, and no other."""
    rng = np.random.default_rng(repeats)
    hashes = rng.integers(0, np.iinfo(np.uint64).max, hashing._CHUNK + 1000, dtype=np.uint64)
    hashes = np.unique(hashes)  # no accidental repeat
    rng.shuffle(hashes)
    extremes = np.array([0, 2**63 - 1, 2**63, 2**64 - 1], dtype=np.uint64)
    hashes[:4] = extremes
    planted = rng.choice(np.arange(4, len(hashes)), repeats, replace=False)
    hashes = np.concatenate([hashes, hashes[planted], extremes[: 4 if repeats else 0]])
    values, counts = np.unique(hashes, return_counts=True)
    expected = np.isin(hashes, values[counts > 1])
    marked = hashing.shared_hashes(hashes)
    assert (marked is None) == (not expected.any())
    if marked is not None:
        assert marked.tolist() == expected.tolist()


@FAST
@given(st.lists(st.text(max_size=6), max_size=30), st.integers(1, 9))
def test_file_groups_from_given_hashes_equal_those_from_the_keys(keys: list[str], n: int) -> None:
    array = pa.array(keys, pa.string())
    given_hashes = hashing.file_groups_of(array, n, hashing.stable_hashes(array))
    assert given_hashes.tolist() == hashing.file_groups_of(array, n).tolist()


def test_hashes_of_another_length_than_the_keys_are_refused() -> None:
    array = pa.array(["a", "b"], pa.string())
    with pytest.raises(MetadataValueError, match="1 hashes given for 2 keys"):
        hashing.file_groups_of(array, 4, hashing.stable_hashes(pa.array(["a"])))


@FAST
@given(st.integers(1, 40), st.integers(0, 6), st.binary(min_size=0, max_size=6), st.data())
def test_keys_sharing_a_prefix_hash_as_each_alone(
    block: int, tail: int, prefix: bytes, data: st.DataObject
) -> None:
    """Keys of one width whose blocks share leading bytes (``key-000...``, every key alike,
    a prefix that changes from one block to the next) hash as :func:`stable_hash` hashes
    each key: the shared bytes are hashed once per block, the rest per key."""
    alphabet = st.sampled_from("ab\u00e9")  # one or two bytes each: equal bytes, not chars
    tails = data.draw(st.lists(st.text(alphabet, min_size=tail, max_size=tail), max_size=90))
    text = prefix.hex()
    keys = [text + t for t in tails]
    keys = [k for k in keys if len(k.encode()) == len(keys[0].encode())] if keys else keys
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hashing, "_BLOCK", block)
        array = pa.array(["pad", *keys], pa.string()).slice(1)
        assert stable_hashes(array).tolist() == [stable_hash(k) for k in keys]
