"""The write client against a model: random batches, reads as of every instant, index
exactness, and bad input that changes nothing. Runs on both engines."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from table_fixtures import DAYS, snapshot
from table_fixtures import random_batch as batch

from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.errors import ConfigError
from lakebraid.timeline.layout import parse_data_file_name
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError

pytestmark = pytest.mark.xdist_group("spark")
ENGINES = {"inprocess": {}, "spark": {"write.inprocess.max.rows": 0}}


def apply_model(model: dict[str, dict], data: pa.Table, op: str) -> None:
    rows = data.to_pylist()
    if op == "delete":
        for row in rows:
            model.pop(row["id"], None)
        return
    best: dict[str, tuple[int, int, dict]] = {}
    for seq, row in enumerate(rows):  # highest ts wins, then the later row
        rank = (row["ts"], seq)
        if row["id"] not in best or rank > best[row["id"]][:2]:
            best[row["id"]] = (*rank, row)
    for key, (_, _, row) in best.items():
        if key in model and model[key]["ts"] > row["ts"]:
            continue  # event-time ordering: an older event never overwrites the stored row
        model[key] = row


def table_rows(table: pa.Table) -> dict[str, dict]:
    cols = ["id", "day", "ts", "amount"]
    rows = table.select(cols).to_pylist()
    keys = [r["id"] for r in rows]
    assert len(keys) == len(set(keys)), "a key appears twice in the table"
    return {r["id"]: r for r in rows}


def check_index_and_listing(client: WriteClient, model: dict[str, dict]) -> None:
    """The listing names each group's newest file with its size and statistics, and the
    index finds every key where it is (any file system: local or S3)."""
    fs, root = client.table.fs, client.table.layout.root
    listed = client.files()
    for partition, files in listed.items():  # one partition's listing reads only its record
        assert client.files(partition=partition) == {partition: files}
    assert client.files(partition="day=1999-12-31") == {}
    on_disk: dict[str, list[str]] = {}
    sizes = {path: info["size"] for path, info in fs.find(root, detail=True).items()}
    for path in sizes:  # the store's own listing: one request, not two per file
        if path.endswith(".parquet") and "/.braid/" not in path:
            name = path.rsplit("/", 1)[-1]
            on_disk.setdefault(parse_data_file_name(name).file_id, []).append(path)
    holder: dict[str, str] = {}
    stats = {(s.partition, s.file, s.column): s for s in client.column_stats("amount")}
    for partition, files in listed.items():
        for name, size in files.items():
            path = f"{root}/{partition}/{name}"
            assert sizes.get(path) == size, (path, size)
            fid = parse_data_file_name(name).file_id
            newest = max(on_disk[fid], key=lambda p: parse_data_file_name(p.split("/")[-1]).instant)
            assert newest == path, "the listing must name a file group's newest file"
            with fs.open(path, "rb") as handle:
                data = pq.read_table(handle)
            for key in data.column("id").to_pylist():
                holder[key] = fid
            s = stats[(partition, name, "amount")]
            amount = data.column("amount")
            assert (s.min_value, s.max_value) == (pc.min(amount).as_py(), pc.max(amount).as_py())
            assert s.null_count == amount.null_count
            assert s.value_count == len(amount) - amount.null_count
    assert set(holder) == set(model)
    located = client.lookup([*list(model), "never-written"])
    assert located.pop("never-written") is None
    for key, location in located.items():
        assert location is not None and location.file_id == holder[key], key


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("engine", ["inprocess", "spark"])
def test_random_batches_match_the_model_now_and_as_of_every_instant(
    tmp_path, spark, engine, where, request
) -> None:
    rng = random.Random(7)
    options = {"write.target.file.rows": 6, "clean.inline": False, **ENGINES[engine]}
    path = str(tmp_path / "t") if where == "local" else request.getfixturevalue("s3_url")()
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark, **options)
    keys = [f"k{i:03d}" for i in range(40)]
    model: dict[str, dict] = {}
    history: list[tuple[str, dict[str, dict]]] = []
    deleted_ever: list[str] = []

    def feed(data: pa.Table):
        return spark.createDataFrame(data) if engine == "spark" else data

    # seed 7: 8 steps are a bulk insert, inserts, upserts and a delete of 4 keys held (the
    # late upserts and the skipped insert come later: only the in-process walk on local disk)
    steps = 30 if (engine, where) == ("inprocess", "local") else 8
    for step in range(steps):
        op = rng.choice(["insert", "upsert", "upsert", "delete"]) if step else "bulk_insert"
        if op == "delete":
            gone = rng.sample(keys, 5)
            data = pa.table({"id": gone})
            client.delete(feed(pa.table({"id": gone + gone[:2]})))  # a key twice is one delete
            deleted_ever += [k for k in gone if k in model]
        elif op in ("insert", "bulk_insert"):
            fresh = [k for k in keys if k not in model]
            if not fresh:
                continue
            data = batch(rng, fresh, 6, step * 10)
            getattr(client, op)(feed(data))
        else:
            late = rng.random() < 0.4  # an older event for keys the table may hold
            data = batch(rng, keys, 12, max(0, step * 10 - 25) if late else step * 10)
            client.upsert(feed(data))
        apply_model(model, data, op)
        done = client.timeline()[-1]
        history.append((done.completion_time, {k: dict(v) for k, v in model.items()}))
        assert table_rows(client.read_arrow()) == model
        check_index_and_listing(client, model)
        assert client.validate() == []
    for as_of, expected in history:
        assert table_rows(client.read_arrow(as_of=as_of)) == expected, as_of
    assert deleted_ever, "the random walk must delete keys the table held"


@pytest.fixture
def client(tmp_path, spark) -> WriteClient:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", spark=spark)
    c.insert(pa.table({"id": ["a", "b"], "day": DAYS[:2], "ts": [1, 1], "amount": [1.0, 2.0]}))
    return c


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pa.table({"id": ["x", None], "day": DAYS[:2], "ts": [1, 1]}), "null record key"),
        (pa.table({"day": DAYS[:1], "ts": [1]}), "no record key column 'id'"),
        (pa.table({"id": ["x"], "day": DAYS[:1], "ts": ["late"]}), "column 'ts' has type string"),
        (pa.table({"id": ["x"], "ts": [1]}), "partition field"),
        (
            pa.Table.from_arrays([pa.array(["x"]), pa.array(["y"])], names=["id", "id"]),
            r"duplicate column names in the input: \['id', 'id'\]",
        ),
        (
            pa.table({"id": ["x"], "day": DAYS[:1], "ts": [1], "v": [1], "V": [2]}),
            r"differ in more than case .*\['id', 'day', 'ts', 'v', 'V'\]",
        ),
        (pa.table({"id": ["x"], "day": DAYS[:1], "ts": [1], "": [1]}), "must be non-empty"),
    ],
    ids=[
        "null-key",
        "no-key-column",
        "type-change",
        "no-partition-field",
        "repeated-key",
        "case-twins",
        "empty-name",
    ],
)
def test_bad_input_is_refused_before_anything_is_written(client, data, message) -> None:
    before = snapshot(client)
    for write in (client.upsert, client.insert):
        with pytest.raises(InputError, match=message) as info:
            write(data)
        assert client.path in str(info.value)
    assert snapshot(client) == before


def test_new_nullable_columns_are_added(client) -> None:
    client.upsert(
        pa.table({"id": ["c"], "day": DAYS[:1], "ts": [2], "amount": [3.0], "note": ["hi"]})
    )
    rows = client.read_arrow().sort_by("id").to_pydict()
    assert rows["note"] == [None, None, "hi"]
    assert [f.name for f in client.schema()][-1] == "note"


def test_read_prunes_files_and_matches_the_filter(client) -> None:
    client.upsert(
        pa.table({"id": ["c", "d"], "day": DAYS[2:] * 2, "ts": [1, 1], "amount": [50.0, 60.0]})
    )
    where = "amount > 10 and day = '2024-01-03'"
    rows = client.read(where=where).toArrow()
    assert sorted(rows.column("id").to_pylist()) == ["c", "d"]
    chosen = client.file_paths(where=where)
    assert len(chosen) == 1 and "day=2024-01-03" in chosen[0]
    assert os.path.exists(chosen[0])
    column = (F.col("amount") > 10) & (F.col("day") == "2024-01-03")
    assert client.file_paths(where=column) == chosen
    assert sorted(client.read(where=column).toArrow().column("id").to_pylist()) == ["c", "d"]
    assert len(client.file_paths(where=None)) == 3


def test_a_filter_on_a_column_the_table_lacks_is_refused(client) -> None:
    """A comparison on a misspelt column names it (Spark would not resolve it; pruning
    without it would quietly give every file), in both case modes of Spark's settings."""
    client.upsert(
        pa.table({"id": ["a", "b"], "day": DAYS[:2], "ts": [1, 1], "amount": [1.0, 20.0]})
    )
    for where in ("amout > 10", "amount > 10 and dya = '2024-01-03'", "not (zz is null)"):
        with pytest.raises(InputError, match=r"compares '(amout|dya|zz)'") as info:
            client.file_paths(where=where)
        assert client.path in str(info.value) and "columns: id, day, ts, amount," in str(info.value)
        with pytest.raises(InputError, match="compares"):
            client.read(where=where)
    assert len(client.file_paths(where="AMOUNT < 10")) == 1  # ASCII names: any case
    assert len(client.file_paths(where="_braid_commit_time > '0'")) == 2
    # Spark reads these names as functions: no column is named, nothing refused
    assert len(client.file_paths(where="current_schema = 'default' and user = 'x'")) == 2
    client.spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        with pytest.raises(InputError, match="compares 'AMOUNT'"):
            client.read(where="AMOUNT > 10")
    finally:
        client.spark.conf.unset("spark.sql.caseSensitive")


