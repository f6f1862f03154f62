"""Column encoding choices of data files: values survive any choice; high-cardinality columns
skip the Parquet dictionary; few-valued string columns travel as Arrow dictionaries, also
through a rewrite that brings new values."""

from __future__ import annotations

import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.keys import RECORD_KEY
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.write.encoding import DICTIONARY_LIMIT, MIN_ROWS, choose
from lakebraid.writers.write.filegroup import OP, OP_UPSERT, RewriteTask, rewrite_file_group

ROWS = MIN_ROWS + 1000


def _written(table: pa.Table, plain: set[str]) -> tuple[pa.Table, list[str], pa.Table]:
    chosen, dictionary = choose(table, plain=plain)
    with tempfile.TemporaryDirectory() as folder:
        pq.write_table(chosen, f"{folder}/f.parquet", use_dictionary=dictionary)
        back = pq.read_table(f"{folder}/f.parquet")
    return chosen, dictionary, back


@settings(max_examples=25, deadline=None)
@given(
    distinct=st.integers(1, 60_000),
    nulls=st.floats(0, 0.5),
    seed=st.integers(0, 2**16),
    big=st.booleans(),
)
def test_values_survive_every_choice(distinct: int, nulls: float, seed: int, big: bool) -> None:
    rng = np.random.default_rng(seed)
    n = ROWS if big else 500
    picks = rng.integers(0, distinct, n)
    missing = rng.random(n) < nulls
    table = pa.table(
        {
            "i": pa.array(picks * 7919, mask=missing),
            "f": pa.array(picks / 3.0),
            "s": pa.array([f"v{p}" for p in picks.tolist()], mask=missing),
            "k": pa.array([f"k{j:08d}" for j in range(n)]),
        }
    )
    _, dictionary, back = _written(table, {"k"})
    assert "k" not in dictionary
    for name in table.column_names:
        column = back.column(name)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        assert column.to_pylist() == table.column(name).to_pylist(), name
    assert choose(table, plain={"k"})[1] == dictionary  # the same rows, the same choice


def test_high_cardinality_columns_skip_the_dictionary_and_few_values_become_one() -> None:
    rng = np.random.default_rng(7)
    n = 300_000
    table = pa.table(
        {
            "id": pa.array(rng.permutation(n) * 3),  # all distinct: 2.4 MB of dictionary
            "status": pa.array(rng.choice(["new", "paid", "void"], n)),
            "price": pa.array(rng.choice([9.99, 4.5], n)),
        }
    )
    chosen, dictionary, back = _written(table, set())
    assert dictionary == ["status", "price"]
    assert pa.types.is_dictionary(chosen.schema.field("status").type)
    assert pa.types.is_dictionary(back.schema.field("status").type)  # the file says so
    assert not pa.types.is_dictionary(chosen.schema.field("price").type)


def test_an_overgrown_arrow_dictionary_is_decoded() -> None:
    n = ROWS
    words = pa.array([f"word-{j:07d}-{'x' * 20}" for j in range(n)])
    table = pa.table({"w": pc.dictionary_encode(words)})  # 33 B x n entries > the limit
    assert n * 33 > DICTIONARY_LIMIT
    chosen, dictionary, _ = _written(table, set())
    assert dictionary == [] and chosen.schema.field("w").type == pa.string()


def test_a_rewrite_keeps_few_valued_strings_as_dictionaries_and_adds_new_values() -> None:
    n = ROWS
    rng = np.random.default_rng(3)
    keys = [f"key-{j:07d}" for j in range(n)]
    status = rng.choice(["new", "paid"], n).tolist()
    schema = [("id", "string", False), ("status", "string", True)]

    def task(root: str, old: str | None, instant: str) -> RewriteTask:
        return RewriteTask(
            root=root,
            record_key="id",
            partition="",
            file_id="00000000-0000-0000-0000-000000000002",
            old_file=old,
            instant=instant,
            write_token="0-0",
            schema=schema,
        )

    def rows(ids: list[str], values: list[str]) -> pa.Table:
        return pa.table(
            {
                "id": ids,
                "status": values,
                RECORD_KEY: ids,
                OP: pa.array([OP_UPSERT] * len(ids), pa.int8()),
            }
        )

    with tempfile.TemporaryDirectory() as root:
        first = rewrite_file_group(task(root, None, "20260101000000000"), rows(keys, status))
        changed = {keys[5]: "void", keys[9]: "paid", "key-new": "void"}
        second = rewrite_file_group(
            task(root, first.file_name, "20260102000000000"),
            rows(list(changed), list(changed.values())),
        )
        folder = TableLayout(root).partition_dir("")
        for status_name in (first.file_name, second.file_name):
            stored = pq.read_schema(f"{folder}/{status_name}").field("status").type
            assert pa.types.is_dictionary(stored), status_name
        written = pq.read_table(f"{folder}/{second.file_name}")
        got = dict(
            zip(
                written["id"].to_pylist(),
                written["status"].cast(pa.string()).to_pylist(),
                strict=True,
            )
        )
        assert got == dict(zip(keys, status, strict=True)) | changed
