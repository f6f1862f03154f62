"""New file groups written as one batch (``writers.write.newgroups``) against the same groups
written one by one (``writers.write.filegroup.rewrite_file_group``): the same files, byte for
byte, and the same statuses."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import tempfile
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace as msgspec_replace

import lakebraid.writers.engine.rewrites as rewrites
from lakebraid.index.keys import RECORD_KEY
from lakebraid.metadata.commits import unpack_keys
from lakebraid.timeline.layout import TableLayout
from lakebraid.timeline.table_config import text_to_type
from lakebraid.writers.client import WriteClient
from lakebraid.writers.write.filegroup import (
    OP,
    OP_DELETE,
    OP_UPSERT,
    RewriteTask,
    rewrite_file_group,
)
from lakebraid.writers.write.newgroups import (
    ONE_THREAD_ROWS,
    SMALL_GROUP_ROWS,
    SYNC_WRITE_THREADS,
    WRITE_THREADS,
    _threads,
    qualifies,
    write_new_groups,
)

INSTANT = "20260301000000000"
SCHEMA = [
    ("id", "string", False),
    ("day", "string", True),
    ("n", "int64", True),
    ("x", "double", True),
    ("note", "string", True),
    ("flag", "bool", True),
    ("at", "timestamp[us]", True),
    ("price", "decimal128(10, 2)", True),
    ("tags", "list<item: int64>", True),
    ("blob", "binary", True),
    ("big", "uint64", True),
    ("on", "date32[day]", True),
    ("utc", "timestamp[ns, tz=UTC]", True),
]


def _row(key: str, delete: bool = False, **values: object) -> dict:
    """A row of the test schema: ``values`` given, every other column null."""
    return {"id": key, **{name: None for name, _, _ in SCHEMA[2:]}, **values, "delete": delete}


UTC_NS = pa.timestamp("ns", tz="UTC")
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
row = st.fixed_dictionaries(
    {
        "id": st.integers(0, 60).map(lambda i: f"k{i:02d}"),
        "n": st.none() | st.integers(-(2**63), 2**63 - 1),
        "x": st.none() | floats,
        "note": st.none() | texts,
        "flag": st.none() | st.booleans(),
        "at": st.none() | st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)),
        "price": st.none() | st.decimals(-(10**7), 10**7, places=2, allow_nan=False),
        "tags": st.none() | st.lists(st.integers(-5, 5), max_size=3),
        "blob": st.none() | st.binary(max_size=5),
        "big": st.none() | st.integers(0, 2**64 - 1),
        "on": st.none() | st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)),
        "utc": st.none() | st.integers(-(2**62), 2**62).map(lambda ns: pa.scalar(ns, UTC_NS)),
        "delete": st.booleans(),
    }
)


def _task(root: str, day: str | None) -> RewriteTask:
    return RewriteTask(
        root=root,
        record_key="id",
        partition="" if day is None else f"day={day}",
        file_id=str(uuid.uuid4()),
        old_file=None,
        instant=INSTANT,
        write_token="1-2",
        schema=list(SCHEMA),
    )


def _rows(groups: list[list[dict]], days: list[str | None]) -> tuple[pa.Table, list[np.ndarray]]:
    """Every group's rows in one table (groups interleaved, as a write's payload holds
    them), and each group's positions in it."""
    flat, owner = [], []
    for g, rows in enumerate(groups):
        seen: set[str] = set()
        for r in rows:
            if r["id"] in seen:
                continue  # a write de-duplicates keys before its groups see them
            seen.add(r["id"])
            flat.append({**r, "day": days[g]})
            owner.append(g)
    order = np.random.default_rng(len(flat)).permutation(len(flat))
    flat = [flat[i] for i in order]
    owner = np.asarray(owner, dtype=np.int64)[order] if len(flat) else np.zeros(0, np.int64)
    schema = pa.schema([(name, text_to_type(text)) for name, text, _ in SCHEMA])
    table = pa.Table.from_pylist([{k: r[k] for k in schema.names} for r in flat], schema)
    table = table.append_column(RECORD_KEY, table.column("id"))
    ops = [OP_DELETE if r["delete"] else OP_UPSERT for r in flat]
    table = table.append_column(OP, pa.array(ops, pa.int8()))
    return table, [np.flatnonzero(owner == g) for g in range(len(groups))]


