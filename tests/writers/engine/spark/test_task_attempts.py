"""Two attempts of one Spark rewrite task never write one path: each attempt's files carry its
task attempt id in their write token (``TaskSet.run``), so a retried or zombie attempt
cannot cut or replace a file another attempt wrote and the commit names. The commit names
the files of the statuses it received; another attempt's marked file is removed with the
commit's markers, and the table reads and validates as written."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakebraid.index.keys import RECORD_KEY
from lakebraid.timeline.layout import TableLayout, parse_data_file_name
from lakebraid.writers.client import WriteClient
from lakebraid.writers.commit.ahead import TaskWrite
from lakebraid.writers.engine.spark import pipeline
from lakebraid.writers.write.filegroup import OP, RewriteTask
from lakebraid.writers.write.logappend import TaskSet
from lakebraid.writers.write.marking import mark

pytestmark = pytest.mark.xdist_group("spark")
ON_SPARK = {"write.inprocess.max.rows": 0}


def rows(ids: range, ts: int) -> pa.Table:
    return pa.table({"id": list(ids), "day": [f"d{i % 4}" for i in ids], "ts": [ts] * len(ids)})


def data_files(path: str) -> list[Path]:
    return sorted(p for p in Path(path).glob("day=*/*") if p.suffix in (".parquet", ".log"))


@pytest.mark.parametrize("kind", ["copy_on_write", "merge_on_read"])
def test_each_attempt_writes_its_own_files_and_the_others_are_swept(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    path = str(tmp_path / "t")
    WriteClient.create(path, "id", ["day"], "ts", spark=spark, table_type=kind, **ON_SPARK)
    WriteClient.open(path, spark).bulk_insert(spark.createDataFrame(rows(range(80), 1).to_pandas()))
    before = set(data_files(path))
    leftovers: list[Path] = []
    real = pipeline.index_written

    def with_a_zombie(*args: Any) -> TaskWrite:
        """The tasks are done, the commit not yet made: another attempt of each task leaves
        its own file (marked, as tasks mark theirs) beside the one the status names."""
        done = real(*args)
        for status in done.statuses:
            parsed = parse_data_file_name(status.file_name)
            number = parsed.write_token.split("-")[0]
            name = status.file_name.replace(f"_{parsed.write_token}_", f"_{number}-999999_")
            assert name != status.file_name
            client = WriteClient.open(path)
            mark(client.table.fs, client.table.layout, parsed.instant, status.partition, name)
            folder = Path(path) / status.partition
            shutil.copyfile(folder / status.file_name, folder / name)
            leftovers.append(folder / name)
        return done

    monkeypatch.setattr(pipeline, "index_written", with_a_zombie)
    upsert = rows(range(40, 120), 2)
    WriteClient.open(path, spark).upsert(spark.createDataFrame(upsert.to_pandas()))
    written = [p for p in data_files(path) if p not in before]
    tokens = [parse_data_file_name(p.name).write_token for p in written]
    assert len(written) >= 2 and len(set(tokens)) == len(tokens)  # one attempt id per task
    assert len({t.split("-")[1] for t in tokens}) > 1  # the attempts' own ids, not "-0"
    assert leftovers and not any(p.exists() for p in leftovers)  # swept with the markers
    client = WriteClient.open(path)
    table = client.read_arrow().sort_by("id")
    assert table.column("id").to_pylist() == list(range(120))
    assert table.column("ts").to_pylist() == [1] * 40 + [2] * 80
    assert client.validate() == []


def test_a_second_attempt_leaves_the_first_attempts_file_as_it_was(tmp_path: Path) -> None:
    """Two attempts of one task with the same rows: two complete files, each status naming
    its own, the first's bytes untouched by the second; attempt 0 keeps the planned token."""
    task = RewriteTask(
        root=str(tmp_path),
        record_key="id",
        partition="",
        file_id="00000000-0000-0000-0000-000000000007",
        old_file=None,
        instant="20261207000000001",
        write_token="3-0",
        schema=[("id", "string", False), ("v", "int64", True)],
    )
    ids = [f"k{i:04d}" for i in range(500)]
    incoming = pa.table({"id": ids, "v": list(range(500)), RECORD_KEY: ids, OP: [0] * 500})
    tasks, name = TaskSet.of([task]), f"\x00{task.file_id}"
    first = tasks.run(name, incoming, attempt=17)
    folder = TableLayout(str(tmp_path)).partition_dir("")
    kept = Path(folder, first.file_name).read_bytes()
    second = tasks.run(name, incoming, attempt=18)
    planned = tasks.run(name, incoming)
    tokens = [parse_data_file_name(s.file_name).write_token for s in (first, second, planned)]
    assert tokens == ["3-17", "3-18", "3-0"]
    assert Path(folder, first.file_name).read_bytes() == kept
    assert Path(folder, second.file_name).read_bytes() == kept  # the same rows, whole
    assert first.rows == second.rows == 500
