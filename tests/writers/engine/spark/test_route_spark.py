"""The Spark engine routes rows in Spark SQL (``writers.engine.spark.routing``); it must give
every row the target file group the in-process ``writers.write.route.route`` gives it: held
keys, new keys spread over several slots by the format's key hash (half of all hashes are
past 2**63, the int64 sign), keys moving between partitions (an insert and a delete row),
partitions of one slot. And the rewrite's task keys spread file groups one to a task; and
upserts through either tagging path equal a model."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION
from lakebraid.metadata.hashing import stable_hashes
from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine.spark import pipeline, routing
from lakebraid.writers.engine.spark.routing import KEY_HASH, route_rows, task_keys, unsigned_mod
from lakebraid.writers.write.filegroup import OP, OP_UPSERT
from lakebraid.writers.write.route import (
    PARTITION,
    TARGET_FILE_ID,
    new_in_partition,
    route,
)
from lakebraid.writers.write.slots import Slot


def _in_process_route(rows: pa.Table, plan: dict[str, list[Slot]]) -> pa.Table:
    return route(rows, plan, new_in_partition(rows))


pytestmark = pytest.mark.xdist_group("spark")
PARTITIONS = ["day=1", "day=2", "day=3", "d=ünï"]
ON_SPARK = {"write.inprocess.max.rows": 0}


def tagged_rows(seed: int, n: int = 400) -> pa.Table:
    """Upserts of ``n`` keys: a third held in their partition, a sixth moving in from
    another, the rest new."""
    rng = random.Random(seed)
    keys, parts, old_parts, old_ids = [], [], [], []
    for i in range(n):
        keys.append(f"k{seed}-{i}-{rng.random()}")
        part = rng.choice(PARTITIONS)
        parts.append(part)
        kind = rng.random()
        if kind < 1 / 3:
            old_parts.append(part)
            old_ids.append(f"held-{rng.randrange(3)}")
        elif kind < 1 / 2:
            old_parts.append(rng.choice([p for p in PARTITIONS if p != part]))
            old_ids.append(f"moved-{rng.randrange(3)}")
        else:
            old_parts.append(None)
            old_ids.append(None)
    return pa.table(
        {
            RECORD_KEY: keys,
            "v": list(range(n)),
            PARTITION: parts,
            OP: pa.array([OP_UPSERT] * n, pa.int8()),
            OLD_PARTITION: pa.array(old_parts, pa.string()),
            OLD_FILE_ID: pa.array(old_ids, pa.string()),
            KEY_HASH: pa.array(stable_hashes(pa.array(keys)).view("int64")),
        }
    )


def plan_for(seed: int) -> dict[str, list[Slot]]:
    rng = random.Random(seed)
    plan = {}
    for p in PARTITIONS:
        count = 1 if p == "day=3" else rng.randrange(2, 5)  # one partition of one slot
        plan[p] = [Slot(f"{p}-slot-{j}", rng.randrange(1, 50)) for j in range(count)]
    return plan


def routed_set(table: pa.Table) -> Counter:
    columns = [RECORD_KEY, OP, PARTITION, TARGET_FILE_ID]
    return Counter(tuple(r[c] for c in columns) for r in table.select(columns).to_pylist())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_in_process_route_reads_the_carried_hashes_as_its_own(seed: int) -> None:
    """``route`` of rows carrying ``KEY_HASH`` (``with_key_hashes``) equals hashing anew;
    hashes of other keys route elsewhere (the carried column is the one read)."""
    rows, plan = tagged_rows(seed), plan_for(seed)
    anew = routed_set(_in_process_route(rows.drop_columns([KEY_HASH]), plan))
    assert routed_set(_in_process_route(rows, plan)) == anew
    others = stable_hashes(pa.array([f"other-{k}" for k in rows[RECORD_KEY].to_pylist()]))
    at = rows.schema.get_field_index(KEY_HASH)
    shifted = rows.set_column(at, KEY_HASH, pa.array(others.view("int64")))
    assert routed_set(_in_process_route(shifted, plan)) != anew


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_spark_sql_routing_equals_the_in_process_route(spark, seed: int) -> None:
    rows, plan = tagged_rows(seed), plan_for(seed)
    assert (rows.column(KEY_HASH).to_numpy() < 0).any()  # hashes past 2**63 are covered
    expected = _in_process_route(rows.drop_columns([KEY_HASH]), plan)
    got = route_rows(spark.createDataFrame(rows), plan).toArrow()
    assert routed_set(got) == routed_set(expected)
    targets = {t for t in expected.column(TARGET_FILE_ID).to_pylist() if "slot" in t}
    assert len(targets) > len(PARTITIONS)  # several slots of a partition were chosen


def test_a_new_row_of_a_partition_without_slots_keeps_no_target(spark) -> None:
    rows = tagged_rows(4, 50)
    plan = {p: s for p, s in plan_for(4).items() if p != "day=1"}
    got = route_rows(spark.createDataFrame(rows), plan)
    lost = got.where(F.col(TARGET_FILE_ID).isNull()).toArrow()
    new = [r for r in rows.to_pylist() if r[PARTITION] == "day=1" and r[OLD_PARTITION] != "day=1"]
    assert sorted(lost.column(RECORD_KEY).to_pylist()) == sorted(r[RECORD_KEY] for r in new)


def test_a_hash_read_unsigned_modulo_a_total_in_long_arithmetic(spark) -> None:
    """Every corner of the 64 bits (0, the sign bit, all ones, odd and even) against totals
    from 1 to 2**62: Python's unsigned remainder, exactly."""
    bits = [0, 1, 2, 2**63 - 1, -(2**63), -(2**63) + 1, -2, -1, 12345678901234567, -987654321]
    totals = [1, 2, 3, 7, 1000, 2**31 + 11, 2**62 - 1, 2**62]
    pairs = [(b, t) for b in bits for t in totals]
    frame = spark.createDataFrame(pairs, "b long, t long")
    got = frame.select(unsigned_mod(F.col("b"), F.col("t")).alias("m")).collect()
    assert [r["m"] for r in got] == [(b % 2**64) % t for b, t in pairs]


