"""Column statistics built on a merge-on-read table (``index.column_stats_build``): a log's
statistics come from the rows of its data blocks, as the writer that appended it computed
them. Expected ranges are read from the files themselves (Parquet for bases, the log format's
decoder for logs: the statistics under test never give their own expectation); expected rows
come from a plain model."""

from __future__ import annotations

import os
from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakebraid.index.datalog import BlockType, iter_blocks
from lakebraid.index.errors import CorruptDataLogError
from lakebraid.timeline.layout import parse_data_file_name
from lakebraid.writers.client import WriteClient

OPTIONS = {
    "metadata.column_stats.max.columns": 3,  # id, day, ts: ``c`` needs a build
    "write.target.file.rows": 10,
    "compaction.inline": False,  # logs stay until the test compacts
    "clean.inline": False,
}
Model = dict[str, tuple[str, int | None]]  # key -> (day, c)


def rows(model: Model, ts: int) -> pa.Table:
    ids = sorted(model)
    return pa.table(
        {
            "id": ids,
            "day": [model[k][0] for k in ids],
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "c": pa.array([model[k][1] for k in ids], pa.int64()),
        }
    )


def file_values(client: WriteClient, path: str) -> pa.ChunkedArray | None:
    """The values of ``c`` a data file holds: a base's column, a log's data blocks' (None: a
    log of deletes only)."""
    if parse_data_file_name(os.path.basename(path)).kind != "log":
        return pq.read_table(path, columns=["c"]).column("c")
    blocks = [b for b in iter_blocks(client.table.fs, path) if b.block_type is BlockType.DATA]
    return pa.chunked_array([b.rows.column("c") for b in blocks]) if blocks else None


def ranges(client: WriteClient) -> dict[str, tuple[int, int] | None]:
    """Each file's [min, max] of ``c`` (None: no value, or a log of deletes only)."""
    found = {}
    for path in client.file_paths():
        values = file_values(client, path)
        bounds = None if values is None else pc.min_max(values).as_py()
        found[path] = None if bounds is None or bounds["min"] is None else tuple(bounds.values())
    return found


def slices(paths: list[str]) -> dict[tuple[str, str], set[str]]:
    """The files of each file slice (partition folder, file id)."""
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in paths:
        folder, name = os.path.split(path)
        found[(folder, parse_data_file_name(name).file_id)].add(path)
    return found


def check_pruning(client: WriteClient, model: Model, values: list[int]) -> None:
    """A read keeps a file slice exactly when one of its files' ranges holds the value, and
    the rows it returns are the model's."""
    bounds = ranges(client)
    every = slices(list(bounds))
    full = client.read_arrow()
    assert {r["id"]: (r["day"], r["c"]) for r in full.to_pylist()} == model

    def may_hold(path: str, value: int) -> bool:  # a log of deletes only: no value at all
        return bounds[path] is not None and bounds[path][0] <= value <= bounds[path][1]

    for value in values:
        want = set()
        for files in every.values():
            if any(may_hold(f, value) for f in files):
                want |= files
        assert set(client.file_paths(where=f"c = {value}")) == want, value
        read = sorted(r.id for r in client.read(where=f"c = {value}").select("id").collect())
        assert read == sorted(k for k, v in model.items() if v[1] == value), value


def check_records(client: WriteClient) -> None:
    """Every base and every log has a record of ``c`` equal to its range (a log of deletes
    only: no bounds)."""
    bounds = ranges(client)
    records = {(r.partition, r.file): (r.min_value, r.max_value) for r in client.column_stats("c")}
    for path, want in bounds.items():
        folder, name = os.path.split(path)
        key = (os.path.basename(folder), name)
        assert records.get(key) == (want or (None, None)), name  # deletes only: no bounds


def grown_table(client: WriteClient) -> Model:
    """Bases with disjoint ranges of ``c``, then logs: updates, deletes only, new keys."""
    model: Model = {}
    for j in range(4):
        batch = {f"k{j}{i}": (f"d{j % 2}", 100 * j + i) for i in range(8)}
        client.bulk_insert(rows(batch, 0))
        model.update(batch)
    update = {"k00": ("d0", 950), "k11": ("d1", 960), "k23": ("d0", None)}
    client.upsert(rows(update, 1))
    model.update(update)
    client.delete(["k34", "k35"])  # a log of deletes only
    del model["k34"], model["k35"]
    fresh = {"n1": ("d1", 970), "n2": ("d0", 5)}
    client.upsert(rows(fresh, 2))
    return model | fresh


