"""The only module that reads or writes instant files (and the instant clock).

Creating an instant file is a put-if-absent that never overwrites (``timeline.durable``).
A timeline is its active folder plus the archive (``timeline.archive``): loading lists the
folder first, then the archive, and bodies of archived instants come from the archive.

Transitions are checked against the timeline's listing (``timeline.check_transition``):
requested -> inflight -> completed, each once. Requesting and completing happen under the
table lock (the store takes it, reentrantly), so completion times are unique and increasing.
On an object store the lock is a lease (``timeline.lease``): the clock lives in its records,
and a global completion is decided by a lease record (fenced against a holder whose lease
was broken) before its instant file is written.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from fsspec import AbstractFileSystem

from lakebraid.timeline.archive import EMPTY, Archive, Snapshot, marked_version
from lakebraid.timeline.bodies import B, decode_body
from lakebraid.timeline.durable import (
    create_settled,
    is_local,
    list_folder,
    put_if_absent,
    read_bytes,
)
from lakebraid.timeline.errors import IllegalTransitionError, InstantExistsError, InstantFileError
from lakebraid.timeline.instant import (
    Action,
    Instant,
    State,
    is_valid_time,
    millis_to_time,
    time_to_millis,
)
from lakebraid.timeline.layout import TableLayout, TimelineKind
from lakebraid.timeline.lease import LeaseLock
from lakebraid.timeline.lock import Lock
from lakebraid.timeline.timeline import Timeline, check_transition

_ARCHIVE_RETRIES = 5
_BODY_CACHE_BYTES = 64 << 20


class InstantStore:
    """Reads and writes the instant files of one table's three timelines."""

    def __init__(self, fs: AbstractFileSystem, layout: TableLayout, lock: Lock):
        self.fs = fs
        self.layout = layout
        self.lock = lock
        self.archive = Archive(fs, layout)
        self._seen = EMPTY  # the archive as of the latest load
        self._archive_read = False  # whether _seen came from reading the archive
        self._joined: dict[tuple[TimelineKind, tuple[str, ...], Timeline], Timeline] = {}
        # path -> body of instant files read: they are created once and never change, so a
        # body read once is read from memory after (one GET per instant on object stores)
        self._bodies: OrderedDict[str, bytes] = OrderedDict()
        self._body_bytes = 0
        self._body_guard = threading.Lock()
        self._scope = threading.local()  # load_scope's listings, per thread
        self._requested: set[tuple[TimelineKind, str, Action]] = set()  # not yet started

    # ---- reading ---------------------------------------------------------------------
    @property
    def seen_archive(self) -> Snapshot:
        """The archive the latest load joined (EMPTY before the first)."""
        return self._seen

    def list_names(self, kind: TimelineKind) -> list[str]:
        return list_folder(self.fs, self.layout.timeline_dir(kind))

    @contextmanager
    def load_scope(self) -> Iterator[None]:
        """Within this block, until the calling thread next takes the table lock, each
        timeline is listed once: later loads of it return that first load (a write's
        preparation, the inline services' checks: one snapshot per timeline, a request each
        on object stores). Loads under the lock and after it are fresh; a create drops the
        timeline it changed. A block inside a live one is part of it; inside one that ended
        (the lock was taken since), it starts anew."""
        outer = getattr(self._scope, "loaded", None), getattr(self._scope, "holds", None)
        if outer[0] is not None and outer[1] == self.lock.holds:
            yield
            return
        self._scope.loaded, self._scope.holds = {}, self.lock.holds
        try:
            yield
        finally:
            self._scope.loaded, self._scope.holds = outer

    def load(self, kind: TimelineKind) -> Timeline:
        """The timeline now, or within :meth:`load_scope` as first loaded there."""
        loaded = getattr(self._scope, "loaded", None)
        if loaded is None or self.lock.held or self.lock.holds != self._scope.holds:
            return self._load(kind)
        if kind not in loaded:
            loaded[kind] = self._load(kind)
        return loaded[kind]

    def _load(self, kind: TimelineKind) -> Timeline:
        """The timeline now: its active folder, listed first, then the archive (read again
        only when the folder marks a newer archive than the one in hand: ``timeline.archive``)."""
        folder = self.layout.timeline_dir(kind)
        names = self.list_names(kind)
        if not self._archive_read or self._seen.version < marked_version(names):
            self._seen, self._archive_read = self.archive.snapshot(), True
        snap = self._seen
        active = Timeline.from_names(kind, names, folder=folder, after=snap.horizon)
        if snap.manifest is None:
            return active
        key = (kind, tuple(f.name for f in snap.manifest.files), active)
        known = self._joined.get(key)
        if known is None:
            if len(self._joined) >= 16:
                self._joined.clear()
            known = self._joined[key] = snap.timeline(kind).joined(active)
        return known

    def path_of(self, kind: TimelineKind, instant: Instant) -> str:
        return f"{self.layout.timeline_dir(kind)}/{instant.file_name}"

    def read_body(self, kind: TimelineKind, instant: Instant) -> bytes:
        """An instant file's body, from its active folder or from the archive."""
        if self._seen.holds(instant.time):
            return self._archived(kind, instant)
        path = self.path_of(kind, instant)
        cached = self._bodies.get(path)
        if cached is not None:
            return cached
        try:
            body = read_bytes(self.fs, path)
        except FileNotFoundError:
            self._seen = self.archive.snapshot()
            if self._seen.holds(instant.time):  # archived since this timeline was loaded
                return self._archived(kind, instant)
            raise InstantFileError(
                f"{path} is missing, though the {kind} timeline listed it and the archive does "
                "not hold it: if the table was being archived or restored from a copy meanwhile, "
                "retry; if it stays missing, it was deleted outside lakebraid (by hand, a "
                "lifecycle rule, a partial copy): restore it from a backup (`lakebraid timeline` "
                "lists the instants)",
                table=self.layout.root,
                instant=instant.time,
            ) from None
        self._remember(path, body)
        return body

    def _remember(self, path: str, body: bytes) -> None:
        """Keep a body read, the oldest read first out past :data:`_BODY_CACHE_BYTES`."""
        with self._body_guard:
            if path in self._bodies:
                return
            self._bodies[path] = body
            self._body_bytes += len(body)
            while self._body_bytes > _BODY_CACHE_BYTES and len(self._bodies) > 1:
                self._body_bytes -= len(self._bodies.popitem(last=False)[1])

    def _archived(self, kind: TimelineKind, instant: Instant) -> bytes:
        """An archived body; when another process's archival merged away the file the
        archive seen last named, the archive is read again (its newer files hold it)."""
        for _ in range(_ARCHIVE_RETRIES - 1):
            try:
                return self.archive.body(self._seen, kind, instant)
            except FileNotFoundError:
                self._seen = self.archive.snapshot()
        return self.archive.body(self._seen, kind, instant)

    def read_typed(self, kind: TimelineKind, instant: Instant, body_type: type[B]) -> B:
        """The body of an instant file as ``body_type``, version-checked (``timeline.bodies``;
        errors name the file)."""
        return decode_body(
            self.read_body(kind, instant), body_type, where=self.path_of(kind, instant)
        )

    # ---- transitions -----------------------------------------------------------------
    def _create(self, kind: TimelineKind, instant: Instant, body: bytes) -> Instant:
        loaded = getattr(self._scope, "loaded", None)
        if loaded is not None:
            loaded.pop(kind, None)
        own = (kind, instant.time, instant.action)
        if instant.state is State.INFLIGHT and own in self._requested:
            # requested by this store: legal by construction (a second start meets the
            # put-if-absent), no listing needed
            self._requested.discard(own)
            return self._put(kind, instant, body)
        timeline = self._load(kind)
        check_transition(timeline, instant.time, instant.action, instant.state)
        if self._seen.holds(instant.time):
            raise IllegalTransitionError(
                f"{instant.time}.{instant.action} on the {kind} timeline was archived (archive "
                f"horizon {self._seen.horizon}) while pending; it cannot become {instant.state}",
                table=self.layout.root,
                instant=instant.time,
            )
        self._put(kind, instant, body)
        if instant.state is State.REQUESTED:
            self._requested.add(own)
        else:
            self._requested.discard(own)
        return instant

    def _put(self, kind: TimelineKind, instant: Instant, body: bytes) -> Instant:
        """Create the instant file (see the module doc)."""
        path = self.path_of(kind, instant)
        try:
            if (
                isinstance(self.lock, LeaseLock)
                and kind is TimelineKind.GLOBAL
                and instant.state is State.COMPLETED
            ):
                self.lock.decide(path, body)  # the commit point, fenced
            elif not is_local(self.fs):  # a lost reply is settled by reading back
                if not create_settled(self.fs, path, body):
                    raise InstantExistsError(f"{path} exists; it is never overwritten")
            else:
                put_if_absent(self.fs, path, body)
        except InstantExistsError as exc:
            raise InstantExistsError(
                exc.message, table=self.layout.root, instant=instant.time
            ) from None
        self._remember(path, body)  # its bytes, read back by this process for free
        return instant

    def request(self, kind: TimelineKind, time: str, action: Action, body: bytes = b"") -> Instant:
        with self.lock:
            return self._create(kind, Instant(time, action, State.REQUESTED), body)

    def start(self, kind: TimelineKind, time: str, action: Action, body: bytes = b"") -> Instant:
        return self._create(kind, Instant(time, action, State.INFLIGHT), body)

    def complete(
        self,
        kind: TimelineKind,
        time: str,
        action: Action,
        body: bytes = b"",
        completion_time: str | None = None,
    ) -> Instant:
        """Write the completed file. Under the lock; the completion time is a fresh instant
        time unless given (the global commit reuses the one of its data/metadata files)."""
        with self.lock:
            done = completion_time or self.next_time()
            return self._create(kind, Instant(time, action, State.COMPLETED, done), body)

    # ---- the instant clock -----------------------------------------------------------
    def next_time(self, now_ms: int | None = None) -> str:
        """A new instant time, strictly greater than every time issued or on the global
        timeline, even if the wall clock went backwards. Takes the table lock."""
        with self.lock:
            last = self._last_issued()
            now = now_ms if now_ms is not None else _wall_clock_ms()
            issued = millis_to_time(max(now, time_to_millis(last) + 1) if last else now)
            self._write_clock(issued)
            return issued

    def _last_issued(self) -> str | None:
        if isinstance(self.lock, LeaseLock):  # its records carry every time ever issued
            return self.lock.clock
        candidates = []
        try:
            text = self.fs.cat_file(self.layout.clock).decode(errors="replace").strip()
            if is_valid_time(text):
                candidates.append(text)
        except FileNotFoundError:
            pass
        on_global = self.load(TimelineKind.GLOBAL).max_time()
        if on_global:
            candidates.append(on_global)
        return max(candidates, default=None)

    def _write_clock(self, issued: str) -> None:
        path = self.layout.clock
        if isinstance(self.lock, LeaseLock):
            self.lock.advance_clock(issued)  # fenced: a holder whose lease broke stops here
        else:
            _overwrite(path, issued.encode())


def _overwrite(path: str, data: bytes) -> None:
    """The local clock file's bytes replaced in place (created the first time, cut to
    ``data``'s length if it held more): one ``pwrite`` of 17 bytes, 3 us against 150 for a
    new file renamed over it. The table lock keeps readers out meanwhile, and a process that
    dies leaves the old bytes or the new ones, never part of them (or, the first time, an
    empty file, passed over as a damaged one is). Neither form is fsynced:
    a clock that a power cut loses or damages is passed over, and times then continue from
    the global timeline's newest (:meth:`InstantStore._last_issued`)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
    try:
        os.pwrite(fd, data, 0)
        if os.fstat(fd).st_size != len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
