"""Integer statistics of many files tested against one condition at once: the vector form of
``index.column_stats.may_match`` where every file's [min, max] of the column and every literal
are integers of 64 bits (ids, epochs, counters: the usual pruning column). It gives exactly
``may_match``'s answer for each file (property-tested against it) in numpy, instead of a
Python call per file (a filtered read of a table of 100,000 files asked 100,000 of them).
None where it does not apply (another op, a literal or a statistic of another type): the
caller then asks ``may_match`` per file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lakebraid.metadata.records import ColumnStatsRecord

INT_OPS = frozenset({"=", "in", "!=", "<", "<=", ">", ">="})
_LIMIT = 1 << 63


def _int64(value: Any) -> bool:
    return type(value) is int and -_LIMIT <= value < _LIMIT  # not bool: another kind


def int_keeps(
    stats: Sequence[ColumnStatsRecord | None], op: str, values: Sequence[Any]
) -> np.ndarray | None:
    """Per file, whether its statistics (None: none recorded, kept) leave room for a row
    with ``column op values``; None when a literal or a statistic is not a 64-bit integer."""
    if op not in INT_OPS or not values or not all(_int64(v) for v in values):
        return None
    n = len(stats)
    lo, hi = np.zeros(n, np.int64), np.zeros(n, np.int64)
    kept = np.ones(n, bool)  # files without statistics, or without a bound
    known = np.zeros(n, bool)
    for i, stat in enumerate(stats):
        if stat is None:
            continue
        if stat.value_count == 0:  # only nulls: no comparison with a literal is true
            kept[i] = False
            continue
        low, high = stat.min_value, stat.max_value
        if low is None or high is None:
            continue
        if not (_int64(low) and _int64(high)):
            return None
        lo[i], hi[i], known[i] = low, high, True
    hit = _holds(op, lo, hi, np.array(values, np.int64))
    return np.where(known, hit, kept)


def _holds(op: str, lo: np.ndarray, hi: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``may_match``'s comparison of [lo, hi] with the literals, per file."""
    if op in ("=", "in"):  # a literal within [lo, hi]: the least one not below lo
        ordered = np.sort(values)
        at = np.searchsorted(ordered, lo, side="left")
        inside = at < len(ordered)
        inside[inside] = ordered[at[inside]] <= hi[inside]
        return inside
    v = values[0]
    if op == "!=":
        return ~((lo == hi) & (hi == v))
    return {"<": lo < v, "<=": lo <= v, ">": hi > v, ">=": hi >= v}[op]
