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
tuples state, when every value is of its column's own type (an ``int`` for an integer
column, a ``float`` for a floating one, a ``Decimal``, a ``str``, a ``date``, a ``datetime``
zoned as the column is) or None: pyarrow then compares the column with them as they are
(``index.column_stats`` also keeps a file wherever NaN could decide), so a pruning changes
how much is read, never what is returned. A literal of another type anywhere turns pruning
off for the read: pyarrow may cast the column to it and fail on some rows, so every row is
read and the read fails or returns as pyarrow's filter of every row would. ``not in`` and a
term with a ``None`` value prune nothing.
A filter pyarrow cannot apply to the read schema (an unknown column, an operator it does not
know, a value it cannot compare with the column) is refused before anything is read.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# Acero's plan types from the compiled module pyarrow.acero re-exports: importing
# pyarrow.acero itself brings pyarrow.dataset (0.18 s at every start of a process)
from pyarrow._acero import Declaration, FilterNodeOptions, TableSourceNodeOptions

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
    types = {f.name: f.type for f in schema}
    try:
        expression = pq.filters_to_expression(conjunctions)
        if not all(_plain(term, types[term[0]]) for c in conjunctions for term in c):
            _trial(expression, schema)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise _refused(filters, exc, table) from None
    if not all(_own(v, types[t[0]]) for c in conjunctions for t in c for v in _values(t)):
        return [[]], expression  # a literal of another type: every file read (module doc)
    return [_conditions(terms) for terms in conjunctions], expression


SINGLE_THREAD_ROWS = 500_000  # up to this many rows the filter runs on the calling thread


def apply(
    rows: pa.Table, expression: pa.compute.Expression, filters: object, table: str
) -> pa.Table:
    """``rows`` that ``expression`` (of ``filters``) keeps; a failure of pyarrow's as
    :class:`InputError`. The plan ``Table.filter`` runs (Acero's table source and filter),
    on the calling thread up to :data:`SINGLE_THREAD_ROWS` rows: handing a small table to
    Acero's threads costs more than it shares out (20,000 rows read from 1% of the files:
    0.09 ms on the calling thread against 0.19 on Acero's; 200,000: 0.44 against 0.67;
    2,000,000: 4.9 against 3.4)."""
    try:
        if rows.num_rows > SINGLE_THREAD_ROWS:
            return rows.filter(expression)
        plan = Declaration.from_sequence(
            [
                Declaration("table_source", TableSourceNodeOptions(rows)),
                Declaration("filter", FilterNodeOptions(expression)),
            ]
        )
        return plan.to_table(use_threads=False)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise _refused(filters, exc, table) from None


def _refused(filters: object, exc: Exception, table: str) -> InputError:
    return InputError(
        f"filters {filters!r} cannot be applied to the table's columns "
        f"({type(exc).__name__}: {exc}); nothing was returned",
        table=table,
    )


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


def _values(term: tuple[Any, ...]) -> tuple[Any, ...]:
    """A term's values: an ``in`` or ``not in`` list's items, else its one value."""
    return tuple(term[2]) if term[1] in ("in", "not in") else (term[2],)


def _conditions(terms: Sequence[tuple[Any, ...]]) -> list[Condition]:
    """The pruning conditions of one conjunction (its values all of their column's own
    type): a term with a ``None`` value (``in`` then matches nulls), or ``not in``, states
    none."""
    out = []
    for term in terms:
        kind, values = OPS.get(term[1]), _values(term)
        if kind is None or any(v is None for v in values):
            continue
        out.append(Condition(term[0], kind, values))
    return out


def _trial(expression: pa.compute.Expression, schema: pa.Schema) -> None:
    """Apply ``expression`` to a row of nulls of ``schema`` (an empty table runs no
    comparison, so refuses no type): pyarrow's error if it cannot apply it."""
    pa.table({f.name: pa.nulls(1, f.type) for f in schema}).filter(expression)


def _plain(term: tuple[Any, ...], kind: pa.DataType) -> bool:
    """Whether pyarrow surely applies ``term`` to a column of ``kind``: a comparison (no
    ``in``) with a value of the column's own type (:func:`_own`, not None) on an integer,
    floating, text, date or timestamp column. Such filters skip the trial on a row of nulls
    (an Acero plan: about 0.5 ms, a tenth of a read of 1% of the files)."""
    op, value = term[1], term[2]
    if op not in _COMPARISONS or value is None or not _own(value, kind):
        return False
    return any(test(kind) for test in _PLAIN_KINDS)


_COMPARISONS = frozenset({"=", "==", "!=", "<", "<=", ">", ">="})
_PLAIN_KINDS = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_date,
    pa.types.is_timestamp,
)


def _own(value: object, kind: pa.DataType) -> bool:
    """Whether ``value`` is None or of exactly the Python type pyarrow gives ``kind``'s
    values (a bool is no int, a datetime no date; a datetime has a zone when the column
    has one)."""
    if value is None:
        return True
    if pa.types.is_timestamp(kind):
        return type(value) is dt.datetime and (value.tzinfo is None) == (kind.tz is None)
    for test, own in _OWN:
        if test(kind):
            return type(value) is own
    return False


_OWN = (
    (pa.types.is_integer, int),
    (pa.types.is_floating, float),
    (pa.types.is_decimal, decimal.Decimal),
    (lambda k: pa.types.is_string(k) or pa.types.is_large_string(k), str),
    (lambda k: pa.types.is_binary(k) or pa.types.is_large_binary(k), bytes),
    (pa.types.is_boolean, bool),
    (pa.types.is_date, dt.date),
)


def any_of(keeps: Sequence[Keep]) -> Keep:
    """A pruning that keeps a file any of ``keeps`` keeps (a disjunction), in their order."""

    def keep(pairs: list[Pair], reader: Any) -> list[Pair]:
        kept: set[Pair] = set()
        for one in keeps:
            kept.update(one(pairs, reader))
        return [pair for pair in pairs if pair in kept]

    return keep
