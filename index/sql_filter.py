"""SQL filters read as Spark reads them: the conditions that can prune files.

SQL text is parsed by sqlglot's Spark dialect, never by hand: string literals are unescaped as
Spark does (``'it\\'s'``, ``'\\u00e9'``; ``'it''s'`` is a concatenation to sqlglot and prunes
nothing). Top-level ``AND``-ed conjuncts (``NOT`` pushed inwards) are conditions when they are
``column OP literal`` either way round (``= == <=> != <> < <= > >=``), ``IN (literals)``,
``BETWEEN``, ``IS [NOT] NULL`` or ``LIKE 'prefix%'``, with literals typed as Spark types them
(``5`` int, ``5.5`` decimal, ``5e0`` double, ``5L``, ``DATE '...'``, exact ``CAST``\\ s); a
``CAST`` of a column to its own type (Spark's analyzer writes them) is the column. Anything
else gives no condition (the filter still runs on every row read, so skipping only saves work).
``index.column_stats`` compares the conditions with files' statistics.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import zoneinfo
from typing import Any

import msgspec
import sqlglot
from sqlglot import exp


class Condition(msgspec.Struct, frozen=True):
    column: str
    op: str  # one of = != < <= > >= in null notnull prefix
    values: tuple[Any, ...]
    time_zone: str | None = None  # reads timestamp text without an offset; None: no pruning


class SqlSettings(msgspec.Struct, frozen=True):
    """The Spark session settings that change what a SQL filter means."""

    time_zone: str | None = "UTC"  # spark.sql.session.timeZone (None: unknown)
    timestamp_ltz: bool = True  # spark.sql.timestampType is TIMESTAMP_LTZ
    escaped_string_literals: bool = False  # spark.sql.parser.escapedStringLiterals
    double_quoted_identifiers: bool = False  # spark.sql.ansi.doubleQuotedIdentifiers
    case_sensitive: bool = False  # spark.sql.caseSensitive
    column_types: dict[str, str] = {}  # column -> Spark type (simpleString): names, casts


UNKNOWN = object()  # not a literal this module understands
_OPS = {exp.EQ: "=", exp.NEQ: "!=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_NEGATED = {"=": "!=", "!=": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}
_T = exp.DataType.Type
_INT_BITS = {_T.TINYINT: 8, _T.SMALLINT: 16, _T.INT: 32, _T.BIGINT: 64}
_IN_ARGS = ("this", "expressions")  # others: a subquery, UNNEST: not a literal list
_INTEGER = re.compile(r"^[+-]?\d+$")
_DECIMAL = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)$")
_DOUBLE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_SPECIAL_DOUBLE = re.compile(r"^([+-]?inf(inity)?|nan)$", re.I)  # Spark casts these too
SURROGATE = re.compile("[\ud800-\udfff]")
# names Spark reads as functions when written without parentheses and no column holds them
NILADIC = frozenset(
    "current_catalog current_database current_date current_schema current_time "
    "current_timestamp current_timezone current_user localtimestamp session_user user".split()
)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIMESTAMP = re.compile(
    r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?)?$"
)


# ---- SQL text -> conditions ------------------------------------------------------------------
def parse_conditions(where: str, settings: SqlSettings | None = None) -> list[Condition]:
    """The conjuncts of ``where`` that can prune files (see the module docstring); never
    raises: text it cannot parse gives no condition."""
    settings = settings or SqlSettings()
    if settings.escaped_string_literals and "\\" in where:
        return []  # Spark keeps backslashes as typed; sqlglot would unescape them
    if settings.double_quoted_identifiers and '"' in where:
        return []  # "x" is a column to Spark, a string to sqlglot's Spark dialect
    try:
        tree = sqlglot.parse_one(where, read="spark")
    except Exception:  # any parser error (ParseError, TokenError, recursion): prune nothing
        return []
    if any(node.comments for node in tree.walk()):
        return []
    found: list[Condition] = []
    pending: list[tuple[exp.Expression, bool]] = [(tree, False)]  # (node, under a NOT)
    while pending:  # a loop, not recursion: a long AND chain is a deep tree
        node, negated = pending.pop()
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Not):
            pending.append((node.this, not negated))
        elif isinstance(node, exp.Or if negated else exp.And):  # NOT (a OR b) = NOT a AND NOT b
            pending += [(node.expression, negated), (node.this, negated)]
        else:
            try:
                found.extend(_conditions(node, negated, settings))
            except Exception:  # a conjunct not understood prunes nothing
                continue
    return found


def _conditions(node: exp.Expression, negated: bool, settings: SqlSettings) -> list[Condition]:
    zone = settings.time_zone

    def made(column: str | None, op: str, values: tuple[Any, ...]) -> list[Condition]:
        ok = column is not None and all(v is not UNKNOWN and v is not None for v in values)
        return [Condition(column, op, values, zone)] if ok else []  # type: ignore[arg-type]

    if type(node) in _OPS:
        op = _NEGATED[_OPS[type(node)]] if negated else _OPS[type(node)]
        left, right = node.this, node.expression
        if (column := _column(left, settings)) is not None:
            return made(column, op, (_literal(right, settings),))
        return made(_column(right, settings), _FLIPPED[op], (_literal(left, settings),))
    if isinstance(node, exp.NullSafeEQ):
        column, value = _column(node.this, settings), _literal(node.expression, settings)
        if value is None:
            return made(column, "notnull" if negated else "null", ())
        return [] if negated else made(column, "=", (value,))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return made(_column(node.this, settings), "notnull" if negated else "null", ())
    if negated:
        return []
    if isinstance(node, exp.In) and not any(v for k, v in node.args.items() if k not in _IN_ARGS):
        values = tuple(_literal(v, settings) for v in node.expressions)
        present = tuple(v for v in values if v is not None)
        return made(_column(node.this, settings), "in", present) if present else []
    if isinstance(node, exp.Between) and not node.args.get("symmetric"):
        column = _column(node.this, settings)
        low, high = _literal(node.args["low"], settings), _literal(node.args["high"], settings)
        return [*made(column, ">=", (low,)), *made(column, "<=", (high,))]
    if isinstance(node, exp.Like) and not node.args.get("negate"):
        pattern = _literal(node.expression, settings)
        if isinstance(pattern, str) and pattern.endswith("%"):
            prefix = pattern[:-1]
            if prefix and not any(c in prefix for c in "%_\\"):
                return made(_column(node.this, settings), "prefix", (prefix,))
    return []


def _column(node: exp.Expression, settings: SqlSettings) -> str | None:
    """The column ``node`` names: a plain (unqualified) column, or a cast of one to its own
    type; else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Column):
        name = _column(node.this, settings)
        own = settings.column_types.get(name or "", "")
        cast_to = node.to.sql(dialect="spark")
        same = own and own.replace(" ", "").lower() == cast_to.replace(" ", "").lower()
        return name if same else None
    if not (isinstance(node, exp.Column) and len(node.parts) == 1):
        return None
    name = node.parts[0].name  # Spark matches ASCII names regardless of case by default:
    same = [c for c in settings.column_types if c.isascii() and c.lower() == name.lower()]
    if not settings.case_sensitive and name.isascii() and len(same) == 1:
        return same[0]
    if name.lower() in NILADIC and name not in settings.column_types:
        return None  # a function to Spark, unless a column holds the name
    return name


