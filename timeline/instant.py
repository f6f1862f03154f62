"""Instants and the instant file-name grammar (this module alone owns it).

An instant is ``(time, action, state)`` plus, once completed, its completion time. Times are
17-digit ``yyyyMMddHHmmssSSS`` strings (UTC), so string order is time order.

File names, format version 1 (one file per state; all three files stay on the timeline):

=========== =====================================  ==================================
state       name                                   example
=========== =====================================  ==================================
requested   ``<time>.<action>.requested``          ``20261122153000123.commit.requested``
inflight    ``<time>.<action>.inflight``           ``20261122153000123.commit.inflight``
completed   ``<time>_<completion time>.<action>``  ``20261122153000123_20261122153004567.commit``
=========== =====================================  ==================================

:func:`parse` and :func:`file_name` are exact inverses on every valid instant. Names starting
with ``.`` are temporary files of the storage module and are not instants.
"""

from __future__ import annotations

import enum
import functools
import re
from datetime import UTC, datetime, timedelta

import msgspec

from lakebraid.timeline.errors import InstantFileError

TIME_LENGTH = 17
_TIME_FORMAT = "%Y%m%d%H%M%S"


class Action(enum.StrEnum):
    COMMIT = "commit"
    DELTACOMMIT = "deltacommit"
    CLEAN = "clean"
    ROLLBACK = "rollback"
    RESTORE = "restore"
    SAVEPOINT = "savepoint"
    COMPACTION = "compaction"
    REINDEX = "reindex"
    INDEX = "index"


class State(enum.StrEnum):
    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"

    @property
    def rank(self) -> int:
        return _STATE_RANK[self]


_STATE_RANK = {State.REQUESTED: 0, State.INFLIGHT: 1, State.COMPLETED: 2}
# sort keys are strings, not tuples: timelines sort thousands of instants per load, and
# strings are not tracked by the garbage collector (a tuple per instant triggered collections)
_ACTION_CHAR = {a: chr(ord("a") + i) for i, a in enumerate(Action)}
_STATE_CHAR = {s: str(rank) for s, rank in _STATE_RANK.items()}
_NEVER = "9" * 17  # after every completion time

_NAME_RE = re.compile(
    r"^(?P<time>\d{17})(?:_(?P<completion>\d{17}))?\.(?P<action>[a-z]+)"
    r"(?:\.(?P<state>requested|inflight))?$"
)


def is_valid_time(value: str) -> bool:
    """True if ``value`` is a 17-digit instant time naming a real UTC millisecond."""
    if len(value) != TIME_LENGTH or not value.isdigit():
        return False
    return _is_real_second(value[:14])


@functools.lru_cache(maxsize=4096)
def _is_real_second(value: str) -> bool:
    """True if 14 digits name a real UTC second (timelines parse the same times often)."""
    try:
        datetime.strptime(value, _TIME_FORMAT)
    except ValueError:
        return False
    return True


def time_to_datetime(value: str) -> datetime:
    """The UTC datetime an instant time names (millisecond precision)."""
    if not is_valid_time(value):
        raise InstantFileError(f"not a 17-digit instant time (yyyyMMddHHmmssSSS): {value!r}")
    base = datetime.strptime(value[:14], _TIME_FORMAT).replace(tzinfo=UTC)
    return base + timedelta(milliseconds=int(value[14:]))


def datetime_to_time(moment: datetime) -> str:
    """Format a datetime (naive means UTC) as a 17-digit instant time, truncating to ms."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime(_TIME_FORMAT) + f"{moment.microsecond // 1000:03d}"


def time_to_millis(value: str) -> int:
    """Milliseconds since the Unix epoch of an instant time."""
    delta = time_to_datetime(value) - datetime(1970, 1, 1, tzinfo=UTC)
    return delta // timedelta(milliseconds=1)


def millis_to_time(millis: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=millis)
    return datetime_to_time(moment)


class Instant(msgspec.Struct, frozen=True, gc=False):
    """One state of one action at one time. Ordered by (time, action, state)."""

    time: str
    action: Action
    state: State
    completion_time: str | None = None

    def __post_init__(self) -> None:
        if not is_valid_time(self.time):
            raise InstantFileError(f"invalid instant time {self.time!r}")
        completed = self.state is State.COMPLETED
        if completed != (self.completion_time is not None):
            raise InstantFileError(
                f"instant {self.time}.{self.action}: a completion time is required exactly "
                "when the state is completed"
            )
        if self.completion_time is not None and not is_valid_time(self.completion_time):
            raise InstantFileError(f"invalid completion time {self.completion_time!r}")

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def is_pending(self) -> bool:
        return self.state is not State.COMPLETED

    def sort_key(self) -> str:
        """Order of (time, action, state), as one string (times have a fixed length)."""
        return self.time + _ACTION_CHAR[self.action] + _STATE_CHAR[self.state]

    def completion_key(self) -> str:
        """Order of completion, then time; pending instants sort after every completed one."""
        return (self.completion_time or _NEVER) + self.time

    def __lt__(self, other: Instant) -> bool:
        return self.sort_key() < other.sort_key()

    def __le__(self, other: Instant) -> bool:
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: Instant) -> bool:
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: Instant) -> bool:
        return self.sort_key() >= other.sort_key()

    def with_state(self, state: State, completion_time: str | None = None) -> Instant:
        return Instant(self.time, self.action, state, completion_time)

    @property
    def file_name(self) -> str:
        return file_name(self)

    def __str__(self) -> str:
        return file_name(self)


def file_name(instant: Instant) -> str:
    """The file name of an instant (inverse of :func:`parse`)."""
    if instant.state is State.COMPLETED:
        return f"{instant.time}_{instant.completion_time}.{instant.action.value}"
    return f"{instant.time}.{instant.action.value}.{instant.state.value}"


def parse(name: str, *, folder: str | None = None) -> Instant:
    """Parse an instant file name (inverse of :func:`file_name`).

    Raises :class:`InstantFileError` naming the file (and its folder) if it is not one.
    Instants are frozen values, so names parsed before are answered from a cache (timelines
    are listed and parsed many times per write).
    """
    known = _PARSED.get(name)
    if known is not None:
        return known
    match = _NAME_RE.match(name)
    where = f"{folder}/{name}" if folder else name
    if match is None:
        raise InstantFileError(
            f"{where!r} is not an instant file name (expected <time>.<action>.requested|inflight "
            "or <time>_<completion>.<action>); move it out of the timeline folder",
            table=folder,
        )
    state_text, completion = match["state"], match["completion"]
    if (state_text is None) == (completion is None):
        raise InstantFileError(f"{where!r} mixes completed and pending name forms", table=folder)
    try:
        action = Action(match["action"])
    except ValueError:
        raise InstantFileError(f"{where!r} names an unknown action {match['action']!r}") from None
    state = State.COMPLETED if state_text is None else State(state_text)
    instant = Instant(match["time"], action, state, completion)
    if len(_PARSED) < _PARSED_LIMIT:
        _PARSED[name] = instant
    return instant


_PARSED: dict[str, Instant] = {}
_PARSED_LIMIT = 200_000


def is_instant_file(name: str) -> bool:
    """True iff ``name`` parses as an instant file name."""
    try:
        parse(name)
    except InstantFileError:
        return False
    return True
