"""``slots.one_slot_targets`` (the target file ids of a load into partitions of one slot each,
as the partition column's own indices) and the in-process engine's grouping of such rows
(``inprocess._by_shared_codes``), against the general paths they stand in for: the same
target per row, the same groups, whatever the partition column's dictionaries hold (values
no row uses, a value twice, nulls, several chunks)."""

from __future__ import annotations

import tempfile
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION
from lakebraid.timeline.layout import parse_partition_path
from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine import inprocess
from lakebraid.writers.write import route as route_module
from lakebraid.writers.write.filegroup import OP, OP_UPSERT
from lakebraid.writers.write.partition_codes import codes
from lakebraid.writers.write.route import (
    KEY_HASH,
    PARTITION,
    TARGET_FILE_ID,
    new_in_partition,
    route,
)
from lakebraid.writers.write.slots import Slot, one_slot_targets

VALUES = ["p0", "p1", "p2", None]


def _chunk(dictionary: list[str | None], picks: list[int]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(
        pa.array(picks, pa.int32()), pa.array(dictionary, pa.string())
    )


def _tagged(chunks: list[pa.DictionaryArray]) -> pa.Table:
    rows = sum(len(c) for c in chunks)
    none = pa.nulls(rows, pa.dictionary(pa.int32(), pa.string()))
    return pa.table(
        {
            RECORD_KEY: pa.array([f"k{i:03d}" for i in range(rows)], pa.string()),
            PARTITION: pa.chunked_array(chunks, pa.dictionary(pa.int32(), pa.string())),
            OLD_PARTITION: none,
            OLD_FILE_ID: none,
            OP: pa.array([OP_UPSERT] * rows, pa.int8()),
            KEY_HASH: pa.array(range(rows), pa.int64()),
        }
    )


chunk_strategy = st.tuples(
    st.lists(st.sampled_from(VALUES), min_size=1, max_size=5),  # a dictionary, repeats too
    st.lists(st.integers(0, 4), min_size=1, max_size=12),  # rows, as picks of it
)


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(chunk_strategy, min_size=1, max_size=3),
    slots=st.dictionaries(st.sampled_from(VALUES[:3]), st.integers(1, 2), min_size=3),
)
def test_one_slot_targets_equal_the_general_route(
    chunks: list[tuple[list[str | None], list[int]]],
    slots: dict[str, int],
) -> None:
    """Where it answers, each row's target is the one the general path gives; it declines
    (None) when a row's partition is null, named twice, or has several slots."""
    arrays = [_chunk(d, [p % len(d) for p in picks]) for d, picks in chunks]
    tagged = _tagged(arrays)
    plan = {p: [Slot(f"{p}-s{j}", 5) for j in range(n)] for p, n in slots.items()}
    new = new_in_partition(tagged)
    fast = one_slot_targets(tagged.column(PARTITION), plan, new)
    rows, twice = [], False
    for c in arrays:
        named = [c.dictionary[i].as_py() for i in sorted(set(c.indices.to_pylist()))]
        twice |= len(set(named)) != len(named)
        rows += [c.dictionary[i].as_py() for i in c.indices.to_pylist()]
    declines = None in rows or twice or any(slots.get(p) != 1 for p in rows)
    assert (fast is None) == declines
    if fast is None:
        return
    assert fast.cast(pa.string()).to_pylist() == [plan[p][0].file_id for p in rows]
    if any(None in c.dictionary.to_pylist() for c in arrays):
        return  # (the general path's dictionary unification refuses null values)
    with patch.object(route_module, "one_slot_targets", lambda *_: None):
        general = route(tagged, plan, new).column(TARGET_FILE_ID).cast(pa.string())
    assert fast.cast(pa.string()).to_pylist() == general.to_pylist()


