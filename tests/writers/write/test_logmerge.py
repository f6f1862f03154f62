"""Merging a file slice's base with its log blocks gives what copy-on-write gives when the same
writes rewrite the base one at a time (a model of dicts, step by step), in the documented
order: the base's rows left, in its order, each in its newest version, then the winners of the
keys the base does not hold in the logs' order (block by block, each block's by key)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.datalog import decode_block, encode_data_block, encode_delete_block
from lakebraid.index.keys import RECORD_KEY
from lakebraid.writers.write.logmerge import _last_versions, _older, merge_slice

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("ts", pa.int64()),
        ("v", pa.int64()),
        ("_braid_commit_time", pa.string()),
        (RECORD_KEY, pa.string()),
    ]
)
KEYS = [f"k{i}" for i in range(12)]
versions = st.dictionaries(
    st.sampled_from(KEYS), st.tuples(st.integers(0, 4), st.integers(0, 10**6))
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("data"), versions.filter(bool)),
        st.tuples(st.just("delete"), st.sets(st.sampled_from(KEYS), min_size=1)),
    ),
    max_size=6,
)


def table_of(rows: dict[str, tuple[int, int]], time: str) -> pa.Table:
    keys = list(rows)
    return pa.table(
        {
            "id": keys,
            "ts": [rows[k][0] for k in keys],
            "v": [rows[k][1] for k in keys],
            "_braid_commit_time": [time] * len(keys),
            RECORD_KEY: keys,
        },
        schema=SCHEMA,
    )


@settings(max_examples=150, deadline=None)
@given(base=versions, writes=steps, event_time=st.booleans())
def test_a_merged_slice_equals_copy_on_write_step_by_step(
    base: dict[str, tuple[int, int]], writes: list, event_time: bool
) -> None:
    check_against_the_model(base, writes, event_time)


@pytest.mark.parametrize("event_time", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_large_slices_of_one_key_width_equal_the_model(seed: int, event_time: bool) -> None:
    """Thousands of keys of one width: the numpy paths of the sort and the key match."""
    rng = random.Random(seed)
    universe = [f"key-{i:06d}" for i in range(15_000)]
    base = {
        k: (rng.randrange(5), rng.randrange(10**6)) for k in sorted(rng.sample(universe, 12_000))
    }
    writes: list = []
    for _ in range(4):
        keys = rng.sample(universe, 4_000)
        writes.append(("data", {k: (rng.randrange(5), rng.randrange(10**6)) for k in keys}))
    writes.insert(2, ("delete", set(rng.sample(universe, 1_000))))
    check_against_the_model(base, writes, event_time)


def check_against_the_model(
    base: dict[str, tuple[int, int]], writes: list, event_time: bool
) -> None:
    state = dict(base)  # the model: key -> (ts, v)
    from_log: dict[str, int] = {}  # keys whose version is a log's: the block's number
    blocks, previous = [], None
    for n, (kind, payload) in enumerate(writes, 1):
        where = dict(instant=f"2026112600000{n:04d}", partition="", file_id="g")
        if kind == "data":
            data, previous = encode_data_block(
                table_of(payload, where["instant"]), previous=previous, **where
            )
            for key, (ts, v) in payload.items():
                if key in state and event_time and ts < state[key][0]:
                    continue  # an older event does not replace the stored row
                state[key] = (ts, v)
                from_log[key] = n
        else:
            data, previous = encode_delete_block(
                pa.array(sorted(payload)), previous=previous, **where
            )
            for key in payload:
                state.pop(key, None)
                from_log.pop(key, None)
        blocks.append(decode_block(data, 0, "f.log"))
    merged = merge_slice(
        table_of(base, "20261126000000000"), blocks, SCHEMA, "ts" if event_time else None
    )
    got = merged.to_pylist()
    assert {r["id"]: (r["ts"], r["v"]) for r in got} == state
    held = [k for k in base if k in state]  # the base's, in its order, replaced in place
    logs = [
        k
        for n, (kind, payload) in enumerate(writes, 1)
        if kind == "data"
        for k in sorted(payload)
        if from_log.get(k) == n and k not in base
    ]
    assert [r["id"] for r in got] == held + logs


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from([pa.int64(), pa.int32(), pa.float64()]),
    data=st.data(),
    chunked=st.booleans(),
)
def test_an_older_event_is_one_whose_stored_value_is_greater(kind, data, chunked) -> None:
    """``_older``, by numpy or by Arrow, is Python's ``>`` on the two values, false where
    either is null or NaN."""
    number = st.floats(allow_infinity=False) if kind == pa.float64() else st.integers(-5, 5)
    values = st.one_of(st.none(), number) if data.draw(st.booleans()) else number
    stored = data.draw(st.lists(values, min_size=1, max_size=12))
    log = data.draw(st.lists(values, min_size=1, max_size=12))
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, len(stored) - 1), st.integers(0, len(log) - 1)))
    )
    at = np.array([a for a, _ in pairs], np.int64)
    won = np.array([w for _, w in pairs], np.int64)
    half = len(stored) // 2
    parts = [stored[:half], stored[half:]] if chunked and half else [stored]
    got = _older(
        pa.chunked_array([pa.array(p, kind) for p in parts], kind),
        pa.chunked_array([pa.array(log, kind)]),
        at,
        won,
    )
    want = [stored[a] is not None and log[w] is not None and stored[a] > log[w] for a, w in pairs]
    assert [bool(x) for x in got] == want


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from([pa.int64(), pa.int32(), pa.timestamp("us"), pa.float64(), None]),
    data=st.data(),
)
def test_the_last_version_of_each_key_is_the_greatest_value_then_the_latest_rank(
    kind, data
) -> None:
    """``_last_versions`` picks, per group, the version of the greatest precombine value (a
    null is the greatest), the latest rank among equals; ``kind`` None: the latest rank
    alone."""
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=8))
    group = np.repeat(np.arange(len(sizes)) * 3, sizes)  # ascending, not contiguous codes
    n = len(group)
    ranks = np.array(data.draw(st.permutations(range(1, n + 1))), dtype=np.int64)
    versions = np.array(data.draw(st.permutations(range(n))), dtype=np.int64)
    ordering, values = None, [None] * n
    rows = pa.table({"x": pa.array(range(n), pa.int64())})
    if kind is not None:
        number = st.integers(-3, 3)
        nullable = data.draw(st.booleans())
        values = data.draw(
            st.lists(st.one_of(st.none(), number) if nullable else number, min_size=n, max_size=n)
        )
        column = pa.array(values, pa.int64()).cast(kind)
        rows, ordering = (
            pa.table({"o": pa.chunked_array([column[: n // 2], column[n // 2 :]])}),
            "o",
        )
    rank = np.zeros(n + 1, dtype=np.int64)
    rank[versions] = ranks

    def key(v: int) -> tuple:
        value = values[v]
        return (value is None, value if value is not None else 0, rank[v])

    want = {}
    for g, v in zip(group.tolist(), versions.tolist(), strict=True):
        if g not in want or key(v) > key(want[g]):
            want[g] = v
    groups, winners = _last_versions(group, versions, rank, rows, ordering)
    assert groups.tolist() == sorted(want)
    assert winners.tolist() == [want[g] for g in sorted(want)]
