"""Secondary indexes (``index.secondary``, ``index.secondary_build``): built on a live table,
kept by every write, readable as of any instant, and used by ``read(where=)`` to open only the
files holding a value. Expected files come from reading every data file's column directly,
expected rows from a plain model; never from the index under test."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakebraid.index import secondary_build
from lakebraid.index.errors import IndexLayerError
from lakebraid.index.secondary import write_logs
from lakebraid.index.secondary_build import build_index
from lakebraid.metadata.table import MetadataTable
from lakebraid.writers.cli.main import main as cli
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteConflictError, WriteError

SMALL = {  # as-of reads reach every instant: no inline clean
    "write.target.file.rows": 8,
    "write.small.file.rows": 4,
    "write.merge.mode": "commit_time",
    "clean.inline": False,
}
Model = dict[str, tuple[str, int]]  # key -> (day, v)


def data(model_rows: Model, ts: int) -> pa.Table:
    ids = sorted(model_rows)
    return pa.table(
        {
            "id": ids,
            "day": [model_rows[k][0] for k in ids],
            "ts": [ts] * len(ids),
            "v": [model_rows[k][1] for k in ids],
        }
    )


def holding(client: WriteClient, value: int, as_of: str | None = None) -> set[str]:
    """The data files whose rows hold ``v = value``, by reading every file."""
    found = set()
    for path in client.file_paths(as_of=as_of):
        column = pq.read_table(path, columns=["v"]).column("v")
        if pc.any(pc.equal(column, value)).as_py():
            found.add(path)
    return found


def check(client: WriteClient, model: Model, values: list[int], as_of: str | None = None) -> None:
    """For each value: the pruned files are exactly those holding it where the index is
    visible (else at least those), and the rows read are the model's."""
    indexed = "v" in client.indexes(as_of=as_of)
    for value in values:
        pruned = set(client.file_paths(as_of=as_of, where=f"v = {value}"))
        truth = holding(client, value, as_of)
        assert pruned == truth if indexed else pruned >= truth, f"v = {value} as of {as_of}"
        rows = client.read(as_of=as_of, where=f"v = {value}").select("id").collect()
        assert sorted(r.id for r in rows) == sorted(k for k, (_, v) in model.items() if v == value)


@pytest.fixture
def client(tmp_path) -> WriteClient:
    return WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **SMALL)


def test_writes_keep_the_index_exact_now_and_as_of_every_commit(client) -> None:
    rng = random.Random(7)
    model: Model = {f"k{i:03d}": (f"d{i % 3}", i % 5) for i in range(40)}
    history = [(client.upsert(data(model, 0)), dict(model))]
    client.create_index("v")
    assert client.indexes() == {"v": client.timeline("metadata")[-1].time}
    for step in range(1, 9):
        change: Model = {}
        for key in rng.sample(sorted(model), 6):  # new values, some move partition
            change[key] = (f"d{rng.randrange(3)}", rng.randrange(7))
        for i in range(2):
            change[f"n{step:02d}{i}"] = (f"d{rng.randrange(3)}", rng.randrange(7))
        model.update(change)
        t = client.upsert(data(change, step))
        if step % 3 == 0:
            gone = rng.sample(sorted(model), 3)
            t = client.delete(gone)
            for key in gone:
                model.pop(key)
        history.append((t, dict(model)))
    for t, then in history[1:]:
        check(client, then, [0, 3, 6], as_of=t)
    check(client, model, list(range(7)))
    # before the index existed, reads as of then prune by column statistics alone
    assert client.indexes(as_of=history[0][0]) == {}
    check(client, history[0][1], [1, 4], as_of=history[0][0])
    assert client.validate() == []


def test_pruning_opens_only_the_matching_files(client) -> None:
    model: Model = {f"k{i:03d}": ("d0", i) for i in range(64)}  # v unique, in key order
    shuffled = dict(random.Random(1).sample(sorted(model.items()), len(model)))
    client.upsert(data(shuffled, 0))
    client.create_index("v")
    every = client.file_paths()
    assert len(every) >= 8
    for value in (5, 40):
        assert len(client.file_paths(where=f"v = {value}")) == 1
    assert len(client.file_paths(where="v in (1, 2, 63)")) == len(
        holding(client, 1) | holding(client, 2) | holding(client, 63)
    )
    assert client.file_paths(where="v = 1000") == []
    full = client.read(where="v in (1, 2, 63)").select("id").collect()
    assert sorted(r.id for r in full) == ["k001", "k002", "k063"]


def test_hostile_index_requests_are_refused_clearly(client) -> None:
    client.upsert(data({"k1": ("d0", 1)}, 0))
    for column, why in [
        ("day", "partition field"),
        ("nope", "no column 'nope'"),
        ("", "needs a column name"),
    ]:
        with pytest.raises(IndexLayerError, match=why):
            client.create_index(column)
    with pytest.raises(WriteError, match="kind 'bloom'"):
        client.create_index("v", kind="bloom")
    with pytest.raises(IndexLayerError, match="no secondary index on column 'v'"):
        client.drop_index("v")
    assert client.indexes() == {}


