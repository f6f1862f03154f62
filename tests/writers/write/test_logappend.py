"""A merge-on-read file group written by appending logs reads as the copy-on-write group the
same writes give by rewriting it (``rewrite_file_group``, step by step), and its write
statuses count the same inserts, updates, deletes and index keys; each log's footers carry
the slice's keys so far."""

from __future__ import annotations

import os
import tempfile

import msgspec
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.datalog import BlockType, iter_blocks, read_last_footer
from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION
from lakebraid.metadata.commits import unpack_keys
from lakebraid.timeline.layout import TableLayout, parse_data_file_name
from lakebraid.writers.errors import CorruptDataLogError
from lakebraid.writers.write import logappend
from lakebraid.writers.write.datafile import data_schema, read_parquet
from lakebraid.writers.write.filegroup import (
    OP,
    OP_DELETE,
    OP_UPSERT,
    RewriteTask,
    rewrite_file_group,
)
from lakebraid.writers.write.logappend import (
    IN_GROUP,
    AppendTask,
    TaskSet,
    append_to_file_group,
    mark_in_group,
)
from lakebraid.writers.write.logmerge import merge_slice
from lakebraid.writers.write.route import PARTITION, TARGET_FILE_ID

SCHEMA = [("id", "string", False), ("ts", "int64", True), ("v", "int64", True)]
FID, PART = "0b0e1c2d-0000-4000-8000-000000000001", "day=1"
KEYS = [f"k{i:02d}" for i in range(16)]
writes = st.lists(
    st.tuples(
        st.dictionaries(
            st.sampled_from(KEYS), st.tuples(st.integers(0, 3), st.integers(-(2**63), 2**63 - 1))
        ),
        st.sets(st.sampled_from(KEYS)),
    )
    .map(lambda w: (w[0], w[1] - set(w[0])))  # one write never upserts and deletes a key
    .filter(lambda w: w[0] or w[1]),
    min_size=1,
    max_size=5,
)


def incoming(upserts: dict[str, tuple[int, int]], deletes: set[str], held: set[str]) -> pa.Table:
    keys = list(upserts) + sorted(deletes)
    return pa.table(
        {
            "id": keys,
            "ts": [upserts[k][0] for k in upserts] + [None] * len(deletes),
            "v": [upserts[k][1] for k in upserts] + [None] * len(deletes),
            RECORD_KEY: keys,
            OP: pa.array([0] * len(upserts) + [1] * len(deletes), pa.int8()),
            IN_GROUP: [k in held for k in keys],
        }
    )


def rows_of(table: pa.Table) -> dict[str, tuple]:
    return {r["id"]: (r["ts"], r["v"], r["_braid_commit_time"]) for r in table.to_pylist()}


@settings(max_examples=40, deadline=None)
@given(
    first=st.dictionaries(
        st.sampled_from(KEYS), st.tuples(st.integers(0, 3), st.integers(-(2**63), 2**63 - 1))
    ),
    later=writes,
)
def test_appended_logs_read_as_the_rewritten_group(first, later) -> None:
    with tempfile.TemporaryDirectory() as cow, tempfile.TemporaryDirectory() as mor:
        check_against_rewrites(cow, mor, first, later)