def _both(
    groups: list[list[dict]], days: list[str | None], sync: bool = True
) -> tuple[list, list, str, str]:
    a, b = tempfile.mkdtemp(), tempfile.mkdtemp()
    table, positions = _rows(groups, days)
    tasks = [_task(a, day) for day in days]
    batched = write_new_groups(tasks, table, positions, sync=sync)  # threads, or this one
    alone = [
        rewrite_file_group(RewriteTask(**{**_fields(t), "root": b}), table.take(p))
        for t, p in zip(tasks, positions, strict=True)
    ]
    return batched, alone, a, b


def _fields(task: RewriteTask) -> dict:
    return {f: getattr(task, f) for f in task.__struct_fields__}


def _check_same(batched: list, alone: list, a: str, b: str) -> None:
    assert len(batched) == len(alone)
    for one, other in zip(batched, alone, strict=True):
        assert one == other
        if one.file_name is not None:
            folder = TableLayout(a).partition_dir(one.partition)
            there = TableLayout(b).partition_dir(other.partition)
            with (
                open(f"{folder}/{one.file_name}", "rb") as x,
                open(f"{there}/{other.file_name}", "rb") as y,
            ):
                assert x.read() == y.read(), one.file_name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(row, max_size=8), min_size=1, max_size=6), st.booleans(), st.booleans())
def test_batched_groups_equal_groups_written_one_by_one(groups, partitioned, sync) -> None:
    days = [f"2026-03-{g:02d}" if partitioned else None for g in range(len(groups))]
    if not partitioned:
        days = [None] * len(groups)
    batched, alone, a, b = _both(groups, days, sync)
    _check_same(batched, alone, a, b)
    for status, rows in zip(batched, groups, strict=True):
        first = {}
        for r in rows:
            first.setdefault(r["id"], r)  # the one row of a key the write keeps
        stored = {key for key, r in first.items() if not r["delete"]}
        assert set(unpack_keys(status.keys_added).to_pylist()) == stored
        assert status.rows == len(stored) and (status.file_name is None) == (not stored)


def test_small_local_groups_not_fsynced_alone_are_written_on_one_thread() -> None:
    """Files fsynced one by one keep their threads (a wait on the disk); an object store's
    too (a wait on the network); small local ones are written on the calling thread."""
    small, large = ONE_THREAD_ROWS - 1, ONE_THREAD_ROWS
    assert _threads(local=True, sync=False, mean_rows=small) == 1
    assert _threads(local=True, sync=False, mean_rows=large) == WRITE_THREADS > 1
    assert _threads(local=False, sync=False, mean_rows=small) == WRITE_THREADS
    assert _threads(local=True, sync=True, mean_rows=small) == SYNC_WRITE_THREADS > 1


def test_a_file_holds_only_its_own_partition_value() -> None:
    rows = [
        _row(f"k{i}", n=i, x=0.5, note="é", flag=True, price=decimal.Decimal("1.25"), tags=[1])
        for i in range(3)
    ]
    days = [f"2026-04-{d:02d}" for d in range(1, 21)]
    batched, alone, a, b = _both([rows] * 20, days)
    _check_same(batched, alone, a, b)
    folder = TableLayout(a).partition_dir(batched[7].partition)
    column = pq.read_table(f"{folder}/{batched[7].file_name}").column("day")
    assert pa.types.is_dictionary(column.type)
    assert column.chunk(0).dictionary.to_pylist() == [days[7]]  # not the batch's 20 values


