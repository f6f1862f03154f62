"""The only module that reads or writes instant files (and the instant clock).

Creating an instant file is a put-if-absent that never overwrites:

* local / mounted file systems: the body goes to a temporary ``.<name>.<uuid>.tmp`` in the
  same folder, is fsynced, then ``os.link``-ed to its final name (fails if the name exists:
  an atomic rename without overwrite), and the temporary name is removed. A crash leaves no
  file or a whole one; temporaries are dot files, ignored by listings.
* other fsspec file systems (object stores): under the table lock, refuse if the name exists,
  else one ``pipe_file`` (a single PUT).

Transitions are checked against the timeline's listing (``timeline.check_transition``):
requested -> inflight -> completed, each once. Requesting and completing happen under the
table lock (the store takes it, reentrantly), so completion times are unique and increasing.
"""

from __future__ import annotations

import os
import posixpath
import time
import uuid

from fsspec import AbstractFileSystem

from lakebraid.timeline.bodies import B, decode_body
from lakebraid.timeline.errors import InstantExistsError, InstantFileError
from lakebraid.timeline.instant import (
    Action,
    Instant,
    State,
    is_valid_time,
    millis_to_time,
    time_to_millis,
)
from lakebraid.timeline.layout import TableLayout, TimelineKind
from lakebraid.timeline.lock import TableLock, is_local
from lakebraid.timeline.timeline import Timeline, check_transition


def fsync_dir(folder: str) -> None:
    """Make a new or renamed entry of a local folder durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable(fs: AbstractFileSystem, path: str) -> None:
    """Make a just-written local file durable, contents and folder entry, before a commit
    names it (a power loss must not leave a completed instant naming a truncated file).
    Object stores make a file durable when its upload completes: nothing to do."""
    if not is_local(fs):
        return
    local = fs._strip_protocol(path)
    fd = os.open(local, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(posixpath.dirname(local) or ".")


def put_if_absent(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    """Create ``path`` holding ``data`` whole, or raise :class:`InstantExistsError`."""
    folder, name = posixpath.split(path)
    if not is_local(fs):
        if fs.exists(path):
            raise InstantExistsError(f"{path} exists; instant files are never overwritten")
        fs.pipe_file(path, data)
        return
    os.makedirs(folder, exist_ok=True)
    tmp = posixpath.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise InstantExistsError(f"{path} exists; instant files are never overwritten") from None
    finally:
        os.unlink(tmp)
    fsync_dir(folder)


class InstantStore:
    """Reads and writes the instant files of one table's three timelines."""

    def __init__(self, fs: AbstractFileSystem, layout: TableLayout, lock: TableLock):
        self.fs = fs
        self.layout = layout
        self.lock = lock

    # ---- reading ---------------------------------------------------------------------
    def list_names(self, kind: TimelineKind) -> list[str]:
        folder = self.layout.timeline_dir(kind)
        if is_local(self.fs):
            try:
                return os.listdir(folder)
            except FileNotFoundError:
                return []
        if not self.fs.exists(folder):
            return []
        return [posixpath.basename(p) for p in self.fs.ls(folder, detail=False)]

    def load(self, kind: TimelineKind) -> Timeline:
        folder = self.layout.timeline_dir(kind)
        return Timeline.from_names(kind, self.list_names(kind), folder=folder)

    def path_of(self, kind: TimelineKind, instant: Instant) -> str:
        return f"{self.layout.timeline_dir(kind)}/{instant.file_name}"

    def read_body(self, kind: TimelineKind, instant: Instant) -> bytes:
        path = self.path_of(kind, instant)
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError:
            raise InstantFileError(
                f"{path} is missing: the {kind} timeline changed while being read; retry",
                table=self.layout.root,
                instant=instant.time,
            ) from None

    def read_typed(self, kind: TimelineKind, instant: Instant, body_type: type[B]) -> B:
        """The body of an instant file as ``body_type``, version-checked (``timeline.bodies``;
        errors name the file)."""
        return decode_body(
            self.read_body(kind, instant), body_type, where=self.path_of(kind, instant)
        )

    # ---- transitions -----------------------------------------------------------------
    def _create(self, kind: TimelineKind, instant: Instant, body: bytes) -> Instant:
        timeline = self.load(kind)
        check_transition(timeline, instant.time, instant.action, instant.state)
        try:
            put_if_absent(self.fs, self.path_of(kind, instant), body)
        except InstantExistsError as exc:
            raise InstantExistsError(
                exc.message, table=self.layout.root, instant=instant.time
            ) from None
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
        candidates = []
        try:
            text = self.fs.cat_file(self.layout.clock).decode().strip()
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
        if is_local(self.fs):
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "w") as handle:
                handle.write(issued)
            os.replace(tmp, path)
        else:
            self.fs.pipe_file(path, issued.encode())


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