def check_against_rewrites(cow: str, mor: str, first: dict, later: list) -> None:
    def rewrite(root: str, old: str | None, time: str, data: pa.Table):
        task = RewriteTask(
            root=root,
            record_key="id",
            partition=PART,
            file_id=FID,
            old_file=old,
            instant=time,
            write_token="0-0",
            schema=SCHEMA,
        )
        return rewrite_file_group(task, data.drop_columns([IN_GROUP]))

    time = "20261126000000000"
    start = incoming(first, set(), set()) if first else incoming({"k99": (0, 0)}, set(), set())
    cow_file = rewrite(cow, None, time, start).file_name
    base = rewrite(mor, None, time, start).file_name
    held = set(start.column("id").to_pylist())
    logs: list[tuple[str, int]] = []
    for n, (upserts, deletes) in enumerate(later, 1):
        time = f"2026112600000{n:04d}"
        data = incoming(upserts, deletes, held)
        expected = rewrite(cow, cow_file, time, data)
        cow_file = expected.file_name  # None: the group is empty, gone from the listing
        task = AppendTask(
            root=mor,
            partition=PART,
            file_id=FID,
            base_file=base,
            instant=time,
            write_token="0-0",
            schema=SCHEMA,
            stats_columns=["id", "ts", "v"],
            previous_log=logs[-1][0] if logs else None,
            previous_size=logs[-1][1] if logs else 0,
        )
        got = append_to_file_group(task, data)
        assert (got.inserts, got.updates, got.deletes) == (
            expected.inserts,
            expected.updates,
            expected.deletes,
        )
        assert set(unpack_keys(got.keys_added).to_pylist()) == set(
            unpack_keys(expected.keys_added).to_pylist()
        )
        assert set(unpack_keys(got.keys_removed).to_pylist()) == set(
            unpack_keys(expected.keys_removed).to_pylist()
        )
        assert got.base_file == base and got.old_file is None
        if upserts or (deletes & held):
            assert parse_data_file_name(got.file_name).kind == "log"
            assert got.size == os.path.getsize(f"{mor}/{PART}/{got.file_name}")
            logs.append((got.file_name, got.size))
        else:
            assert got.file_name is None
        held = (held - deletes) | set(upserts)
        merged = read_slice(mor, base, [name for name, _ in logs])
        if expected.file_name is None:
            assert merged == {}
        else:
            stored = read_parquet_rows(cow, expected.file_name)
            assert merged == stored


def read_parquet_rows(root: str, name: str) -> dict[str, tuple]:
    import fsspec

    return rows_of(read_parquet(fsspec.filesystem("file"), f"{root}/{PART}/{name}"))


def read_slice(root: str, base: str, logs: list[str]) -> dict[str, tuple]:
    import fsspec

    fs = fsspec.filesystem("file")
    folder = TableLayout(root).partition_dir(PART)
    blocks = [b for name in logs for b in iter_blocks(fs, f"{folder}/{name}")]
    seen = 0
    for b in blocks:  # each footer's slice counts every block up to it
        seen += 1
        assert b.footer.slice.blocks == seen
        assert all(b.footer.slice_may_hold(k) for k in b.keys.to_pylist())
    if logs:
        last = read_last_footer(fs, f"{folder}/{logs[-1]}", os.path.getsize(f"{folder}/{logs[-1]}"))
        assert last == blocks[-1].footer
    kinds = [b.block_type for name in logs for b in iter_blocks(fs, f"{folder}/{name}")]
    assert all(k in (BlockType.DATA, BlockType.DELETE) for k in kinds)
    schema = data_schema(SCHEMA)
    base_rows = read_parquet(fs, f"{folder}/{base}")
    base_rows = base_rows.append_column(RECORD_KEY, base_rows.column("id"))
    return rows_of(merge_slice(base_rows, blocks, schema))


def test_a_damaged_previous_log_is_an_error_naming_it(tmp_path) -> None:
    root = str(tmp_path)
    task = AppendTask(
        root=root,
        partition=PART,
        file_id=FID,
        base_file=None,
        instant="20261126000000001",
        write_token="0-0",
        schema=SCHEMA,
    )
    first = append_to_file_group(task, incoming({"a": (1, 1)}, set(), set()))
    path = f"{root}/{PART}/{first.file_name}"
    with open(path, "r+b") as handle:
        handle.seek(first.size - 30)
        handle.write(b"\xff\xff")
    later = msgspec.structs.replace(
        task,
        instant="20261126000000002",
        previous_log=first.file_name,
        previous_size=first.size,
    )
    with pytest.raises(CorruptDataLogError) as info:
        append_to_file_group(later, incoming({"b": (1, 1)}, set(), set()))
    assert first.file_name in str(info.value)
    assert not os.path.exists(f"{root}/{PART}/{FID}_0-0_20261126000000002.log")


