"""The exception root of lakebraid and the timeline package's errors.

Every error lakebraid raises derives from :class:`LakebraidError` and carries the table path
and the instant it concerns (either may be ``None`` when it does not apply). Each package has
its own base (``TimelineError`` here, ``MetadataError`` in ``metadata.errors`` and so on).

Two families cut across packages and tell the caller what it may do next:

* :class:`RetryableError` -- a conflict; nothing of the caller's was committed and it is safe
  to retry the whole operation.
* :class:`StateUnknownError` -- the outcome is not known (e.g. a crash or I/O error around the
  commit point); do not clean anything up by hand, let the next writer's recovery decide.
"""

from __future__ import annotations


class LakebraidError(Exception):
    """Root of every lakebraid error. ``table`` and ``instant`` locate it."""

    def __init__(self, message: str, *, table: str | None = None, instant: str | None = None):
        self.message = message
        self.table = table
        self.instant = instant
        super().__init__(message)

    def __str__(self) -> str:
        where = []
        if self.table is not None:
            where.append(f"table {self.table}")
        if self.instant is not None:
            where.append(f"instant {self.instant}")
        return f"{self.message} [{', '.join(where)}]" if where else self.message


class RetryableError(LakebraidError):
    """A conflict: nothing was committed; the operation is safe to retry."""


class StateUnknownError(LakebraidError):
    """The outcome is unknown: do not clean up by hand; the next writer's recovery decides."""


class TimelineError(LakebraidError):
    """Base of the timeline package's errors."""


class ConfigError(LakebraidError):
    """A config key, value or table.json is invalid."""


class InvalidPathError(LakebraidError):
    """A partition value, field name or file name cannot be placed safely in the table."""


class InstantFileError(TimelineError):
    """An instant file name or body is malformed (names the folder and the file)."""


class IllegalTransitionError(TimelineError):
    """An instant was moved out of order: requested -> inflight -> completed, once each."""


class InstantExistsError(IllegalTransitionError):
    """The instant file to create is already there; instant files are never overwritten."""


class LockTimeoutError(RetryableError, TimelineError):
    """The table lock could not be taken in time; safe to retry."""


class LockLostError(RetryableError, TimelineError):
    """The table lock's lease was taken over while this writer held it (it paused longer
    than the lease); nothing of the operation was committed: safe to retry."""


class DecisionUnknownError(StateUnknownError, TimelineError):
    """A global completion's lease record was created, but the store failed before the
    holder could confirm that it stands or write its instant file: the commit may be
    decided. The next holder of the table lock (the next write, ``recover()``) writes the
    instant file of a decision that stands; recovery rolls back one that does not."""
