"""Writes run again after a lost conflict (``write.conflict.retries``, ``writers.commit.retry``):
another writer's upsert is run deterministically between a write's reads and its commit (as in
``test_first_writes.py``), before each of its first attempts; the expected rows are the union
a plain model gives, never read back from the code under test."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest

import lakebraid.writers.commit.retry as retry
import lakebraid.writers.engine.inprocess as inprocess
from lakebraid.timeline.errors import StateUnknownError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine.spark.datasource_write import LakebraidWriter
from lakebraid.writers.errors import WriteConflictError

RETRIES = "write.conflict.retries"


class Others:
    """Before each of the next ``times`` attempts of an in-process write, another writer
    upserts key ``o<n>`` into the table's one file group (it is unpartitioned and small):
    ``instants`` receives its instants, ``pauses`` the retry pauses (not slept)."""

    def __init__(self, monkeypatch, path: str, times: int):
        self.path, self.times = path, times
        self.instants: list[str] = []
        self.pauses: list[float] = []
        self._inside = False
        self._real = inprocess.run_write
        monkeypatch.setattr(inprocess, "run_write", self._run_write)
        # the retry module's own name only: time.sleep itself is every thread's (a thread of
        # an earlier test in this worker that sleeps in a loop would spin and fill the list)
        monkeypatch.setattr(retry, "sleep", self.pauses.append)

    def _run_write(self, *args, **kwargs):
        if not self._inside and len(self.instants) < self.times:
            self._inside = True  # the other writer's own write passes through here too
            try:
                n = len(self.instants)
                rows = pa.table({"id": [f"o{n}"], "v": [n]})
                self.instants.append(WriteClient.open(self.path).upsert(rows))
            finally:
                self._inside = False
        return self._real(*args, **kwargs)


@pytest.fixture(params=["copy_on_write", "merge_on_read"])
def path(tmp_path, request) -> str:
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", [], "v", table_type=request.param)
    client.upsert(pa.table({"id": ["a", "b"], "v": [0, 0]}))
    return path


def ids(path: str) -> list[str]:
    return sorted(WriteClient.open(path).read_arrow().column("id").to_pylist())


def test_a_write_that_lost_a_conflict_runs_again_and_commits(path, monkeypatch, caplog):
    others = Others(monkeypatch, path, times=1).instants
    client = WriteClient.open(path, **{RETRIES: 2})
    with caplog.at_level(logging.WARNING, logger="lakebraid"):
        mine = client.upsert(pa.table({"id": ["a", "c"], "v": [5, 5]}))
    assert len(others) == 1 and mine > others[0]
    assert "upsert lost a conflict" in caplog.text and others[0] in caplog.text
    assert path in caplog.text and "retry 1 of 2" in caplog.text
    monkeypatch.undo()
    assert ids(path) == ["a", "b", "c", "o0"]
    rows = {r["id"]: r["v"] for r in WriteClient.open(path).read_arrow().to_pylist()}
    assert rows["a"] == 5 and rows["o0"] == 0
    assert WriteClient.open(path).validate() == []


def test_without_retries_the_conflict_reaches_the_caller(path, monkeypatch):
    others = Others(monkeypatch, path, times=1).instants
    with pytest.raises(WriteConflictError) as raised:
        WriteClient.open(path).upsert(pa.table({"id": ["c"], "v": [5]}))
    assert others[0] in str(raised.value)
    monkeypatch.undo()
    assert ids(path) == ["a", "b", "o0"]


def test_retries_end_with_the_last_conflict_and_pauses_grow(path, monkeypatch):
    interfering = Others(monkeypatch, path, times=3)
    others, pauses = interfering.instants, interfering.pauses
    client = WriteClient.open(path, **{RETRIES: 2})
    with pytest.raises(WriteConflictError) as raised:
        client.delete(["a"])
    assert len(others) == 3 and others[2] in str(raised.value)  # lost three times: 1 + 2
    assert len(pauses) == 2
    assert retry.PAUSE[0] <= pauses[0] <= retry.PAUSE[1]
    assert 2 * retry.PAUSE[0] <= pauses[1] <= 2 * retry.PAUSE[1]
    monkeypatch.undo()
    assert ids(path) == ["a", "b", "o0", "o1", "o2"]  # nothing of the lost delete
    assert WriteClient.open(path).validate() == []


def test_a_write_of_unknown_outcome_is_not_run_again(path, monkeypatch):
    calls = []

    def unknown(*args, **kwargs):
        calls.append(1)
        raise StateUnknownError("the commit point's reply was lost")

    monkeypatch.setattr(inprocess, "run_write", unknown)
    with pytest.raises(StateUnknownError):
        WriteClient.open(path, **{RETRIES: 3}).upsert(pa.table({"id": ["c"], "v": [5]}))
    assert calls == [1]


@pytest.mark.parametrize("bad", ["-1", "two"])
def test_a_bad_retry_count_is_refused_by_name(tmp_path, bad):
    WriteClient.create(str(tmp_path / "t"), "id", [], "v")
    with pytest.raises(Exception, match=RETRIES):
        WriteClient.open(str(tmp_path / "t"), **{RETRIES: bad}).upsert(
            pa.table({"id": ["c"], "v": [5]})
        )


def staged_append(path: str, keys: list[str], options: dict[str, str]):
    """A data source append of ``keys`` as its executors leave it: the rows staged by a task,
    the writer that commits them (its commit runs here, as in Spark's commit worker)."""
    writer = LakebraidWriter(path, "job", options, {})
    rows = pa.table({"id": keys, "v": [7] * len(keys)})
    return writer, writer.write(iter(rows.to_batches()))


def test_a_data_source_append_that_lost_runs_again_with_its_staged_rows(path, monkeypatch):
    writer, message = staged_append(path, ["c", "d"], {RETRIES: "2"})
    others = Others(monkeypatch, path, times=1).instants
    writer.commit([message])
    assert len(others) == 1
    monkeypatch.undo()
    assert ids(path) == ["a", "b", "c", "d", "o0"]
    assert not Path(path, ".braid", "staging", "job").exists()
    assert WriteClient.open(path).validate() == []


def test_a_data_source_append_without_retries_raises_and_leaves_nothing(path, monkeypatch):
    writer, message = staged_append(path, ["c", "d"], {})
    others = Others(monkeypatch, path, times=1).instants
    with pytest.raises(WriteConflictError) as raised:
        writer.commit([message])
    assert others[0] in str(raised.value)
    monkeypatch.undo()
    assert ids(path) == ["a", "b", "o0"]
    assert not Path(path, ".braid", "staging", "job").exists()


WRITER = """
import json, sys
import pyarrow as pa
from lakebraid.writers.client import WriteClient
path, me = sys.argv[1], sys.argv[2]
done = []
for n in range(8):
    client = WriteClient.open(path, **{"write.conflict.retries": 50})
    done.append(client.upsert(pa.table({"id": [f"{me}{n}"], "v": [n]})))
print(json.dumps(done))
"""


@pytest.mark.slow
def test_two_writer_processes_into_one_group_all_commit(path, run_python) -> None:
    """Two processes upsert disjoint keys into the table's one file group at once, each write
    retried on conflict: every write commits and no row is lost."""
    procs = [run_python(WRITER, path, me) for me in ("p", "q")]
    outs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    done = [t for out, _ in outs for t in json.loads(out)]
    print(sum(err.count("lost a conflict") for _, err in outs), "conflicts lost and retried")
    assert len(set(done)) == 16
    want = ["a", "b", *(f"{me}{n}" for me in "pq" for n in range(8))]
    assert ids(path) == sorted(want)
    assert WriteClient.open(path).validate() == []
