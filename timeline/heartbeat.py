"""Heartbeats of in-flight instants: ``.braid/heartbeats/<instant>`` (format version 1).

The file holds msgspec JSON ``{"version": 1, "instant": "...", "pid": 123, "host": "...",
"beat_ms": 1795361400123}``, rewritten whole (temporary file + rename) by a background thread
every ``heartbeat.interval.ms``. A pending instant is *dead* when its heartbeat file is missing
or its last beat is older than ``heartbeat.expiry.ms``; the next writer may roll it back.
A writer starts its heartbeat before it requests its instant and stops it after completing.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from types import TracebackType

import msgspec
from fsspec import AbstractFileSystem

from lakebraid.timeline.durable import replace_whole
from lakebraid.timeline.instant import Instant
from lakebraid.timeline.layout import TableLayout
from lakebraid.timeline.timeline import Timeline

HEARTBEAT_VERSION = 1


class Beat(msgspec.Struct, frozen=True):
    version: int
    instant: str
    pid: int
    host: str
    beat_ms: int


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def write_beat(fs: AbstractFileSystem, layout: TableLayout, instant: str) -> Beat:
    beat = Beat(HEARTBEAT_VERSION, instant, os.getpid(), socket.gethostname(), now_ms())
    data = msgspec.json.encode(beat)
    replace_whole(fs, layout.heartbeat(instant), data)
    return beat


def read_beat(fs: AbstractFileSystem, layout: TableLayout, instant: str) -> Beat | None:
    """The last beat, or None if there is no (readable) heartbeat file."""
    try:
        return msgspec.json.decode(fs.cat_file(layout.heartbeat(instant)), type=Beat)
    except (FileNotFoundError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def is_beating(beat: Beat | None, expiry_ms: int, at_ms: int) -> bool:
    """Whether a writer whose last beat is ``beat`` counts as alive at ``at_ms``."""
    return beat is not None and at_ms - beat.beat_ms <= expiry_ms


def remove_beat(fs: AbstractFileSystem, layout: TableLayout, instant: str) -> None:
    try:
        fs.rm_file(layout.heartbeat(instant))
    except FileNotFoundError:
        pass


class Heartbeat:
    """Keeps one instant's heartbeat fresh from a daemon thread while in a ``with`` block."""

    def __init__(self, fs: AbstractFileSystem, layout: TableLayout, instant: str, interval_ms: int):
        self._fs, self._layout, self.instant = fs, layout, instant
        self._interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        write_beat(self._fs, self._layout, self.instant)
        self._thread = threading.Thread(
            target=self._run, name=f"lakebraid-heartbeat-{self.instant}", daemon=True
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                write_beat(self._fs, self._layout, self.instant)
            except Exception:  # a missed beat (any I/O failure); expiry tolerates several
                continue

    def stop(self, *, remove: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if remove:
            remove_beat(self._fs, self._layout, self.instant)

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # On failure keep the file: it expires, and recovery then rolls the instant back.
        self.stop(remove=exc_type is None)


def dead_pending(
    fs: AbstractFileSystem,
    layout: TableLayout,
    global_timeline: Timeline,
    expiry_ms: int,
    at_ms: int | None = None,
) -> list[Instant]:
    """Pending instants of the global timeline whose writer is gone (oldest first)."""
    now = at_ms if at_ms is not None else now_ms()
    dead = []
    for inst in global_timeline.pending():
        if not is_beating(read_beat(fs, layout, inst.time), expiry_ms, now):
            dead.append(inst)
    return dead
