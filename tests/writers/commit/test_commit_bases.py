"""Commit bases: a write whose record-index entries fall in a file group holding no file
writes them as that group's base (``metadata.writer``), and conflict rule 7 keeps two writers
from both doing so in one group (readers take one base per group). Expected states come from
what the tests wrote."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.metadata.table import MetadataTable
from lakebraid.writers.client import WriteClient
from lakebraid.writers.commit.conflicts import Mine, Verdict, check
from lakebraid.writers.errors import WriteConflictError

ON = {"metadata.record_index.commit.bases": True}


def rows(keys: list[str], value: int = 1) -> pa.Table:
    n = len(keys)
    return pa.table({"id": keys, "day": ["d0"] * n, "ts": [value] * n, "v": [value] * n})


def index_files(path: Path) -> list[str]:
    return sorted(p.name for p in (path / ".braid" / "metadata" / "record_index").iterdir())


def test_a_first_bulk_insert_writes_bases_not_logs(tmp_path) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **ON)
    keys = [f"k{i:04d}" for i in range(2000)]
    first = client.bulk_insert(rows(keys))
    assert index_files(tmp_path / "t") == [f"record_index-0000_{first}.parquet"]
    second = client.upsert(rows(["k0001", "new"], 2))  # the group has a file now: a log
    assert index_files(tmp_path / "t") == [
        f"record_index-0000_{first}.parquet",
        f"record_index-0000_{second}.log",
    ]
    found = client.lookup([*keys, "new", "absent"])
    assert all(found[k] is not None for k in [*keys, "new"]) and found["absent"] is None
    assert found["k0001"].instant == first  # type: ignore[union-attr]  # updated in place
    assert client.validate() == []
    client.rollback(second)
    assert client.lookup(["new"]) == {"new": None}
    client.rollback(first)  # the commit base goes with its commit
    assert index_files(tmp_path / "t") == []
    assert client.lookup(["k0001"]) == {"k0001": None}
    assert client.validate() == []


def test_commit_bases_can_be_turned_off(tmp_path) -> None:
    options = {"metadata.record_index.commit.bases": False}
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **options)
    first = client.bulk_insert(rows(["a", "b"]))
    assert index_files(tmp_path / "t") == [f"record_index-0000_{first}.log"]


def test_a_second_commit_base_in_one_group_conflicts(tmp_path, monkeypatch) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **ON)
    # both writers believe the group empty (a listing taken before the other wrote)
    monkeypatch.setattr(
        MetadataTable, "_commit_base_groups", lambda self, instant, point: frozenset({0})
    )
    first = client.upsert(rows(["a1", "a2"]))
    with pytest.raises(WriteConflictError, match=first):
        client.upsert(rows(["b1", "b2"]))
    monkeypatch.undo()
    # nothing of the first write is lost; nothing of the refused one is visible
    found = client.lookup(["a1", "a2", "b1", "b2"])
    assert [k for k, where in found.items() if where is not None] == ["a1", "a2"]
    assert index_files(tmp_path / "t") == [f"record_index-0000_{first}.parquet"]
    assert client.validate() == []
    client.upsert(rows(["b1", "b2"]))  # the retry writes a log beside the base
    assert all(client.lookup(["a1", "a2", "b1", "b2"]).values())


def test_rule_7_in_the_pure_checker() -> None:
    mine = Mine(time="20261123100000003", read_at="20261123100000001", groups=frozenset())
    crowded = Mine(
        time="20261123100000003",
        read_at="20261123100000001",
        groups=frozenset(),
        base_neighbours=frozenset({"20261123100000002"}),
    )
    no_keys = frozenset[str]
    assert check(mine, [], lambda: no_keys(), lambda t: no_keys()) == Verdict()
    assert check(crowded, [], lambda: no_keys(), lambda t: no_keys()) == Verdict(
        conflicts=("20261123100000002",)
    )


def test_an_instant_may_not_write_after_its_commit_bases(tmp_path) -> None:
    from lakebraid.metadata.errors import MetadataError
    from lakebraid.metadata.writer import InstantChanges

    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **ON)
    upserts = pa.table(
        {
            "key": ["a", "b"],
            "partition": ["day=d0"] * 2,
            "file_id": ["00000000-0000-0000-0000-000000000007"] * 2,
        }
    )
    time = "20261123100000001"
    client.metadata.write(time, InstantChanges(index_upserts=upserts))
    with pytest.raises(MetadataError, match="already wrote record-index commit bases"):
        client.metadata.write(time, InstantChanges(index_upserts=upserts))
