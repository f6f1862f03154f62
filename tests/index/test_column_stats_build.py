"""Column statistics built on a live table (``index.column_stats_build``): statistics of
columns beyond ``metadata.column_stats.max.columns``, built while writers commit, kept by every
write, used by reads only from the build's completion (and no more after a drop), exact across
rollback and restore. Expected files come from reading every data file's column directly,
expected rows from a plain model; never from the statistics under test."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakebraid.index import column_stats_build
from lakebraid.index.column_stats_build import build_stats
from lakebraid.index.errors import IndexLayerError
from lakebraid.metadata.table import MetadataTable
from lakebraid.writers.cli.main import main as cli
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteConflictError, WriteError

# statistics by default for id, day, ts only: ``c`` (and ``d``) need a build
OPTIONS = {
    "metadata.column_stats.max.columns": 3,
    "write.target.file.rows": 10,
    "write.small.file.rows": 0,
    "write.merge.mode": "commit_time",
    "clean.inline": False,  # as-of reads reach every instant
}
Model = dict[str, tuple[str, int, int | None]]  # key -> (day, c, d)


def rows(model: Model, ts: int) -> pa.Table:
    ids = sorted(model)
    return pa.table(
        {
            "id": ids,
            "day": [model[k][0] for k in ids],
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "c": pa.array([model[k][1] for k in ids], pa.int64()),
            "d": pa.array([model[k][2] for k in ids], pa.int64()),
        }
    )


def ranges(client: WriteClient, as_of: str | None = None) -> dict[str, tuple[int, int] | None]:
    """Each data file's [min, max] of ``c``, read from the file itself (None: only nulls)."""
    found = {}
    for path in client.file_paths(as_of=as_of):
        bounds = pc.min_max(pq.read_table(path, columns=["c"]).column("c")).as_py()
        found[path] = None if bounds["min"] is None else (bounds["min"], bounds["max"])
    return found


def may_hold(client: WriteClient, value: int, as_of: str | None = None) -> set[str]:
    """The files whose range of ``c`` holds ``value``: what exact statistics keep."""
    return {
        path
        for path, bounds in ranges(client, as_of).items()
        if bounds is not None and bounds[0] <= value <= bounds[1]
    }


def holding(client: WriteClient, value: int, as_of: str | None = None) -> set[str]:
    """The files with a row whose ``c`` is ``value``, by reading every file."""
    return {
        path
        for path in client.file_paths(as_of=as_of)
        if pc.any(pc.equal(pq.read_table(path, columns=["c"]).column("c"), value)).as_py()
    }


def check_pruning(client: WriteClient, values: list[int], as_of: str | None = None) -> None:
    """Where ``c``'s statistics are built at ``as_of``, reads keep exactly the files whose
    range holds the value; elsewhere every file."""
    built = "c" in client.indexes(as_of=as_of, kind="column_stats")
    every = set(client.file_paths(as_of=as_of))
    for value in values:
        pruned = set(client.file_paths(as_of=as_of, where=f"c = {value}"))
        want = may_hold(client, value, as_of) if built else every
        assert pruned == want, f"c = {value} as of {as_of} (built: {built})"
        assert pruned >= holding(client, value, as_of)


def check_rows(client: WriteClient, model: Model, where: str, as_of: str | None = None) -> None:
    """A read with ``where`` returns the rows of a full scan filtered in pyarrow, and those
    are the model's."""
    full = client.read_arrow(as_of=as_of)
    assert {r["id"]: (r["day"], r["c"], r["d"]) for r in full.to_pylist()} == model
    value = int(where.rsplit("=", 1)[1])
    scanned = sorted(full.filter(pc.equal(full.column("c"), value)).column("id").to_pylist())
    read = sorted(r.id for r in client.read(as_of=as_of, where=where).select("id").collect())
    assert read == scanned == sorted(k for k, v in model.items() if v[1] == value), where


@pytest.fixture
def client(tmp_path) -> WriteClient:
    return WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)


