"""The record-index entries of an insert-only write, known from its routing
(``writers.write.planned``). Routed tables are built by hand; expected entries come from the
mapping the test chose."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.record_index import OLD_FILE_ID
from lakebraid.index.scope import SEP
from lakebraid.writers.write.filegroup import OP, OP_DELETE, OP_UPSERT
from lakebraid.writers.write.planned import inserted_entries, inserts_only, planned_counts
from lakebraid.writers.write.route import PARTITION, TARGET_FILE_ID

IDS = [f"00000000-0000-0000-0000-{i:012d}" for i in range(6)]


def routed(
    targets: list[tuple[str, str]],
    old: list[str | None] | None = None,
    ops: list[int] | None = None,
) -> pa.Table:
    """Rows k0, k1, ... routed to ``targets`` ((partition, file id) per row)."""
    n = len(targets)
    return pa.table(
        {
            RECORD_KEY: [f"k{i}" for i in range(n)],
            PARTITION: pa.array([p for p, _ in targets]).dictionary_encode(),
            TARGET_FILE_ID: pa.array([f for _, f in targets], pa.string()),
            OLD_FILE_ID: pa.array(old or [None] * n, pa.string()),
            OP: pa.array(ops or [OP_UPSERT] * n, pa.int8()),
        }
    )


def entries_as_rows(entries: pa.Table) -> list[tuple[str, str, str]]:
    columns = [
        entries.column(c).cast(pa.string()).to_pylist() for c in ("key", "partition", "file_id")
    ]
    return list(zip(*columns, strict=True))


def test_an_insert_of_new_keys_is_planned_row_by_row() -> None:
    targets = [("d=1", IDS[0]), ("d=2", IDS[1]), ("d=1", IDS[0]), ("d=1", IDS[2])]
    table = routed(targets)
    assert inserts_only(table)
    entries = inserted_entries(table)
    assert entries is not None
    assert entries_as_rows(entries) == [(f"k{i}", p, f) for i, (p, f) in enumerate(targets)]
    assert planned_counts(entries) == {("d=1", IDS[0]): 2, ("d=2", IDS[1]): 1, ("d=1", IDS[2]): 1}
    # the two location columns share one index array (the index writer keeps them as codes)
    partition, file_id = (entries.column(c).combine_chunks() for c in ("partition", "file_id"))
    assert partition.indices.equals(file_id.indices)


def test_a_partition_scoped_index_plans_scoped_keys() -> None:
    entries = inserted_entries(routed([("d=1", IDS[0]), ("d=2", IDS[1])]), scoped=True)
    assert entries is not None
    assert entries.column("key").to_pylist() == [f"d=1{SEP}k0", f"d=2{SEP}k1"]


def test_updates_moves_and_deletes_are_not_planned() -> None:
    targets = [("d=1", IDS[0]), ("d=1", IDS[0])]
    assert not inserts_only(routed(targets, old=[None, IDS[0]]))  # one key the table holds
    assert not inserts_only(routed(targets, ops=[OP_UPSERT, OP_DELETE]))
    assert not inserts_only(routed([]))
    assert not inserts_only(routed(targets).drop_columns([OLD_FILE_ID]))


def test_a_file_id_routed_into_two_partitions_is_not_planned() -> None:
    assert inserted_entries(routed([("d=1", IDS[0]), ("d=2", IDS[0])])) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=60))
def test_planned_entries_reproduce_any_routing(choices: list[int]) -> None:
    # a file id lives in one partition: the partition is a function of the file id
    targets = [(f"p={f % 3}", IDS[f]) for f in choices]
    entries = inserted_entries(routed(targets))
    assert entries is not None
    assert entries_as_rows(entries) == [(f"k{i}", p, f) for i, (p, f) in enumerate(targets)]
    expected: dict[tuple[str, str], int] = {}
    for target in targets:
        expected[target] = expected.get(target, 0) + 1
    assert planned_counts(entries) == expected
