"""Filters of an in-process read (``WriteClient.read_arrow(filters=...)``), in pyarrow's own
form: a list of ``(column, op, value)`` tuples that must all hold, or a list of such lists of
which one must hold (disjunctive normal form); ops ``=`` ``==`` ``!=`` ``<`` ``<=`` ``>``
``>=`` ``in`` ``not in`` (``pyarrow.parquet.filters_to_expression``).

What a filtered read returns is exactly the rows of the unfiltered read for which pyarrow's
expression of the filters is true: the expression runs on every row read, with pyarrow's
semantics (a comparison with a null is not true; ``in`` with ``None`` among its values
matches nulls; ``not in`` matches them too; NaN equals nothing). Which files are read is
pruned first, as ``read(where=)`` prunes (``writers.read.plan.keep_matching``: the record
index for key equality, secondary indexes, then ``column_stats``), by the conditions the
tuples state; a pruning keeps every file that may hold a row any condition's comparison
makes true, under Spark's comparisons and pyarrow's alike (``index.column_stats`` keeps a
file whenever the two could differ: NaN, a literal of another type), so it changes how much
is read, never what is returned. ``not in`` and a value list holding ``None`` prune nothing.
A filter pyarrow cannot apply to the read schema (an unknown column, an operator it does not
know, a value it cannot compare with the column) is refused before anything is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakebraid.index.sql_filter import Condition
from lakebraid.writers.errors import InputError
from lakebraid.writers.read.units import Keep

Pair = tuple[str, str]
OPS = {"=": "=", "==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "in": "in"}


def parse_filters(
    filters: object, schema: pa.Schema, table: str
) -> tuple[list[list[Condition]], pa.compute.Expression]:
    """The conjunctions of ``filters`` as pruning conditions, and their pyarrow expression,
    checked against the read ``schema``; :class:`InputError` naming the problem otherwise."""
    conjunctions = _conjunctions(filters, table)
    unknown = sorted({t[0] for c in conjunctions for t in c} - set(schema.names))
    if unknown:
        raise InputError(
            f"filters name {unknown}, which are no columns of the table at this read point "
            f"(columns: {', '.join(schema.names)}); nothing was read",
            table=table,
        )
    try:
        expression = pq.filters_to_expression(conjunctions)
        schema.empty_table().filter(expression)  # the columns, operators and value types
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise InputError(
            f"filters {filters!r} cannot be applied to the table's columns "
            f"({type(exc).__name__}: {exc}); nothing was read",
            table=table,
        ) from None
    return [_conditions(terms) for terms in conjunctions], expression


def _conjunctions(filters: object, table: str) -> list[list[tuple[Any, ...]]]:
    """``filters`` as a list of lists of 3-tuples (a flat list is one conjunction)."""
    if not isinstance(filters, list | tuple) or not filters:
        raise InputError(
            f"filters must be a non-empty list of (column, op, value) tuples, or a list of "
            f"such lists; got {filters!r}",
            table=table,
        )
    flat = all(_is_term(f) for f in filters)
    groups = [list(filters)] if flat else list(filters)
    for group in groups:
        if not isinstance(group, list | tuple) or not group or not all(map(_is_term, group)):
            raise InputError(
                f"filters: {group!r} is not a non-empty list of (column, op, value) tuples "
                "(a list of tuples is one conjunction; a list of such lists, any of them)",
                table=table,
            )
    return [[tuple(term) for term in group] for group in groups]


def _is_term(term: object) -> bool:
    return isinstance(term, tuple | list) and len(term) == 3 and isinstance(term[0], str)


def _conditions(terms: Sequence[tuple[Any, ...]]) -> list[Condition]:
    """The pruning conditions of one conjunction: a term whose value (or a value of whose
    list) is None, or whose operator is ``not in``, states none."""
    out = []
    for column, op, value in terms:
        kind = OPS.get(op)
        values = tuple(value) if kind == "in" else (value,)
        if kind is None or any(v is None for v in values):
            continue
        out.append(Condition(column, kind, values))
    return out


def any_of(keeps: Sequence[Keep]) -> Keep:
    """A pruning that keeps a file any of ``keeps`` keeps (a disjunction), in their order."""

    def keep(pairs: list[Pair], reader: Any) -> list[Pair]:
        kept: set[Pair] = set()
        for one in keeps:
            kept.update(one(pairs, reader))
        return [pair for pair in pairs if pair in kept]

    return keep
