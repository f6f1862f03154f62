"""Progress of long work, told to whoever asked for it; silent by default.

Library code never prints. A long operation opens a task and advances it::

    with progress.task("write data files", total=len(work)) as bar:
        for item in work:
            ...
            bar.advance()

and the calls go to the :class:`Reporter` that the caller set for the current context with
:func:`reporting` (the CLI and the demo set one that draws bars with ``rich``, and only on a
terminal and without ``--json``), or nowhere. A :class:`Task` holds its reporter, so worker
threads of the operation may advance it. Bottom of the package (like the config registry), so
every layer can report.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class Reporter(Protocol):
    """Receives the tasks of long operations (``total`` None: unknown, a spinner)."""

    def start(self, label: str, total: int | None) -> object: ...

    def advance(self, handle: object, n: int) -> None: ...

    def finish(self, handle: object) -> None: ...


_CURRENT: ContextVar[Reporter | None] = ContextVar("lakebraid_progress", default=None)


@contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """Send the tasks opened inside this block (in this context) to ``reporter``."""
    token = _CURRENT.set(reporter)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class Task:
    """One task of a long operation; :meth:`advance` is a no-op when nobody listens."""

    def __init__(self, reporter: Reporter | None, handle: object):
        self._reporter = reporter
        self._handle = handle

    def advance(self, n: int = 1) -> None:
        if self._reporter is not None:
            self._reporter.advance(self._handle, n)


@contextmanager
def task(label: str, total: int | None = None) -> Iterator[Task]:
    """A task of ``total`` steps (None: unknown) for the current reporter, if any."""
    reporter = _CURRENT.get()
    if reporter is None:
        yield Task(None, None)
        return
    handle = reporter.start(label, total)
    try:
        yield Task(reporter, handle)
    finally:
        reporter.finish(handle)
