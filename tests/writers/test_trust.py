"""Issue 11, as a hostile user found it: savepoints of cleaned commits, unchecked read points,
inconsistent key text and bad configuration. Each test failed on f2d2aa2."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.index.errors import RecordKeyError
from lakebraid.timeline.as_of import AsOfError, parse_as_of
from lakebraid.timeline.errors import ConfigError, LakebraidError, StateUnknownError
from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.store import InstantStore
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError, WriteError


def rows(ids: list, ts: int, p: str = "x", **extra: list) -> pa.Table:
    n = len(ids)
    return pa.table({"id": ids, "p": [p] * n, "ts": [ts] * n, **extra})


@pytest.fixture
def client(tmp_path: Path) -> WriteClient:
    return WriteClient.create(
        str(tmp_path / "t"), record_key="id", partition_by=["p"], precombine="ts"
    )


def files_on_disk(c: WriteClient) -> set[str]:
    root = Path(c.path)
    return {str(p) for p in root.rglob("*.parquet") if ".braid" not in p.parts}


# ---- case 1: savepoint / restore of a cleaned commit --------------------------------------
def test_savepoint_of_a_cleaned_commit_is_refused_and_nothing_is_lost(client) -> None:
    ts = [client.upsert(rows(["a", f"n{i}"], i)) for i in range(14)]
    assert client.clean() is not None
    before = client.read_arrow().sort_by("id").to_pylist()
    on_disk = files_on_disk(client)
    with pytest.raises(WriteError, match="can still be savepointed and restored is") as err:
        client.savepoint(ts[0])
    assert err.value.instant == ts[0]
    with pytest.raises(WriteError, match="has no savepoint"):
        client.restore(ts[0])
    assert client.read_arrow().sort_by("id").to_pylist() == before
    assert files_on_disk(client) == on_disk
    assert [i.action for i in client.timeline()].count("savepoint") == 0
    # the commit the error names can be savepointed and restored
    earliest = str(err.value).split("restored is ")[1].split()[0].rstrip(";[")
    assert earliest in ts
    client.savepoint(earliest)
    client.restore(earliest)
    assert sorted(r["id"] for r in client.read_arrow().to_pylist()) == sorted(
        ["a"] + [f"n{i}" for i in range(ts.index(earliest) + 1)]
    )
    assert client.validate() == []


def test_restore_refuses_a_savepoint_whose_files_went_missing(client) -> None:
    t1 = client.upsert(rows(["a", "b"], 1))
    client.savepoint(t1)
    client.upsert(rows(["c"], 2, p="y"))
    victim = next(p for p in files_on_disk(client) if "p=x" in p)
    Path(victim).unlink()
    with pytest.raises(WriteError, match="data files are gone"):
        client.restore(t1)
    assert client.lookup(["c"])["c"] is not None, "nothing was undone"


# ---- case 3: one read point parser -------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    ["yesterday", "20261399999999999", "2026139999999999", "", "2024-13-01", "12:00", "1e5"],
)
def test_malformed_as_of_is_refused_everywhere(client, value) -> None:
    client.upsert(rows(["a"], 1))
    for call in (
        lambda: client.read_arrow(as_of=value),
        lambda: client.lookup(["a"], as_of=value),
        lambda: client.files(as_of=value),
        lambda: client.column_stats("ts", as_of=value),
        lambda: client.schema(as_of=value),
    ):
        with pytest.raises(AsOfError, match=r"instant time|read point"):
            call()


def test_as_of_of_a_wrong_type_is_a_named_error(client) -> None:
    client.upsert(rows(["a"], 1))
    with pytest.raises(AsOfError, match="not int"):
        client.read_arrow(as_of=20261123000000000)


def test_as_of_outside_the_history_is_refused(client) -> None:
    t1 = client.upsert(rows(["a"], 1))
    with pytest.raises(AsOfError, match="before the table was created"):
        client.read_arrow(as_of="2024-01-01")
    with pytest.raises(AsOfError, match="after the latest commit"):
        client.read_arrow(as_of=dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    with pytest.raises(AsOfError, match="after the latest commit"):
        client.lookup(["a"], as_of="99991231235959999")
    assert client.read_arrow(as_of=t1).num_rows == 1


def test_as_of_datetimes_and_iso_strings_mean_utc_moments(client) -> None:
    t1 = client.upsert(rows(["a"], 1))
    done = next(i for i in client.timeline() if i.time == t1).completion_time
    t2 = client.upsert(rows(["b"], 2))
    moment = dt.datetime.strptime(done, "%Y%m%d%H%M%S%f").replace(tzinfo=dt.UTC)
    moment = moment.replace(microsecond=int(done[14:]) * 1000)
    iso_utc = moment.strftime("%Y-%m-%dT%H:%M:%S.") + done[14:] + "Z"
    plus_one = (moment + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.") + done[14:]
    for value in (moment, moment.replace(tzinfo=None), iso_utc, plus_one + "+01:00"):
        assert client.read_arrow(as_of=value).column("id").to_pylist() == ["a"], value
    assert sorted(client.read_arrow(as_of=t2).column("id").to_pylist()) == ["a", "b"]


def test_parse_as_of_forms() -> None:
    assert parse_as_of("20261123081500250") == "20261123081500250"
    assert parse_as_of("2026-11-23") == "20261123000000000"
    assert parse_as_of("2026-11-23T09:15:00.250+01:00") == "20261123081500250"
    assert parse_as_of(dt.date(2026, 11, 23)) == "20261123000000000"
    assert parse_as_of(None) is None


def test_read_older_than_the_clean_retention_is_a_named_error(client) -> None:
    ts = [client.upsert(rows(["a", f"n{i}"], i)) for i in range(14)]
    client.clean()
    with pytest.raises(AsOfError, match="older than the clean retention"):
        client.read_arrow(as_of=ts[0])
    with pytest.raises(AsOfError, match="older than the clean retention"):
        client.lookup(["a"], as_of=ts[1])
    assert client.read_arrow(as_of=ts[-1]).num_rows == 15


# ---- case 4: one canonical key text ------------------------------------------------------
def test_null_keys_are_refused_by_delete_and_lookup(client) -> None:
    client.upsert(rows(["None", "a"], 1))
    with pytest.raises(RecordKeyError, match="null"):
        client.delete([None])
    with pytest.raises(RecordKeyError, match="null"):
        client.lookup([None])
    assert sorted(client.read_arrow().column("id").to_pylist()) == ["None", "a"]


def test_a_bare_string_is_not_a_sequence_of_keys(client) -> None:
    client.upsert(rows(["k1", "k"], 1))
    with pytest.raises(RecordKeyError, match="list of keys"):
        client.lookup("k1")
    with pytest.raises(RecordKeyError, match="list of keys"):
        client.delete("k1")
    assert client.read_arrow().num_rows == 2


def test_keys_come_in_any_collection_but_a_string_or_a_mapping(client) -> None:
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    client.upsert(rows(["a", "b"], 1))
    for keys in (
        {"a", "zz"},
        ("a", "zz"),
        np.array(["a", "zz"]),
        pd.Series(["a", "zz"]),
        pa.array(["a", "zz"]),
    ):
        found = client.lookup(keys)
        assert found["a"] is not None and found["zz"] is None, type(keys)
    with pytest.raises(RecordKeyError, match="list of keys"):
        client.lookup({"a": 1})
    client.delete(pd.Series(["b"]))
    assert client.read_arrow().column("id").to_pylist() == ["a"]


def test_float_key_columns_are_refused_before_anything_is_written(tmp_path) -> None:
    schema = pa.schema([("id", pa.float64()), ("ts", pa.int64())])
    with pytest.raises(RecordKeyError, match="floating-point"):
        WriteClient.create(str(tmp_path / "f"), record_key="id", schema=schema)
    assert not (tmp_path / "f").exists()
    c = WriteClient.create(str(tmp_path / "g"), record_key="id", precombine="ts")
    with pytest.raises(InputError, match="floating-point"):
        c.upsert(pa.table({"id": [1.0, 2.5], "ts": [1, 1]}))
    assert c.timeline() == []


def test_integer_and_decimal_keys_are_found_whatever_form_the_caller_uses(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "i"), record_key="id", precombine="ts")
    c.upsert(pa.table({"id": pa.array([1, 20], pa.int32()), "ts": [1, 1]}))
    found = c.lookup([1, "20", 3])
    assert found["1"] is not None and found["20"] is not None and found["3"] is None
    c.delete([20])
    assert c.read_arrow().column("id").to_pylist() == [1]
    with pytest.raises(RecordKeyError, match="key type"):
        c.lookup(["x"])
    d = WriteClient.create(str(tmp_path / "d"), record_key="id", precombine="ts")
    d.upsert(pa.table({"id": pa.array([Decimal("1.50")], pa.decimal128(5, 2)), "ts": [1]}))
    assert d.lookup([Decimal("1.5")])["1.50"] is not None


# ---- case 8: bad configuration -----------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"record_key": ""}, "record_key must name a column"),
        ({"record_key": "id", "partition_by": "day"}, "list of field names"),
        ({"record_key": "id", "precombine": ""}, "precombine must name a column"),
        ({"record_key": "id", "precombine": "id"}, "cannot be the record key"),
        ({"record_key": "id", "partition_by": ["p", "p"]}, "repeat"),
        (
            {"record_key": "id", "precombine": "nope", "schema": pa.schema([("id", pa.string())])},
            "precombine column 'nope'",
        ),
        (
            {"record_key": "id", "partition_by": ["q"], "schema": pa.schema([("id", pa.string())])},
            "partition field 'q'",
        ),
    ],
)
def test_create_refuses_bad_arguments_and_writes_nothing(tmp_path, kwargs, match) -> None:
    with pytest.raises((ConfigError, LakebraidError), match=match):
        WriteClient.create(str(tmp_path / "bad"), **kwargs)
    assert not (tmp_path / "bad").exists()


def test_a_write_without_the_precombine_column_is_refused(client) -> None:
    with pytest.raises(InputError, match="no precombine column 'ts'"):
        client.upsert(pa.table({"id": ["a"], "p": ["x"]}))
    with pytest.raises(InputError, match="null precombine"):
        client.upsert(pa.table({"id": ["a", "a"], "p": ["x", "x"], "ts": [1, None]}))
    assert client.timeline() == []


# ---- case 2: key uniqueness on every write path -------------------------------------------
@pytest.mark.parametrize("op", ["insert", "bulk_insert"])
def test_inserting_existing_keys_fails_before_writing(client, op) -> None:
    getattr(client, op)(rows(["a", "b"], 1))
    before = (client.read_arrow().sort_by("id").to_pylist(), files_on_disk(client))
    with pytest.raises(InputError, match=r"2 key\(s\) already exist.*'a', 'b'|'b', 'a'"):
        getattr(client, op)(rows(["a", "c", "b"], 2))
    assert (client.read_arrow().sort_by("id").to_pylist(), files_on_disk(client)) == before
    client.delete(["a"])
    assert client.lookup(["a"])["a"] is None
    assert sorted(client.read_arrow().column("id").to_pylist()) == ["b"]
    assert client.validate() == []


def test_duplicate_policies_drop_and_upsert(client) -> None:
    client.insert(rows(["a", "b"], 1, v=[1, 1]))
    client.insert(rows(["a", "c"], 2, v=[2, 2]), duplicates="drop")
    got = {r["id"]: r["v"] for r in client.read_arrow().to_pylist()}
    assert got == {"a": 1, "b": 1, "c": 2}
    client.bulk_insert(rows(["b", "d"], 3, v=[3, 3]), duplicates="upsert")
    got = {r["id"]: r["v"] for r in client.read_arrow().to_pylist()}
    assert got == {"a": 1, "b": 3, "c": 2, "d": 3}
    with pytest.raises(InputError, match="choose one of"):
        client.insert(rows(["z"], 4, v=[4]), duplicates="ignore")
    assert client.validate() == []


def test_the_table_option_sets_the_policy(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["p"], "ts", **{"insert.duplicates": "drop"})
    c.bulk_insert(rows(["a"], 1, v=[1]))
    c.bulk_insert(rows(["a"], 2, v=[2]))
    assert c.read_arrow().column("v").to_pylist() == [1]
    with pytest.raises(ConfigError, match="must be one of"):
        WriteClient.create(str(tmp_path / "u"), "id", **{"insert.duplicates": "nope"})


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_spark_engine_and_data_source_keep_keys_unique(tmp_path, spark) -> None:
    c = WriteClient.create(
        str(tmp_path / "s"), "id", ["p"], "ts", spark=spark, **{"write.inprocess.max.rows": 0}
    )
    c.bulk_insert(spark.createDataFrame(rows(["a", "b"], 1, v=[1, 1]).to_pandas()))
    with pytest.raises(InputError, match=r"1 key\(s\) already exist in the table \('a'\)"):
        c.bulk_insert(spark.createDataFrame(rows(["a", "c"], 2, v=[2, 2]).to_pandas()))
    c.insert(spark.createDataFrame(rows(["a", "c"], 2, v=[2, 2]).to_pandas()), duplicates="drop")
    assert {r["id"]: r["v"] for r in c.read_arrow().to_pylist()} == {"a": 1, "b": 1, "c": 2}
    frame = spark.createDataFrame(rows(["b", "x"], 3, v=[3, 3]).to_pandas())
    with pytest.raises(Exception, match="already exist"):
        frame.write.format("lakebraid").mode("append").save(c.path)
    assert sorted(c.read_arrow().column("id").to_pylist()) == ["a", "b", "c"]
    assert c.validate() == []


# ---- case 7: a failure inside a write ----------------------------------------------------
def test_pandas_datetimes_are_written_and_read_back(client) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {
            "id": ["a", "b"],
            "p": ["x", "y"],
            "ts": [1, 1],
            "at": pd.to_datetime(["2024-01-01 10:00:00.123456", "1999-12-31 00:00:00.000000"]),
        }
    )
    client.upsert(frame)
    got = client.read_arrow().sort_by("id").column("at").to_pylist()
    assert got == [dt.datetime(2024, 1, 1, 10, 0, 0, 123456), dt.datetime(1999, 12, 31)]
    nanos = pd.DataFrame(
        {
            "id": ["c"],
            "p": ["x"],
            "ts": [2],
            "at": pd.to_datetime(["2024-01-01 00:00:00.000000001"]),
        }
    )
    with pytest.raises(InputError, match=r"'at'.*microseconds"):
        client.upsert(nanos)
    assert client.lookup(["c"])["c"] is None


def test_a_failure_after_the_write_began_rolls_its_instant_back_at_once(client, monkeypatch):
    client.upsert(rows(["a"], 1))
    before = files_on_disk(client)

    def broken(self, statuses, schema, *ahead):
        raise OSError("disk on fire")

    monkeypatch.setattr("lakebraid.writers.commit.transaction.Transaction.commit", broken)
    with pytest.raises(OSError, match="disk on fire"):
        client.upsert(rows(["a", "b"], 2))
    monkeypatch.undo()
    timeline = client.table.timeline()
    (failed,) = timeline.pending()
    assert failed.time in client.table.visibility().undone, "rolled back, not left to recovery"
    assert [i.action for i in timeline.completed()][-1] == "rollback"
    assert files_on_disk(client) == before, "the failed write's files are gone"
    assert not list(Path(client.path, ".braid", "heartbeats").glob("*"))
    assert client.recover() == []
    assert client.read_arrow().column("id").to_pylist() == ["a"]


def test_markers_of_a_completed_commit_are_removed(client) -> None:
    client.upsert(rows(["a"], 1))
    t = client.upsert(rows(["b"], 2, p="y"))
    markers = Path(client.path, ".braid", "markers")
    assert not (markers / t).exists()
    assert not markers.exists() or not list(markers.iterdir())


# ---- the precombine field orders against stored rows --------------------------------------
ENGINES = {"inprocess": {}, "spark": {"write.inprocess.max.rows": 0}}


def _frame(c: WriteClient, table: pa.Table, spark_engine: bool):
    return c.spark.createDataFrame(table.to_pandas()) if spark_engine else table


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_an_older_event_never_overwrites_a_newer_stored_row(tmp_path, spark, engine) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["p"], "ts", spark=spark, **ENGINES[engine])
    sp = engine == "spark"
    c.upsert(_frame(c, rows(["a", "b", "m"], 5, v=[1, 1, 1]), sp))
    # a: older event in place; b: newer in place; m: older event that would move partition
    late = pa.table(
        {"id": ["a", "b", "m", "n"], "p": ["x", "x", "y", "y"], "ts": [4, 6, 3, 1], "v": [2] * 4}
    )
    c.upsert(_frame(c, late, sp))
    got = {r["id"]: (r["p"], r["ts"], r["v"]) for r in c.read_arrow().to_pylist()}
    assert got == {"a": ("x", 5, 1), "b": ("x", 6, 2), "m": ("x", 5, 1), "n": ("y", 1, 2)}
    assert c.lookup(["m"])["m"].partition == "p=x"
    tie = pa.table({"id": ["a"], "p": ["y"], "ts": [5], "v": [3]})
    c.upsert(_frame(c, tie, sp))  # a tie goes to the incoming row (and moves it)
    assert {r["id"]: r["v"] for r in c.read_arrow().to_pylist()}["a"] == 3
    assert c.lookup(["a"])["a"].partition == "p=y"
    assert c.validate() == []


def test_commit_time_ordering_lets_the_latest_write_win(tmp_path) -> None:
    c = WriteClient.create(
        str(tmp_path / "t"), "id", ["p"], "ts", **{"write.merge.mode": "commit_time"}
    )
    c.upsert(rows(["a", "m"], 5, v=[1, 1]))
    c.upsert(pa.table({"id": ["a", "m"], "p": ["x", "y"], "ts": [1, 1], "v": [2, 2]}))
    got = {r["id"]: (r["p"], r["v"]) for r in c.read_arrow().to_pylist()}
    assert got == {"a": ("x", 2), "m": ("y", 2)}


def test_rollback_refuses_when_the_file_it_would_bring_back_is_gone(client) -> None:
    t1 = client.upsert(rows(["a", "b"], 1))
    old = files_on_disk(client)
    t2 = client.upsert(rows(["a"], 2))
    (Path(next(iter(old)))).unlink()  # the file t2 replaced
    with pytest.raises(WriteError, match="file it replaced"):
        client.rollback(t2)
    assert client.lookup(["a"])["a"].instant in (t1, t2)
    assert client.read_arrow().num_rows == 2, "nothing was undone"


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_the_data_source_as_of_option_uses_the_same_parser(tmp_path, spark) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["p"], "ts", spark=spark)
    t1 = c.upsert(rows(["a"], 1))
    c.upsert(rows(["b"], 2))
    done = next(i.completion_time for i in c.timeline() if i.time == t1)
    iso = (
        f"{done[:4]}-{done[4:6]}-{done[6:8]}T{done[8:10]}:{done[10:12]}:{done[12:14]}.{done[14:]}Z"
    )
    for value in (t1, iso):
        frame = spark.read.format("lakebraid").option("as_of", value).load(c.path)
        assert [r["id"] for r in frame.collect()] == ["a"], value
    for value, match in (("yesterday", "read point"), ("2001-01-01", "before the table")):
        with pytest.raises(Exception, match=match):
            spark.read.format("lakebraid").option("as_of", value).load(c.path).collect()


def test_a_failure_writing_the_commit_point_is_state_unknown_and_undoes_nothing(
    client, monkeypatch
):
    client.upsert(rows(["a"], 1))
    original = InstantStore.complete

    def failing(self, kind, time, action, *args, **kwargs):
        if kind is TimelineKind.GLOBAL and action is Action.COMMIT:
            raise OSError("connection reset while writing")
        return original(self, kind, time, action, *args, **kwargs)

    monkeypatch.setattr(InstantStore, "complete", failing)
    with pytest.raises(StateUnknownError, match="whether it committed is unknown") as err:
        client.upsert(rows(["b"], 2))
    monkeypatch.undo()
    assert err.value.instant is not None and err.value.table == client.path
    timeline = client.table.timeline()
    assert [i.time for i in timeline.pending()] == [err.value.instant]
    assert "rollback" not in [i.action for i in timeline], "the writer undid nothing itself"
    heartbeat = Path(client.path, ".braid", "heartbeats", err.value.instant)
    assert heartbeat.exists(), "left to expire, so recovery decides"