def test_statistics_of_nan_null_and_unicode_columns() -> None:
    rows = [
        _row("b", x=float("nan"), note="ζ"),
        _row(
            "a",
            n=-3,
            x=2.0,
            note="a",
            flag=False,
            at=dt.datetime(2020, 1, 1),
            tags=[],
            price=decimal.Decimal("-1.50"),
        ),
        _row("c", delete=True),
    ]
    batched, alone, a, b = _both([rows, rows[:1], rows[2:]], ["d1", "d2", "d3"])
    _check_same(batched, alone, a, b)
    stats = {s.column: s for s in batched[0].stats}
    assert (stats["n"].min_value, stats["n"].max_value, stats["n"].null_count) == (-3, -3, 1)
    assert (stats["note"].min_value, stats["note"].max_value) == ("a", "ζ")
    assert batched[2].file_name is None and batched[2].keys_added == b""


def test_only_new_small_groups_qualify_and_mixed_writes_are_refused(tmp_path) -> None:
    task = _task(str(tmp_path), "d")
    assert qualifies(task, SMALL_GROUP_ROWS)
    assert not qualifies(task, SMALL_GROUP_ROWS + 1)
    old = RewriteTask(**{**_fields(task), "old_file": "f.parquet"})
    assert not qualifies(old, 1)
    table, positions = _rows([[_row("k", n=1, x=1.0, note="", flag=True)]], ["d"])
    with pytest.raises(ValueError, match="not new"):
        write_new_groups([old], table, positions)
    other = RewriteTask(**{**_fields(task), "instant": "20260302000000000"})
    with pytest.raises(ValueError, match="one write"):
        write_new_groups([task, other], table, [positions[0], positions[0][:0]])
    assert not os.listdir(tmp_path)  # nothing written


def test_a_dictionary_column_of_several_values_in_one_file_keeps_them_all() -> None:
    """Not a layout a write makes (a partition column holds its partition's value), but the
    batch must not assume it: each file keeps every value its rows hold."""
    rows = [_row(f"k{i}", n=i) for i in range(4)]
    table, positions = _rows([rows, rows[:2]], ["d1", "d2"])
    day = pa.array(["d1", "d9", "d1", "d8", "d2", "d2"][: table.num_rows])
    table = table.set_column(table.schema.get_field_index("day"), "day", day)
    a, b = tempfile.mkdtemp(), tempfile.mkdtemp()
    tasks = [_task(a, "d1"), _task(a, "d2")]
    batched = write_new_groups(tasks, table, positions)
    alone = [
        rewrite_file_group(RewriteTask(**{**_fields(t), "root": b}), table.take(p))
        for t, p in zip(tasks, positions, strict=True)
    ]
    for one, other in zip(batched, alone, strict=True):
        assert one == msgspec_replace(other, size=one.size, crc32=one.crc32)
        read = pq.read_table(f"{TableLayout(a).partition_dir(one.partition)}/{one.file_name}")
        there = pq.read_table(f"{TableLayout(b).partition_dir(other.partition)}/{other.file_name}")
        assert read.to_pylist() == there.to_pylist()  # dictionaries decoded


def _wide(n: int, ts: int, big: int = 0) -> pa.Table:
    """``n`` rows in ``n`` new days, and ``big`` more rows in one more day."""
    ids = [f"k{i}" for i in range(n)] + [f"b{i}" for i in range(big)]
    days = [f"d{i:03d}" for i in range(n)] + ["big"] * big
    return pa.table({"id": ids, "day": days, "ts": [ts] * (n + big), "v": [float(ts)] * (n + big)})


@pytest.mark.parametrize(
    ("n", "kind"),  # per-file markers, then one batch marker; both table types
    [(20, "copy_on_write"), (70, "copy_on_write"), (20, "merge_on_read")],
)
def test_a_write_of_many_new_partitions_reads_back_exactly(tmp_path, batches, n, kind):
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type=kind)
    c.insert(_wide(3, 1))  # three groups that the next write updates (or appends to)
    c.upsert(_wide(n, 2, big=SMALL_GROUP_ROWS + 5))
    assert batches == [n - 3]  # the new small groups only: not the big one, not the old three
    got = c.read_arrow().sort_by("id")
    want = _wide(n, 2, big=SMALL_GROUP_ROWS + 5).sort_by("id")
    assert got.select(want.column_names).cast(want.schema).equals(want)
    assert c.validate() == []
    found = c.lookup(["k5", f"k{n - 1}", "b0", "nope"])
    assert found["k5"].partition == "day=d005" and found[f"k{n - 1}"] is not None
    assert found["b0"].partition == "day=big" and found["nope"] is None
    assert not list((tmp_path / "t" / ".braid" / "markers").glob("*/*"))