@pytest.mark.parametrize("n", [1, 7, 60])
def test_task_keys_send_each_file_group_to_its_own_task(spark, n: int) -> None:
    keys = task_keys(spark, n)
    frame = spark.createDataFrame([(k,) for k in keys], "k long").repartition(n, "k")
    sizes = frame.rdd.glom().map(len).collect()
    assert sorted(sizes) == [1] * n


def day_rows(ids: list[int], days: list[int], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": [f"d{d}" for d in days],
            "ts": [ts] * len(ids),
            "v": [float(i * ts) for i in ids],
        }
    )


@pytest.mark.parametrize("single_pass", [True, False], ids=["one-pass", "by-group"])
@pytest.mark.parametrize("kind", ["copy_on_write", "merge_on_read"])
def test_spark_upserts_match_the_model_on_both_tagging_paths(
    tmp_path, spark, monkeypatch, single_pass: bool, kind: str
) -> None:
    """An upsert of updates, in-batch duplicates (the higher ts wins), keys moving between
    days and new keys, on Spark, tagged in one pass (few record-index groups) or with the
    group pass first (many): the table equals a model either way."""
    if not single_pass:
        monkeypatch.setattr(pipeline, "SINGLE_PASS_GROUPS", 0)
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", table_type=kind, spark=spark)
    client.bulk_insert(day_rows(list(range(40)), [i % 3 for i in range(40)], 1))
    model = {i: (f"d{i % 3}", 1) for i in range(40)}
    ids = [*range(0, 40, 3), 5, 5, 41, 42, 7, 8]  # 5 twice, two new, 7 and 8 move day
    days = [i % 3 for i in range(0, 40, 3)] + [2, 2, 0, 1, 0, 0]
    stamps = [2] * len(range(0, 40, 3)) + [3, 4, 2, 2, 2, 2]
    batch = pa.concat_tables(
        [day_rows([i], [d], t) for i, d, t in zip(ids, days, stamps, strict=True)]
    )
    for i, d, t in zip(ids, days, stamps, strict=True):
        if t >= model.get(i, ("", 0))[1]:
            model[i] = (f"d{d}", t)
    WriteClient.open(path, spark, **ON_SPARK).upsert(spark.createDataFrame(batch.to_pandas()))
    after = WriteClient.open(path, spark).read_arrow()
    got = {r["id"]: (r["day"], r["ts"]) for r in after.to_pylist()}
    assert len(after) == len(model) and got == model
    assert WriteClient.open(path, spark).validate() == []


