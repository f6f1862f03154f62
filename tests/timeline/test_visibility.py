"""Visibility over hand-made timeline folders (fixtures/make_visibility_fixtures.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lakebraid.timeline.instant import Action
from lakebraid.timeline.table import TableTimelines

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "visibility"


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
    ("restored", None, [10, 20, 60, 80], {30, 40, 50}),
    ("restored", T(41), [10, 20], {30, 40, 50}),
    ("restored", T(75), [10, 20, 60], {30, 40, 50}),
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
