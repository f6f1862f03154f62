"""Column encoding choices of data files: values survive any choice; high-cardinality columns
skip the Parquet dictionary; few-valued string columns travel as Arrow dictionaries, also
through a rewrite that brings new values."""

from __future__ import annotations

import itertools
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.keys import RECORD_KEY
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.write.datafile import COMMIT_TIME
from lakebraid.writers.write.encoding import (
    DICTIONARY_LIMIT,
    SAMPLE,
    SMALL_ROWS,
    choose,
    compacted,
    distinct_values,
)
from lakebraid.writers.write.filegroup import OP, OP_UPSERT, RewriteTask, rewrite_file_group

ROWS = 40_000  # sampled, and past a dictionary's limit for 33-byte strings


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
    n=st.sampled_from([500, SAMPLE, 20_000, ROWS]),  # Arrow's default, counted, sampled
)
def test_values_survive_every_choice(distinct: int, nulls: float, seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, distinct, n)
    missing = rng.random(n) < nulls
    table = pa.table(
        {
            "i": pa.array(picks * 7919, mask=missing),
            "f": pa.array(np.where(picks % 97 == 0, np.nan, picks / 3.0)),
            "s": pa.array([f"v{p}" for p in picks.tolist()], mask=missing),
            "t": pa.array(picks * 1_000_003, pa.timestamp("us"), mask=missing),
            "d": pa.array(picks, pa.int64()).cast(pa.decimal128(22, 2)),
            "k": pa.array([f"k{j:08d}" for j in range(n)]),
        }
    )
    _, dictionary, back = _written(table, {"k"})
    assert "k" not in dictionary
    for name in table.column_names:
        column = back.column(name)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        assert list(map(repr, column.to_pylist())) == list(
            map(repr, table.column(name).to_pylist())
        )
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


def test_mostly_distinct_columns_skip_the_dictionary_in_files_of_any_size() -> None:
    """A 20,000-row file (sampled): distinct ints, floats and strings are written plain, a
    column of a tenth or about 40% as many values as rows keeps its dictionary."""
    rng = np.random.default_rng(11)
    n = 20_000
    assert SAMPLE < n
    table = pa.table(
        {
            "i": pa.array(rng.permutation(n)),
            "f": pa.array(rng.random(n)),
            "s": pa.array([f"s{j:06d}" for j in rng.permutation(n).tolist()]),
            "tenth": pa.array(rng.integers(0, n // 10, n)),
            "half": pa.array(rng.integers(0, n // 2, n) / 7.0),
        }
    )
    _, dictionary, back = _written(table, set())
    assert dictionary == ["tenth", "half"]
    assert back.equals(table)


@pytest.mark.parametrize(
    ("distinct", "plain"), [(5_000, True), (4_000, True), (3_500, False), (3_000, False)]
)
def test_a_file_of_at_most_a_sample_counts_its_distinct_values(distinct: int, plain: bool) -> None:
    """Up to ``SAMPLE`` rows every value is counted: 5,000 rows of 4,000 distinct values
    (80%) are plain, of 3,500 (70%; a sample drawn with replacement would show fewer than
    a 75% column's 3,327) or 3,000 keep the dictionary."""
    n = 5_000
    assert SMALL_ROWS <= n <= SAMPLE
    values = np.arange(n) % distinct
    _, dictionary, back = _written(pa.table({"v": pa.array(values * 3)}), set())
    assert dictionary == ([] if plain else ["v"])
    assert back.column("v").to_pylist() == (values * 3).tolist()


def test_a_small_file_keeps_arrows_defaults() -> None:
    n = SMALL_ROWS - 1
    table = pa.table({"i": pa.array(np.arange(n)), "s": pa.array([f"s{j}" for j in range(n)])})
    chosen, dictionary, _ = _written(table, set())
    assert dictionary == ["i", "s"] and chosen.equals(table)


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


@settings(max_examples=60, deadline=None)
@given(
    values=st.integers(0, 40),
    picks=st.lists(st.one_of(st.none(), st.integers(0, 39)), max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=3),
)
def test_compacted_keeps_every_row_and_only_used_dictionary_values(
    values: int, picks: list[int | None], cuts: list[int]
) -> None:
    dictionary = pa.array([f"t{j:03d}" for j in range(values)])
    picks = [p if p is None or p < values else None for p in picks]
    indices = pa.array(picks, pa.int32())
    whole = pa.DictionaryArray.from_arrays(indices, dictionary)
    bounds = sorted({0, len(picks), *(c for c in cuts if c <= len(picks))})
    chunks = [whole.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    column = pa.chunked_array(chunks or [whole], whole.type)
    out = compacted(column)
    assert out.num_chunks == 1 and out.type == whole.type
    expected = [None if p is None else f"t{p:03d}" for p in picks]
    assert out.cast(pa.string()).to_pylist() == expected
    used = {v for v in expected if v is not None}
    if used:  # an all-null column keeps what it had: nothing to read from it
        assert sorted(out.chunk(0).dictionary.to_pylist()) == sorted(used)
    out.validate(full=True)


def test_the_commit_time_dictionary_holds_only_the_times_its_rows_carry() -> None:
    """Each rewrite replaces one row of a group: after 40 rewrites the file's commit-time
    dictionary holds the times its rows carry, not every commit that touched the group."""
    keys = [f"key-{j:03d}" for j in range(10)]
    schema = [("id", "string", False)]

    def rows(ids: list[str]) -> pa.Table:
        ops = pa.array([OP_UPSERT] * len(ids), pa.int8())
        return pa.table({"id": ids, RECORD_KEY: ids, OP: ops})

    with tempfile.TemporaryDirectory() as root:
        name = None
        for commit in range(40):
            task = RewriteTask(
                root=root,
                record_key="id",
                partition="",
                file_id="00000000-0000-0000-0000-000000000003",
                old_file=name,
                instant=f"202601010000{commit:05d}",
                write_token="0-0",
                schema=schema,
            )
            name = rewrite_file_group(task, rows(keys if name is None else [keys[commit % 10]]))
            name = name.file_name
        path = f"{TableLayout(root).partition_dir('')}/{name}"
        stored = pq.read_table(path, read_dictionary=[COMMIT_TIME]).column(COMMIT_TIME)
        assert sorted(stored.chunk(0).dictionary.to_pylist()) == [
            f"202601010000{c:05d}" for c in range(30, 40)
        ]


@settings(max_examples=80, deadline=None)
@given(
    st.one_of(
        st.lists(st.one_of(st.none(), st.integers(-3, 3)), max_size=40).map(
            lambda v: pa.array(v, pa.int64())
        ),
        st.lists(st.one_of(st.none(), st.floats(allow_nan=True, width=64)), max_size=40).map(
            lambda v: pa.array(v, pa.float64())
        ),
        st.lists(st.one_of(st.none(), st.text("ab", max_size=2)), max_size=40).map(
            lambda v: pa.array(v, pa.string())
        ),
    ),
    st.integers(1, 3),
)
def test_distinct_values_count_as_arrows_count_distinct(values: pa.Array, chunks: int) -> None:
    """The sample's distinct count equals ``pc.count_distinct`` (nulls not counted, NaN once),
    in one chunk or several."""
    cut = [
        values.slice(i * len(values) // chunks, len(values) // chunks + 1) for i in range(chunks)
    ]
    chunked = pa.chunked_array([c for c in cut if len(c)] or [values], values.type)
    want = pc.count_distinct(chunked).as_py()
    assert distinct_values(values) == pc.count_distinct(values).as_py()
    assert distinct_values(chunked) == want