@pytest.mark.parametrize("task_rows", [None, 40])
@pytest.mark.parametrize("kind", ["copy_on_write", "merge_on_read"])
def test_more_file_groups_than_rewrite_tasks_are_each_written_whole(
    tmp_path, spark, monkeypatch, kind: str, task_rows: int | None
) -> None:
    """An upsert touching 24 file groups (one per day), on a session that rewrites them in
    fewer tasks: every group's updates, inserts and moves land, the table equals a model.
    ``task_rows``: a task per that many rows, so more tasks than the cores (the cap a large
    write of small groups takes)."""
    days = 24
    assert routing.rewrite_tasks(spark, days) < days  # several groups share a task
    assert routing.rewrite_tasks(spark, 1) == 1  # never more tasks than groups
    # many small groups: a task per TASK_ROWS rows, however few the cores
    many = 40 * routing.TASK_ROWS
    assert routing.rewrite_tasks(spark, 1_000, many) == 40
    assert routing.rewrite_tasks(spark, 1_000, many + 1) == 41
    assert routing.rewrite_tasks(spark, 30, many) == 30  # a bulk: a task per group
    assert routing.rewrite_tasks(spark, days, days * routing.ALONE_ROWS) == days  # a bulk
    used: list[int] = []  # the rewrite's task counts
    if task_rows is not None:
        monkeypatch.setattr(routing, "TASK_ROWS", task_rows)
        counted = routing.rewrite_tasks

        def spied(*args: object) -> int:
            used.append(counted(*args))
            return used[-1]

        monkeypatch.setattr(pipeline, "rewrite_tasks", spied)
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts", table_type=kind, spark=spark)
    client.bulk_insert(day_rows(list(range(240)), [i % days for i in range(240)], 1))
    model = {i: (f"d{i % days}", 1) for i in range(240)}
    ids = [*range(0, 240, 2), *range(240, 288)]  # every day: updates, then new keys
    moved = {i: (i + 1) % days for i in range(0, 240, 10)}  # some updates change day
    new_days = [moved.get(i, i % days) for i in ids]
    batch = day_rows(ids, new_days, 2)
    model.update({i: (f"d{d}", 2) for i, d in zip(ids, new_days, strict=True)})
    WriteClient.open(path, spark, **ON_SPARK).upsert(spark.createDataFrame(batch.to_pandas()))
    if task_rows is not None:  # 168 rows, 40 a task: 5 tasks, more than the cores
        assert used == [5] and spark.sparkContext.defaultParallelism < 5
    after = WriteClient.open(path, spark).read_arrow()
    got = {r["id"]: (r["day"], r["ts"]) for r in after.to_pylist()}
    assert len(after) == len(model) and got == model
    assert WriteClient.open(path, spark).validate() == []


def test_one_pass_tagging_takes_a_task_per_core_whatever_the_input_partitions(
    tmp_path, spark, monkeypatch
) -> None:
    """Each one-pass tagging task looks its keys up in every record-index group, so tasks
    beyond the cores only multiply index reads: an input of 8 partitions into a table of 6
    groups is tagged in a task per core (it took one per input partition, up to one per
    group), and the upsert still matches its rows."""
    path = str(tmp_path / "t")
    options = {"metadata.record_index.min.groups": 6, "write.inprocess.max.rows": 0}
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark, **options)
    client.bulk_insert(day_rows(list(range(40)), [i % 3 for i in range(40)], 1))
    assert client.metadata.reader().point.group_counts["record_index"] == 6
    tagged = []
    real_cache = pipeline.cache

    def watched(frame):
        tagged.append(frame.rdd.getNumPartitions())
        return real_cache(frame)

    monkeypatch.setattr(pipeline, "cache", watched)
    incoming = day_rows(list(range(30, 60)), [i % 3 for i in range(30, 60)], 2)
    frame = spark.createDataFrame(incoming.to_pandas()).repartition(8)
    assert frame.rdd.getNumPartitions() == 8
    WriteClient.open(path, spark).upsert(frame)
    assert tagged == [max(2, spark.sparkContext.defaultParallelism)]
    got = WriteClient.open(path).read_arrow()
    assert sorted(got.column("id").to_pylist()) == list(range(60))
    stamps = dict(zip(got.column("id").to_pylist(), got.column("ts").to_pylist(), strict=True))
    assert stamps == {i: (2 if i >= 30 else 1) for i in range(60)}
