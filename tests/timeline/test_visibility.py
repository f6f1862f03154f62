"""Visibility over hand-made timeline folders (fixtures/make_visibility_fixtures.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakebraid.timeline.bodies import RestoreBody, RollbackBody
from lakebraid.timeline.instant import Action, Instant, State, millis_to_time
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.timeline import Timeline
from lakebraid.timeline.visibility import UNDO_ACTIONS, resolve, undone_times

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "visibility"
BASE = 1_780_000_000_000
G = TimelineKind.GLOBAL


def T(n: int) -> str:
    return f"2026010100000{n:04d}"


def open_case(case: str, tmp_path: Path) -> TableTimelines:
    target = tmp_path / case
    shutil.copytree(FIXTURES / case, target)
    return TableTimelines.open(str(target))


# (case, as_of, visible instant times in completion order, undone times)
CASES = [
    ("half_completed", None, [10], set()),
    ("rolled_back", None, [10, 30, 40], {20}),
    ("rolled_back", T(21), [10], {20}),  # rolled back later: invisible at every point
    ("rolled_back", T(11), [10], {20}),
    # the clean at 40 within the restore's range stays: its deletions cannot be undone
    ("restored", None, [10, 20, 40, 60, 80], {30, 50}),
    ("restored", T(41), [10, 20, 40], {30, 50}),
    ("restored", T(75), [10, 20, 40, 60], {30, 50}),
    ("out_of_order_after", T(30), [20], set()),
    ("out_of_order_after", T(39), [20], set()),
    ("out_of_order_after", T(40), [20, 10], set()),
    ("out_of_order_after", T(25), [], set()),
    ("out_of_order_before", T(30), [20], set()),
    ("out_of_order_before", None, [20], set()),
]


@pytest.mark.parametrize(("case", "as_of", "visible", "undone"), CASES)
def test_visibility(tmp_path, case, as_of, visible, undone) -> None:
    table = open_case(case, tmp_path)
    result = table.visibility(as_of)
    assert [i.time for i in result.visible] == [T(n) for n in visible]
    assert result.undone == {T(n) for n in undone}


def test_half_completed_is_completed_on_data_but_not_global(tmp_path) -> None:
    table = open_case("half_completed", tmp_path)
    assert table.timeline("data").get(T(20)).is_completed
    assert table.timeline("metadata").get(T(20)).is_completed
    assert table.timeline("global").get(T(20)).is_pending
    assert not table.visibility().is_visible(T(20))


def test_as_of_reads_repeatable_under_out_of_order_completion(tmp_path) -> None:
    before = open_case("out_of_order_before", tmp_path).visibility(T(30))
    after = open_case("out_of_order_after", tmp_path).visibility(T(30))
    assert before.visible == after.visible


def test_timeline_orders_by_time_and_by_completion(tmp_path) -> None:
    tl = open_case("out_of_order_after", tmp_path).timeline()
    assert [i.time for i in tl.by_time()] == [T(10), T(20)]
    assert [i.time for i in tl.by_completion()] == [T(20), T(10)]
    assert tl.filter(actions=[Action.COMMIT], start=T(15)).by_time()[0].time == T(20)
    assert tl.latest_completed().time == T(10)


def test_fixtures_are_current(tmp_path) -> None:
    """The committed folders equal what the script writes today."""
    script = FIXTURES.parent / "make_visibility_fixtures.py"
    listing = sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*"))
    assert listing, "run make_visibility_fixtures.py"
    text = {p: (FIXTURES / p).read_bytes() for p in listing if (FIXTURES / p).is_file()}
    copy = tmp_path / "fixtures"
    shutil.copytree(FIXTURES.parent, copy)
    subprocess.run([sys.executable, str(copy / script.name)], check=True)
    fresh = copy / "visibility"
    assert sorted(str(p.relative_to(fresh)) for p in fresh.rglob("*")) == listing
    assert all((fresh / p).read_bytes() == data for p, data in text.items())


@st.composite
def undo_histories(draw: st.DrawFn):
    """A global timeline of commits, savepoints, cleans, rollbacks and restores in random
    states (the completed ones at distinct later completion times, some out of start order),
    optionally split into an archived and an active part; each completed undo names an
    earlier target."""
    n = draw(st.integers(1, 25))
    files, bodies = [], {}
    for k in range(n):
        time = millis_to_time(BASE + k * 100)
        action = draw(
            st.sampled_from([Action.COMMIT, Action.SAVEPOINT, Action.CLEAN, *UNDO_ACTIONS])
        )
        state = draw(st.sampled_from(list(State)))
        files.append(Instant(time, action, State.REQUESTED))
        if state is State.COMPLETED:
            done = millis_to_time(BASE + k * 100 + draw(st.integers(1, 300)) * 3 + 1)
            files.append(Instant(time, action, state, done))
            if action in UNDO_ACTIONS:
                target = millis_to_time(BASE + draw(st.integers(0, k)) * 100)
                bodies[time] = (
                    RollbackBody(target=target, target_action=Action.COMMIT)
                    if action is Action.ROLLBACK
                    else RestoreBody(target=target)
                )
    split = millis_to_time(BASE + draw(st.integers(0, n)) * 100 - 50)
    return files, bodies, split


@given(undo_histories())
def test_undone_times_follow_the_rule_on_whole_and_joined_timelines(history) -> None:
    """The rule of the module doc, spelled out here over every instant, against
    ``undone_times`` (which reads per-action lists and binary searches)."""
    files, bodies, split = history
    whole = Timeline.from_instants(G, files)
    expected: set[str] = set()
    for inst in whole:
        if not inst.is_completed or inst.action not in UNDO_ACTIONS:
            continue
        body = bodies[inst.time]
        if inst.action is Action.ROLLBACK:
            expected.add(body.target)
        else:
            expected |= {
                other.time
                for other in whole
                if body.target < other.time < inst.time
                and other.action not in (Action.SAVEPOINT, Action.CLEAN, *UNDO_ACTIONS)
            }
    older = Timeline.from_instants(G, [f for f in files if f.time < split])
    newer = Timeline.from_instants(G, [f for f in files if f.time > split])
    assert undone_times(whole, bodies) == expected
    assert undone_times(older.joined(newer), bodies) == expected
    for inst in whole.by_completion():  # as of each completion: visible = done, not undone
        visible = resolve(older.joined(newer), bodies, inst.completion_time).visible
        done = [i for i in whole.by_completion() if i.completion_time <= inst.completion_time]
        assert list(visible) == [i for i in done if i.time not in expected]
