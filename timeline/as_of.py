"""The one parser of read points: what every ``as_of`` (client reads, lookups, listings, the
Spark data source option, the CLI's ``--as-of``) may be, and where it must fall.

Accepted forms:

* ``None``: now (the latest visible state);
* a 17-digit instant time ``yyyyMMddHHmmssSSS`` (UTC) naming a real millisecond; the time a
  write returned means "after that write" (its completion time);
* a :class:`datetime.datetime` (naive means UTC) or an ISO-8601 string (``2026-11-23``,
  ``2026-11-23T08:15:00``, ``2026-11-23 08:15:00.250+01:00``; UTC unless an offset is given),
  truncated to the millisecond.

Anything else (other types, other digit strings, impossible dates) is a :class:`AsOfError`.
A well-formed point must also fall inside the table's history (:func:`check_point`): not
before the table was created, not after the latest completed instant, and not older than
what the cleaner retained (the earliest retained commit of the latest clean), unless the
state at that point is a savepointed commit, whose files the cleaner keeps. The instant time
of a write that a rollback or restore undid names a state that no longer exists: refused by
``TableTimelines.read_point``, which names the undoing instant.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, date, datetime

from lakebraid.timeline.errors import TimelineError
from lakebraid.timeline.instant import TIME_LENGTH, datetime_to_time, is_valid_time

FORMS = (
    "a 17-digit instant time (yyyyMMddHHmmssSSS, UTC) such as a write returned, a "
    "datetime, or an ISO-8601 string such as '2026-11-23T08:15:00Z' (UTC unless an offset "
    "is given)"
)


class AsOfError(TimelineError):
    """An ``as_of`` read point is malformed or outside what the table can still show."""


def parse_as_of(value: object, *, table: str | None = None) -> str | None:
    """``value`` as a 17-digit UTC time (None stays None); :class:`AsOfError` if malformed."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return _from_datetime(value)
    if isinstance(value, date):
        return _from_datetime(datetime(value.year, value.month, value.day))
    if not isinstance(value, str):
        raise AsOfError(
            f"as_of must be a string or a datetime, not {type(value).__name__} {value!r}: "
            f"give {FORMS}",
            table=table,
        )
    text = value.strip()
    if text.isdigit():
        if len(text) == TIME_LENGTH and is_valid_time(text):
            return text
        raise AsOfError(f"as_of {value!r} is not a valid instant time: give {FORMS}", table=table)
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise AsOfError(f"as_of {value!r} is not a read point: give {FORMS}", table=table) from None
    return _from_datetime(moment)


def _from_datetime(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return datetime_to_time(moment.astimezone(UTC))


def check_point(
    point: str,
    *,
    created_at: str | None,
    latest: str | None,
    retained_from: str | None,
    savepointed: Collection[str],
    latest_commit_at_point: str | None,
    table: str | None = None,
    given: object = None,
) -> None:
    """Refuse a completion-time read point outside the table's readable history.

    ``latest``: the newest completion time on the global timeline (or the creation time of a
    table without instants); ``retained_from``: the completion time of the earliest commit
    the latest clean kept; ``latest_commit_at_point``: the newest visible commit at ``point``
    (a savepointed one is always readable); ``given``: the caller's ``as_of``, named beside
    ``point`` when they differ (a write's instant time reads as of its completion)."""
    shown = point if given is None or given == point else f"{given!r} (read point {point})"
    if created_at is not None and point < created_at:
        raise AsOfError(
            f"as_of {shown} is before the table was created ({created_at}); read as of "
            f"{created_at} or later",
            table=table,
        )
    if latest is not None and point > latest:
        raise AsOfError(
            f"as_of {shown} is after the latest commit of the table ({latest}); omit as_of "
            "to read the current state, or give a time up to the latest commit",
            table=table,
        )
    if retained_from is None or point >= retained_from:
        return
    if latest_commit_at_point is not None and latest_commit_at_point in savepointed:
        return
    kept = f"; savepointed commits can still be read: {sorted(savepointed)}" if savepointed else ""
    raise AsOfError(
        f"as_of {shown} is older than the clean retention: the cleaner removed the files it "
        f"needs; the earliest readable point is {retained_from}{kept} (raise "
        "clean.retain.commits or savepoint a commit to keep it readable)",
        table=table,
    )
