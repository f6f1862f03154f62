"""How many file groups the record index gets: estimated from a record count,
``ceil(count / records_per_group)`` clamped to ``[min_groups, max_groups]``
(:func:`estimate_file_groups`); :func:`estimate_groups` takes the three numbers from a table's
config keys (``metadata.record_index.records.per.group``, ``.min.groups``, ``.max.groups``).
"""

from __future__ import annotations

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
