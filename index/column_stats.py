"""Data skipping: which files can hold rows matching a filter's conditions
(``index.sql_filter``), from ``column_stats``.

:func:`may_match` compares a literal with a file's [min, max] only where Spark compares the two
types alike, else keeps the file: integer columns exactly with integer and decimal literals and
as doubles with doubles; decimal columns exactly with integer and decimal literals (Spark widens
both to one decimal type, never rounding either) and not with doubles (Spark compares the
column cast to double, which may differ from Python's rounding by an ulp); float columns as
doubles (integer literals up to 2**24); dates and timestamps also with ISO text (in the session
time zone when it names no offset; times a DST change skips or repeats prune nothing).
Statistics leave NaN out and Spark sorts NaN above every number (``NaN = NaN``): on float
columns ``>``, ``>=``, ``!=`` and NaN literals keep all.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from lakebraid.index.int_bounds import int_keeps
from lakebraid.index.sql_filter import (
    SURROGATE,
    UNKNOWN,
    Condition,
    SqlSettings,
    parse_conditions,
    text_as,
)
from lakebraid.metadata.records import ColumnStatsRecord


# ---- conditions against statistics -----------------------------------------------------------
def may_match(stat: ColumnStatsRecord, cond: Condition) -> bool:
    """False only when the file's statistics of ``cond.column`` prove no row satisfies it."""
    if cond.op == "null":
        return stat.null_count > 0
    if cond.op == "notnull":
        return stat.value_count > 0
    if stat.value_count == 0:
        return False  # only nulls: no comparison with a literal is true
    lo, hi = stat.min_value, stat.max_value
    if lo is None or hi is None:
        return True
    if cond.op == "prefix":
        prefix = cond.values[0]
        if not (isinstance(lo, str) and isinstance(hi, str) and isinstance(prefix, str)):
            return True
        # a string starting with prefix is >= prefix, and its first len(prefix) characters
        # (equal to prefix) are >= those of any smaller string
        return hi >= prefix and lo[: len(prefix)] <= prefix
    if isinstance(lo, float) and cond.op in (">", ">=", "!="):
        return True  # statistics leave NaN out, and NaN is above every number
    aligned = _aligned(lo, hi, cond.values, cond.time_zone)
    if aligned is None:
        return True  # types Spark would compare otherwise than Python: keep the file
    lo, hi, values = aligned
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return True
    return _holds(cond.op, lo, hi, values)


def _holds(op: str, lo: Any, hi: Any, values: Sequence[Any]) -> bool:
    if op in ("=", "in"):
        return any(lo <= v <= hi for v in values)
    v = values[0]
    found = {"!=": not lo == hi == v, "<": lo < v, "<=": lo <= v, ">": hi > v, ">=": hi >= v}
    return found.get(op, True)


_KINDS = (("bool", bool), ("int", int), ("float", float), ("str", str), ("date", dt.date))
_EXACT_KINDS = {t: kind for kind, t in _KINDS} | {decimal.Decimal: "decimal"}  # no subclass


def _kind(value: Any) -> str | None:
    exact = _EXACT_KINDS.get(type(value))
    if exact is not None:
        return exact
    if isinstance(value, dt.datetime):
        return "ntz" if value.tzinfo is None else "ltz"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    return next((kind for kind, types in _KINDS if isinstance(value, types)), None)


def _aligned(
    lo: Any, hi: Any, values: Sequence[Any], zone: str | None
) -> tuple[Any, Any, list[Any]] | None:
    """Statistics and literals brought to the type Spark compares them in, or None when
    unsure (see the module docstring)."""
    kind = _kind(lo)
    if kind is None or _kind(hi) != kind or not values:
        return None
    kinds = {_kind(v) for v in values}
    if kind == "int" and kinds <= {"int", "decimal"}:
        if _digits_over(values, 18):
            return None  # Spark may round the common decimal type of a long and this literal
        return lo, hi, list(values)
    if kind == "decimal":  # a double literal: Spark's cast of the column may differ by an ulp
        if not kinds <= {"int", "decimal"} or _digits_over(values, 38):
            return None  # (a longer decimal literal is more than Spark's decimals hold)
        return lo, hi, list(values)
    if kind in ("int", "float") and kinds <= {"int", "decimal", "float"}:
        if any(isinstance(v, int) and abs(v) > 2**24 for v in values) and kind == "float":
            return None  # a float32 column may compare an integer literal as a float32
        return float(lo), float(hi), [float(v) for v in values]
    converted = [_to_kind(v, kind, zone) for v in values]
    if any(v is UNKNOWN for v in converted):
        return None
    return lo, hi, converted


def _digits_over(values: Sequence[Any], digits: int) -> bool:
    """Whether a decimal literal of ``values`` has more than ``digits`` digits."""
    return any(isinstance(v, decimal.Decimal) and len(v.as_tuple().digits) > digits for v in values)


def _to_kind(value: Any, kind: str, zone: str | None) -> Any:
    """A literal as a value of the statistics' kind (Spark casts text to dates and
    timestamps), or ``UNKNOWN``."""
    if _kind(value) == kind:
        return UNKNOWN if kind == "str" and SURROGATE.search(value) else value
    return text_as(value, kind, zone) if isinstance(value, str) else UNKNOWN


def keep_files(
    files: Iterable[tuple[str, str]],
    stats: Iterable[ColumnStatsRecord],
    conditions: Sequence[Condition],
) -> list[tuple[str, str]]:
    """The (partition, file) pairs no condition rules out (a file without statistics for a
    column is kept)."""
    files = list(files)
    if not files:
        return []
    wanted = {c.column for c in conditions}
    by_file = {(s.partition, s.file, s.column): s for s in stats if s.column in wanted}
    keep = np.ones(len(files), dtype=bool)
    found_of = {column: [by_file.get((p, name, column)) for p, name in files] for column in wanted}
    for c in conditions:  # integer bounds in numpy (``index.int_bounds``), else one by one
        found = found_of[c.column]
        fast = int_keeps(found, c.op, c.values)
        keep &= (
            fast
            if fast is not None
            else np.array([s is None or may_match(s, c) for s in found], bool)
        )
    return [pair for pair, kept in zip(files, keep.tolist(), strict=True) if kept]


def prune(
    files: Iterable[tuple[str, str]],
    stats: Iterable[ColumnStatsRecord],
    where: Any,
    settings: SqlSettings | None = None,
) -> list[tuple[str, str]]:
    """The (partition, file) pairs that may hold rows matching ``where``, SQL text read with
    ``settings`` (a Spark Column must first be written as SQL: ``writers.read.plan.filter_sql``;
    anything but text prunes nothing)."""
    settings = settings or SqlSettings()
    conditions = parse_conditions(where, settings) if isinstance(where, str) else []
    if not conditions:
        return list(files)
    return keep_files(files, stats, conditions)
