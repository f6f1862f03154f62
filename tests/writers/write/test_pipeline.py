"""The per-file-group rewrite and batch de-duplication against plain-dict models."""

from __future__ import annotations

import tempfile
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION
from lakebraid.metadata.commits import unpack_keys
from lakebraid.metadata.gather import taken_by_key
from lakebraid.metadata.keyorder import ordering_words
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.write.datafile import COMMIT_TIME
from lakebraid.writers.write.filegroup import (
    OP,
    OP_DELETE,
    OP_UPSERT,
    RewriteTask,
    rewrite_file_group,
)
from lakebraid.writers.write.partition_codes import codes
from lakebraid.writers.write.route import (
    KEY_HASH,
    PARTITION,
    TARGET_FILE_ID,
    deduplicate,
    insert_counts,
    key_copies,
    new_in_partition,
    route,
    with_key_hashes,
)
from lakebraid.writers.write.slots import Slot, by_hash

SCHEMA = [("id", "string", False), ("v", "int64", True)]
KEYS = st.text(alphabet="abcé", min_size=1, max_size=4)


def _rows(keys: list[str], values: list[int | None], ops: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(keys, pa.string()),
            "v": pa.array(values, pa.int64()),
            RECORD_KEY: pa.array(keys, pa.string()),
            OP: pa.array(ops, pa.int8()),
        }
    )


def _task(root: str, old_file: str | None, instant: str) -> RewriteTask:
    return RewriteTask(
        root=root,
        record_key="id",
        partition="",
        file_id="00000000-0000-0000-0000-000000000001",
        old_file=old_file,
        instant=instant,
        write_token="0-0",
        schema=SCHEMA,
    )


@settings(max_examples=60, deadline=None)
@given(
    old=st.dictionaries(KEYS, st.integers(-5, 5) | st.none(), max_size=12),
    upserts=st.dictionaries(KEYS, st.integers(-5, 5), max_size=8),
    deletes=st.sets(KEYS, max_size=5),
)
def test_rewrite_matches_a_dict_model(
    old: dict[str, int | None], upserts: dict[str, int], deletes: set[str]
) -> None:
    deletes -= set(upserts)  # a batch never upserts and deletes one key in one group
    with tempfile.TemporaryDirectory() as root:
        first = rewrite_file_group(
            _task(root, None, "20260101000000000"),
            _rows(list(old), list(old.values()), [OP_UPSERT] * len(old)),
        )
        incoming = _rows(
            [*upserts, *deletes],
            [*upserts.values(), *([None] * len(deletes))],
            [OP_UPSERT] * len(upserts) + [OP_DELETE] * len(deletes),
        )
        status = rewrite_file_group(_task(root, first.file_name, "20260102000000000"), incoming)
        model = {k: v for k, v in old.items() if k not in deletes} | upserts
        if not model:
            assert status.file_name is None
            assert status.rows == 0
            return
        folder = TableLayout(root).partition_dir("")
        written = pq.read_table(f"{folder}/{status.file_name}")
        got = dict(zip(written["id"].to_pylist(), written["v"].to_pylist(), strict=True))
        assert got == model
        assert RECORD_KEY not in written.column_names  # a string key is virtual
        stamps = dict(zip(written["id"].to_pylist(), written[COMMIT_TIME].to_pylist(), strict=True))
        assert {k for k, t in stamps.items() if t == "20260102000000000"} == set(upserts)
        kept = [k for k in written["id"].to_pylist() if k in old and k not in upserts]
        # a new group is sorted by key; a rewrite keeps the order of the rows it keeps
        assert kept == [k for k in sorted(old) if k not in deletes and k not in upserts]
        assert set(unpack_keys(status.keys_added).to_pylist()) == set(upserts) - set(old)
        assert set(unpack_keys(status.keys_removed).to_pylist()) == deletes & set(old)
        assert (status.inserts, status.updates, status.deletes) == (
            len(set(upserts) - set(old)),
            len(set(upserts) & set(old)),
            len(deletes & set(old)),
        )
        assert status.rows == len(model)
        values = [v for v in model.values() if v is not None]
        stat = next(s for s in status.stats if s.column == "v")
        assert (stat.min_value, stat.max_value) == (
            (min(values), max(values)) if values else (None, None)
        )
        assert stat.null_count == sum(v is None for v in model.values())
        key_stat = next(s for s in status.stats if s.column == "id")
        assert (key_stat.min_value, key_stat.max_value) == (min(model), max(model))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(KEYS, st.integers(0, 3), st.sampled_from(["a", "b"])), max_size=30),
    st.booleans(),
    st.booleans(),
)
def test_deduplicate_keeps_the_highest_precombine_then_the_last_row(
    rows: list[tuple[str, int, str]], hashed: bool, scoped: bool
) -> None:
    """With or without the key hashes carried as a column (``with_key_hashes``); ``scoped``:
    one row per partition and key (a partition-scoped index), else per key."""
    table = pa.table(
        {
            RECORD_KEY: pa.array([k for k, _, _ in rows], pa.string()),
            PARTITION: pa.array([p for _, _, p in rows], pa.string()),
            "ts": pa.array([t for _, t, _ in rows], pa.int64()),
            "seq": pa.array(range(len(rows)), pa.int64()),
        }
    )
    if hashed:
        table = with_key_hashes(table)
    model: dict[tuple[str, str], tuple[int, int]] = {}
    for seq, (key, ts, partition) in enumerate(rows):
        at = (partition if scoped else "", key)
        if at not in model or ts >= model[at][0]:
            model[at] = (ts, seq)
    got = deduplicate(table, "ts", scoped)
    assert got.num_rows == len(model)
    columns = (got[RECORD_KEY].to_pylist(), got["ts"].to_pylist(), got["seq"].to_pylist())
    kept = zip(*columns, strict=True)
    assert {((rows[s][2] if scoped else ""), k): (t, s) for k, t, s in kept} == model
    if hashed:  # the hashes still belong to their rows
        assert (
            got[KEY_HASH].to_pylist()
            == with_key_hashes(got.drop_columns([KEY_HASH]))[KEY_HASH].to_pylist()
        )