def test_opening_a_table_of_another_format_version_is_a_clear_error(client) -> None:
    config = Path(client.path) / ".braid" / "table.json"
    config.write_text(config.read_text().replace('"format_version": 1', '"format_version": 0'))
    with pytest.raises(ConfigError, match="format version 0") as info:
        WriteClient.open(client.path)
    assert "upgrade lakebraid or migrate the table" in str(info.value)


def test_as_of_a_write_time_means_after_that_write(client) -> None:
    first = client.timeline()[-1]
    second = client.upsert(
        pa.table({"id": ["a", "z"], "day": DAYS[:2], "ts": [5, 5], "amount": [9.0, 9.0]})
    )
    after_first = table_rows(client.read_arrow(as_of=first.time))
    assert after_first == table_rows(client.read_arrow(as_of=first.completion_time))
    assert set(after_first) == {"a", "b"} and after_first["a"]["amount"] == 1.0
    assert table_rows(client.read_arrow(as_of=second)) == table_rows(client.read_arrow())
    assert client.lookup(["z"], as_of=first.time)["z"] is None
    assert client.lookup(["z"], as_of=second)["z"] is not None


@pytest.mark.parametrize("engine", ["inprocess", "spark"])
@pytest.mark.parametrize(
    ("key_type", "physical"),
    [(pa.string(), False), (pa.int64(), False), (pa.int16(), False), (pa.date32(), True)],
)
def test_record_key_column_is_virtual_for_string_and_integer_keys(
    tmp_path, spark, engine, key_type, physical
) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", spark=spark, **ENGINES[engine])
    ids = pa.array([3, 11, 250, 7], pa.int32()).cast(key_type)

    def rows(keys: pa.Array, ts: int) -> pa.Table:
        n = len(keys)
        return pa.table({"id": keys, "day": (DAYS * 2)[:n], "ts": [ts] * n, "amount": [1.5] * n})

    if engine == "spark":
        c.insert(spark.createDataFrame(rows(ids, 1).to_pandas()))
    else:
        c.insert(rows(ids, 1))
    c.upsert(rows(ids.slice(1, 2), 2))  # rewrites groups that hold other keys too
    gone = pc.cast(ids.slice(0, 1), pa.string()).to_pylist()
    c.delete(gone)
    texts = pc.cast(ids, pa.string()).to_pylist()
    for partition, files in c.files().items():
        for name in files:
            stored = pq.read_schema(Path(c.path) / partition / name).names
            assert ("_braid_record_key" in stored) is physical, (partition, name)
    arrow = c.read_arrow()
    got = dict(zip(arrow["_braid_record_key"].to_pylist(), arrow["ts"].to_pylist(), strict=True))
    assert got == {texts[1]: 2, texts[2]: 2, texts[3]: 1}
    assert arrow["_braid_record_key"].to_pylist() == pc.cast(arrow["id"], pa.string()).to_pylist()
    frame = c.read().select("_braid_record_key", "ts").toArrow()
    assert dict(zip(*frame.to_pydict().values(), strict=True)) == got
    source = spark.read.format("lakebraid").load(c.path).select("_braid_record_key", "ts")
    assert dict(zip(*source.toArrow().to_pydict().values(), strict=True)) == got
    located = c.lookup(texts)
    assert located[gone[0]] is None and all(located[k] is not None for k in texts[1:])
    assert c.validate() == []


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_inserts_fill_a_small_file_group_and_updates_alone_look_up_no_room(
    tmp_path, table_type: str
) -> None:
    """Under ``write.small.file.rows`` a group takes new keys before a new group is made; an
    upsert of stored keys only makes none either (it plans no insert)."""
    options = {"write.small.file.rows": 100, "write.target.file.rows": 1000}
    client = WriteClient.create(
        str(tmp_path / "t"), "id", ["day"], "ts", table_type=table_type, **options
    )

    def rows(ids: range, ts: int) -> pa.Table:
        return pa.table(
            {"id": [f"k{i:03d}" for i in ids], "day": ["d1"] * len(ids), "ts": [ts] * len(ids)}
        )

    def groups() -> set[str]:
        names = [p.rsplit("/", 1)[1] for p in client.file_paths()]
        return {parse_data_file_name(n).file_id for n in names}

    client.bulk_insert(rows(range(10), 1))
    (group,) = groups()
    client.upsert(rows(range(5), 2))  # updates only
    assert groups() == {group}
    client.upsert(rows(range(5, 15), 3))  # 5 updates, 5 new keys: into the small group
    assert groups() == {group}
    table = client.read_arrow()
    assert sorted(table.column("id").to_pylist()) == [f"k{i:03d}" for i in range(15)]


