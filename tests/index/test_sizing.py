"""The record index's group-count estimate (Hudi RFC-8): clamped ceiling division, and the
same numbers taken from a table's config keys."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lakebraid.index.sizing import (
    estimate_file_groups,
    estimate_groups,
    partition_spans,
    resize_target,
)
from lakebraid.timeline import config as cfg


def test_estimate_file_groups_clamps() -> None:
    assert estimate_file_groups(0) == 1
    assert estimate_file_groups(1) == 1
    assert estimate_file_groups(1_000_000) == 1
    assert estimate_file_groups(1_000_001) == 2
    assert estimate_file_groups(10**12) == 10_000
    assert estimate_file_groups(95, records_per_group=10, min_groups=2, max_groups=8) == 8
    assert estimate_file_groups(5, records_per_group=10, min_groups=2, max_groups=8) == 2
    assert estimate_file_groups(35, records_per_group=10, min_groups=2, max_groups=8) == 4
    assert estimate_file_groups(10**30 + 1, records_per_group=10**29, max_groups=100) == 11
    for bad in [
        dict(record_count=-1),
        dict(record_count=1, records_per_group=0),
        dict(record_count=1, min_groups=5, max_groups=4),
    ]:
        with pytest.raises(ValueError):
            estimate_file_groups(**bad)  # type: ignore[arg-type]


def test_estimate_groups_reads_the_config_keys() -> None:
    assert estimate_groups(cfg.Options({}), 1_000_001) == 2
    options = cfg.Options(
        {
            "metadata.record_index.records.per.group": "10",
            "metadata.record_index.min.groups": "2",
            "metadata.record_index.max.groups": "8",
        }
    )
    assert estimate_groups(options, 35) == 4
    assert estimate_groups(options, 95) == 8
    assert estimate_groups(options, 5) == 2


def test_resize_target_grows_only_past_the_factor() -> None:
    keys = {"metadata.record_index.records.per.group": 100}
    options = cfg.Options(keys)
    assert resize_target(options, 200, 1) is None  # at the factor (2.0): not past it
    assert resize_target(options, 201, 1) == 3  # past it: the estimate, ceil(201 / 100)
    assert resize_target(options, 1_000, 4) == 10
    assert resize_target(options, 50, 4) is None  # never shrinks
    assert resize_target(options, 0, 0) is None
    tight = cfg.Options({**keys, "metadata.record_index.max.groups": 4})
    assert resize_target(tight, 5_000, 4) is None  # the estimate is no larger
    assert resize_target(tight, 5_000, 2) == 4
    off = cfg.Options({**keys, "metadata.record_index.auto.resize": False})
    assert resize_target(off, 10_000, 1) is None
    eager = cfg.Options({**keys, "metadata.record_index.resize.factor": 1.0})
    assert resize_target(eager, 101, 1) == 2
    with pytest.raises(cfg.ConfigError, match=r"at least 1\.0"):
        cfg.Options({"metadata.record_index.resize.factor": 0.5})


@given(
    st.dictionaries(st.text(min_size=1, max_size=4), st.integers(0, 5000), max_size=12),
    st.integers(1, 16),
)
@example(counts={"0": 24, "5": 24, "4": 25, "3": 76, "2": 85, "1": 32, "000": 33, "00": 28}, n=15)
def test_partition_spans_give_large_partitions_their_share(counts, n) -> None:
    spans = partition_spans(counts, n)
    total = sum(counts.values())
    share = max(1, -(-total // n))
    for partition, entries in counts.items():
        width = min(n, -(-entries // share))
        if partition in spans:
            first, got = spans[partition]
            assert 0 <= first < n and got == width >= 2
        else:  # fits one group's share: kept in its home group
            assert width < 2
    widths = [w for _, w in spans.values()]
    # Each span rounds its share up by less than one group, and the shares sum to at most n:
    # the spans go once around the ring plus less than one group per span.
    assert sum(widths) < n + len(widths) or not widths
    assert sum(widths) <= 2 * n


def test_resize_target_for_a_scoped_index_follows_the_fullest_group() -> None:
    options = cfg.Options({"metadata.record_index.records.per.group": "100"})
    assert resize_target(options, entries=300, groups=4, largest=150) is None  # under 2 x 100
    assert resize_target(options, entries=300, groups=4, largest=250) == 4  # re-spread, same n
    assert resize_target(options, entries=900, groups=4, largest=250) == 9