def test_values_with_separators_nulls_and_rebuild_and_drop(tmp_path) -> None:
    client = WriteClient.create(str(tmp_path / "s"), "id", ["day"], "ts", **SMALL)
    odd = ["a\x00b", "a", "b\x00c", "\x01", "\x01\x02", None, "plain"]
    ids = ["b\x00c", "k1", "k2", "k3", "k4", "k5", "k6"]
    table = pa.table({"id": ids, "day": ["d0"] * 7, "ts": [1] * 7, "s": odd})
    client.upsert(table)
    client.create_index("s")
    for value in ["a\x00b", "a", "\x01", "\x01\x02", "plain"]:
        found = client.read_arrow().filter(pc.equal(client.read_arrow().column("s"), value))
        escaped = value.replace("'", "\\'").replace("\x00", "\\u0000")
        rows = client.read(where=f"s = '{escaped}'").select("id").collect()
        assert sorted(r.id for r in rows) == sorted(found.column("id").to_pylist()), repr(value)
    rebuilt = client.create_index("s")  # a rebuild replaces the entries, no duplicates
    assert client.indexes() == {"s": rebuilt}
    client.drop_index("s")
    assert client.indexes() == {}
    client.upsert(pa.table({"id": ["k9"], "day": ["d0"], "ts": [2], "s": ["a"]}))
    rows = client.read(where="s = 'a'").select("id").collect()
    assert sorted(r.id for r in rows) == ["k1", "k9"]  # column statistics alone, still exact
    assert client.validate() == []


