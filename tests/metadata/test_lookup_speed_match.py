"""Matching wanted keys against a base file's sorted keys (``metadata.keymatch.KeyMatcher``,
``metadata.basefile.lookup_base``): the merge by 8-byte words finds exactly the keys a set
would, ties in those words included, whatever the key form (packed, fixed, strings), the
read mode (seek or scan) and the number of row groups per read."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from fsspec.implementations.local import LocalFileSystem
from index_base_fixtures import write_index_base

from lakebraid.metadata import baselookup
from lakebraid.metadata.basefile import read_base
from lakebraid.metadata.baselookup import lookup_base
from lakebraid.metadata.keymatch import KeyMatcher, SortedRun

FS = LocalFileSystem()


def _sorted_bytes(rng: random.Random, n: int, width: int, shared: bytes) -> list[bytes]:
    """Up to ``n`` distinct keys of ``width`` bytes starting with ``shared``, many equal
    in their first 8 bytes after it (the tie case)."""
    heads = [bytes(rng.randrange(256) for _ in range(width)) for _ in range(max(1, n // 8))]
    keys = set()
    for _ in range(4 * n):  # fewer keys when the width leaves few
        if len(keys) == n:
            break
        head = rng.choice(heads)
        cut = rng.randrange(len(shared), width + 1)
        tail = bytes(rng.choice((0, 1, 255, rng.randrange(256))) for _ in range(width - cut))
        keys.add((shared + head[len(shared) :])[:cut] + tail)
    return sorted(keys)


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 8, 9, 12, 16, 20])
@pytest.mark.parametrize("shared", [b"", b"ab\x00"], ids=["no-prefix", "prefix"])
def test_merge_finds_exactly_the_wanted_keys(width: int, shared: bytes) -> None:
    rng = random.Random(width)
    shared = shared[: max(0, width - 1)]
    universe = _sorted_bytes(rng, 600, width, shared)
    file_keys = sorted(rng.sample(universe, len(universe) * 2 // 3))
    wanted = sorted(rng.sample(universe, len(universe) // 4))
    present = set(file_keys)
    view = np.array(file_keys, dtype=f"S{width}")
    lo = int(np.searchsorted(np.array(wanted, f"S{width}"), view[0], side="left"))
    hi = int(np.searchsorted(np.array(wanted, f"S{width}"), view[-1], side="right"))
    inside = np.array(wanted[lo:hi], dtype=f"S{width}")
    rows, which = SortedRun.of(view).find(inside)
    expected = [i for i, key in enumerate(wanted[lo:hi]) if key in present]
    assert which.tolist() == expected
    assert [file_keys[r] for r in rows] == [wanted[lo + i] for i in expected]


def test_matcher_with_string_keys_of_several_widths() -> None:
    wanted = pa.array(sorted(["a1", "a3", "b", "b22", "c0", "zz9"]))
    matcher = KeyMatcher(wanted)
    fixed = pa.array(["a0", "a1", "a2", "a3", "c0", "c1"])  # one width: the merge
    rows, which = matcher.match(fixed)
    assert rows.tolist() == [1, 3, 4] and which.tolist() == [0, 1, 4]
    ragged = pa.chunked_array([pa.array(["a1", "b", "b2", "b22", "zz9"])])  # a hash join
    rows, which = matcher.match(ragged)
    assert rows.tolist() == [0, 1, 3, 4] and which.tolist() == [0, 2, 3, 5]
    rows, which = matcher.match(pa.array(["abc", "abd"]))  # no wanted key has that width
    assert rows.tolist() == which.tolist() == []


def _uuid_keys(rng: random.Random, n: int) -> list[str]:
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]


KEY_FORMS = {
    "packed": _uuid_keys,
    "fixed": lambda rng, n: [f"k{rng.getrandbits(40):012x}".replace("a", "x") for _ in range(n)],
    "strings": lambda rng, n: [f"key-{rng.getrandbits(30)}" for _ in range(n)],
}


def _index_base(folder: Path, keys: list[str]) -> str:
    """A record-index base file of ``keys`` (sorted) in row groups of 16 keys."""
    table = pa.table(
        {
            "key": pa.array(keys),
            "partition": pa.array([f"p{i % 3}" for i in range(len(keys))]),
            "file_id_hi": pa.array(range(len(keys)), pa.int64()),
            "file_id_lo": pa.array([i % 7 for i in range(len(keys))], pa.int64()),
            "instant": pa.array([1] * len(keys), pa.int64()),
        }
    )
    return write_index_base(folder / "record_index-0000_1.parquet", table, row_group_rows=16)


@pytest.mark.parametrize("form", sorted(KEY_FORMS))
@pytest.mark.parametrize("fraction", [0.0, 1.0], ids=["scan", "seek"])
@pytest.mark.parametrize("batch", [40, 1 << 20], ids=["small-reads", "one-read"])
def test_lookup_base_matches_a_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str, fraction: float, batch: int
) -> None:
    monkeypatch.setattr(baselookup, "BATCH_ROWS", batch)
    rng = random.Random(form)
    keys = sorted(set(KEY_FORMS[form](rng, 500)))
    path = _index_base(tmp_path, keys)
    # keys of a few row groups only (seek), asked twice, plus absent ones of every form
    wanted = keys[30:45] + keys[300:302] + keys[31:33] + rng.sample(keys, 5)
    wanted += [k for f in KEY_FORMS.values() for k in f(rng, 4)] + ["", "zz"]
    found, mode = lookup_base(FS, path, pa.array(wanted), scan_fraction=fraction)
    assert mode == ("scan" if fraction == 0.0 else "seek")
    every = read_base(FS, path)
    expected = every.filter(pc.is_in(every.column("key"), value_set=pa.array(wanted)))
    assert found.equals(expected)


def test_spanned_row_groups_count_the_groups_a_key_range_meets(tmp_path: Path) -> None:
    """Against the row groups as written (16 sorted keys each): a range meets a group when
    the group's first key is at most its end and its last key at least its start."""
    rng = random.Random(7)
    keys = sorted({f"k{rng.getrandbits(24):08d}" for _ in range(200)})
    path = _index_base(tmp_path, keys)
    groups = [keys[i : i + 16] for i in range(0, len(keys), 16)]
    ends = [*keys, "", "k", "k9", "zz", keys[0][:-1], keys[-1] + "0"]
    for _ in range(300):
        low, high = sorted(rng.sample(ends, 2))
        want = sum(1 for g in groups if g[0] <= high and g[-1] >= low)
        assert baselookup.spanned_row_groups(FS, path, low, high) == want, (low, high)
