"""The one typed registry of lakebraid's config keys: name, type, default and doc together.

Every package registers its keys here (this package is the bottom of the import graph, so all
of them can). Options given by users (``WriteClient.create(path, **options)``, Spark data
source options, the command line) are strings or Python values; :class:`Options` checks each
against its key, refuses unknown names with a suggestion, and hands back typed values.
``docs/configuration.md`` is generated from :data:`REGISTRY` (see :func:`render_markdown`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lakebraid.timeline.errors import ConfigError

T = TypeVar("T")


def _parse_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


_PARSERS: dict[type, Callable[[object], Any]] = {
    bool: _parse_bool,
    int: lambda raw: int(str(raw)) if not isinstance(raw, bool) else int("x"),
    float: lambda raw: float(str(raw)),
    str: str,
}


@dataclass(frozen=True)
class ConfigKey(Generic[T]):
    """One config key. ``check`` returns an error text for an out-of-range value, or None."""

    name: str
    type: type
    default: T
    doc: str
    check: Callable[[T], str | None] | None = None

    def parse(self, raw: object) -> T:
        try:
            value = _PARSERS[self.type](raw)
        except (TypeError, ValueError):
            raise ConfigError(
                f"config {self.name!r}: {raw!r} is not a valid {self.type.__name__} ({self.doc})"
            ) from None
        if self.check is not None and (problem := self.check(value)) is not None:
            raise ConfigError(f"config {self.name!r}={value!r}: {problem}")
        return value


REGISTRY: dict[str, ConfigKey[Any]] = {}


def register(
    name: str,
    type_: type[T],
    default: T,
    doc: str,
    check: Callable[[T], str | None] | None = None,
) -> ConfigKey[T]:
    if name in REGISTRY:
        raise ConfigError(f"config key {name!r} registered twice")
    key = ConfigKey(name, type_, default, doc, check)
    REGISTRY[name] = key
    return key


def positive(value: float) -> str | None:
    return None if value > 0 else "must be greater than 0"


def at_least(bound: int) -> Callable[[int], str | None]:
    return lambda value: None if value >= bound else f"must be at least {bound}"


class Options:
    """Validated, typed options: the registry's defaults overlaid with given values."""

    def __init__(self, given: Mapping[str, object] | None = None):
        values: dict[str, object] = {}
        for name, raw in (given or {}).items():
            key = REGISTRY.get(name)
            if key is None:
                close = difflib.get_close_matches(name, REGISTRY, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"unknown config key {name!r}{hint} (see docs/configuration.md)")
            values[name] = key.parse(raw)
        self._values = values

    def get(self, key: ConfigKey[T]) -> T:
        return self._values.get(key.name, key.default)  # type: ignore[return-value]

    def given(self) -> dict[str, object]:
        """Only the values set explicitly (what table.json stores)."""
        return dict(self._values)

    def with_overrides(self, more: Mapping[str, object]) -> Options:
        return Options({**self._values, **more})


def render_markdown(keys: Iterable[ConfigKey[Any]] | None = None) -> str:
    rows = sorted(keys if keys is not None else REGISTRY.values(), key=lambda k: k.name)
    lines = [
        "# Configuration",
        "",
        "Generated from `timeline/config.py`'s registry by `.venv/bin/python docs/generate.py`;",
        "a test fails when this file is stale.",
        "",
        "| key | type | default | description |",
        "|---|---|---|---|",
    ]
    for key in rows:
        doc = key.doc.replace("|", "\\|")
        lines.append(f"| `{key.name}` | {key.type.__name__} | `{key.default!r}` | {doc} |")
    return "\n".join(lines) + "\n"


# ---- keys of the timeline layer ---------------------------------------------------------

LOCK_TIMEOUT_S = register(
    "lock.timeout.seconds",
    float,
    120.0,
    "How long to wait for the table lock before failing with a retryable error.",
    positive,
)
LOCK_LEASE_MS = register(
    "lock.lease.ms",
    int,
    30_000,
    "Object stores: how long the table lock's lease lasts without renewal (the holder renews "
    "it every third of this); a holder silent this long is presumed dead and its lock broken.",
    at_least(1_000),
)
HEARTBEAT_INTERVAL_MS = register(
    "heartbeat.interval.ms",
    int,
    10_000,
    "How often a writer refreshes the heartbeat of its in-flight instant.",
    positive,
)
HEARTBEAT_EXPIRY_MS = register(
    "heartbeat.expiry.ms",
    int,
    60_000,
    "A pending instant whose heartbeat is older than this is dead and may be rolled back.",
    positive,
)
ARCHIVE_INLINE = register(
    "archive.inline",
    bool,
    True,
    "After a write's commit, archive the oldest instants when the active global timeline "
    "holds more than archive.max.instants (lakebraid archive PATH runs it by hand).",
)
ARCHIVE_MAX = register(
    "archive.max.instants",
    int,
    40,
    "Archival is due once the active global timeline holds more instants than this.",
    at_least(2),
)
ARCHIVE_MIN = register(
    "archive.min.instants",
    int,
    20,
    "Archival keeps this many of the newest global instants active (fewer than "
    "archive.max.instants).",
    at_least(1),
)
ARCHIVE_MERGE_FILES = register(
    "archive.merge.files",
    int,
    4,
    "Archive files of one level merged into one file of the next level.",
    at_least(2),
)
ARCHIVE_MERGE_MAX_BYTES = register(
    "archive.merge.max.bytes",
    int,
    128 << 20,
    "An archive merge takes as many files of one level as fit in this many bytes of instant "
    "bodies (uncompressed), at least two: bounds an archival's time however long the history "
    "(its memory holds one batch of rows whatever the size).",
    at_least(1),
)
