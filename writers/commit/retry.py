"""Writes run again after a lost conflict (``write.conflict.retries``).

A write that a concurrent commit beat to one of its file groups or keys (``conflicts``) was
rolled back whole before :class:`~lakebraid.writers.errors.WriteConflictError` reached the
caller: nothing of it stays, and nothing of the winner was touched. Running it again from the
start (a fresh read point, so it plans against the commits that won) is what the error asks of
the caller; :func:`retrying` does it for them up to the configured count, after a random pause
that grows with each attempt, so that writers who collided do not collide again in step.
Only that error is retried: a write whose outcome is unknown
(:class:`~lakebraid.timeline.errors.StateUnknownError`) or that failed otherwise raises at once.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from time import sleep

from lakebraid.timeline.table import TableTimelines
from lakebraid.writers import settings
from lakebraid.writers.errors import WriteConflictError

LOG = logging.getLogger("lakebraid")
PAUSE = (0.05, 0.25)  # seconds before the first retry, drawn at random; doubled at each next
MAX_PAUSE = 5.0


def retrying(table: TableTimelines, write: Callable[[], str], operation: str) -> str:
    """``write()``'s instant; after a :class:`WriteConflictError`, ``write()`` again, at most
    ``write.conflict.retries`` times (the last error raised as it came). Each attempt runs in
    a load scope of its own (its preparation lists each timeline once), so it reads the table
    as it is then."""
    retries = table.options.get(settings.CONFLICT_RETRIES)
    for attempt in range(retries):
        try:
            with table.store.load_scope():
                return write()
        except WriteConflictError as lost:
            pause = min(MAX_PAUSE, random.uniform(*PAUSE) * 2**attempt)
            LOG.warning(
                "%s lost a conflict: %s; running it again in %.2f s (retry %d of %d)",
                operation,
                lost,
                pause,
                attempt + 1,
                retries,
            )
            sleep(pause)
    with table.store.load_scope():  # the last attempt: its conflict reaches the caller
        return write()
