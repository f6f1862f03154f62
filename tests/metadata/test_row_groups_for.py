"""Which row groups of a base file a seek reads (``baselookup.row_groups_for``): never fewer
than those whose key bounds hold a wanted key (a group left out would hide its keys), at most
``FEW_GROUPS`` more-than-needed groups, and only groups that meet the wanted keys' range."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from index_base_fixtures import FS, write_index_base

from lakebraid.metadata.basefile import BaseInfo, bounds_ascend, open_base
from lakebraid.metadata.baselookup import FEW_GROUPS, row_groups_for

TEXT = st.text(alphabet="ab\u00e9\U0001f600z", max_size=4)


def _info(mins: list[str], maxs: list[str]) -> BaseInfo:
    low, high = tuple(mins), tuple(maxs)  # as a footer read gives them
    return BaseInfo(
        "f", 4, "record_index", "g", "1", (), 0, low, high, None, bounds_ascend(low, high)
    )


def _holding(mins: list[str], maxs: list[str], wanted: list[str]) -> set[int]:
    bounds = enumerate(zip(mins, maxs, strict=True))
    return {i for i, (a, b) in bounds if any(a <= w <= b for w in wanted)}


@settings(max_examples=300, deadline=None)
@given(st.sets(TEXT, min_size=1, max_size=60), st.lists(TEXT, max_size=12), st.integers(1, 7))
def test_a_sorted_file_reads_every_group_holding_a_wanted_key(
    stored: set[str], asked: list[str], size: int
) -> None:
    keys = sorted(stored)  # a base file's keys, in row groups of ``size``
    groups = [keys[i : i + size] for i in range(0, len(keys), size)]
    mins, maxs = [g[0] for g in groups], [g[-1] for g in groups]
    wanted = sorted(set(asked))
    chosen = row_groups_for(_info(mins, maxs), pa.array(wanted, pa.string()))
    exact = _holding(mins, maxs, wanted)
    assert chosen == sorted(chosen) and exact <= set(chosen)
    if len(chosen) > FEW_GROUPS:
        assert set(chosen) == exact
    if wanted:  # only groups that meet the wanted range
        meet = _holding(mins, maxs, [w for w in keys if wanted[0] <= w <= wanted[-1]])
        meet |= {i for i in range(len(groups)) if mins[i] <= wanted[-1] and maxs[i] >= wanted[0]}
        assert set(chosen) <= meet
    else:
        assert chosen == []


def test_a_group_without_statistics_is_never_ruled_out() -> None:
    """An old file's group without statistics spans everything ("" to U+10FFFF): its bounds
    do not ascend, so no group is ruled out by the wanted range alone."""
    mins, maxs = ["a", "", "m"], ["c", "\U0010ffff", "p"]
    for wanted in (["b"], ["x"], ["n", "o"], ["d", "e", "f", "g"]):
        chosen = row_groups_for(_info(mins, maxs), pa.array(wanted))
        assert _holding(mins, maxs, wanted) <= set(chosen), wanted
        assert 1 in chosen


def test_keys_past_every_group_read_nothing() -> None:
    mins, maxs = ["ev-0000", "ev-0100"], ["ev-0099", "ev-0199"]
    assert row_groups_for(_info(mins, maxs), pa.array(["ev-0200", "ev-0300"])) == []
    assert row_groups_for(_info(mins, maxs), pa.array(["a", "b"])) == []
    assert row_groups_for(_info(mins, maxs), pa.array(["ev-0150"])) == [1]


def test_a_written_base_files_footer_says_its_bounds_ascend(tmp_path: Path) -> None:
    keys = [f"k{i:03d}" for i in range(30)]
    rows = pa.table(
        {
            "key": keys,
            "partition": ["p"] * 30,
            "file_id_hi": pa.array(range(30), pa.int64()),
            "file_id_lo": pa.array([0] * 30, pa.int64()),
            "instant": pa.array([1] * 30, pa.int64()),
        }
    )
    path = write_index_base(tmp_path / "record_index-0000_1.parquet", rows, row_group_rows=4)
    info = open_base(FS, path).info
    assert len(info.row_group_min) == 8 and info.ascending
    assert row_groups_for(info, pa.array(["k010", "k011"])) == [2]
