"""Heartbeats: refreshed by a thread; a SIGKILLed writer's pending instant becomes dead."""

from __future__ import annotations

import signal
import time

import pytest

from lakebraid.timeline.errors import ConfigError
from lakebraid.timeline.heartbeat import read_beat
from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind

G = TimelineKind.GLOBAL

WRITER = """
import sys, time
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.instant import Action
table = TableTimelines.open(sys.argv[1], {"heartbeat.interval.ms": 50})
t = table.next_time()
hb = table.heartbeat(t).start()
table.store.request(TimelineKind.GLOBAL, t, Action.COMMIT)
print(t, flush=True)
time.sleep(60)
"""


def test_heartbeat_refreshes_and_is_removed_on_success(new_table) -> None:
    table = new_table(**{"heartbeat.interval.ms": 20})
    t = table.next_time()
    with table.heartbeat(t):
        first = read_beat(table.fs, table.layout, t)
        time.sleep(0.2)
        later = read_beat(table.fs, table.layout, t)
        assert later.beat_ms > first.beat_ms and later.instant == t
    assert read_beat(table.fs, table.layout, t) is None


@pytest.mark.slow
def test_killed_writer_instant_becomes_dead(new_table, run_python) -> None:
    table = new_table(**{"heartbeat.expiry.ms": 400, "heartbeat.interval.ms": 50})
    live_t = table.next_time()
    with table.heartbeat(live_t):
        table.store.request(G, live_t, Action.COMMIT)
        proc = run_python(WRITER, table.path)
        dead_t = proc.stdout.readline().strip()
        time.sleep(0.6)
        assert table.dead_instants() == []  # the child keeps beating
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.6)
        assert [i.time for i in table.dead_instants()] == [dead_t]
    # a pending instant with no heartbeat file at all is dead too
    orphan = table.next_time()
    table.store.request(G, orphan, Action.CLEAN)
    dead = {i.time for i in table.dead_instants()}
    assert orphan in dead and live_t in dead  # live_t's writer (this block) has ended


def test_interval_must_be_shorter_than_expiry(new_table) -> None:
    with pytest.raises(ConfigError, match=r"heartbeat\.interval\.ms"):
        new_table(**{"heartbeat.expiry.ms": 400, "heartbeat.interval.ms": 400})
