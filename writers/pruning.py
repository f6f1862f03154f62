"""Data skipping: which files can hold rows matching a filter, from ``column_stats``.

A Spark Column filter is read from the prefix form Spark prints for it
(``and(>(amount, 10), =(day, '2024-01-02'))``) into the same conditions. A filter given as SQL
text is split into its top-level ``AND``-ed conjuncts; each conjunct of
the form ``column OP literal`` (``=, ==, !=, <>, <, <=, >, >=``; literals: quoted strings,
numbers, true/false) or ``column IN (literal, ...)`` prunes files whose [min, max] cannot hold
a match. Anything else (OR at the top level, functions, column-to-column comparisons) prunes
nothing: the filter itself still runs on the rows, so skipping only ever saves work.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from metadata.records import ColumnStatsRecord

_COMPARE = re.compile(
    r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s*(==|=|!=|<>|<=|>=|<|>)\s*(.+?)\s*$", re.S
)
_IN = re.compile(r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s+in\s*\((.*)\)\s*$", re.S | re.I)
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+)$")


class Condition(msgspec.Struct, frozen=True):
    column: str
    op: str  # one of = != < <= > >= in
    values: tuple[Any, ...]


def split_top_level(text: str, word: str) -> list[str]:
    """Split on ``word`` (case-insensitive, as a whole word) outside quotes and parentheses."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    lower, size = text.lower(), len(word)
    while i < len(text):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif (
            depth == 0
            and lower.startswith(word, i)
            and (i == 0 or not lower[i - 1].isalnum())
            and (i + size == len(text) or not lower[i + size].isalnum())
        ):
            parts.append(text[start:i])
            start = i + size
            i += size
            continue
        i += 1
    parts.append(text[start:])
    return parts


def literal(text: str) -> tuple[bool, Any]:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return True, text[1:-1]
    if _NUMBER.match(text):
        return True, float(text) if any(c in text for c in ".eE") else int(text)
    if text.lower() in ("true", "false"):
        return True, text.lower() == "true"
    return False, None


def parse_conditions(where: str) -> list[Condition]:
    """The conjuncts of ``where`` that can prune files (see the module docstring)."""
    if len(split_top_level(where, "or")) > 1:
        return []
    found = []
    for part in split_top_level(where, "and"):
        if match := _IN.match(part):
            values = [literal(v) for v in split_top_level(match[2], ",")]
            if values and all(ok for ok, _ in values):
                found.append(Condition(match[1], "in", tuple(v for _, v in values)))
        elif match := _COMPARE.match(part):
            ok, value = literal(match[3])
            if ok:
                op = {"==": "=", "<>": "!="}.get(match[2], match[2])
                found.append(Condition(match[1], op, (value,)))
    return found


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DATE_LIKE = re.compile(r"^\d{4}-\d{2}-\d{2}([ T][0-9:.]+)?$")


def _call_tree(text: str) -> Any:
    """Parse the prefix form Spark prints for a Column (``and(>(a, 1), =(b, 'x'))``) into
    nested ``(name, [args])`` tuples; atoms stay strings (quoted ones keep their quotes)."""
    pos = 0

    def parse() -> Any:
        nonlocal pos
        while pos < len(text) and text[pos] == " ":
            pos += 1
        if pos < len(text) and text[pos] == "'":
            end = pos + 1
            while end < len(text) and text[end] != "'":
                end += 1
            atom, pos = text[pos : end + 1], end + 1
            return atom
        start = pos
        while pos < len(text) and text[pos] not in "(),":
            pos += 1
        name = text[start:pos].strip()
        if pos < len(text) and text[pos] == "(":
            pos += 1
            args = []
            while pos < len(text) and text[pos] != ")":
                args.append(parse())
                if pos < len(text) and text[pos] == ",":
                    pos += 1
                elif pos >= len(text) or text[pos] != ")":
                    raise ValueError(f"unexpected text at {pos}")  # e.g. a quote inside a value
            pos += 1
            return (name, args)
        return name

    tree = parse()
    if pos != len(text):
        raise ValueError(f"unparsed text at {pos}")
    return tree


