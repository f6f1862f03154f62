from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakebraid.timeline.errors import InstantFileError
from lakebraid.timeline.instant import (
    Action,
    Instant,
    State,
    datetime_to_time,
    file_name,
    is_instant_file,
    millis_to_time,
    parse,
    time_to_millis,
)

MIN_MS = 0  # 1970-01-01
MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999

times = st.integers(MIN_MS, MAX_MS).map(millis_to_time)


@st.composite
def instants(draw: st.DrawFn) -> Instant:
    time = draw(times)
    state = draw(st.sampled_from(State))
    completion = draw(times) if state is State.COMPLETED else None
    return Instant(time, draw(st.sampled_from(Action)), state, completion)


@given(instants())
def test_file_name_round_trips(instant: Instant) -> None:
    name = file_name(instant)
    assert parse(name) == instant
    assert file_name(parse(name)) == name
    assert is_instant_file(name)


@given(st.lists(instants(), min_size=2, max_size=20))
def test_instant_order_is_time_order(batch: list[Instant]) -> None:
    by_instant = sorted(batch)
    assert [i.time for i in by_instant] == sorted(i.time for i in batch)
    # and 17-digit time strings order exactly like the moments they name
    assert sorted(i.time for i in batch) == sorted((i.time for i in batch), key=time_to_millis)


@given(st.integers(MIN_MS, MAX_MS))
def test_time_millis_round_trip(ms: int) -> None:
    assert time_to_millis(millis_to_time(ms)) == ms
    assert len(millis_to_time(ms)) == 17


@pytest.mark.parametrize(
    "name",
    [
        "2026112215300012.commit.requested",  # 16 digits
        "20261122153000123.commit",  # completed form without completion time
        "20261122153000123_20261122153000999.commit.inflight",  # both forms
        "20261122153000123.merge.requested",  # unknown action
        "20261322153000123.commit.requested",  # month 13
        "20261122153000123.commit.done",
        "notes.txt",
    ],
)
def test_bad_names_are_refused_with_the_name(name: str) -> None:
    with pytest.raises(InstantFileError, match=name.split(".")[0]):
        parse(name, folder="/t/.braid/global")
    assert not is_instant_file(name)


def test_completion_time_required_exactly_when_completed() -> None:
    with pytest.raises(InstantFileError):
        Instant("20261122153000123", Action.COMMIT, State.COMPLETED)
    with pytest.raises(InstantFileError):
        Instant("20261122153000123", Action.COMMIT, State.INFLIGHT, "20261122153000124")


def test_datetime_formatting_truncates_to_millis() -> None:
    assert datetime_to_time(datetime(2026, 11, 22, 15, 30, 0, 123999)) == "20261122153000123"