def test_the_small_groups_are_looked_up_in_the_inserted_partitions_only(tmp_path) -> None:
    """An upsert that inserts into one day reads that day's file statistics, not the
    table's: the partition-scoped read is the full one filtered, and the new keys still fill
    the day's small group."""
    options = {"write.small.file.rows": 100, "write.target.file.rows": 1000}
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **options)
    days = ["d1", "d2", "d3"]
    ids = [f"k{i:03d}" for i in range(30)]
    client.bulk_insert(pa.table({"id": ids, "day": days * 10, "ts": [1] * 30}))
    reader = MetadataTable(client.table).reader()
    full = reader.column_stats("id")
    assert {r.partition for r in full} == {"day=d1", "day=d2", "day=d3"}
    some = reader.column_stats("id", partitions=["day=d2"])
    assert some and some == [r for r in full if r.partition == "day=d2"]
    assert reader.column_stats("id", partitions=[]) == []
    every = reader.column_stats(partitions=["day=d3"])
    assert every == [r for r in reader.column_stats() if r.partition == "day=d3"]
    before = {p.rsplit("/", 1)[1] for p in client.file_paths() if "day=d2" in p}
    client.upsert(pa.table({"id": ["n1", "n2"], "day": ["d2", "d2"], "ts": [2, 2]}))
    after = {p.rsplit("/", 1)[1] for p in client.file_paths() if "day=d2" in p}
    assert len(after) == len(before) == 1  # into the small group, rewritten
    assert client.read_arrow().num_rows == 32


def test_a_new_table_has_at_least_min_groups_index_groups(tmp_path) -> None:
    """``metadata.record_index.min.groups`` holds at creation with or without an expected
    record count (it was ignored without one: one group)."""

    def groups(name: str, **options: object) -> int:
        client = WriteClient.create(str(tmp_path / name), "id", [], None, **options)
        return MetadataTable(client.table).reader().point.group_counts["record_index"]

    assert groups("plain") == 1
    assert groups("min", **{"metadata.record_index.min.groups": 4}) == 4
    sized = {"index.expected.records": 35, "metadata.record_index.records.per.group": 10}
    assert groups("sized", **sized) == 4
    assert groups("both", **sized, **{"metadata.record_index.min.groups": 6}) == 6