def _atom_literal(atom: Any) -> tuple[bool, Any]:
    if not isinstance(atom, str):
        return False, None
    if _DATE_LIKE.match(atom):
        return True, atom
    return literal(atom)


def column_conditions(text: str) -> list[Condition]:
    """The prunable conjuncts of a Spark Column, from its printed form (see
    :func:`_call_tree`); anything not understood prunes nothing."""
    inner = text.removeprefix("Column<'").removesuffix("'>")
    if inner.count("'") % 2:
        return []
    try:
        tree = _call_tree(inner)
    except ValueError:
        return []
    found: list[Condition] = []

    def walk(node: Any) -> None:
        if not isinstance(node, tuple):
            return
        name, args = node
        if name == "and":
            for arg in args:
                walk(arg)
        elif name == "in" and args and isinstance(args[0], str) and _IDENT.match(args[0]):
            values = [_atom_literal(a) for a in args[1:]]
            if values and all(ok for ok, _ in values):
                found.append(Condition(args[0], "in", tuple(v for _, v in values)))
        elif name in _FLIP and len(args) == 2:
            left, right = args
            if isinstance(left, str) and _IDENT.match(left) and _atom_literal(right)[0]:
                found.append(Condition(left, name, (_atom_literal(right)[1],)))
            elif isinstance(right, str) and _IDENT.match(right) and _atom_literal(left)[0]:
                found.append(Condition(right, _FLIP[name], (_atom_literal(left)[1],)))

    walk(tree)
    return found


def _coerce(value: Any, like: Any) -> Any:
    """Bring a literal to the type of a statistic (a date column compared with '2024-01-02')."""
    if isinstance(like, dt.datetime) and isinstance(value, str):
        parsed = dt.datetime.fromisoformat(value)
        if like.tzinfo is not None and parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return parsed
    if isinstance(like, dt.date) and isinstance(value, str):
        return dt.date.fromisoformat(value)
    return value


def may_match(stat: ColumnStatsRecord, cond: Condition) -> bool:
    """False only when the file's statistics prove no row can satisfy ``cond``."""
    lo, hi = stat.min_value, stat.max_value
    if stat.value_count == 0:
        return False  # only nulls: no comparison with a literal is true
    if lo is None or hi is None:
        return True
    if isinstance(lo, float) or isinstance(hi, float):
        # statistics leave NaN out, and Spark sorts NaN above every number (NaN = NaN too)
        if cond.op in (">", ">=", "!=") or any(_is_nan(v) for v in cond.values):
            return True
    try:
        values = [_coerce(v, lo) for v in cond.values]
        if cond.op in ("=", "in"):
            return any(lo <= v <= hi for v in values)
        value = values[0]
        if cond.op == "!=":
            return not (lo == hi == value)
        if cond.op == "<":
            return lo < value
        if cond.op == "<=":
            return lo <= value
        if cond.op == ">":
            return hi > value
        return hi >= value
    except (TypeError, ValueError):
        return True  # incomparable types: keep the file


def _is_nan(value: Any) -> bool:
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def prune(
    files: Iterable[tuple[str, str]], stats: Iterable[ColumnStatsRecord], where: Any
) -> list[tuple[str, str]]:
    """The (partition, file) pairs that may hold rows matching ``where`` (SQL text or a
    Spark Column)."""
    conditions = (
        parse_conditions(where) if isinstance(where, str) else column_conditions(str(where))
    )
    if not conditions:
        return list(files)
    by_file: dict[tuple[str, str, str], ColumnStatsRecord] = {
        (s.partition, s.file, s.column): s for s in stats
    }
    kept = []
    for partition, name in files:
        if all(
            (stat := by_file.get((partition, name, c.column))) is None or may_match(stat, c)
            for c in conditions
        ):
            kept.append((partition, name))
    return kept