def test_a_build_on_a_merge_on_read_table_records_logs_and_prunes_exactly(tmp_path) -> None:
    client = WriteClient.create(
        str(tmp_path / "t"), "id", ["day"], "ts", table_type="merge_on_read", **OPTIONS
    )
    model = grown_table(client)
    assert any(p.endswith(".log") for p in client.file_paths())
    assert client.column_stats("c") == []
    built = client.create_index("c", kind="column_stats")
    assert client.indexes(kind="column_stats") == {"c": built}
    check_records(client)
    values = [950, 960, 970, 5, 105, 334, 3, 1000]
    check_pruning(client, model, values)
    assert client.validate() == []
    later = {"k01": ("d0", 980), "n3": ("d1", 990)}
    client.upsert(rows(later, 3))  # written after the build: its log records ``c``
    model |= later
    check_records(client)
    check_pruning(client, model, [*values, 980, 990])
    assert client.compact() is not None  # the bases written by the compaction record it too
    assert not any(p.endswith(".log") for p in client.file_paths())
    check_records(client)
    check_pruning(client, model, [*values, 980, 990])
    assert client.validate() == []


def test_a_damaged_log_stops_the_build_naming_the_file(tmp_path) -> None:
    client = WriteClient.create(
        str(tmp_path / "t"), "id", ["day"], "ts", table_type="merge_on_read", **OPTIONS
    )
    grown_table(client)
    log = next(p for p in client.file_paths() if p.endswith(".log"))
    with open(log, "rb") as source:
        kept = source.read()
    damaged = bytearray(kept)
    damaged[len(damaged) // 2] ^= 0xFF  # a bit flipped inside a block
    with open(log, "wb") as out:
        out.write(damaged)
    with pytest.raises(
        CorruptDataLogError, match=f"corrupt data log block in {log} at byte"
    ) as caught:
        client.create_index("c", kind="column_stats")
    assert str(client.path) in str(caught.value)  # the table is named too
    assert client.indexes(kind="column_stats") == {}
    with open(log, "wb") as out:  # the file restored from a backup: the build goes through
        out.write(kept)
    client.create_index("c", kind="column_stats")
    check_records(client)
    assert client.validate() == []


def test_undo_across_a_build_on_a_merge_on_read_table(tmp_path) -> None:
    """Rolling back a log the build folded, then restoring a savepoint from before the build,
    leaves records of exactly the files then current (``index.column_stats_rebase`` reads logs
    too); the built statistics stay, as on a copy-on-write table."""
    client = WriteClient.create(
        str(tmp_path / "t"), "id", ["day"], "ts", table_type="merge_on_read", **OPTIONS
    )
    model = grown_table(client)
    saved = client.upsert(rows({"k02": ("d0", 940)}, 4))
    client.savepoint(saved)
    change = {"k03": ("d1", 930), "k12": ("d1", 920)}  # k03 moves: a delete and an insert
    undone = client.upsert(rows(change, 5))
    built = client.create_index("c", kind="column_stats")  # folds both upserts
    check_records(client)
    client.rollback(undone)
    model["k02"] = ("d0", 940)
    check_records(client)
    check_pruning(client, model, [940, 930, 920, 3, 12])
    assert client.validate() == []
    client.upsert(rows({"k20": ("d0", 910)}, 6))  # undone by the restore below
    assert client.lookup(["k20"])["k20"] is not None
    client.restore(saved)
    check_records(client)
    check_pruning(client, model, [940, 930, 920, 910, 3, 12])
    assert client.indexes(kind="column_stats") == {"c": built}  # an index outlives a restore
    assert client.validate() == []


ROWS = """
def rows(step):
    return pa.table({"id": [f"k0{step % 8}", f"x{step:03d}"], "day": ["d0", "d1"],
                     "ts": [10 + step, 10 + step], "c": [2000 + step, 3000 + step]})
"""


@pytest.mark.slow
def test_a_build_while_a_writer_process_appends_logs(tmp_path, beside_writer) -> None:
    """Logs appended while the build runs record ``c`` too (the build's request on): after it,
    every current file's statistics are exact."""
    client = WriteClient.create(
        str(tmp_path / "t"), "id", ["day"], "ts", table_type="merge_on_read", **OPTIONS
    )
    model = grown_table(client)
    run = beside_writer(client, kind="column_stats", columns="c", rows=ROWS)
    fresh, done = run.fresh, run.done
    assert run.during, "no log appended during the build"
    for _, step in done:  # one writer: its commits complete in this order
        model[f"k0{step % 8}"] = ("d0", 2000 + step)
        model[f"x{step:03d}"] = ("d1", 3000 + step)
    check_records(fresh)
    check_pruning(fresh, model, [2000 + done[0][1], 3000 + done[-1][1], 105, 950])
    assert fresh.validate() == []
