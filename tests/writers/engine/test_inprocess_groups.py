"""How the in-process engine splits routed rows into file-group tasks (``_grouped``),
against a plain-Python grouping."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.writers.engine.inprocess import _grouped

TEXT = ["p0", "p1", "f0", "f1", "f2"]  # codes 0-1: partitions, 2-4: file ids


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 1), st.integers(2, 4)), min_size=1, max_size=40),
    one_home=st.booleans(),
)
def test_groups_hold_each_row_once_in_order_of_their_pair(
    rows: list[tuple[int, int]], one_home: bool
) -> None:
    """Every row lands in the group of its (partition, file id), rows in input order within
    a group; an id seen in two partitions (``one_home`` False may draw it) is two groups."""
    if one_home:  # each file id in one partition, as writers route them
        rows = [(file_id % 2, file_id) for _, file_id in rows]
    parts = np.array([p for p, _ in rows], dtype=np.int32)
    ids = np.array([i for _, i in rows], dtype=np.int32)
    order, starts, targets = _grouped(parts, ids, TEXT)
    ends = [*starts[1:], len(order)]
    model: dict[tuple[str, str], list[int]] = {}
    for at, (p, i) in enumerate(rows):
        model.setdefault((TEXT[p], TEXT[i]), []).append(at)
    got = {
        target: order[start:end].tolist()
        for target, start, end in zip(targets, starts, ends, strict=True)
    }
    assert len(got) == len(targets)  # no pair named twice
    assert got == model
    if one_home:  # groups in file-id order
        assert [t[1] for t in targets] == sorted(t[1] for t in targets)