@settings(max_examples=200, deadline=None)
@given(
    dictionary=st.lists(st.sampled_from([*VALUES[:3], "p3", "p4"]), min_size=1, max_size=6),
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=30),
    several=st.booleans(),
)
def test_groups_of_shared_codes_equal_the_general_grouping(
    dictionary: list[str], picks: list[int], several: bool
) -> None:
    """Rows routed by ``one_slot_targets`` are grouped as ``_grouped`` groups them: the same
    (partition, file id) groups, each with the same rows in input order. Two chunks (the
    rows of a routed table with delete rows appended), or targets of their own codes, take
    the general path (None)."""
    chunk = _chunk(dictionary, [p % len(dictionary) for p in picks])
    named = [dictionary[i] for i in sorted(set(chunk.indices.to_pylist()))]
    tagged = _tagged([chunk, chunk] if several else [chunk])
    plan = {p: [Slot(f"{p}-slot", 5)] for p in set(dictionary)}
    routed = route(tagged, plan, new_in_partition(tagged))
    partitions, targets = routed.column(PARTITION), routed.column(TARGET_FILE_ID)
    fast = inprocess._by_shared_codes(partitions, targets)
    if several or len(set(named)) != len(named):
        assert fast is None  # two chunks; or a value used twice: ``route``'s general path
        return
    assert fast is not None
    (parts, ids), names = codes([partitions, targets])
    general = inprocess._grouped(parts, ids, names.to_pylist())
    assert _groups(*fast) == _groups(*general)
    assert sorted(_groups(*fast)) == sorted(
        ((p, plan[p][0].file_id), [i for i, q in enumerate(partitions.to_pylist()) if q == p])
        for p in set(partitions.cast(pa.string()).to_pylist())
    )


def test_targets_of_their_own_codes_are_not_taken_for_shared() -> None:
    """Equal values in other buffers are not shared codes: the general grouping runs."""
    chunk = _chunk(["p0", "p1"], [0, 1, 1, 0])
    copy = pa.DictionaryArray.from_arrays(
        pa.array(np.array([0, 1, 1, 0], np.int32)), pa.array(["f0", "f1"])
    )
    assert inprocess._by_shared_codes(pa.chunked_array([chunk]), pa.chunked_array([copy])) is None


def _groups(
    order: np.ndarray, starts: list[int], targets: list[tuple[str, str]]
) -> list[tuple[tuple[str, str], list[int]]]:
    ends = [*starts[1:], len(order)]
    return [
        (target, order[start:end].tolist())
        for target, start, end in zip(targets, starts, ends, strict=True)
    ]


@settings(max_examples=25, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c/d", "é", None]), st.integers(-2, 2)),
        min_size=1,
        max_size=40,
    ),
    target=st.sampled_from([3, 1000]),
)
def test_a_load_puts_each_row_in_its_own_partition(
    rows: list[tuple[str | None, int]], target: int
) -> None:
    """A bulk insert into an empty table (partitions of one slot each when the target is
    large; several when it is 3) writes every row into the folder of its own partition
    values, each key once, and validates: whichever path ``route`` and ``tasks_of`` took."""
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/t"
        WriteClient.create(path, "id", ["kind", "n"], None, **{"write.target.file.rows": target})
        keys = [f"k{i:03d}" for i in range(len(rows))]
        data = pa.table(
            {
                "id": keys,
                "kind": pa.array([k for k, _ in rows], pa.string()),
                "n": pa.array([n for _, n in rows], pa.int64()),
            }
        )
        client = WriteClient.open(path)
        client.bulk_insert(data)
        seen: dict[str, tuple[str | None, int]] = {}
        for partition, files in client.files().items():
            kind, n = parse_partition_path(partition, ["kind", "n"])
            for name in files:
                stored = pq.read_table(f"{path}/{partition}/{name}")
                columns = [stored.column(c).to_pylist() for c in data.column_names]
                for key, k, v in zip(*columns, strict=True):
                    assert (k, v) == (kind, None if n is None else int(n)), (partition, key)
                    assert key not in seen
                    seen[key] = (k, v)
        assert seen == dict(zip(keys, rows, strict=True))
        assert client.validate() == []