def batches(n: int, size: int = 10, nulls: bool = True) -> list[Model]:
    """``n`` batches of new keys, batch ``j`` holding ``c`` in [100 j, 100 j + size)."""
    return [
        {f"k{j}{i:02d}": ("d0", 100 * j + i, (i % 3 or None) if nulls else i) for i in range(size)}
        for j in range(n)
    ]


def test_a_build_prunes_by_a_column_beyond_the_limit_and_stays_exact(client) -> None:
    model: Model = {}
    for batch in batches(5):
        before = client.bulk_insert(rows(batch, 0))  # one file per batch: disjoint ranges
        model.update(batch)
    every = client.file_paths()
    assert len(every) == 5
    assert client.column_stats("c") == []
    assert set(client.file_paths(where="c = 205")) == set(every)  # nothing to prune by yet
    built = client.create_index("c", kind="column_stats")
    assert client.indexes(kind="column_stats") == {"c": built}
    assert client.indexes() == {}  # the secondary indexes: none
    assert client.indexes(kind="all") == {"secondary": {}, "column_stats": {"c": built}}
    assert len(client.column_stats("c")) == 5
    for value in (205, 0, 409):
        pruned = client.file_paths(where=f"c = {value}")
        assert len(pruned) == 1 and set(pruned) == holding(client, value)
    assert client.file_paths(where="c = 1000") == []
    assert set(client.file_paths(where="c >= 150 and c < 320")) == (
        may_hold(client, 200) | may_hold(client, 300)
    )
    check_rows(client, model, "c = 205")
    check_rows(client, model, "c = 1000")
    # as of before the build: no statistics of c, every file
    assert client.indexes(as_of=before, kind="column_stats") == {}
    check_pruning(client, [205], as_of=before)
    # writes after the build record c: an update moves one value into a new range
    change: Model = {"k203": ("d0", 777, None), "n001": ("d1", 778, 5)}
    later = client.upsert(rows(change, 1))
    model.update(change)
    assert len(client.file_paths(where="c = 777")) == 1
    check_pruning(client, [203, 205, 777, 778])
    check_rows(client, model, "c = 777")
    check_pruning(client, [203, 205], as_of=later)
    assert client.validate() == []


def test_bad_requests_are_refused_clearly(tmp_path) -> None:
    client = WriteClient.create(str(tmp_path / "b"), "id", ["day"], "ts", **OPTIONS)
    table = rows({"k1": ("d0", 1, 2)}, 0).append_column("tags", pa.array([["x"]]))
    client.upsert(table)
    for columns, why in [
        ("nope", "column 'nope' is not in the table"),
        ("day", "column 'day' is a partition field"),
        ("ts", "column 'ts' already has statistics"),
        ("tags", "column 'tags' has type list"),
        ([], "need one or more column names"),
        (5, "need one or more column names"),
        (["c", "c"], "column 'c' is named twice"),
        (["c", ""], "need one or more column names"),
    ]:
        with pytest.raises(IndexLayerError, match=why) as caught:
            client.create_index(columns, kind="column_stats")
        assert caught.value.table == client.path
    client.create_index(["c", "d"], kind="column_stats")
    with pytest.raises(IndexLayerError, match=r"column 'd' already has statistics \(built by"):
        client.create_index("d", kind="column_stats")
    with pytest.raises(IndexLayerError, match="no column-statistics index on column 'ts'"):
        client.drop_index("ts", kind="column_stats")
    with pytest.raises(WriteError, match="kind 'bloom'"):
        client.drop_index("c", kind="bloom")
    assert sorted(client.indexes(kind="column_stats")) == ["c", "d"]
    assert client.validate() == []