def test_a_batch_that_fails_part_way_leaves_nothing(tmp_path, fail_parquet_write) -> None:
    """20 new groups (file markers, no batch marker) whose 10th file fails: the write rolls
    itself back from the markers written so far; no file or row of it is left."""
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    calls = fail_parquet_write(10)
    with pytest.raises(OSError, match="injected"):
        c.insert(_wide(20, 1))
    assert len(calls) >= 10
    assert not list((tmp_path / "t").glob("day=*/*.parquet"))
    assert c.read_arrow().num_rows == 0 and c.validate() == []
    c.insert(_wide(20, 2))
    assert c.read_arrow().num_rows == 20 and c.validate() == []


def test_new_groups_on_an_object_store_and_in_nested_partitions(s3_url, tmp_path) -> None:
    """The batch on S3 (no folders, each file's CRC counted as it uploads) and on local disk
    under two partition levels (the parent folders made too)."""
    n = 24
    rows = pa.table(
        {
            "id": [f"k{i}" for i in range(n)],
            "day": [f"d{i % 12:02d}" for i in range(n)],
            "region": ["eu" if i < 12 else "us" for i in range(n)],
            "ts": [1] * n,
        }
    )
    for url in (s3_url(), str(tmp_path / "t")):
        c = WriteClient.create(url, "id", ["day", "region"], "ts")
        c.insert(rows)
        assert c.read_arrow().sort_by("id").select(rows.column_names).to_pylist() == (
            rows.sort_by("id").to_pylist()
        )
        assert c.validate() == [], url
        assert c.lookup(["k13"])["k13"].partition == "day=d01/region=us"


def test_a_large_write_is_batched_in_bounded_pieces(tmp_path, monkeypatch, batches) -> None:
    """Each batch holds a copy of its rows: past ``BATCH_BYTES`` the groups go in several
    batches, and the write is the same."""
    monkeypatch.setattr(rewrites, "BATCH_BYTES", 300)  # a few rows per batch
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    c.insert(_wide(40, 1))
    assert sum(batches) == 40 and len(batches) > 4 and max(batches) < 40
    got = c.read_arrow().sort_by("id")
    assert got.column("id").to_pylist() == sorted(f"k{i}" for i in range(40))
    assert c.validate() == []


@pytest.mark.parametrize("rows", [1_500, SMALL_GROUP_ROWS])
def test_groups_past_the_small_file_size_choose_encodings_as_files_of_their_own(rows) -> None:
    """Groups of 1,024 rows or more take ``encoding.choose``'s rule in a batch too (distinct
    numbers plain, a few-valued text column an Arrow dictionary): the same bytes as one by
    one, and the files say so."""
    rng = np.random.default_rng(rows)
    statuses = ["new", "paid", "void"]

    def group(g: int) -> list[dict]:
        return [
            _row(f"g{g}-{i:05d}", n=g * rows + i, x=float(rng.random()), note=statuses[i % 3])
            for i in range(rows)
        ]

    batched, alone, a, b = _both([group(0), group(1)], ["2026-05-01", "2026-05-02"])
    _check_same(batched, alone, a, b)
    folder = TableLayout(a).partition_dir(batched[0].partition)
    parquet = pq.ParquetFile(f"{folder}/{batched[0].file_name}")
    encodings = {
        parquet.metadata.row_group(0).column(c).path_in_schema: parquet.metadata.row_group(0)
        .column(c)
        .encodings
        for c in range(parquet.metadata.num_columns)
    }
    assert "RLE_DICTIONARY" not in encodings["n"] and "RLE_DICTIONARY" not in encodings["x"]
    assert "RLE_DICTIONARY" in encodings["note"]
    assert pa.types.is_dictionary(parquet.schema_arrow.field("note").type)
