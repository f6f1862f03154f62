"""A timeline joined from an older part (the archive) and a newer part (the active folder)
derives the same values as one built from all its instant files at once; and a derived value
is remembered for as long as its timeline lives, and no longer."""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.timeline import memo as memo_module
from lakebraid.timeline.instant import Action, Instant, State, millis_to_time
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.timeline import Timeline

BASE = 1_780_000_000_000
G = TimelineKind.GLOBAL


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Instant], str]:
    """Instants at times 0..n-1 (ms after BASE), each requested, inflight or completed at a
    later, distinct completion time; and a split time."""
    n = draw(st.integers(1, 30))
    actions = [Action.COMMIT, Action.CLEAN, Action.ROLLBACK]
    states = draw(st.lists(st.sampled_from(list(State)), min_size=n, max_size=n))
    delays = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n, unique=True))
    files: list[Instant] = []
    for k, (state, delay) in enumerate(zip(states, delays, strict=True)):
        time = millis_to_time(BASE + k * 100)
        action = draw(st.sampled_from(actions))
        files.append(Instant(time, action, State.REQUESTED))
        if state is not State.REQUESTED:
            files.append(Instant(time, action, State.INFLIGHT))
        if state is State.COMPLETED:
            files.append(Instant(time, action, state, millis_to_time(BASE + k * 100 + delay * 7)))
    split = millis_to_time(BASE + draw(st.integers(0, n)) * 100 - 50)
    return files, split


@settings(max_examples=400)
@given(histories())
def test_a_joined_timeline_derives_what_one_built_at_once_derives(history) -> None:
    files, split = history
    whole = Timeline.from_instants(G, files)
    older = Timeline.from_instants(G, [f for f in files if f.time < split])
    newer = Timeline.from_instants(G, [f for f in files if f.time > split])
    older.by_completion(), older.completed(), older.pending()  # the archived part's memos
    joined = older.joined(newer)
    assert joined.instants == whole.instants
    assert joined.files == newer.files  # the long part's set is not copied...
    assert all(joined.has_file(f) for f in files)  # ...yet every state file is found
    assert joined.all_files() == whole.files
    absent = Instant(millis_to_time(BASE - 100), Action.COMMIT, State.REQUESTED)
    assert not joined.has_file(absent)
    for inst in whole:
        assert joined.states_of(inst.time, inst.action) == whole.states_of(inst.time, inst.action)
    assert joined.by_completion() == whole.by_completion()
    assert joined.completed().instants == whole.completed().instants
    assert joined.pending().instants == whole.pending().instants
    assert joined.max_time() == whole.max_time()
    for action in Action:  # per action, from the parts' lists (a scan of neither whole)
        assert joined.of_action(action) == tuple(
            i for i in whole.by_completion() if i.action is action
        )
    for inst in whole.by_completion():
        assert joined.by_completion(inst.completion_time) == whole.by_completion(
            inst.completion_time
        )


def test_a_derived_value_lives_as_long_as_its_timeline() -> None:
    calls: list[int] = []
    timeline = Timeline.from_instants(
        G, [Instant(millis_to_time(BASE), Action.COMMIT, State.REQUESTED)]
    )
    first = memo_module.memo(timeline, "probe", lambda: calls.append(1) or len(calls))
    again = memo_module.memo(timeline, "probe", lambda: calls.append(1) or len(calls))
    assert first == again == 1 and calls == [1]  # computed once
    key = id(timeline)
    assert key in memo_module._MEMO
    del timeline
    gc.collect()
    assert key not in memo_module._MEMO  # dropped with its timeline: no stale value by id


@given(histories(), st.integers(-1, 40))
def test_since_and_completed_after_select_by_binary_search(history, step) -> None:
    files, _ = history
    timeline = Timeline.from_instants(G, files)
    point = millis_to_time(BASE + step * 100 + 50)
    assert timeline.since(point) == tuple(i for i in timeline if i.time >= point)
    assert timeline.after(point) == tuple(i for i in timeline if i.time > point)
    assert timeline.after(None) == timeline.instants
    for inst in timeline:  # strictly after an instant's own time
        assert all(i.time > inst.time for i in timeline.after(inst.time))
        assert len(timeline.after(inst.time)) == sum(1 for i in timeline if i.time > inst.time)
    for inst in timeline:  # at an instant's own time: it and every later one
        assert timeline.since(inst.time)[0].time == inst.time
    after = [i for i in timeline.by_completion() if i.completion_time > point]
    assert list(timeline.completed_after(point)) == after
    assert list(timeline.completed_after(None)) == timeline.by_completion()
    until = [i for i in timeline.by_completion() if i.completion_time <= point]
    assert list(timeline.completed_until(point)) == until
    assert timeline.completed_until(None) == timeline.by_completion_view()