def test_rollback_and_restore_of_commits_a_build_folded(client) -> None:
    first = batches(3)
    model: Model = {}
    for batch in first:
        t1 = client.bulk_insert(rows(batch, 0))
        model.update(batch)
    client.savepoint(t1)
    history = {t1: dict(model)}
    change: Model = {"k105": ("d0", 555, 1), "k205": ("d1", 556, None), "n001": ("d0", 557, 2)}
    t2 = client.upsert(rows(change, 1))  # rewrites two files, adds one
    history[t2] = {**model, **change}
    client.create_index("c", kind="column_stats")  # folds t1 and t2
    t3 = client.upsert(rows({"k001": ("d0", 900, None)}, 2))
    history[t3] = {**history[t2], "k001": ("d0", 900, None)}
    values = [1, 105, 205, 555, 556, 557, 900]
    check_pruning(client, values)
    client.rollback(t3)  # after the build: its logs only
    check_pruning(client, values)
    check_rows(client, history[t2], "c = 900")
    client.rollback(t2)  # folded by the build: corrected bases
    check_pruning(client, values)
    check_rows(client, history[t1], "c = 105")
    check_rows(client, history[t1], "c = 555")
    assert client.validate() == []
    t4 = client.upsert(rows({"k102": ("d0", 600, 3)}, 3))
    history[t4] = {**history[t1], "k102": ("d0", 600, 3)}
    client.drop_index("c", kind="column_stats")  # folds t4
    client.create_index("c", kind="column_stats")  # folds t4 again
    client.restore(t1)  # undoes t4: corrections for the drop and the rebuild
    check_pruning(client, [102, 600, 5])
    check_rows(client, history[t1], "c = 102")
    client.compact_metadata()
    check_pruning(client, [102, 600, 5])
    assert client.validate() == []


