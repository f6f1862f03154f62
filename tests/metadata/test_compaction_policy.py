"""The inline metadata compaction rule (``metadata.compaction_policy``): a scenario table,
and the property that makes it worth having: a group's base is rewritten in proportion to
what the commits wrote, not once every few commits whatever its size."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.compaction_policy import Entries, LogPolicy
from lakebraid.metadata.slices import FileSlice
from lakebraid.timeline import config as cfg

POLICY = LogPolicy(max_log_files=8, max_log_bytes=1000, log_ratio=0.5, hard_log_files=32)


def piece(sizes: list[int]) -> FileSlice:
    names = tuple(f"g_{i:017d}.log" for i in range(len(sizes)))
    return FileSlice(
        "g", "g_00000000000000000.parquet", "0" * 17, names, names, frozenset(),
        sum(sizes), tuple(sizes),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("logs", "base", "due"),
    [
        ([], 0, False),  # no logs: nothing to fold
        ([10] * 7, 0, False),  # no base, under both limits
        ([10] * 8, 0, True),  # no base, 8 files
        ([1000], 0, True),  # no base, the byte limit
        ([10] * 8, 100, True),  # 80 bytes of logs >= half of a 100-byte base
        ([10] * 8, 1000, False),  # 80 < 500: the base is too big to rewrite yet
        ([100] * 8, 1000, True),  # 800 >= 500
        ([2000], 10_000, False),  # the byte limit, but 2000 < 5000
        ([10] * 32, 10**9, True),  # the hard limit, whatever the base
    ],
)
def test_scenarios(logs: list[int], base: int, due: bool) -> None:
    assert POLICY.due(piece(logs), base) is due


SMALL = LogPolicy(8, max_log_bytes=1000, log_ratio=0.5, hard_log_files=32, small_base_bytes=5000)


@pytest.mark.parametrize(
    ("logs", "base", "due"),
    [
        ([10] * 8, 4999, True),  # a small base: the count limit alone
        ([10] * 7, 4999, False),  # ... still reached first
        ([1000], 4999, True),  # ... or the byte limit alone
        ([10] * 8, 5000, False),  # not small: 80 < 2500, it waits for the ratio
        ([300] * 8, 5000, False),  # 2400 bytes: past the byte limit, short of the ratio
        ([400] * 8, 5000, True),  # 3200 >= 2500
    ],
)
def test_a_small_base_does_not_wait_for_the_ratio(logs: list[int], base: int, due: bool) -> None:
    assert SMALL.due(piece(logs), base) is due


def test_inline_off_is_never_due() -> None:
    off = LogPolicy(max_log_files=0, max_log_bytes=1, log_ratio=0.0, hard_log_files=1)
    assert not off.inline and not off.due(piece([10] * 40), 0)


def test_the_policy_comes_from_the_config() -> None:
    options = cfg.Options(
        {"metadata.compact.log.ratio": "0.25", "metadata.compact.hard.log.files": "5"}
    )
    policy = LogPolicy.of(options)
    assert (policy.max_log_files, policy.log_ratio, policy.hard_log_files) == (8, 0.25, 5)
    assert (policy.small_base_bytes, policy.small_base_entries) == (1024 * 1024, 100_000)
    with pytest.raises(Exception, match=r"metadata\.compact\.log\.ratio"):
        cfg.Options({"metadata.compact.log.ratio": "-1"})


@settings(max_examples=50, deadline=None)
@given(st.integers(100, 5000), st.integers(200, 2000))
def test_rewrites_grow_with_the_writes_not_the_table(write: int, commits: int) -> None:
    """Commits each appending a log of ``write`` bytes to a group whose base starts at 100 KB
    and grows by what is folded: the bytes rewritten stay under (1 + 1/ratio) times the bytes
    written plus the start (with 8 logs per fold, every base would be rewritten at least
    commits/32 times: with the hard limit alone, ~commits/32 * base)."""
    policy = LogPolicy(max_log_files=8, max_log_bytes=10**9, log_ratio=0.5, hard_log_files=10**6)
    base, logs, rewritten = 100_000, [], 0
    for _ in range(commits):
        logs.append(write)
        if policy.due(piece(logs), base):
            base += sum(logs)
            rewritten += base
            logs = []
    written = write * commits
    assert rewritten <= (1 + 1 / policy.log_ratio) * (written + 100_000)


COUNTED = LogPolicy(
    8, max_log_bytes=10**9, log_ratio=0.5, hard_log_files=32,
    small_base_bytes=5000, small_base_entries=1000,
)  # fmt: skip


@pytest.mark.parametrize(
    ("logs", "base", "entries", "due"),
    [
        # a base small in bytes but not in entries (keys that compress well) waits for the
        # ratio of entries, whatever the bytes say
        ([1000] * 8, 4000, Entries(base=60_000, logs=8_000), False),
        ([1000] * 8, 4000, Entries(base=60_000, logs=30_000), True),
        # small in both: the count limit alone
        ([1] * 8, 4000, Entries(base=999, logs=8), True),
        # large in bytes, few entries in the logs: waits although their bytes pass the ratio
        ([10_000] * 8, 100_000, Entries(base=50_000, logs=24_999), False),
        ([1] * 8, 100_000, Entries(base=50_000, logs=25_000), True),
        # the hard limit and a missing base need no counts
        ([1] * 32, 10**9, None, True),
        ([1] * 8, 0, None, True),
    ],
)
def test_entries_decide_the_ratio_and_the_small_base(
    logs: list[int], base: int, entries: Entries | None, due: bool
) -> None:
    asked: list[bool] = []

    def counts() -> Entries:
        asked.append(True)
        assert entries is not None, "counted where no count was needed"
        return entries

    assert COUNTED.due(piece(logs), base, counts) is due


def test_counts_are_not_asked_for_a_group_under_the_limits() -> None:
    def counts() -> Entries:
        raise AssertionError("counted a group that is not a candidate")

    assert not COUNTED.due(piece([1] * 7), 10**6, counts)
