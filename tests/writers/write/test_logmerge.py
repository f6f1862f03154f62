"""Merging a file slice's base with its log blocks gives what copy-on-write gives when the same
writes rewrite the base one at a time (a model of dicts, step by step), in the documented
order: the base's rows no log replaced, in its order, then the logs' winners of keys the base
holds, in its order, then those of new keys sorted by key. Blocks may name their keys' base
rows: rightly (used), for another base (ignored) or wrongly (caught, keys matched instead)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.keys import RECORD_KEY
from lakebraid.writers.write.datalog import (
    BASE_ROW,
    decode_block,
    encode_data_block,
    encode_delete_block,
)
from lakebraid.writers.write.logmerge import merge_slice

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


BASE_FILE = "g_0-0_20261126000000000.parquet"
ROWS = ["none", "named", "other base", "wrong"]  # what the blocks say of their base rows


@settings(max_examples=200, deadline=None)
@given(base=versions, writes=steps, event_time=st.booleans(), rows=st.sampled_from(ROWS))
def test_a_merged_slice_equals_copy_on_write_step_by_step(
    base: dict[str, tuple[int, int]], writes: list, event_time: bool, rows: str
) -> None:
    check_against_the_model(base, writes, event_time, rows)


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("event_time", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_large_slices_of_one_key_width_equal_the_model(
    seed: int, event_time: bool, rows: str
) -> None:
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
    check_against_the_model(base, writes, event_time, rows)


def base_rows(keys: list[str], base: dict[str, tuple[int, int]], how: str) -> dict:
    """The keyword arguments naming ``keys``' rows in ``base`` (in its dict order), as ``how``
    says: not at all, rightly, for another base file (one that holds none of them: were they
    believed, the base's versions would stay beside the logs'), or wrongly (shifted by one)."""
    if how == "none":
        return {}
    at = {k: i for i, k in enumerate(base)} if how != "other base" else {}
    rows = [at.get(k) for k in keys]
    if how == "wrong" and len(base) > 1:
        rows = [None if r is None else (r + 1) % len(base) for r in rows]
    name = "g_0-0_20261126010000000.parquet" if how == "other base" else BASE_FILE
    return {"base_rows": pa.array(rows, pa.int32()), "base_file": name}


def check_against_the_model(
    base: dict[str, tuple[int, int]], writes: list, event_time: bool, rows: str = "none"
) -> None:
    state = dict(base)  # the model: key -> (ts, v)
    from_log: set[str] = set()  # keys whose version is a log's
    blocks, previous = [], None
    for n, (kind, payload) in enumerate(writes, 1):
        where = dict(instant=f"2026112600000{n:04d}", partition="", file_id="g")
        named = base_rows(sorted(payload), base, rows)
        if kind == "data":
            table = table_of(dict(sorted(payload.items())), where["instant"])
            if named:
                table = table.append_column(BASE_ROW, named.pop("base_rows"))
            data, previous = encode_data_block(table, previous=previous, **where, **named)
            for key, (ts, v) in payload.items():
                if key in state and event_time and ts < state[key][0]:
                    continue  # an older event does not replace the stored row
                state[key] = (ts, v)
                from_log.add(key)
        else:
            data, previous = encode_delete_block(
                pa.array(sorted(payload)), previous=previous, **where, **named
            )
            for key in payload:
                state.pop(key, None)
        blocks.append(decode_block(data, 0, "f.log"))
    ordering = "ts" if event_time else None
    stored = table_of(base, "20261126000000000")
    merged = merge_slice(stored, blocks, SCHEMA, ordering, base_file=BASE_FILE)
    got = merged.to_pylist()
    assert {r["id"]: (r["ts"], r["v"]) for r in got} == state
    held = [k for k in base if k in state and k not in from_log]  # the base's, in its order
    replaced = [k for k in base if k in state and k in from_log]
    new = sorted(k for k in from_log & state.keys() if k not in base)
    assert [r["id"] for r in got] == held + replaced + new
