"""How the Spark rewrite deals file groups to its tasks (``writers.engine.spark.routing``:
``rewrite_costs`` and ``deal``), against hand-computed cases and the greedy rule's bound:
every task ends within one group's cost of every other."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.writers.engine.spark.routing import FILE_COST, INCOMING_COST, deal, rewrite_costs
from lakebraid.writers.write.slots import Slot


def test_the_costliest_group_goes_first_to_the_least_loaded_task() -> None:
    # 5 -> task 0, 4 -> task 1, 3 -> task 1 (4 < 5), 1 -> task 0 (5 < 7)
    assert deal([5, 1, 4, 3], 2) == [0, 0, 1, 1]
    assert deal([2, 2, 2], 3) == [0, 1, 2]  # ties: the lowest task
    assert deal([], 4) == []


def test_heavy_rewrites_and_light_new_groups_are_balanced_where_turns_are_not() -> None:
    """The 1M-row upsert into 10M rows: 30 rewrites of 333k stored rows beside 30 new groups,
    in partition order (a rewrite, then its partition's new group)."""
    costs = [333_000.0 if i % 2 == 0 else 70_000.0 for i in range(60)]
    loads = [0.0] * 8
    for group, task in enumerate(deal(costs, 8)):
        loads[task] += costs[group]
    turns = [0.0] * 8
    for group, cost in enumerate(costs):
        turns[group % 8] += cost
    assert max(loads) - min(loads) <= max(costs)
    assert max(loads) < max(turns)  # in turn, even tasks get every rewrite


@settings(max_examples=200, deadline=None)
@given(costs=st.lists(st.floats(0, 1e6), max_size=40), tasks=st.integers(1, 9))
def test_every_task_ends_within_one_groups_cost_of_the_others(costs, tasks) -> None:
    dealt = deal(costs, tasks)
    assert len(dealt) == len(costs) and all(0 <= t < tasks for t in dealt)
    loads = [0.0] * tasks
    for group, task in enumerate(dealt):
        loads[task] += costs[group]
    assert max(loads) - min(loads) <= max(costs, default=0.0) + 1e-6


def test_costs_count_stored_rows_incoming_rows_and_inserts_shared_by_room() -> None:
    touched = {("p", "a"): 100, ("q", "b"): 7}
    plan = {"p": [Slot("a", 50), Slot("n", 150)], "r": [Slot("m", 0)]}
    inserts = {"p": 400, "r": 3}
    stored = {("p", "a"): 1000, ("q", "b"): 20}
    costs = rewrite_costs(touched, plan, inserts, stored)
    assert costs == {
        ("p", "a"): 1000 + INCOMING_COST * (100 + 400 * 50 / 200) + FILE_COST,
        ("p", "n"): INCOMING_COST * 400 * 150 / 200 + FILE_COST,
        ("q", "b"): 20 + INCOMING_COST * 7 + FILE_COST,
        ("r", "m"): FILE_COST,  # a partition whose slots have no room: no share
    }
