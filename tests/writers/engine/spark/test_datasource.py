"""The Spark data source ``format("lakebraid")``: reads (now, as of, schema evolution, every
file of the read point, ``pushdown`` refused) and appends through the commit protocol, with
the errors it must give."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import from_arrow_schema

from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine.spark import datasource
from lakebraid.writers.engine.spark.datasource import plan_files
from lakebraid.writers.read.plan import table_schema

pytestmark = pytest.mark.xdist_group("spark")
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def rows(keys: list[str], days: list[str], ts: int, amount: float, **more: list) -> pa.Table:
    n = len(keys)
    return pa.table({"id": keys, "day": days, "ts": [ts] * n, "amount": [amount] * n, **more})


def sorted_rows(frame) -> list[dict]:
    return frame.toArrow().sort_by("id").to_pylist()


def load(spark, path: str, **options: str):
    reader = spark.read.format("lakebraid")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def snapshot(c: WriteClient) -> tuple:
    files = sorted(
        str(p) for p in Path(c.path).rglob("*") if p.is_file() and "heartbeats" not in p.parts
    )
    return files, c.timeline("global"), c.timeline("data"), c.timeline("metadata")


def staged(c: WriteClient) -> list[Path]:
    folder = Path(c.path, ".braid", "staging")
    return list(folder.iterdir()) if folder.exists() else []


@pytest.fixture
def client(tmp_path, spark) -> WriteClient:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", spark=spark)
    c.insert(rows(["a", "b", "c"], DAYS, 1, 1.0))
    return c


# ---- reads ----------------------------------------------------------------------------------
def test_every_file_is_read_and_spark_filters_the_rows(tmp_path, spark):
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", spark=spark)
    days = [f"d{i:03d}" for i in range(100) for _ in range(5)]
    c.insert(
        pa.table(
            {
                "id": [f"k{i:04d}" for i in range(500)],
                "day": days,
                "ts": list(range(500)),
                "amount": [i % 7 + 0.5 for i in range(500)],
            }
        )
    )
    assert len(c.file_paths()) == 100
    root = c.table.fs.unstrip_protocol(c.path)
    assert len(plan_files(root, None)) == 100
    frame = load(spark, c.path).where("ts >= 210 and ts < 212 and amount > 0")
    assert frame.rdd.getNumPartitions() == 100  # one Spark partition per file, none pruned
    assert [r["id"] for r in sorted_rows(frame)] == ["k0210", "k0211"]


def test_schema_as_of_and_schema_evolution_match_the_client(client, spark):
    first = client.timeline()[-1].time
    client.upsert(rows(["a", "d"], [DAYS[0], DAYS[0]], 2, 5.0, note=["x", "y"]))
    now = load(spark, client.path)
    assert now.schema == from_arrow_schema(table_schema(client.schema()))
    assert now.columns == client.read().columns
    assert now.columns[-3:] == ["note", "_braid_commit_time", "_braid_record_key"]
    nullable = {f.name: f.nullable for f in now.schema.fields}
    assert not any(nullable[n] for n in ("id", "_braid_commit_time", "_braid_record_key"))
    assert nullable["note"] is True
    got = sorted_rows(now)
    assert got == sorted_rows(client.read())
    assert [r["note"] for r in got] == ["x", None, None, "y"]  # b, c: files without the column

    then = load(spark, client.path, as_of=first)
    assert then.columns == client.read(as_of=first).columns and "note" not in then.columns
    assert sorted_rows(then) == sorted_rows(client.read(as_of=first))
    assert [r["amount"] for r in sorted_rows(then)] == [1.0, 1.0, 1.0]
    where = "day = '2024-01-01'"
    filtered = load(spark, client.path, as_of=first).where(where)
    assert sorted_rows(filtered) == sorted_rows(client.read(as_of=first, where=where))


def test_a_pruned_read_keeps_the_columns_its_files_lack(client, spark):
    """Files written before a column was added: a read pruned to them (or read-optimized)
    still has the column, as nulls, so a filter on it resolves."""
    client.upsert(rows(["a"], [DAYS[0]], 2, 5.0, note=["x"]))
    columns = client.read().columns
    for where in ("id = 'b'", "id = 'b' and note is null"):
        pruned = client.read(where=where)
        assert pruned.columns == columns
        assert [r["note"] for r in sorted_rows(pruned)] == [None]
    assert client.read(mode="read_optimized").columns == columns


def test_an_empty_selection_reads_nothing(client, spark):
    frame = load(spark, client.path).where("day = '1999-01-01'")
    assert frame.count() == 0 and frame.columns == client.read().columns


def test_a_reused_dataframe_reads_every_file_for_each_scan(client, spark):
    frame = load(spark, client.path)
    assert frame.where("day = '2024-01-01'").count() == 1
    assert frame.count() == 3
    both = frame.where(f"day = '{DAYS[0]}'").union(frame.where(f"day = '{DAYS[1]}'"))
    assert sorted(r["day"] for r in sorted_rows(both)) == DAYS[:2]
    # a filter Spark pushes, then one it cannot push (an OR under NOT), on one DataFrame
    assert frame.where("id = 'a'").count() == 1
    assert frame.where("NOT (NOT (id IN ('zz') OR amount = 1.0))").count() == 3


@pytest.mark.parametrize("value", ["true", "TRUE", "yes"])
def test_pushdown_is_refused_naming_the_pruned_read(client, spark, value):
    with pytest.raises(Exception, match=f"pushdown={value!r} is not supported") as caught:
        load(spark, client.path, pushdown=value).where("day = '2024-01-01'").count()
    assert "read(where=" in str(caught.value) and client.path in str(caught.value)


def test_pushdown_false_is_the_default_behaviour(client, spark):
    frame = load(spark, client.path, pushdown="false")
    assert frame.where(f"day = '{DAYS[0]}'").count() == 1 and frame.count() == 3


def test_a_client_given_a_session_registers_the_format(client, spark):
    datasource._registered.discard(spark)
    try:
        WriteClient.open(client.path, spark=spark)
        assert spark in datasource._registered
    finally:
        datasource.register(spark)


# ---- writes ---------------------------------------------------------------------------------
def test_append_commits_through_the_protocol(client, spark):
    commits = len(client.timeline())
    new = rows(["w1", "w2"], [DAYS[0], "2024-02-01"], 9, 2.5)
    spark.createDataFrame(new).write.format("lakebraid").mode("append").save(client.path)
    assert len(client.timeline()) == commits + 1
    last = client.timeline()[-1]
    assert last.action.value == "commit" and last.completion_time is not None
    got = {r["id"]: r for r in sorted_rows(client.read())}
    assert set(got) == {"a", "b", "c", "w1", "w2"}
    assert got["w2"]["day"] == "2024-02-01" and got["w2"]["_braid_commit_time"] == last.time
    located = client.lookup(["w1", "w2"])
    assert all(loc is not None for loc in located.values())
    assert located["w2"].partition == "day=2024-02-01"  # type: ignore[union-attr]
    assert client.validate() == []
    assert staged(client) == []


def test_overwrite_is_refused_and_changes_nothing(client, spark):
    before = snapshot(client)
    frame = spark.createDataFrame(rows(["z"], [DAYS[0]], 1, 1.0))
    with pytest.raises(Exception, match="overwrite is not supported") as info:
        frame.write.format("lakebraid").mode("overwrite").save(client.path)
    assert client.path in str(info.value) and "WriteClient" in str(info.value)
    assert snapshot(client) == before


def test_a_path_without_a_table_is_a_clear_error(tmp_path, spark):
    missing = str(tmp_path / "nothing")
    with pytest.raises(Exception, match="is not a lakebraid table"):
        load(spark, missing).count()
    frame = spark.createDataFrame(rows(["z"], [DAYS[0]], 1, 1.0))
    with pytest.raises(Exception, match="is not a lakebraid table"):
        frame.write.format("lakebraid").mode("append").save(missing)
    assert not Path(missing).exists()


def test_a_failed_append_leaves_the_table_unchanged(client, spark):
    before = snapshot(client)
    bad = spark.createDataFrame(rows(["x", None], DAYS[:2], 1, 1.0))  # type: ignore[list-item]
    with pytest.raises(Exception, match="null record key"):
        bad.write.format("lakebraid").mode("append").save(client.path)
    assert snapshot(client) == before
    assert staged(client) == []
    assert sorted(r["id"] for r in sorted_rows(client.read())) == ["a", "b", "c"]


def test_an_append_reads_its_retry_count_from_the_write_options(client, spark):
    """``write.conflict.retries`` given to the append reaches its commit: a bad count is
    refused by name, and nothing is written."""
    before = snapshot(client)
    frame = spark.createDataFrame(rows(["z"], [DAYS[0]], 1, 1.0))
    writer = frame.write.format("lakebraid").option("write.conflict.retries", "two")
    with pytest.raises(Exception, match=r"write\.conflict\.retries"):
        writer.mode("append").save(client.path)
    assert snapshot(client) == before
    assert staged(client) == []
    frame.write.format("lakebraid").option("write.conflict.retries", "2").mode("append").save(
        client.path
    )
    assert sorted(r["id"] for r in sorted_rows(client.read())) == ["a", "b", "c", "z"]


# ---- read mode (merge-on-read) ----------------------------------------------------------------
def by_id(frame) -> dict[str, tuple]:
    found = frame.select("id", "day", "ts", "amount").collect()
    assert len(found) == len({r["id"] for r in found}), "a key appears twice"
    return {r["id"]: (r["day"], r["ts"], r["amount"]) for r in found}


def test_read_optimized_reads_bases_only_and_snapshot_merges_the_logs(tmp_path, spark):
    path = str(tmp_path / "mor")
    mor = WriteClient.create(
        path,
        "id",
        ["day"],
        "ts",
        table_type="merge_on_read",
        spark=spark,
        **{"compaction.inline": False},
    )
    days = [DAYS[0], DAYS[0], DAYS[1], DAYS[1]]
    first = mor.bulk_insert(rows(["a", "b", "c", "d"], days, 1, 1.0))
    base = {"a": (DAYS[0], 1, 1.0), "b": (DAYS[0], 1, 1.0), "c": (DAYS[1], 1, 1.0)}
    base["d"] = (DAYS[1], 1, 1.0)
    mor.upsert(rows(["a", "c"], [DAYS[0], DAYS[1]], 2, 2.0))
    mor.delete(["d"])
    assert any(p.endswith(".log") for p in mor.file_paths())
    merged = {"a": (DAYS[0], 2, 2.0), "b": base["b"], "c": (DAYS[1], 2, 2.0)}

    assert by_id(load(spark, path, mode="read_optimized")) == base
    assert by_id(load(spark, path)) == merged
    assert by_id(load(spark, path, mode="snapshot")) == merged
    assert by_id(load(spark, path, mode="read_optimized", as_of=first)) == base
    assert by_id(load(spark, path, mode="read_optimized").where(f"day = '{DAYS[1]}'")) == {
        "c": base["c"],
        "d": base["d"],
    }
    with pytest.raises(Exception, match="read mode 'latest' is not one of"):
        load(spark, path, mode="latest").count()

    mor.compact()
    assert by_id(load(spark, path, mode="read_optimized")) == merged
