"""The record index's group-count estimate (Hudi RFC-8): clamped ceiling division, and the
same numbers taken from a table's config keys."""

from __future__ import annotations

import pytest

from lakebraid.index.sizing import estimate_file_groups, estimate_groups, resize_target
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