ids = st.sampled_from(["f1", "f2", "f3"]) | st.none()
parts = st.sampled_from(["day=1", "day=2", ""]) | st.none()


def _column(values: list, encoded: bool, split: int) -> pa.ChunkedArray:
    """A column of ``values`` as the route leaves it: strings or dictionaries, in two chunks."""
    whole = pa.array(values, pa.string())
    if encoded:
        whole = whole.dictionary_encode()
    return pa.chunked_array([whole.slice(0, split), whole.slice(split)], whole.type)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(ids, parts, ids, parts), max_size=20),
    encoded=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
    split=st.integers(0, 20),
)
def test_in_group_is_same_old_and_target_group(rows: list, encoded: tuple, split: int) -> None:
    """``_braid_in_group``: the row's old file id and partition are both set and equal its
    target's, whatever mix of string and dictionary columns the route hands over."""
    names = [OLD_FILE_ID, OLD_PARTITION, TARGET_FILE_ID, PARTITION]
    split = min(split, len(rows))
    table = pa.table(
        {name: _column([r[i] for r in rows], encoded[i], split) for i, name in enumerate(names)}
    )
    want = [
        old is not None and part is not None and old == target and part == new_part
        for old, part, target, new_part in rows
    ]
    got = mark_in_group(table)
    assert got.column(IN_GROUP).to_pylist() == want
    assert got.select(names).equals(table)


UUID1, UUID2, UUID3 = (f"00000000-0000-0000-0000-00000000000{n}" for n in (1, 2, 3))


def test_run_all_makes_every_written_file_durable_before_it_returns(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TaskSet.run_all`` (a Spark rewrite task's groups): the statuses ``run`` gives, each
    written file made durable (file and folder, ``sync_new_files``) before it returns, none
    for a group left empty; a failed fsync fails the call."""

    def task(partition: str, file_id: str) -> RewriteTask:
        return RewriteTask(
            root=str(tmp_path),
            record_key="id",
            partition=partition,
            file_id=file_id,
            old_file=None,
            instant="20261207000000001",
            write_token="0-0",
            schema=[("id", "string", False), ("v", "int64", True)],
        )

    def incoming(keys: list[str], op: int) -> pa.Table:
        values = list(range(len(keys)))
        return pa.table({"id": keys, "v": values, RECORD_KEY: keys, OP: [op] * len(keys)})

    tasks = TaskSet.of([task("p=a", UUID1), task("p=b", UUID2), task("p=c", UUID3)])
    groups = [
        (f"p=a\x00{UUID1}", incoming(["k1", "k2"], OP_UPSERT)),
        (f"p=b\x00{UUID2}", incoming(["k3"], OP_DELETE)),  # a delete of a key it lacks: no file
        (f"p=c\x00{UUID3}", incoming(["k4", "k5", "k6"], OP_UPSERT)),
    ]
    durable: list[str] = []
    real = logappend.sync_new_files
    monkeypatch.setattr(
        logappend, "sync_new_files", lambda fs, ps: (durable.extend(ps), real(fs, ps))
    )
    statuses = tasks.run_all(groups, attempt=5)
    assert [s.rows for s in statuses] == [2, 0, 3]
    assert statuses[1].file_name is None
    layout = TableLayout(str(tmp_path))
    written = [f"{layout.partition_dir(s.partition)}/{s.file_name}" for s in statuses if s.rows]
    assert sorted(durable) == sorted(written)
    assert all(os.path.exists(p) for p in written)
    assert [parse_data_file_name(s.file_name).write_token for s in statuses if s.rows] == [
        "0-5",
        "0-5",
    ]

    def refused(fs: object, paths: list[str]) -> None:
        raise OSError(5, "write-back failed", paths[0])

    monkeypatch.setattr(logappend, "sync_new_files", refused)
    with pytest.raises(OSError, match="write-back failed"):
        tasks.run_all(groups[:1], attempt=6)
