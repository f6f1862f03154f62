"""A timeline built from a listing that only grew since the last one built (a write's creates)
is grown from that one (``Timeline.grown``): it must equal the timeline parsed from the whole
listing, whatever files came, went or came back, with or without an archive horizon."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.timeline import timeline as timeline_module
from lakebraid.timeline.instant import Action, Instant, State, file_name, parse
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.timeline import Timeline

TIMES = [f"2026010100000{i:04d}" for i in range(1, 9)]


@st.composite
def instant_names(draw: st.DrawFn) -> str:
    time = draw(st.sampled_from(TIMES))
    action = draw(st.sampled_from([Action.COMMIT, Action.CLEAN, Action.COMPACTION]))
    state = draw(st.sampled_from(list(State)))
    done = f"2026010100001{TIMES.index(time):04d}" if state is State.COMPLETED else None
    return file_name(Instant(time, action, state, done))


def scratch(names: frozenset[str], after: str | None) -> Timeline:
    parsed = [parse(n) for n in names if not n.startswith(".")]
    parsed = [i for i in parsed if after is None or i.time > after]
    return Timeline.from_instants(TimelineKind.DATA, parsed)


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.booleans(), st.lists(instant_names(), min_size=1, max_size=4)),
        min_size=1,
        max_size=12,
    ),
    after=st.sampled_from([None, TIMES[2]]),
)
def test_a_grown_timeline_equals_the_whole_listing_parsed(steps, after) -> None:
    timeline_module._BUILT.clear()
    timeline_module._LAST.clear()
    listing: set[str] = {".a-temporary-file.tmp"}
    for add, names in steps:
        if add:
            listing |= set(names)
        else:
            listing -= set(names)
        built = Timeline.from_names(TimelineKind.DATA, sorted(listing), after=after)
        expected = scratch(frozenset(listing), after)
        assert built.instants == expected.instants
        assert built.files == expected.files
        timeline_module._BUILT.clear()  # the next listing is grown, not looked up


def test_a_grown_timeline_keeps_the_later_state_of_an_instant() -> None:
    timeline_module._BUILT.clear()
    timeline_module._LAST.clear()
    requested = file_name(Instant(TIMES[0], Action.COMMIT, State.REQUESTED))
    first = Timeline.from_names(TimelineKind.DATA, [requested])
    done = file_name(Instant(TIMES[0], Action.COMMIT, State.COMPLETED, TIMES[1]))
    grown = Timeline.from_names(TimelineKind.DATA, [requested, done])
    assert [i.state for i in first] == [State.REQUESTED]
    assert [i.state for i in grown] == [State.COMPLETED]
    assert len(grown.files) == 2
