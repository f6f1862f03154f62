"""Progress bars of the CLI and the demo: ``rich`` drawing the tasks of ``timeline.progress``.

Only on a terminal (stdout and stderr both), never with ``--json``; a task appears once it has
run for :data:`DELAY` seconds (short work draws nothing) and the bars vanish when the work ends
(``transient``). Drawn on stderr, so stdout stays the command's answer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from lakebraid.timeline.progress import reporting

DELAY = 2.0  # seconds a task runs before its bar is drawn


class _Delayed(Progress):
    """A rich ``Progress`` that draws only the unfinished tasks older than :data:`DELAY`."""

    def get_renderables(self) -> Iterator[Any]:
        shown = [t for t in self.tasks if not t.finished and (t.elapsed or 0) >= DELAY]
        yield self.make_tasks_table(shown)


class RichReporter:
    """A ``timeline.progress.Reporter`` over one rich display."""

    def __init__(self, display: Progress):
        self.display = display

    def start(self, label: str, total: int | None) -> object:
        return self.display.add_task(label, total=total)

    def advance(self, handle: object, n: int) -> None:
        self.display.advance(handle, n)  # type: ignore[arg-type]

    def finish(self, handle: object) -> None:
        task: TaskID = handle  # type: ignore[assignment]
        self.display.update(task, visible=False)
        self.display.stop_task(task)
        self.display.remove_task(task)


def wanted(json_output: bool = False) -> bool:
    """Whether to draw progress: a terminal on stdout and stderr, and no ``--json``."""
    return not json_output and sys.stdout.isatty() and sys.stderr.isatty()


@contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """Draw the tasks that long operations open inside this block, when ``enabled``."""
    if not enabled:
        yield
        return
    display = _Delayed(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with display, reporting(RichReporter(display)):
        yield
