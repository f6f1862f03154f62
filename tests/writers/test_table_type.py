"""The table type chosen at creation (``table_type``): stored in the table config, shown by
``lakebraid show``; a merge-on-read table takes every write after its first as logs, and
refuses secondary index builds."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lakebraid.timeline.errors import ConfigError
from lakebraid.writers.cli.main import main
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteError


def rows(ids: list[str], ts: int) -> pa.Table:
    return pa.table({"id": ids, "day": ["2024-01-01"] * len(ids), "ts": [ts] * len(ids)})


def held(client: WriteClient) -> set[str]:
    return {k for k, at in client.lookup(["a", "b", "y", "z"]).items() if at is not None}


def test_a_merge_on_read_table_stores_its_type_and_takes_every_write_as_logs(
    tmp_path, capsys
) -> None:
    path = tmp_path / "t"
    c = WriteClient.create(str(path), "id", ["day"], "ts", table_type="merge_on_read")
    stored = json.loads((path / ".braid" / "table.json").read_text())
    assert (stored["format_version"], stored["table_type"]) == (3, "merge_on_read")
    c.bulk_insert(rows(["a", "b"], 1))
    assert held(c) == {"a", "b"}
    c.upsert(rows(["a", "z"], 2))
    c.insert(rows(["y"], 2))
    c.delete(["a"])
    reopened = WriteClient.open(str(path))
    assert held(reopened) == {"b", "y", "z"}
    assert sorted(reopened.read_arrow().column("id").to_pylist()) == ["b", "y", "z"]
    names = [p.rsplit("/", 1)[1] for p in reopened.file_paths()]
    assert sum(n.endswith(".log") for n in names) == 3, names  # upsert, insert, delete
    assert sum(n.endswith(".parquet") for n in names) == 1, names  # the bulk insert's base
    assert reopened.validate() == []
    assert main(["show", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["table"]["table_type"] == "merge_on_read"
    assert main(["show", str(path)]) == 0
    assert "(merge-on-read, format version 3)" in capsys.readouterr().out


def test_copy_on_write_stays_the_default_and_its_format_version(tmp_path) -> None:
    path = tmp_path / "t"
    WriteClient.create(str(path), "id", ["day"], "ts").bulk_insert(rows(["a"], 1))
    stored = json.loads((path / ".braid" / "table.json").read_text())
    assert (stored["format_version"], stored["table_type"]) == (1, "copy_on_write")


@pytest.mark.parametrize("bad", ["mor", "MERGE_ON_READ", "", 3])
def test_an_unknown_table_type_is_refused_before_anything_is_written(tmp_path, bad) -> None:
    path = tmp_path / "t"
    with pytest.raises(ConfigError, match="table_type must be one of") as info:
        WriteClient.create(str(path), "id", table_type=bad)
    assert "merge_on_read" in str(info.value)
    assert not path.exists() or not any(path.rglob("*.json"))


def test_secondary_index_builds_are_refused_on_merge_on_read_tables(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", table_type="merge_on_read")
    c.bulk_insert(rows(["a", "b"], 1))
    made = c.timeline("metadata")
    with pytest.raises(WriteError, match="a secondary index on a merge-on-read table") as info:
        c.create_index("ts", kind="secondary")
    assert "kind='column_stats'" in str(info.value)  # what the table does offer
    assert c.timeline("metadata") == made
