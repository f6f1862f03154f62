"""The local table lock (``timeline.lock.TableLock``): reentrant within a thread, and held
until the outermost block of the holding thread ends; other processes and threads wait or
time out with ``LockTimeoutError``."""

from __future__ import annotations

import threading

import pytest

from lakebraid.timeline.errors import LockTimeoutError
from lakebraid.timeline.lock import TableLock

TRY_LOCK = """
import sys
from lakebraid.timeline.errors import LockTimeoutError
from lakebraid.timeline.table import TableTimelines
table = TableTimelines.open(sys.argv[1], {"lock.timeout.seconds": 0.3})
try:
    with table.lock:
        print("took it")
except LockTimeoutError as exc:
    print("timed out", exc)
"""


def try_in_another_process(run_python, path: str) -> str:
    proc = run_python(TRY_LOCK, path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out


def test_nested_blocks_hold_the_lock_until_the_outermost_ends(new_table, run_python) -> None:
    table = new_table(**{"lock.timeout.seconds": 0.3})
    lock = table.lock
    assert isinstance(lock, TableLock)
    with lock:
        with lock:
            assert lock.held
        assert lock.held  # the inner block's end leaves it held
        out = try_in_another_process(run_python, table.path)
        assert out.startswith("timed out") and table.layout.lock in out
    assert not lock.held
    assert try_in_another_process(run_python, table.path).startswith("took it")


def test_another_thread_waits_for_the_outermost_block(new_table) -> None:
    table = new_table(**{"lock.timeout.seconds": 5})
    lock = table.lock
    events: list[str] = []
    before = lock.holds
    inner_done, started = threading.Event(), threading.Event()

    def other() -> None:
        started.set()
        with lock:
            events.append("other took it")

    with lock:
        thread = threading.Thread(target=other)
        with lock:
            thread.start()
            started.wait(5)
        inner_done.set()
        thread.join(0.5)  # still held by the outer block: the other thread waits
        assert thread.is_alive()
        events.append("outer ends")
    thread.join(10)
    assert events == ["outer ends", "other took it"]
    assert lock.holds == before + 2  # outermost acquisitions: ours, the other thread's


def test_a_thread_that_cannot_take_it_in_time_gets_a_clear_error(new_table) -> None:
    table = new_table(**{"lock.timeout.seconds": 0.2})
    failures: list[BaseException] = []

    def other() -> None:
        try:
            with table.lock:
                pass
        except LockTimeoutError as exc:
            failures.append(exc)

    with table.lock:
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(10)
    assert len(failures) == 1
    with pytest.raises(LockTimeoutError):
        raise failures[0]
    assert "lock.timeout.seconds" in str(failures[0])
