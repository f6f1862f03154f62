"""The data table's file groups as the metadata table lists them: the current file of each
group, and the groups small enough for inserts to fill first (from ``column_stats`` row
counts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lakebraid.metadata.records import ColumnStatsRecord
from lakebraid.timeline.layout import parse_data_file_name


def current_files(listing: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, str]]:
    """partition -> file id -> newest file name, from a ``files`` partition listing."""
    current: dict[str, dict[str, str]] = {}
    for partition, files in listing.items():
        groups = current.setdefault(partition, {})
        for name in files:
            parsed = parse_data_file_name(name)
            known = groups.get(parsed.file_id)
            if known is None or parse_data_file_name(known).instant < parsed.instant:
                groups[parsed.file_id] = name
    return current


def small_groups(
    stats: Sequence[ColumnStatsRecord], listing: Mapping[str, Mapping[str, str]], target: int
) -> dict[str, dict[str, int]]:
    """partition -> file id -> rows, for the current file groups under ``target`` rows (the
    small-file limit)."""
    current = {(p, name): fid for p, groups in listing.items() for fid, name in groups.items()}
    small: dict[str, dict[str, int]] = {}
    for s in stats:
        fid = current.get((s.partition, s.file))
        if fid is not None and s.value_count < target:
            small.setdefault(s.partition, {})[fid] = s.value_count
    return small