@settings(max_examples=80, deadline=None)
@given(
    keys=st.lists(KEYS, min_size=1, max_size=30, unique=True),
    data=st.data(),
    copied=st.booleans(),
    chunked=st.booleans(),
)
def test_a_new_groups_rows_taken_by_key_equal_a_take_then_a_sort(
    keys: list[str], data: st.DataObject, copied: bool, chunked: bool
) -> None:
    """``taken_by_key`` against Arrow's own: the rows at the positions, stably sorted by
    key; a key copy column (the virtual key's text column) holds the same sorted keys."""
    values = data.draw(
        st.lists(st.integers(-9, 9) | st.none(), min_size=len(keys), max_size=len(keys))
    )
    rows = _rows(keys, values, [OP_UPSERT] * len(keys))
    if chunked:  # a payload of two chunks per column
        rows = pa.concat_tables([rows.slice(0, len(keys) // 2), rows.slice(len(keys) // 2)])
    picked = data.draw(st.lists(st.integers(0, len(keys) - 1), unique=True))
    if data.draw(st.booleans()):  # positions in key order: the keys are taken as they are
        picked.sort(key=lambda at: keys[at].encode())
    positions = np.array(picked, dtype=np.int64)
    copies = key_copies(rows, "id", virtual=copied)
    assert copies == (("id",) if copied else ())
    got = taken_by_key(rows, RECORD_KEY, positions, copies)
    taken = rows.take(pa.array(positions, pa.int64()))
    expected = taken.take(pc.sort_indices(taken, sort_keys=[(RECORD_KEY, "ascending")]))
    assert got.schema == rows.schema
    assert got.to_pylist() == expected.to_pylist()


@settings(max_examples=150, deadline=None)
@given(
    ids=st.lists(st.integers(0, 10**6), min_size=1, max_size=40),
    prefix=st.sampled_from(["", "key-", "tenant-0042/"]),
    data=st.data(),
)
def test_rows_taken_by_key_with_ordering_words_equal_a_take_then_a_stable_sort(
    ids: list[int], prefix: str, data: st.DataObject
) -> None:
    """Keys of one width that differ in at most 8 bytes (zero-padded ids after a shared
    prefix), repeats allowed: ordered by ``keyorder.ordering_words`` before the take, the
    rows are those of a take then Arrow's stable sort (equal keys in their order)."""
    keys = [f"{prefix}{i:07d}" for i in ids]
    rows = _rows(keys, list(range(len(keys))), [OP_UPSERT] * len(keys))
    words = ordering_words(rows.column(RECORD_KEY))
    assert words is not None
    picked = data.draw(st.lists(st.integers(0, len(keys) - 1), unique=True))
    positions = np.array(picked, dtype=np.int64)
    got = taken_by_key(rows, RECORD_KEY, positions, ("id",), words)
    taken = rows.take(pa.array(positions, pa.int64()))
    expected = taken.take(pc.sort_indices(taken, sort_keys=[(RECORD_KEY, "ascending")]))
    assert got.schema == rows.schema
    assert got.to_pylist() == expected.to_pylist()


@pytest.mark.parametrize("order", ["ascending", "one swap", "a row left out"])
def test_every_row_in_key_order_is_taken_as_it_is(order: str) -> None:
    """All the rows at their own positions, in key order by their words (an append of ids
    that grow into one new file group): the rows themselves, nothing copied. Rows out of
    order, or not all of them, are taken and sorted as before."""
    keys = [f"ev-{i:010d}" for i in range(50)]
    rows = _rows(keys, list(range(50)), [OP_UPSERT] * 50).combine_chunks()
    if order == "one swap":
        rows = rows.take(pa.array([1, 0, *range(2, 50)]))
    positions = np.arange(49 if order == "a row left out" else 50, dtype=np.int64)
    words = ordering_words(rows.column(RECORD_KEY))
    got = taken_by_key(rows, RECORD_KEY, positions, ("id",), words)
    assert got.column(RECORD_KEY).to_pylist() == keys[: len(positions)]
    kept = got.column("v").chunk(0).buffers()[1].address
    assert (kept == rows.column("v").chunk(0).buffers()[1].address) == (order == "ascending")


def test_ordering_words_only_for_keys_of_one_width_within_eight_bytes() -> None:
    """No words (the caller sorts the taken keys) for keys of several widths, keys that
    differ past 8 bytes after their shared prefix, or nulls."""
    assert ordering_words(pa.array(["a1", "a22"])) is None
    assert ordering_words(pa.array(["x" * 9 + "a", "b" + "x" * 9])) is None
    assert ordering_words(pa.array(["ab", None])) is None
    words = ordering_words(pa.chunked_array([["k-000000000002"], ["k-000000000001"]]))
    assert words is not None and words[1] < words[0]


def _texts(values: list[str | None], encoded: bool) -> pa.Array:
    """Text as the tagged work columns hold it (dictionary<int32, string>) or plain."""
    plain = pa.array(values, pa.string())
    return plain.dictionary_encode() if encoded else plain


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(0, 3), max_size=30),
    keep=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_insert_counts_sum_a_partition_named_twice(picks: list[int], keep: list[bool]) -> None:
    """Rows are counted per partition path text, whatever the dictionary: a path its
    dictionary holds twice (no write makes one) is still one partition."""
    names = pa.array(["p=a", "p=b", "p=a", "p=c"], pa.string())
    column = pa.DictionaryArray.from_arrays(pa.array(picks, pa.int32()), names)
    tagged = pa.table({PARTITION: column})
    new = pa.array(keep[: len(picks)], pa.bool_())
    text = names.to_pylist()
    want = Counter(text[p] for p, k in zip(picks, keep, strict=False) if k)
    assert insert_counts(tagged, new) == dict(want)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["day=1", "day=2", ""]),
            st.none() | st.sampled_from(["day=1", "day=2"]),
            st.sampled_from([OP_UPSERT, OP_DELETE]),
        ),
        max_size=40,
    ),
    all_new=st.booleans(),
    encoded=st.booleans(),
)
def test_new_rows_and_insert_counts_equal_a_python_model(
    rows: list[tuple[str, str | None, int]], all_new: bool, encoded: bool
) -> None:
    """A row is new to its partition when it is an upsert whose key was held nowhere or in
    another partition; a first load (no old partition anywhere) takes the short way and must
    agree. Old file ids: -1 where none, else an index of the id itself."""
    olds = [None if all_new else old for _, old, _ in rows]
    ids = [None if old is None else f"f{old}" for old in olds]
    tagged = pa.table(
        {
            PARTITION: _texts([p for p, _, _ in rows], True),
            OLD_PARTITION: _texts(olds, encoded),
            OLD_FILE_ID: _texts(ids, encoded),
            OP: pa.array([op for _, _, op in rows], pa.int8()),
        }
    )
    expected = [op == OP_UPSERT and old != p for (p, _, op), old in zip(rows, olds, strict=True)]
    new = new_in_partition(tagged)
    assert new.to_pylist() == expected
    counted = Counter(p for (p, _, _), new in zip(rows, expected, strict=True) if new)
    assert insert_counts(tagged, new) == dict(counted)
    (found,), known = codes([tagged.column(OLD_FILE_ID)])
    assert [None if c < 0 else known[int(c)].as_py() for c in found] == ids
    (old, now), known = codes([tagged.column(OLD_PARTITION), tagged.column(PARTITION)])
    assert [None if c < 0 else known[int(c)].as_py() for c in old] == olds
    assert [known[int(c)].as_py() for c in now] == [p for p, _, _ in rows]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=4), min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2**64 - 1)), max_size=200),
)
def test_slots_by_hash_equal_a_per_row_model(rooms: list[list[int]], rows: list) -> None:
    """Each insert goes to the slot of its partition whose share of the room holds its key
    hash modulo the room: the vectorized choice equals one row at a time in Python."""
    rows = [(p % len(rooms), h) for p, h in rows] or [(0, 7)]
    plans = [(c, [Slot(f"p{c}-s{j}", n) for j, n in enumerate(r)]) for c, r in enumerate(rooms)]
    parts = np.array([p for p, _ in rows], dtype=np.int32)
    hashes = np.array([h for _, h in rows], dtype=np.uint64)
    used = sorted(set(parts.tolist()))
    chosen, names = by_hash(parts, hashes, [plans[c] for c in used], [])
    first, expected_names = {}, []
    for c in used:
        first[c] = len(expected_names)
        expected_names += [s.file_id for s in plans[c][1]]
    expected = []
    for p, h in rows:
        sizes = [s.rows for s in plans[p][1]]
        left = h % sum(sizes)
        j = 0
        while left >= sizes[j]:
            left -= sizes[j]
            j += 1
        expected.append(first[p] + j)
    assert names.to_pylist() == expected_names
    assert chosen.tolist() == expected


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["p0", "p1"]),
            st.sampled_from([None, "p0", "p1"]),
            st.sampled_from([OP_UPSERT, OP_UPSERT, OP_DELETE]),
        ),
        max_size=30,
    ),
    all_new=st.booleans(),
)
def test_routes_equal_a_python_model(rows: list[tuple[str, str | None, int]], all_new) -> None:
    """Every row gets a target: a held key's own group, unless it moves partition (then a
    slot of its new partition, and a delete row for its old group); a new key a slot; a
    delete of a key held nowhere is dropped. A first write (no key held) takes the short way
    and must agree."""
    olds = [None if all_new else old for _, old, _ in rows]
    keys = [f"k{i:02d}" for i in range(len(rows))]
    tagged = pa.table(
        {
            RECORD_KEY: pa.array(keys, pa.string()),
            PARTITION: _texts([p for p, _, _ in rows], True),
            OLD_PARTITION: _texts(olds, True),
            OLD_FILE_ID: _texts([None if o is None else f"f-{o}" for o in olds], True),
            OP: pa.array([op for _, _, op in rows], pa.int8()),
            KEY_HASH: pa.array(range(len(rows)), pa.int64()),
        }
    )
    plan = {p: [Slot(f"s-{p}", 100)] for p in ("p0", "p1")}
    routed = route(tagged, plan, new_in_partition(tagged))
    got = sorted(
        zip(
            routed.column(RECORD_KEY).to_pylist(),
            routed.column(OP).to_pylist(),
            routed.column(PARTITION).cast(pa.string()).to_pylist(),
            routed.column(TARGET_FILE_ID).cast(pa.string()).to_pylist(),
            strict=True,
        )
    )
    expected = []
    for key, (p, _, op), old in zip(keys, rows, olds, strict=True):
        if op == OP_DELETE:
            if old is not None:
                expected.append((key, op, p, f"f-{old}"))
            continue
        expected.append((key, op, p, f"f-{old}" if old == p else f"s-{p}"))
        if old is not None and old != p:  # moved: a delete in the old group
            expected.append((key, OP_DELETE, old, f"f-{old}"))
    assert got == sorted(expected)
