"""Instant times: unique, increasing, above the global timeline, under a backwards clock."""

from __future__ import annotations

import json
import os

import pytest

from lakebraid.timeline.instant import Action, millis_to_time, time_to_millis
from lakebraid.timeline.layout import TimelineKind

G = TimelineKind.GLOBAL

ASKER = """
import sys, json
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.instant import Action
table = TableTimelines.open(sys.argv[1])
out = []
for n in range(200):
    with table.lock:
        latest = table.timeline().max_time()
        t = table.next_time()
        if n % 10 == 0:  # some times become instants on the global timeline
            table.store.request(TimelineKind.GLOBAL, t, Action.COMMIT)
    out.append([t, latest])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_four_processes_200_times_each(new_table, run_python) -> None:
    table = new_table()
    procs = [run_python(ASKER, table.path) for _ in range(4)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    times = [t for result in results for t, _ in result]
    assert len(times) == 800 and len(set(times)) == 800
    for result in results:
        mine = [t for t, _ in result]
        assert mine == sorted(mine) and len(set(mine)) == len(mine)  # strictly increasing
        for t, latest in result:
            assert latest is None or t > latest
    assert len(table.timeline()) == 80


def test_wall_clock_going_backwards(new_table) -> None:
    table = new_table()
    now = time_to_millis(table.next_time()) + 3_600_000  # a wall clock an hour ahead
    first = table.store.next_time(now_ms=now)
    second = table.store.next_time(now_ms=now - 3_600_000)  # clock jumped back an hour
    third = table.store.next_time(now_ms=now - 3_600_000)
    assert first == millis_to_time(now)
    assert first < second < third
    assert time_to_millis(third) == now + 2


def test_times_exceed_global_timeline_even_without_clock_file(new_table) -> None:
    table = new_table()
    future = millis_to_time(time_to_millis(table.next_time()) + 86_400_000)
    table.store.request(G, future, Action.COMMIT)  # e.g. written by a skewed host
    os.remove(table.layout.clock)
    assert table.next_time() > future


@pytest.mark.parametrize("damage", [b"2026\xff\xfe0101000000000", b"garbage", b""])
def test_a_damaged_clock_file_is_passed_over_like_a_missing_one(new_table, damage) -> None:
    """Times come from the global timeline too: a clock file that is not a time (not even
    text) is ignored, as a missing one is, instead of failing every write."""
    table = new_table()
    future = millis_to_time(time_to_millis(table.next_time()) + 86_400_000)
    table.store.request(G, future, Action.COMMIT)
    with open(table.layout.clock, "wb") as handle:
        handle.write(damage)
    assert table.next_time() > future


def test_the_clock_file_holds_the_last_time_issued_whatever_it_held(new_table) -> None:
    """The clock is rewritten in place: longer damage is cut, not left after the time."""
    table = new_table()
    table.next_time()
    with open(table.layout.clock, "wb") as handle:
        handle.write(b"9" * 40)  # not a time: passed over
    issued = table.next_time()
    with open(table.layout.clock, "rb") as handle:
        assert handle.read() == issued.encode()
    assert table.next_time() > issued