def _literal(node: exp.Expression, settings: SqlSettings) -> Any:
    """The Python value of a literal as Spark types it (None for NULL), or ``UNKNOWN``."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Literal):
        return str(node.this) if node.is_string else _number(str(node.this))
    if isinstance(node, exp.Neg):
        value = _literal(node.this, settings)
        numeric = isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool)
        return -value if numeric else UNKNOWN
    if isinstance(node, exp.Cast) and not isinstance(node.this, exp.Column):
        return _cast(_literal(node.this, settings), node.to, settings)
    return UNKNOWN


def _number(text: str) -> Any:
    if _INTEGER.match(text):
        return int(text)
    if _DECIMAL.match(text):
        return decimal.Decimal(text)
    if _DOUBLE.match(text):
        return float(text)  # an exponent makes a DOUBLE literal
    return UNKNOWN


def _cast(value: Any, to: exp.DataType, settings: SqlSettings) -> Any:
    """``CAST(value AS to)`` where the cast is exact; anything else is ``UNKNOWN``."""
    kind = to.this
    if value is None or value is UNKNOWN or isinstance(value, bool):
        return UNKNOWN
    if kind in _INT_BITS:
        if isinstance(value, str) and _INTEGER.match(value):
            value = int(value)
        limit = 2 ** (_INT_BITS[kind] - 1)
        return value if isinstance(value, int) and -limit <= value < limit else UNKNOWN
    if kind == _T.DOUBLE:
        text = isinstance(value, str)
        return (
            float(value)
            if not text or _DOUBLE.match(value) or _SPECIAL_DOUBLE.match(value)
            else UNKNOWN
        )
    if kind == _T.DECIMAL:
        return _decimal(value, to)
    if not isinstance(value, str):
        return UNKNOWN
    if kind == _T.DATE:
        return dt.date.fromisoformat(value) if _DATE.match(value) else UNKNOWN
    if kind == _T.TIMESTAMPLTZ or (kind == _T.TIMESTAMPTZ and settings.timestamp_ltz):
        return _timestamp(value, settings.time_zone, aware=True)
    if kind == _T.TIMESTAMPNTZ or (kind == _T.TIMESTAMPTZ and not settings.timestamp_ltz):
        return _timestamp(value, None, aware=False)
    return UNKNOWN


def _decimal(value: Any, to: exp.DataType) -> Any:
    """A decimal literal that fits ``DECIMAL(p, s)`` exactly (no rounding, no overflow)."""
    precision, scale = [int(p.name) for p in to.expressions] or [10, 0]
    if not (isinstance(value, int) or _DECIMAL.match(str(value))):
        return UNKNOWN
    number = decimal.Decimal(str(value))
    fitted = number.quantize(decimal.Decimal(1).scaleb(-scale))
    return number if fitted == number and len(fitted.as_tuple().digits) <= precision else UNKNOWN


def _timestamp(text: str, zone_name: str | None, aware: bool) -> Any:
    """ISO text as Spark casts it to a timestamp: with the session time zone (``aware``, when
    the text names no offset) or as a wall-clock time (timestamp_ntz, no offset allowed)."""
    if not _TIMESTAMP.match(text):
        return UNKNOWN
    parsed = dt.datetime.fromisoformat(text)
    if not aware:
        return parsed if parsed.tzinfo is None else UNKNOWN
    if parsed.tzinfo is not None:
        return parsed
    zone = _zone(zone_name)
    if zone is None:
        return UNKNOWN
    local = parsed.replace(tzinfo=zone)
    if local.utcoffset() != parsed.replace(tzinfo=zone, fold=1).utcoffset():
        return UNKNOWN  # a wall-clock time a DST change repeats
    if local.astimezone(dt.UTC).astimezone(zone).replace(tzinfo=None) != parsed:
        return UNKNOWN  # a wall-clock time a DST change skips
    return local


def text_as(text: str, kind: str, zone: str | None) -> Any:
    """Text compared with a ``date`` column or a timestamp column (``ltz``: read in ``zone``
    when it names no offset; ``ntz``) as Spark casts it; else ``UNKNOWN``."""
    if kind == "date":
        return dt.date.fromisoformat(text) if _DATE.match(text) else UNKNOWN
    if kind in ("ltz", "ntz"):
        return _timestamp(text, zone, aware=kind == "ltz")
    return UNKNOWN


def _zone(name: str | None) -> dt.tzinfo | None:
    """A time zone Python and Java read alike: a region (``Europe/Paris``) or UTC (Java's
    three-letter ids such as PST, and offsets, prune nothing)."""
    if name is None or not (name == "UTC" or "/" in name):
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
