"""How many file groups the record index gets: estimated from a record count,
``ceil(count / records_per_group)`` clamped to ``[min_groups, max_groups]``
(:func:`estimate_file_groups`); :func:`estimate_groups` takes the three numbers from a table's
config keys (``metadata.record_index.records.per.group``, ``.min.groups``, ``.max.groups``).
:func:`resize_target` is the automatic resize's rule: grow to the estimate once entries per
group pass ``records.per.group`` times ``metadata.record_index.resize.factor``.
"""

from __future__ import annotations

from collections.abc import Mapping

from lakebraid.metadata import settings
from lakebraid.metadata.errors import MetadataValueError
from lakebraid.timeline import config as cfg

DEFAULT_RECORDS_PER_GROUP = 1_000_000
DEFAULT_MIN_GROUPS = 1
DEFAULT_MAX_GROUPS = 10_000


def estimate_file_groups(
    record_count: int,
    records_per_group: int = DEFAULT_RECORDS_PER_GROUP,
    min_groups: int = DEFAULT_MIN_GROUPS,
    max_groups: int = DEFAULT_MAX_GROUPS,
) -> int:
    """``ceil(record_count / records_per_group)`` clamped to ``[min_groups, max_groups]``."""
    if record_count < 0:
        raise MetadataValueError(f"record count must be >= 0, not {record_count}")
    if records_per_group < 1:
        raise MetadataValueError(f"records per group must be >= 1, not {records_per_group}")
    if not 1 <= min_groups <= max_groups:
        raise MetadataValueError(
            f"need 1 <= min_groups <= max_groups, not {min_groups}, {max_groups}"
        )
    return max(min_groups, min(max_groups, -(-record_count // records_per_group)))


def estimate_groups(options: cfg.Options, record_count: int) -> int:
    """:func:`estimate_file_groups` of ``record_count`` under a table's config keys."""
    return estimate_file_groups(
        record_count,
        options.get(settings.RECORDS_PER_GROUP),
        options.get(settings.MIN_GROUPS),
        options.get(settings.MAX_GROUPS),
    )


def resize_target(
    options: cfg.Options, entries: int, groups: int, largest: int | None = None
) -> int | None:
    """The group count the automatic resize moves to, or None: off, not past the growth
    factor, or the estimate is no larger (at the max.groups bound). ``largest``: the entries
    of the fullest group, for a partition-scoped index (whose groups fill unevenly, one
    partition at a time): once it passes the factor, a reindex to the larger of the estimate
    and ``groups`` spreads the large partitions again (``partition_spans``)."""
    if not options.get(settings.AUTO_RESIZE) or groups < 1:
        return None
    limit = options.get(settings.RECORDS_PER_GROUP) * options.get(settings.RESIZE_FACTOR)
    target = estimate_groups(options, entries)
    if largest is not None:
        return max(target, groups) if largest > limit else None
    if entries / groups <= limit:
        return None
    return target if target > groups else None


def partition_spans(counts: Mapping[str, int], n: int) -> dict[str, list[int]]:
    """The spans of a partition-scoped record index of ``n`` groups, from entries per data
    partition: a partition holding more than an even share (``ceil(total / n)``) gets
    ``ceil(entries / share)`` groups of its own (at most ``n``), laid out one after another,
    largest first (wrapping past ``n``); smaller partitions get none and keep their keys in
    their home group (``metadata.hashing.scoped_groups``)."""
    if n < 1:
        raise MetadataValueError(f"a record index has at least 1 file group, not {n}")
    total = sum(counts.values())
    share = max(1, -(-total // n))
    spans: dict[str, list[int]] = {}
    first = 0
    for partition, entries in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        width = min(n, -(-entries // share))
        if width < 2:
            break
        spans[partition] = [first % n, width]
        first += width
    return spans
