"""The lifecycle every table service shares (rollback, restore, clean, savepoint).

A service instant lives on all three timelines: requested on global, data, metadata under the
table lock (with a heartbeat, so a dead one is found and finished), inflight, its work, then
completed on data, metadata and global under the lock with one completion time. Each step
checks what is already there, so finishing a service whose writer died repeats nothing:
:func:`start_all` and :func:`complete_all` act only on the timelines the instant was
requested on and skip states already written.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import sys
from collections.abc import Callable

from fsspec import AbstractFileSystem

from lakebraid.timeline.durable import is_local
from lakebraid.timeline.errors import LakebraidError, RetryableError, StateUnknownError
from lakebraid.timeline.heartbeat import Heartbeat
from lakebraid.timeline.instant import Action, State, is_valid_time
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.errors import WriteError

G, D, M = TimelineKind.GLOBAL, TimelineKind.DATA, TimelineKind.METADATA
LOG = logging.getLogger("lakebraid")


def check_commit_time(table: TableTimelines, time: object, what: str) -> str:
    """``time`` if it is an instant time as text, else a ``WriteError`` saying what ``what``
    (rollback, savepoint, restore) takes."""
    if isinstance(time, str) and is_valid_time(time):
        return time
    raise WriteError(
        f"{what}: {time!r:.60} is not an instant time; give the 17-digit time of a commit as "
        "text (`lakebraid timeline` lists them)",
        table=table.path,
    )


def requested_on(table: TableTimelines, time: str, action: Action) -> list[TimelineKind]:
    """The timelines an instant was requested on (a writer that died between the three
    requests leaves it on fewer; it is finished on those, global always first)."""
    return [k for k in (G, D, M) if table.timeline(k).states_of(time, action)]


def start_all(table: TableTimelines, time: str, action: Action, body: bytes) -> None:
    for kind in requested_on(table, time, action):
        if State.INFLIGHT not in table.timeline(kind).states_of(time, action):
            table.store.start(kind, time, action, body)


def complete_all(table: TableTimelines, time: str, action: Action, body: bytes) -> None:
    kinds = requested_on(table, time, action)
    with table.lock:
        completion = table.next_time()
        for kind in (D, M, G):
            if kind in kinds and State.COMPLETED not in table.timeline(kind).states_of(
                time, action
            ):
                table.store.complete(kind, time, action, body, completion_time=completion)


def open_instant(table: TableTimelines, action: Action, body: bytes) -> tuple[str, Heartbeat]:
    """A new ``action`` instant requested on the three timelines, with a live heartbeat.
    Takes the table lock (re-entrantly: a caller may hold it to check and request at once)."""
    with table.lock:
        time = table.next_time()
        heartbeat = table.heartbeat(time).start()
        for kind in (G, D, M):
            table.store.request(kind, time, action, body)
    return time, heartbeat


def run_opened(
    table: TableTimelines,
    action: Action,
    time: str,
    heartbeat: Heartbeat,
    work: Callable[[str], None],
) -> str:
    """Run ``work(time)`` (which starts and completes the instant: :func:`start_all`,
    :func:`complete_all`). A failure after the instant completed on the global timeline
    (deleting the files it undid, say) does not fail the service: it took effect, and the
    cleaner removes what it left (logged). A failure before leaves the instant pending: the
    heartbeat file stays, expires, and recovery finishes the service; a store's error then
    becomes :class:`StateUnknownError` (it will take effect: do not retry, do not undo)."""
    try:
        work(time)
    except Exception as exc:
        if _completed(table, time, action):
            LOG.warning("%s %s took effect; what it left is cleaned later: %s", action, time, exc)
        else:
            heartbeat.stop(remove=False)
            if isinstance(exc, LakebraidError) and not isinstance(
                exc, (RetryableError, StateUnknownError)
            ):
                raise  # a finding about the table (it will meet recovery too)
            raise StateUnknownError(
                f"the {action} {time} failed midway ({type(exc).__name__}: {exc}); it stays "
                "requested and recovery finishes it once its heartbeat expires (the next "
                "write, or `lakebraid recover PATH`): do not run it again",
                table=table.path,
                instant=time,
            ) from exc
    except BaseException:
        heartbeat.stop(remove=False)
        raise
    try:
        heartbeat.stop()
    except Exception as exc:  # the file of a completed instant is inert; the cleaner takes it
        LOG.warning("%s %s completed; its heartbeat file stays: %s", action, time, exc)
    return time


def _completed(table: TableTimelines, time: str, action: Action) -> bool:
    """Whether ``time`` completed on the global timeline (False when that cannot be read)."""
    try:
        done = table.timeline(G).get(time, action)
    except Exception:
        return False
    return done is not None and done.is_completed


def run_service(
    table: TableTimelines, action: Action, body: bytes, work: Callable[[str], None]
) -> str:
    return run_opened(table, action, *open_instant(table, action, body), work)


def modified_at(info: dict) -> float | None:
    """Modification time (seconds since the epoch) of an fsspec listing entry, if it says."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, dt.datetime):
            return value.timestamp()
    return None


def remove(fs: AbstractFileSystem, path: str) -> None:
    """Delete a file; a file already gone is fine (services repeat deletes on recovery)."""
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        pass


def remove_tree(fs: AbstractFileSystem, path: str) -> None:
    """Delete a folder and everything under it; a folder already gone is fine, and so is one
    another process empties at the same time (a writer's rollback and another writer's
    cleaner both delete an undone instant's markers): on local disk an entry the other
    removed first is skipped, not an error, so each removal finishes in one pass (retrying
    the whole tree instead let racing removals abort each other over and over)."""
    if not is_local(fs):
        try:
            fs.rm(path, recursive=True)  # a batch delete: keys already gone are fine
        except FileNotFoundError:
            pass
        return
    handler = "onexc" if sys.version_info >= (3, 12) else "onerror"
    shutil.rmtree(fs._strip_protocol(path), **{handler: _gone_is_fine})


def _gone_is_fine(function: object, path: str, error: object) -> None:
    """``shutil.rmtree``'s error handler: an entry already removed is fine, not the rest."""
    exc = error[1] if isinstance(error, tuple) else error
    if not isinstance(exc, FileNotFoundError):
        raise exc  # type: ignore[misc]