def test_drop_stops_pruning_and_the_cli_builds_lists_and_drops(client, capsys) -> None:
    model: Model = {}
    for batch in batches(4):
        client.bulk_insert(rows(batch, 0))
        model.update(batch)
    every = set(client.file_paths())
    assert cli(["index", "build", client.path, "--column-stats", "c,d", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["kind"], out["columns"]) == ("column_stats", ["c", "d"])
    assert cli(["index", "list", client.path, "--kind", "column_stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"c": out["index"], "d": out["index"]}
    assert cli(["index", "list", client.path]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed == [f"{c}\tcolumn_stats\tbuilt {out['index']}" for c in ("c", "d")]
    assert cli(["index", "build", client.path, "--column-stats", "day"]) == 1
    assert "partition field" in capsys.readouterr().err
    assert len(client.file_paths(where="c = 305")) == 1
    assert cli(["index", "drop", client.path, "c", "--kind", "column_stats"]) == 0
    capsys.readouterr()
    fresh = WriteClient.open(client.path)
    assert fresh.indexes(kind="column_stats") == {"d": out["index"]}
    assert fresh.column_stats("c") == []
    assert set(fresh.file_paths(where="c = 305")) == every  # no longer pruned by c
    check_rows(fresh, model, "c = 305")
    fresh.upsert(rows({"n1": ("d0", 305, 7)}, 1))  # writes no longer record c
    model["n1"] = ("d0", 305, 7)
    assert fresh.column_stats("c") == []
    check_rows(fresh, model, "c = 305")
    assert len(fresh.column_stats("d")) == len(fresh.file_paths())
    assert fresh.validate() == []


def test_a_write_that_missed_a_build_conflicts_and_its_retry_records(client, monkeypatch) -> None:
    model: Model = {}
    for batch in batches(3):
        client.bulk_insert(rows(batch, 0))
        model.update(batch)
    original = MetadataTable.write

    def write_then_build(self, instant, changes, point=None):
        logs = original(self, instant, changes, point)
        monkeypatch.setattr(MetadataTable, "write", original)
        build_stats(MetadataTable(self.table), ["c"])  # lands after this write chose its layout
        return logs

    monkeypatch.setattr(MetadataTable, "write", write_then_build)
    change: Model = {"n1": ("d0", 5000, 1)}
    with pytest.raises(WriteConflictError, match="got in the way"):
        client.upsert(rows(change, 1))
    assert "c" in client.indexes(kind="column_stats")
    check_pruning(client, [5000, 105])
    client.upsert(rows(change, 1))  # the retry records c's statistics
    model.update(change)
    assert len(client.column_stats("c")) == len(client.file_paths())
    check_pruning(client, [5000, 105])
    check_rows(client, model, "c = 5000")
    assert client.validate() == []


def test_a_failed_build_then_an_undo_across_reindexes(client, monkeypatch) -> None:
    model: Model = {}
    for batch in batches(3):
        t1 = client.bulk_insert(rows(batch, 0))
        model.update(batch)
    client.savepoint(t1)

    def crash(*args):
        raise OSError("disk full while writing the statistics bases")

    monkeypatch.setattr(column_stats_build, "_write_bases", crash)
    with pytest.raises(OSError, match="disk full"):
        client.create_index("c", kind="column_stats")
    monkeypatch.undo()
    assert client.indexes(kind="column_stats") == {}
    change: Model = {"k101": ("d1", 3000, 1), "n1": ("d0", 3001, None)}
    t2 = client.upsert(rows(change, 1))  # the dead build stops nobody
    check_pruning(client, [3000, 101])
    client.reindex(groups=3)
    client.create_index(["c", "d"], kind="column_stats")
    client.reindex(groups=2)
    check_pruning(client, [3000, 3001, 101, 205])
    check_rows(client, {**model, **change}, "c = 3000")
    client.rollback(t2)  # folded by two reindexes and the build
    check_pruning(client, [3000, 3001, 101, 205])
    check_rows(client, model, "c = 101")
    client.restore(t1)
    check_pruning(client, [3000, 101])
    assert client.validate() == []


ROWS = """
def rows(step):
    ids = [f"w{step % 10:02d}", f"x{step:03d}"]
    return pa.table({"id": ids, "day": ["d1", "d2"], "ts": [step, step],
                     "c": [step % 7, 1000 + step], "d": [None, step]})
"""


def writer_change(step: int) -> Model:
    return {f"w{step % 10:02d}": ("d1", step % 7, None), f"x{step:03d}": ("d2", 1000 + step, step)}


@pytest.mark.slow
def test_build_while_a_writer_process_commits(client, beside_writer) -> None:
    model: Model = {f"k{i:03d}": (f"d{i % 3}", i % 7, i) for i in range(60)}
    start = client.upsert(rows(model, 0))
    run = beside_writer(client, kind="column_stats", columns=["c"], rows=ROWS)
    built, fresh, before, during, after = run.built, run.fresh, run.before, run.during, run.after
    models = {start: dict(model)}
    for t, step in run.done:  # one writer: its commits complete in this order
        model.update(writer_change(step))
        models[t] = dict(model)
    assert before and during and after
    assert fresh.indexes(as_of=during[-1], kind="column_stats") == {}
    assert fresh.indexes(as_of=after[0], kind="column_stats") == {"c": built}
    for t in [start, *before, *during, *after]:
        check_pruning(fresh, [1, 3, 1001, 1020], as_of=t)
    for t in (before[-1], during[0], during[-1], after[0], after[-1]):
        check_rows(fresh, models[t], "c = 3", as_of=t)
        step = next(s for u, s in run.done if u == t)
        check_rows(fresh, models[t], f"c = {1000 + step}", as_of=t)
    assert fresh.validate() == []


@pytest.mark.spark
@pytest.mark.slow
def test_the_spark_engine_records_built_statistics(tmp_path, spark) -> None:
    options = {**OPTIONS, "write.inprocess.max.rows": 0}  # every write runs as Spark tasks
    client = WriteClient.create(str(tmp_path / "k"), "id", ["day"], "ts", spark=spark, **options)
    model: Model = {}
    for batch in batches(3, nulls=False):
        client.bulk_insert(spark.createDataFrame(rows(batch, 0).to_pandas()))
        model.update(batch)
    client.create_index("c", kind="column_stats")
    change: Model = {"k105": ("d1", 4242, 1), "n9": ("d0", 4243, 2)}
    client.upsert(spark.createDataFrame(rows(change, 1).to_pandas()))
    model.update(change)
    assert len(client.column_stats("c")) == len(client.file_paths())
    check_pruning(client, [4242, 4243, 105, 205])
    pruned = client.file_paths(where="c = 4242")
    assert set(pruned) == may_hold(client, 4242)
    assert len(pruned) == 1
    check_rows(client, model, "c = 4242")
    assert client.validate() == []
