"""Instant files: put-if-absent, checked transitions, and SIGKILL during creation."""

from __future__ import annotations

import os
import signal
import time

import msgspec
import pytest

from lakebraid.timeline.durable import put_if_absent
from lakebraid.timeline.errors import (
    IllegalTransitionError,
    InstantExistsError,
    InstantFileError,
)
from lakebraid.timeline.instant import Action, State
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines

G = TimelineKind.GLOBAL


def test_lifecycle_requested_inflight_completed(new_table) -> None:
    table = new_table()
    t = table.next_time()
    table.store.request(G, t, Action.COMMIT, b'{"version":1}')
    assert table.timeline().get(t).state is State.REQUESTED
    table.store.start(G, t, Action.COMMIT)
    assert table.timeline().pending().get(t).state is State.INFLIGHT
    done = table.store.complete(G, t, Action.COMMIT, b'{"version":1,"ok":true}')
    tl = table.timeline()
    assert tl.get(t) == done and done.completion_time > t
    assert tl.states_of(t, Action.COMMIT) == {State.REQUESTED, State.INFLIGHT, State.COMPLETED}
    assert table.store.read_body(G, done) == b'{"version":1,"ok":true}'


def test_a_listed_instant_file_deleted_outside_lakebraid_is_named_with_what_to_do(
    new_table,
) -> None:
    table = new_table()
    t = table.next_time()
    table.store.request(G, t, Action.COMMIT, b'{"version":1}')
    table.store.start(G, t, Action.COMMIT)
    done = table.store.complete(G, t, Action.COMMIT, b'{"version":1,"ok":true}')
    reader = TableTimelines.open(table.path)  # a new process: no body remembered
    listed = reader.timeline().get(t)
    assert listed == done
    os.remove(table.store.path_of(G, done))  # deleted by hand after the listing
    with pytest.raises(InstantFileError, match="deleted outside lakebraid") as err:
        reader.store.read_body(G, listed)
    assert done.file_name in str(err.value) and "restore it from a backup" in str(err.value)
    assert err.value.instant == t


def test_illegal_transitions_raise(new_table) -> None:
    table = new_table()
    t = table.next_time()
    with pytest.raises(IllegalTransitionError, match="not inflight"):
        table.store.complete(G, t, Action.COMMIT)  # nothing requested
    table.store.request(G, t, Action.COMMIT)
    with pytest.raises(IllegalTransitionError, match="not inflight"):
        table.store.complete(G, t, Action.COMMIT)  # skips inflight
    with pytest.raises(InstantExistsError):
        table.store.request(G, t, Action.COMMIT)  # requested twice
    table.store.start(G, t, Action.COMMIT)
    with pytest.raises(InstantExistsError):
        table.store.start(G, t, Action.COMMIT)
    table.store.complete(G, t, Action.COMMIT)
    with pytest.raises(InstantExistsError, match="already completed"):
        table.store.request(G, t, Action.COMMIT)  # re-request a completed instant
    with pytest.raises(InstantExistsError, match="already completed"):
        table.store.complete(G, t, Action.COMMIT)  # second completion, other completion time
    with pytest.raises(IllegalTransitionError, match="already used"):
        table.store.request(G, t, Action.CLEAN)  # same time, other action
    assert len(table.timeline().completed()) == 1


def test_request_older_than_timeline_refused(new_table) -> None:
    table = new_table()
    old, new = table.next_time(), table.next_time()
    table.store.request(G, new, Action.COMMIT)
    with pytest.raises(IllegalTransitionError, match="older"):
        table.store.request(G, old, Action.COMMIT)


def test_put_if_absent_never_overwrites(tmp_path) -> None:
    import fsspec

    fs = fsspec.filesystem("file")
    path = str(tmp_path / "x" / "20261122153000123.commit.requested")
    put_if_absent(fs, path, b"first")
    with pytest.raises(InstantExistsError):
        put_if_absent(fs, path, b"second")
    assert open(path, "rb").read() == b"first"
    assert os.listdir(tmp_path / "x") == ["20261122153000123.commit.requested"]


WRITER = """
import sys, msgspec
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.instant import Action
table = TableTimelines.open(sys.argv[1])
G = TimelineKind.GLOBAL
body = msgspec.json.encode({"version": 1, "pad": "x" * 4_000_000})
print("ready", flush=True)
while True:
    t = table.next_time()
    table.store.request(G, t, Action.COMMIT)
    table.store.start(G, t, Action.COMMIT)
    table.store.complete(G, t, Action.COMMIT, body)
"""


@pytest.mark.slow
@pytest.mark.parametrize("delay_ms", [3, 17, 40, 95, 160])
def test_sigkill_while_completing_leaves_no_partial_file(new_table, run_python, delay_ms) -> None:
    table = new_table()
    proc = run_python(WRITER, table.path)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(delay_ms / 1000)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    tl = table.timeline()  # every name parses
    for inst in tl.completed():
        body = msgspec.json.decode(table.store.read_body(G, inst))  # whole JSON, never partial
        assert len(body["pad"]) == 4_000_000
    # the writer may have died mid-instant: a second completion of any completed instant fails
    for inst in tl.completed():
        with pytest.raises(InstantExistsError, match="already completed"):
            table.store.complete(G, inst.time, Action.COMMIT, b"{}")
    # a pending one left by the kill can still be completed exactly once
    for inst in tl.pending().filter(states=[State.INFLIGHT]):
        table.store.complete(G, inst.time, Action.COMMIT, b"{}")
        with pytest.raises(InstantExistsError):
            table.store.complete(G, inst.time, Action.COMMIT, b"{}")