def test_the_cli_builds_and_drops(client, capsys) -> None:
    client.upsert(data({f"k{i}": ("d0", i % 3) for i in range(20)}, 0))
    assert cli(["index", "build", client.path, "--secondary", "v", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["column"] == "v"
    assert cli(["index", "list", client.path, "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["v"]
    assert cli(["index", "build", client.path, "--secondary", "day"]) == 1
    assert "partition field" in capsys.readouterr().err
    assert cli(["index", "drop", client.path, "v"]) == 0
    assert WriteClient.open(client.path).indexes() == {}


ROWS = """
def rows(step):
    ids = [f"w{step % 10:02d}", f"x{step:03d}"]
    v = [step % 7, 100 + step]
    return pa.table({"id": ids, "day": ["d1", "d2"], "ts": [step, step], "v": v})
"""


@pytest.mark.slow
def test_build_while_a_writer_process_commits(client, beside_writer) -> None:
    client.upsert(data({f"k{i:03d}": (f"d{i % 3}", i % 7) for i in range(60)}, 0))
    run = beside_writer(client, kind="secondary", columns="v", rows=ROWS)
    built, fresh, before, during, after = run.built, run.fresh, run.before, run.during, run.after
    assert run.done, "the writer committed nothing"
    assert before and during and after
    for t in before + during + after:
        then = {r["id"]: (r["day"], r["v"]) for r in fresh.read_arrow(as_of=t).to_pylist()}
        check(fresh, then, [1, 3, 103], as_of=t)
    check(fresh, {r["id"]: (r["day"], r["v"]) for r in fresh.read_arrow().to_pylist()}, [0, 2, 5])
    assert fresh.indexes() == {"v": built}
    assert fresh.validate() == []


def test_a_write_that_missed_a_build_conflicts_and_loses_nothing(client, monkeypatch) -> None:
    model: Model = {f"k{i:03d}": ("d0", i % 4) for i in range(20)}
    client.upsert(data(model, 0))
    original = MetadataTable.write

    def write_then_build(self, instant, changes, point=None):
        logs = original(self, instant, changes, point)
        monkeypatch.setattr(MetadataTable, "write", original)
        build_index(MetadataTable(self.table), "v")  # lands after this write chose its layout
        return logs

    monkeypatch.setattr(MetadataTable, "write", write_then_build)
    with pytest.raises(WriteConflictError, match="got in the way"):
        client.upsert(data({"k001": ("d0", 9)}, 1))
    assert "v" in client.indexes()
    check(client, model, [1, 9])
    client.upsert(data({"k001": ("d0", 9)}, 1))  # the retry keeps the index
    model["k001"] = ("d0", 9)
    check(client, model, [1, 9])


def test_rollback_and_restore_across_an_index_build(client) -> None:
    model: Model = {f"k{i:03d}": (f"d{i % 3}", i % 4) for i in range(30)}
    t1 = client.upsert(data(model, 0))
    client.savepoint(t1)
    history = {t1: dict(model)}
    change = {f"k{i:03d}": ("d0", 9) for i in range(0, 30, 5)}  # values 0..3 -> 9
    change["n001"] = ("d1", 9)
    t2 = client.upsert(data(change, 1))
    history[t2] = {**model, **change}
    t3 = client.delete(["k001", "k002"])
    history[t3] = {k: v for k, v in history[t2].items() if k not in ("k001", "k002")}
    client.create_index("v")
    t4 = client.upsert(data({"k003": ("d2", 9)}, 2))
    history[t4] = {**history[t3], "k003": ("d2", 9)}
    check(client, history[t4], [0, 1, 9])
    client.rollback(t4)  # after the build: its logs only
    check(client, history[t3], [0, 1, 3, 9])
    client.rollback(t3)  # folded by the build: corrected bases bring k001, k002 back
    check(client, history[t2], [1, 2, 9])
    client.restore(t1)  # folded too: every value as of t1
    check(client, history[t1], [0, 1, 2, 3, 9])
    client.upsert(data({"k004": ("d0", 9)}, 3))
    check(client, {**history[t1], "k004": ("d0", 9)}, [0, 9])
    client.compact_metadata()
    check(client, {**history[t1], "k004": ("d0", 9)}, [0, 9])
    assert client.validate() == []


def test_validate_reports_a_damaged_index(client) -> None:
    client.upsert(data({f"k{i}": ("d0", i % 3) for i in range(12)}, 0))
    client.create_index("v")
    assert client.validate() == []
    t = client.upsert(data({"k1": ("d0", 1)}, 1))
    gone = pa.array(["v\x000\x00k0"])  # a stray write, as a bug would leave
    write_logs(client.table.fs, client.table.layout, t, pa.array(["v\x007\x00zz"]), gone, 4)
    problems = client.validate()
    assert "secondary_index: column 'v' value '0' key 'k0' is missing" in problems
    assert "secondary_index: column 'v' value '7' key 'zz' is in no current file" in problems


@pytest.mark.slow
def test_the_spark_engine_keeps_the_index_and_the_data_source_prunes_by_it(tmp_path, spark) -> None:
    options = {**SMALL, "write.inprocess.max.rows": 0}  # every write runs as Spark tasks
    client = WriteClient.create(str(tmp_path / "k"), "id", ["day"], "ts", spark=spark, **options)
    model: Model = {f"k{i:03d}": (f"d{i % 2}", i % 5) for i in range(40)}
    client.upsert(spark.createDataFrame(data(model, 0).to_pandas()))
    client.create_index("v")
    change: Model = {f"k{i:03d}": ("d1", 7) for i in range(0, 40, 6)}
    client.upsert(spark.createDataFrame(data(change, 1).to_pandas()))
    model.update(change)
    client.delete(spark.createDataFrame(pa.table({"id": ["k001", "k002"]}).to_pandas()))
    del model["k001"], model["k002"]
    check(client, model, [1, 2, 7])
    assert set(client.file_paths(where="v = 7")) == holding(client, 7)
    frame = spark.read.format("lakebraid").load(client.path)  # every file; Spark filters
    ids = sorted(r.id for r in frame.where("v = 7").select("id").collect())
    assert ids == sorted(k for k, (_, v) in model.items() if v == 7)
    assert client.validate() == []


def test_undo_across_a_reindex_and_a_build_together(client) -> None:
    model: Model = {f"k{i:03d}": (f"d{i % 3}", i % 4) for i in range(40)}
    t1 = client.upsert(data(model, 0))
    client.savepoint(t1)
    change = {f"k{i:03d}": (f"d{(i + 1) % 3}", 8) for i in range(0, 40, 3)}  # moves, new value
    t2 = client.upsert(data(change, 1))
    after_t2 = {**model, **change}
    client.reindex(groups=3)
    client.create_index("v")
    client.reindex(groups=5)
    t3 = client.delete(["k001", "k004"])
    after_t3 = {k: v for k, v in after_t2.items() if k not in ("k001", "k004")}
    check(client, after_t3, [1, 8])
    client.rollback(t3)  # folded by nothing: logs only
    check(client, after_t2, [0, 1, 8])
    client.rollback(t2)  # folded by two reindexes and the build
    check(client, model, [0, 1, 2, 3, 8])
    assert {k: loc.partition for k, loc in client.lookup(sorted(model)).items()} == {
        k: f"day={d}" for k, (d, _) in model.items()
    }
    client.restore(t1)  # nothing left to undo but a restore still works
    check(client, model, [0, 3, 8])
    assert client.validate() == []


def test_a_failed_build_leaves_nothing_visible_and_can_be_run_again(client, monkeypatch) -> None:
    model: Model = {f"k{i:03d}": ("d0", i % 5) for i in range(30)}
    client.upsert(data(model, 0))
    original = secondary_build._write_bases

    def crash(metadata_table, entries, n, time, folded):
        raise OSError("disk full while writing the index bases")

    monkeypatch.setattr(secondary_build, "_write_bases", crash)
    with pytest.raises(OSError, match="disk full"):
        client.create_index("v")
    monkeypatch.setattr(secondary_build, "_write_bases", original)
    assert client.indexes() == {}
    change: Model = {"k001": ("d0", 4), "n001": ("d0", 1)}
    client.upsert(data(change, 1))  # the dead build stops nobody
    model.update(change)
    check(client, model, [1, 4])
    client.create_index("v")
    check(client, model, [0, 1, 4])
